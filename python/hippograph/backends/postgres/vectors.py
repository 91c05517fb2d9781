"""Vectors in the server: pgvector's `vector` copies of the embeddings and their HNSW indexes.

`enable` installs the extension and creates ``{s}.vectors`` (one row per embedded node: repo, id,
type, the vector) once per schema, filled from the embeddings; from then on every writer's
`write_graph` keeps it in step (a writer that does not send the vectors is refused with
SQLSTATE HG002 and sends them on its retry). `ensure_indexes` builds one partial HNSW index per
(repo, node type, dimension), so a search reads one type of one repo and nothing else.
``docs/postgres.md`` (Server-side search) tells why the design is so.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import threading
import time
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from ...errors import ConfigError
from ...graph import codec
from ...graph.model import NodeType
from ...graph.value import DEFAULT_PARAMS
from .arrays import Float4Array, register
from .tx import Conn, _rollback

__all__ = [
    "AHEAD",
    "MAX_INDEXED_DIM",
    "MIN_VERSION",
    "earlier_index_names",
    "earlier_value_index_names",
    "enable",
    "ensure_indexes",
    "index_name",
    "value_graph",
    "value_index_name",
]

MIN_VERSION = (0, 8)
"""The least pgvector version: iterative index scans came with 0.8."""
MAX_INDEXED_DIM = 2000
"""pgvector's HNSW indexes take `vector` columns of at most this many dimensions; above it the
server answers with exact scans."""
VECTORS_STATE = "HG002"
"""`write_graph`: the schema keeps server-side vectors and the caller sent none."""
_BACKFILL_BATCH = 5000


def extension_schema(conn: Conn) -> str | None:
    """The schema pgvector is installed in, or None when it is not installed in this database."""
    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
    ).fetchone()
    return None if row is None else str(row[0])


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def enable(conn: Conn, schema: str) -> str:
    """Makes `schema` keep server-side vectors (idempotent, safe when many processes open at once);
    returns the extension's schema. `conn` is in autocommit. ConfigError when the server has no
    pgvector of at least `MIN_VERSION`, or the role may not install it."""
    row = conn.execute(
        "SELECT default_version, installed_version FROM pg_available_extensions WHERE name = 'vector'"
    ).fetchone()
    if row is None:
        raise ConfigError(
            "search='server' needs the pgvector extension on the PostgreSQL server (package "
            "postgresql-NN-pgvector, or a server build that ships it)"
        )
    installed = row[1]
    if installed is None:
        if _version(str(row[0])) < MIN_VERSION:
            raise ConfigError(f"search='server' needs pgvector >= 0.8; the server offers {row[0]}")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.UniqueViolation:
            pass  # another process installed it at the same moment
        except psycopg.Error as exc:
            raise ConfigError(f"cannot install the pgvector extension (CREATE EXTENSION vector): {exc}") from None
        installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]  # type: ignore[index]
    if _version(str(installed)) < MIN_VERSION:
        raise ConfigError(f"search='server' needs pgvector >= 0.8; this database has {installed} (ALTER EXTENSION)")
    ext = extension_schema(conn)
    assert ext is not None
    quoted = sql.Identifier(schema)
    for attempt in range(1, _ENABLE_ATTEMPTS + 1):
        if all(_relation_exists(conn, schema, table) for table in ("vectors", "valued", "reweighed")) and _settling(
            conn, schema
        ):
            return ext
        try:
            _enable_once(conn, quoted, sql.Identifier(ext), schema)
        except psycopg.Error as exc:
            if exc.sqlstate not in _LOCK_STATES or attempt == _ENABLE_ATTEMPTS:
                raise
            time.sleep(0.05 * attempt * random.uniform(0.5, 1.5))
    return ext


_ENABLE_ATTEMPTS = 20
_LOCK_STATES = frozenset({"40001", "40P01", "55P03", "42P07", "42710"})
"""Serialization failure, deadlock, lock timeout, and a table or trigger another process created
first: `enable` tries again."""


def _enable_once(conn: Conn, quoted: sql.Identifier, ext: sql.Identifier, schema: str) -> None:
    # The usage columns first, alone: adding nullable columns is instant, and the lock it needs
    # (ACCESS EXCLUSIVE) is held only for that.
    conn.execute("SET lock_timeout = '10s'")
    try:
        conn.execute(
            sql.SQL(
                "ALTER TABLE {s}.metadata ADD COLUMN IF NOT EXISTS ts float8, "
                "ADD COLUMN IF NOT EXISTS accesses float8, ADD COLUMN IF NOT EXISTS reward_count float8, "
                "ADD COLUMN IF NOT EXISTS reward_sum float8"
            ).format(s=quoted)
        )
        conn.execute("BEGIN")
        try:
            # In the writers' order. SHARE ROW EXCLUSIVE excludes writers and other enablers, not readers:
            # writes committed before are copied below; writes waiting see the table (`write_graph`).
            conn.execute(
                sql.SQL("LOCK TABLE {s}.nodes, {s}.embeddings, {s}.metadata IN SHARE ROW EXCLUSIVE MODE").format(
                    s=quoted
                )
            )
            if not _relation_exists(conn, schema):
                for statement in _ENABLE:
                    conn.execute(sql.SQL(statement).format(s=quoted, e=ext))
                _backfill(conn, schema)
            if not _relation_exists(conn, schema, "valued"):
                steps: tuple[str, ...] = (*_VALUED, *_REWEIGHED, *_VALUED_TRIGGERS)
            elif not _relation_exists(conn, schema, "reweighed"):  # enabled by an earlier release
                steps = _REWEIGHED
            else:
                steps = ()
            if steps or not _settling(conn, schema):  # created now, or enabled by an earlier release
                steps = (*steps, *_PENDING)
            for statement in steps:
                conn.execute(sql.SQL(statement).format(s=quoted, e=ext, **_WEIGHT_PARAMS))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    finally:
        conn.execute("RESET lock_timeout")


_ENABLE = (
    "CREATE TABLE {s}.vectors (repo text NOT NULL, id bytea NOT NULL, type text NOT NULL, vec {e}.vector NOT NULL, "
    "PRIMARY KEY (repo, id), FOREIGN KEY (repo, id) REFERENCES {s}.nodes (repo, id) ON DELETE CASCADE)",
    "CREATE TABLE {s}.search_depth (repo text NOT NULL, type text NOT NULL, dim integer NOT NULL, "
    "rows bigint NOT NULL, depth integer NOT NULL, recall float8 NOT NULL, floor float8 NOT NULL, "
    "measured_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (repo, type, dim))",
)
"""What `enable` creates besides the usage columns of ``{s}.metadata`` (the default value
function's inputs, NULL without metadata, written by `write_graph` in the same row as the
record): ``{s}.vectors`` (each embedded node's type and vector) and the calibrations."""


VALUE_REFERENCE = 1_767_225_600.0
"""The reference time of the value-weighted vectors (2026-01-01 UTC, in seconds): a weight is
the default value function's factor at this time, so weights of rows written years apart stay
within single precision."""
VALUE_CLAMP = 60.0
"""A weight's natural logarithm is clamped to within this: about 21 years either side of
`VALUE_REFERENCE` at the default 90-day half-life. Rows beyond share the clamped weight (their
order among themselves then ignores their age), which the calibration's recall measures."""

_WEIGHTED = {name: float(DEFAULT_PARAMS[NodeType.SEMANTIC][name]) for name in ("lambda", "k", "base_floor", "beta")}
"""The value function parameters the weights are computed with: the defaults every type shares."""
_WEIGHT_PARAMS = {
    "lam": sql.Literal(_WEIGHTED["lambda"]),
    "k": sql.Literal(_WEIGHTED["k"]),
    "floor": sql.Literal(_WEIGHTED["base_floor"]),
    "beta": sql.Literal(_WEIGHTED["beta"]),
    "ref": sql.Literal(VALUE_REFERENCE),
    "clamp": sql.Literal(VALUE_CLAMP),
}


AHEAD = math.log(1.01) / _WEIGHTED["lambda"] * 3600.0
"""Seconds a row's usage may be stamped after a query's `now` while its weight in the value-weighted
index exceeds its score's share by at most 1% (about 31 hours at the default half-life): clocks
that differ between writers, or a write that lands while a query runs, do not count as later."""


def weighted_alike(lam: float, k: float, base_floor: float, beta: float) -> bool:
    """Whether a type's value function parameters are those the weights were computed with (only
    then does the inner-product index order rows by their score)."""
    return (lam, k, base_floor, beta) == tuple(_WEIGHTED[n] for n in ("lambda", "k", "base_floor", "beta"))


_VALUED = (
    "CREATE TABLE {s}.valued (repo text NOT NULL, id bytea NOT NULL, type text NOT NULL, val {e}.vector, "
    "PRIMARY KEY (repo, id), FOREIGN KEY (repo, id) REFERENCES {s}.vectors (repo, id) ON DELETE CASCADE)",
    "CREATE INDEX valued_unweighted ON {s}.valued (repo, type) WHERE val IS NULL",
    "CREATE FUNCTION {s}.hg_weight(p_ts float8, p_accesses float8, p_reward_count float8, p_reward_sum float8) "
    "RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT CASE WHEN p_ts IS NULL THEN NULL ELSE "
    "exp(least({clamp}, greatest(-{clamp}, {lam} * (p_ts - {ref}) / 3600 "
    "+ ln(greatest({floor}, CASE WHEN p_accesses + {k} > 0 THEN p_accesses / (p_accesses + {k}) ELSE 0 END)) "
    "- CASE WHEN p_reward_count > 0 THEN greatest(r.t, 0) + ln(1 + exp(greatest(-700, -abs(r.t)))) ELSE 0 END))) "
    "END FROM (SELECT CASE WHEN p_reward_count > 0 THEN -{beta} * p_reward_sum / p_reward_count END AS t) r $fn$",
    "CREATE FUNCTION {s}.hg_valued(p_vec {e}.vector, p_weight float8) RETURNS {e}.vector "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT CASE WHEN p_weight IS NULL THEN NULL ELSE "
    "(SELECT array_agg(u.x * p_weight ORDER BY u.o) FROM unnest({e}.l2_normalize(p_vec)::real[]) "
    "WITH ORDINALITY AS u(x, o))::{e}.vector END $fn$",
)
"""The value-weighted vectors: ``{s}.valued`` holds, per embedded node, its unit vector times its
weight under the default value function (decay from `VALUE_REFERENCE`, usage and reward), NULL
without metadata. The inner product of a unit query with it is the node's default score up to a
factor every row shares at a given time, so an inner-product HNSW index over it hands out the
best-scored rows first. `_REWEIGHED` and `_VALUED_TRIGGERS` keep it in step with every writer,
whichever release."""

_REWEIGHED = (
    "CREATE TABLE {s}.reweighed (repo text NOT NULL, id bytea NOT NULL, type text NOT NULL, "
    "val {e}.vector NOT NULL, PRIMARY KEY (repo, id), "
    "FOREIGN KEY (repo, id) REFERENCES {s}.valued (repo, id) ON DELETE CASCADE)",
    "CREATE INDEX reweighed_type ON {s}.reweighed (repo, type)",
    "CREATE FUNCTION {s}.hg_heavier(p_a {e}.vector, p_b {e}.vector) RETURNS boolean "
    "LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT {e}.vector_norm(p_a) > {e}.vector_norm(p_b) $fn$",
    """CREATE OR REPLACE FUNCTION {s}.hg_valued_of_vector() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.valued (repo, id, type, val)
    SELECT NEW.repo, NEW.id, NEW.type, {s}.hg_valued(NEW.vec, (SELECT {s}.hg_weight(m.ts, m.accesses,
        m.reward_count, m.reward_sum) FROM {s}.metadata m WHERE m.repo = NEW.repo AND m.id = NEW.id))
    ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, val = EXCLUDED.val;
    IF TG_OP = 'UPDATE' THEN  -- a new vector's node has no reweighed row yet
        DELETE FROM {s}.reweighed WHERE repo = NEW.repo AND id = NEW.id;
    END IF;
    RETURN NULL;
END
$fn$""",
    """CREATE OR REPLACE FUNCTION {s}.hg_valued_of_usage() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_type text;
    v_held {e}.vector;
    v_now {e}.vector;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE {s}.valued SET val = NULL WHERE repo = OLD.repo AND id = OLD.id AND val IS NOT NULL;
        DELETE FROM {s}.reweighed WHERE repo = OLD.repo AND id = OLD.id;
        RETURN NULL;
    END IF;
    -- The weighted row first, locked: `fold` locks it before the reweighed row too.
    SELECT w.type, w.val, {s}.hg_valued(v.vec, {s}.hg_weight(NEW.ts, NEW.accesses, NEW.reward_count,
        NEW.reward_sum)) INTO v_type, v_held, v_now
    FROM {s}.valued w JOIN {s}.vectors v ON v.repo = w.repo AND v.id = w.id
    WHERE w.repo = NEW.repo AND w.id = NEW.id FOR UPDATE OF w;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_held IS NOT NULL AND v_now IS NOT NULL AND {s}.hg_heavier(v_now, v_held) THEN
        INSERT INTO {s}.reweighed (repo, id, type, val) VALUES (NEW.repo, NEW.id, v_type, v_now)
        ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, val = EXCLUDED.val;
    ELSE
        IF v_held IS DISTINCT FROM v_now THEN
            UPDATE {s}.valued SET val = v_now WHERE repo = NEW.repo AND id = NEW.id;
        END IF;
        IF v_held IS NOT NULL THEN  -- only a weighted row has a reweighed one
            DELETE FROM {s}.reweighed WHERE repo = NEW.repo AND id = NEW.id;
        END IF;
    END IF;
    RETURN NULL;
END
$fn$""",
)
"""Usage that raises a node's weight leaves its indexed row alone: the current weighted vector goes
to ``{s}.reweighed``, and each pool ranks those rows exactly beside its index lists (`ranked`).
Rewriting ``valued`` would insert into the HNSW index (milliseconds a row) and leave the old
version's element in the graph, right where queries look, until a vacuum. A row indexed below its
score is found by that list, so pools stay whole. Usage that lowers a weight (the row would sit
above its score and crowd the pools) or gives the first one rewrites ``valued``. `fold` moves the
rows back when they grow many. Created with the first weights, or added to a schema an earlier
release enabled (its trigger functions replaced in place)."""

_VALUED_TRIGGERS = (
    "CREATE TRIGGER hg_valued_vector AFTER INSERT ON {s}.vectors FOR EACH ROW "
    "EXECUTE FUNCTION {s}.hg_valued_of_vector()",
    "CREATE TRIGGER hg_valued_vector_change AFTER UPDATE ON {s}.vectors FOR EACH ROW "
    "WHEN (OLD.vec IS DISTINCT FROM NEW.vec OR OLD.type IS DISTINCT FROM NEW.type) "
    "EXECUTE FUNCTION {s}.hg_valued_of_vector()",
    "CREATE TRIGGER hg_valued_usage AFTER INSERT OR DELETE ON {s}.metadata FOR EACH ROW "
    "EXECUTE FUNCTION {s}.hg_valued_of_usage()",
    "CREATE TRIGGER hg_valued_usage_change AFTER UPDATE ON {s}.metadata FOR EACH ROW "
    "WHEN (OLD.ts IS DISTINCT FROM NEW.ts OR OLD.accesses IS DISTINCT FROM NEW.accesses "
    "OR OLD.reward_count IS DISTINCT FROM NEW.reward_count OR OLD.reward_sum IS DISTINCT FROM NEW.reward_sum) "
    "EXECUTE FUNCTION {s}.hg_valued_of_usage()",
    "INSERT INTO {s}.valued (repo, id, type, val) SELECT v.repo, v.id, v.type, "
    "{s}.hg_valued(v.vec, {s}.hg_weight(m.ts, m.accesses, m.reward_count, m.reward_sum)) "
    "FROM {s}.vectors v LEFT JOIN {s}.metadata m ON m.repo = v.repo AND m.id = v.id",
)
"""The triggers that keep ``{s}.valued`` (their functions: `_REWEIGHED`); the last statement fills it
from what is stored."""


_PENDING = (
    # Rows stored before stay indexed (false); every row inserted from now on lands pending (true).
    "ALTER TABLE {s}.vectors ADD COLUMN IF NOT EXISTS pending boolean NOT NULL DEFAULT false",
    "ALTER TABLE {s}.vectors ALTER COLUMN pending SET DEFAULT true",
    "ALTER TABLE {s}.valued ADD COLUMN IF NOT EXISTS pending boolean NOT NULL DEFAULT false",
    "ALTER TABLE {s}.valued ALTER COLUMN pending SET DEFAULT true",
    # Keyed by id too: `settle` walks the pending rows in key order from where its last chunk ended.
    "DROP INDEX IF EXISTS {s}.vectors_pending",
    "DROP INDEX IF EXISTS {s}.valued_pending",
    "CREATE INDEX IF NOT EXISTS vectors_pending_key ON {s}.vectors (repo, type, id) WHERE pending",
    "CREATE INDEX IF NOT EXISTS valued_pending_key ON {s}.valued (repo, type, id) WHERE pending",
    """CREATE OR REPLACE FUNCTION {s}.hg_pending() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.pending := true;
    RETURN NEW;
END
$fn$""",
    "DROP TRIGGER IF EXISTS hg_vector_pending ON {s}.vectors",
    "DROP TRIGGER IF EXISTS hg_valued_pending ON {s}.valued",
    "CREATE TRIGGER hg_vector_pending BEFORE UPDATE ON {s}.vectors FOR EACH ROW "
    "WHEN (OLD.vec IS DISTINCT FROM NEW.vec OR OLD.type IS DISTINCT FROM NEW.type) EXECUTE FUNCTION {s}.hg_pending()",
    "CREATE TRIGGER hg_valued_pending BEFORE UPDATE ON {s}.valued FOR EACH ROW "
    "WHEN (OLD.val IS DISTINCT FROM NEW.val OR OLD.type IS DISTINCT FROM NEW.type) "
    "EXECUTE FUNCTION {s}.hg_pending()",
    """CREATE OR REPLACE FUNCTION {s}.hg_valued_of_usage() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_type text;
    v_held {e}.vector;
    v_now {e}.vector;
    v_pending boolean;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE {s}.valued SET val = NULL WHERE repo = OLD.repo AND id = OLD.id AND val IS NOT NULL;
        DELETE FROM {s}.reweighed WHERE repo = OLD.repo AND id = OLD.id;
        RETURN NULL;
    END IF;
    -- The weighted row first, locked: `fold` locks it before the reweighed row too.
    SELECT w.type, w.val, {s}.hg_valued(v.vec, {s}.hg_weight(NEW.ts, NEW.accesses, NEW.reward_count,
        NEW.reward_sum)), w.pending INTO v_type, v_held, v_now, v_pending
    FROM {s}.valued w JOIN {s}.vectors v ON v.repo = w.repo AND v.id = w.id
    WHERE w.repo = NEW.repo AND w.id = NEW.id FOR UPDATE OF w;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- A pending row is scanned exactly: its weight is rewritten in place, at no index cost.
    IF v_held IS NOT NULL AND v_now IS NOT NULL AND NOT v_pending AND {s}.hg_heavier(v_now, v_held) THEN
        INSERT INTO {s}.reweighed (repo, id, type, val) VALUES (NEW.repo, NEW.id, v_type, v_now)
        ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, val = EXCLUDED.val;
    ELSE
        IF v_held IS DISTINCT FROM v_now THEN
            UPDATE {s}.valued SET val = v_now WHERE repo = NEW.repo AND id = NEW.id;
        END IF;
        IF v_held IS NOT NULL THEN  -- only a weighted row has a reweighed one
            DELETE FROM {s}.reweighed WHERE repo = NEW.repo AND id = NEW.id;
        END IF;
    END IF;
    RETURN NULL;
END
$fn$""",
)
"""The pending segment: a vector or weight written lands in its row with ``pending`` set, which the
HNSW indexes' predicates leave out (`ensure_indexes`), so a write pays no graph insert; each pool
scans the type's pending rows exactly beside its index lists (`ranked`), and `settle` clears the
flag in the background, where the index inserts happen. A 9-node write into an indexed type of
100k rows spent about 50 ms of its server time in the two HNSW inserts per node. Added under the
lock `enable` takes, idempotent (it also follows a re-creation of ``{s}.valued`` or
``{s}.reweighed``); the rows stored before stay indexed."""


def _settling(conn: Conn, schema: str) -> bool:
    """Whether the schema's vectors have the pending segment as this release keeps it (`_PENDING`,
    whose last index an earlier release did not have)."""
    return _relation_exists(conn, schema, "valued_pending_key")


def kept(conn: Conn, schema: str) -> bool:
    """Whether `schema` keeps server-side vectors (its writers must send them)."""
    return _relation_exists(conn, schema)


def _relation_exists(conn: Conn, schema: str, name: str = "vectors") -> bool:
    """Whether the schema holds a table or index of that name."""
    row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{name}',)).fetchone()
    return row is not None and row[0] is not None


def _backfill(conn: Conn, schema: str) -> None:
    """Fills the new columns and table from every stored metadata record and embedding, in batches."""
    quoted = sql.Identifier(schema)
    register(conn)
    with conn.cursor(name="hippograph_backfill_meta", binary=True) as cur:
        cur.execute(sql.SQL("SELECT repo, id, record FROM {s}.metadata").format(s=quoted))
        while rows := cur.fetchmany(_BACKFILL_BATCH):
            usage = [u for _, _, record in rows for u in codec.usage_of_meta(bytes(record))]
            conn.execute(
                sql.SQL(
                    "UPDATE {s}.metadata m SET ts = %s[4 * x.o - 3], accesses = %s[4 * x.o - 2], "
                    "reward_count = %s[4 * x.o - 1], reward_sum = %s[4 * x.o] "
                    "FROM unnest(%s::text[], %s::bytea[]) WITH ORDINALITY AS x(repo, id, o) "
                    "WHERE m.repo = x.repo AND m.id = x.id"
                ).format(s=quoted),
                (usage, usage, usage, usage, [r[0] for r in rows], [bytes(r[1]) for r in rows]),
            )
    select = sql.SQL(
        "SELECT e.repo, e.id, n.type, e.vec FROM {s}.embeddings e JOIN {s}.nodes n ON n.repo = e.repo AND n.id = e.id"
    ).format(s=quoted)
    insert = sql.SQL(
        "INSERT INTO {s}.vectors (repo, id, type, vec) "
        "SELECT x.repo, x.id, x.type, %s[(x.o - 1) * %s + 1 : x.o * %s] "
        "FROM unnest(%s::text[], %s::bytea[], %s::text[]) WITH ORDINALITY AS x(repo, id, type, o)"
    ).format(s=quoted)
    with conn.cursor(name="hippograph_backfill", binary=True) as cur:
        cur.execute(select)
        while rows := cur.fetchmany(_BACKFILL_BATCH):
            by_dim: dict[int, list[tuple[str, bytes, str, npt.NDArray[np.float32]]]] = {}
            for repo, key, node_type, vec in rows:
                v = codec.decode_embedding(bytes(vec))
                by_dim.setdefault(v.shape[0], []).append((repo, bytes(key), node_type, v))
            for dim, group in by_dim.items():
                flat = Float4Array(np.concatenate([g[3] for g in group]))
                conn.execute(
                    insert, (flat, dim, dim, [g[0] for g in group], [g[1] for g in group], [g[2] for g in group])
                )


def _base_name(repo: str, node_type: NodeType, dim: int) -> str:
    digest = hashlib.sha256(repo.encode("utf-8")).hexdigest()[:24]
    return f"hg_hnsw_{digest}_{node_type.value}_{dim}"


def index_name(repo: str, node_type: NodeType, dim: int) -> str:
    """The name of one (repo, type, dimension)'s cosine HNSW index over its settled (not pending)
    rows (a digest of the repo: names are short)."""
    return _base_name(repo, node_type, dim) + "_s"


def value_index_name(repo: str, node_type: NodeType, dim: int) -> str:
    """The name of one (repo, type, dimension)'s inner-product index over its settled value-weighted
    vectors."""
    return _base_name(repo, node_type, dim) + "_ws"


def earlier_index_names(repo: str, node_type: NodeType, dim: int) -> tuple[str, ...]:
    """The cosine index earlier releases built (every row of the type, pending ones included): it
    serves until `index_name`'s is built, then is dropped."""
    return (_base_name(repo, node_type, dim),)


def earlier_value_index_names(repo: str, node_type: NodeType, dim: int) -> tuple[str, ...]:
    """The value-weighted indexes earlier releases built: over every row (``_w``), and before it a
    sparser one (``_v``, the cosine index's `m` and `ef_construction`). They serve until
    `value_index_name`'s is built, then are dropped."""
    base = _base_name(repo, node_type, dim)
    return base + "_w", base + "_v"


VALUE_GRAPH_SCALE = 2
"""The value-weighted index links each row to this many times the cosine index's neighbours and
builds with as many times its candidate list (pgvector's limits: `m` 100, `ef_construction` 1,000).
Inner product is not a metric, and its graph needs denser links for a search to reach the best
rows: on 1M clustered rows × 128, 20-row pools of queries near stored vectors found 0.87–0.99 of
their best rows at m 16 and 0.94–1.0 at m 32 (docs/postgres.md, Server-side search), for about
1.4× the search time and twice the build time."""


def value_graph(m: int, ef_construction: int) -> tuple[int, int]:
    """The value-weighted index's (m, ef_construction) for the cosine index's."""
    dense = min(100, VALUE_GRAPH_SCALE * m)
    return dense, min(1000, max(VALUE_GRAPH_SCALE * ef_construction, 2 * dense))


def repo_index_prefix(repo: str) -> str:
    return _base_name(repo, NodeType.SEMANTIC, 1).rsplit("_", 2)[0] + "_"


def existing_indexes(conn: Conn, schema: str, repo: str) -> dict[str, bool]:
    """The repo's HNSW indexes by name, each with whether it is valid (a concurrent build that
    failed or is still running leaves an invalid one)."""
    rows = conn.execute(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname LIKE %s",
        (schema, repo_index_prefix(repo) + "%"),
    ).fetchall()
    return {str(name): bool(valid) for name, valid in rows}


def ensure_indexes(
    conn: Conn,
    schema: str,
    ext: str,
    repo: str,
    dim: int,
    types: Iterable[NodeType],
    m: int,
    ef_construction: int,
    stop: threading.Event | None = None,
) -> list[str]:
    """Builds the missing HNSW indexes of `types`, over the vectors (cosine) and over the
    value-weighted vectors (inner product, a denser graph: `value_graph`) (``CREATE INDEX
    CONCURRENTLY``: writers go on), and drops an earlier release's value-weighted index once its
    replacement is valid; returns the names built. `conn` is in autocommit. A session advisory lock
    per index keeps two processes from building the same one; an invalid index nobody is building
    is rebuilt."""
    if dim > MAX_INDEXED_DIM:
        return []
    have = existing_indexes(conn, schema, repo)
    built = []
    dense = value_graph(m, ef_construction)
    for node_type in types:
        for name, table, column, ops, (links, candidates) in (
            (index_name(repo, node_type, dim), "vectors", "vec", "vector_cosine_ops", (m, ef_construction)),
            (value_index_name(repo, node_type, dim), "valued", "val", "vector_ip_ops", dense),
        ):
            if have.get(name) is True or (stop is not None and stop.is_set()):
                continue
            lock = index_lock(schema, name)
            got = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()
            if got is None or not got[0]:
                continue  # another process is building it
            have = existing_indexes(conn, schema, repo)  # again, under the lock: it may have just been built
            if have.get(name) is True:
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
                continue
            try:
                with no_timeout(conn):
                    if name in have:  # left invalid by a build that died
                        conn.execute(
                            sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(
                                sql.Identifier(schema), sql.Identifier(name)
                            )
                        )
                    conn.execute(
                        sql.SQL(
                            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {s}.{table} USING hnsw "
                            "(({column}::{e}.vector({dim})) {e}.{ops}) WITH (m = {m}, ef_construction = {efc}) "
                            "WHERE repo = {repo} AND type = {type} AND NOT pending"
                        ).format(
                            name=sql.Identifier(name),
                            s=sql.Identifier(schema),
                            table=sql.Identifier(table),
                            column=sql.Identifier(column),
                            e=sql.Identifier(ext),
                            ops=sql.Identifier(ops),
                            dim=sql.Literal(dim),
                            m=sql.Literal(links),
                            efc=sql.Literal(candidates),
                            repo=sql.Literal(repo),
                            type=sql.Literal(node_type.value),
                        )
                    )
                built.append(name)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))
        if stop is None or not stop.is_set():
            _drop_replaced(conn, schema, repo, node_type, dim)
    return built


def index_lock(schema: str, name: str) -> int:
    """The session advisory lock of one index: held while it is built or rebuilt."""
    return int.from_bytes(hashlib.sha256(f"{schema}.{name}".encode()).digest()[:8], "big", signed=True)


@contextlib.contextmanager
def no_timeout(conn: Conn) -> Iterator[None]:
    """Lifts the session's statement timeout: a build takes minutes per million rows."""
    timeout = conn.execute("SHOW statement_timeout").fetchone()
    conn.execute("SET statement_timeout = 0")
    try:
        yield
    finally:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout[0] if timeout else "0",))


def _leftover(name: str, other: str) -> bool:
    """Whether index `other` is what a rebuild of index `name` that died left."""
    return other.startswith((name + "_ccnew", name + "_ccold"))


def drop_leftovers(conn: Conn, schema: str, repo: str, name: str) -> None:
    """Drops what a rebuild of index `name` that died left (``REINDEX CONCURRENTLY`` names its new
    index ``<name>_ccnew`` and the old one ``<name>_ccold``, with a number when taken)."""
    for other in existing_indexes(conn, schema, repo):
        if _leftover(name, other):
            conn.execute(
                sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(other))
            )


def _drop_replaced(conn: Conn, schema: str, repo: str, node_type: NodeType, dim: int) -> None:
    """Drops the type's indexes of an earlier release once their replacements serve, and what a
    rebuild of the value-weighted index that died left (unless a rebuild runs: its advisory lock)."""
    name = value_index_name(repo, node_type, dim)
    have = existing_indexes(conn, schema, repo)
    for current, earlier in (
        (index_name(repo, node_type, dim), earlier_index_names(repo, node_type, dim)),
        (name, earlier_value_index_names(repo, node_type, dim)),
    ):
        for old in earlier:
            if old in have and have.get(current) is True:
                conn.execute(
                    sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(
                        sql.Identifier(schema), sql.Identifier(old)
                    )
                )
    if any(_leftover(name, other) for other in have):
        lock = index_lock(schema, name)
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()
        if got is not None and got[0]:
            try:
                drop_leftovers(conn, schema, repo, name)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))


def drop_indexes(conn: Conn, schema: str, repo: str) -> None:
    """Drops every HNSW index of `repo` and its calibrations (when the repo is dropped). `conn`:
    autocommit (``DROP INDEX CONCURRENTLY``: other repos' reads and writes go on)."""
    conn.execute(sql.SQL("DELETE FROM {}.search_depth WHERE repo = %s").format(sql.Identifier(schema)), (repo,))
    for name in existing_indexes(conn, schema, repo):
        conn.execute(
            sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
        )
