"""`Postgres`: one memory shared by many processes and hosts, on PostgreSQL.

Install with ``pip install 'hippograph[postgres]'`` (psycopg 3 and
psycopg-pool). ``docs/postgres.md`` is the operator's guide; this docstring is
the design.

Layout (all tables in one schema, ``hippograph`` by default, created and
migrated by the backend itself; several repos share them through a ``repo``
column):

- ``migrations(version PK)``: the schema versions applied;
- ``repos(repo PK, dim, created_at)``: one row per repo; ``dim`` is fixed by
  the first embedding, ``created_at`` tells caches that a repo was dropped
  and created again;
- ``nodes(repo, id, type, record, created_at)``, ``embeddings(repo, id, vec)``,
  ``links(repo, a, edge, b)`` (stored in both directions), ``metadata(repo,
  id, record)``, ``ingestion(repo, source_id, record, token, stored_at)``:
  records encoded by `hippograph.codec`, embeddings as raw little-endian
  float32. Embeddings and links reference their nodes with ``ON DELETE
  CASCADE`` foreign keys, so the database itself guarantees that no link ever
  outlives one of its ends, even between concurrent writers;
- ``changes(seq identity PK, repo, ids, at)``: the change log, one row per
  write transaction, naming the node ids whose scoring inputs it touched;
  ``log_floor(seq)``: entries at or below it were trimmed.

Ids are stored as their UTF-8 bytes (``bytea``): PostgreSQL ``text`` cannot
hold NUL, which a valid id may contain, and bytes sort in code-point order.

Transactions. Every mutating call is one transaction at the server's default
isolation (READ COMMITTED on PostgreSQL; SERIALIZABLE on CockroachDB; both are
correct). `commit_ingestion` claims the source with ``INSERT ... ON CONFLICT
DO NOTHING`` on the ``(repo, source_id)`` primary key and reads the stored
record in the same transaction; the changeset is applied only when the claim
inserted, so exactly one of any number of concurrent callers wins and every
other one gets the winner's receipt. The first embedding fixes the dimension
with an upsert that keeps an existing value and returns it, so two writers
racing with different dimensions cannot both succeed. Multi-statement reads
run in one REPEATABLE READ, READ ONLY transaction: one snapshot.

Retries. Serialization failures and deadlocks (SQLSTATE 40001, 40P01), and a
foreign-key or unique violation caused by a concurrent writer, roll back
everything and are retried with jittered backoff, a bounded number of times.
A lost connection is retried when it is safe: always for reads; for writes
only when the connection died before ``COMMIT`` was sent, because then the
server certainly rolled back. A connection lost during ``COMMIT`` leaves the
outcome unknown: `commit_ingestion` resolves it exactly (its claim row carries
a random token, so a retry can tell its own committed claim from another
caller's) and every other write raises `StorageError` saying the change may or
may not have been applied. Either way a transaction is all or nothing.

The derived cache. Scoring runs on the Rust core over a per-process `TypeColumns`
per node type, like the LMDB backend. Each `find_candidates` opens a snapshot,
brings the cache up to date from the change log, scores, and hydrates the
chosen ids from the same snapshot, so an id the database no longer holds is
never returned, whatever the cache says.

Sequence values commit out of order: a transaction can draw seq 11, another
seq 12, and 12 commit first. A reader that remembered only "the highest seq
seen" would skip 11 forever. This cache therefore keeps ``high`` (the highest
seq seen) plus the *gaps* below it: seqs not visible yet, each with the time it
was first noticed. Each refresh reads the entries above ``high`` and the open
gaps, by primary key. A gap is dropped once no transaction can still commit it:
a writer inserts its log row as the very last statement before ``COMMIT`` and
runs with ``idle_in_transaction_session_timeout`` at half of `gap_timeout`, so
a seq that stays invisible for `gap_timeout` belongs to a rolled-back
transaction (or to a value the sequence skipped). The sequence is shared by
all repos, so the reader reads every repo's seq numbers (ids only for its own)
to tell another repo's entry from a gap. A cache rebuilt from scratch treats
the holes among the newest 10 000 seqs as gaps and assumes older ones settled.
The sequence must hand out values in allocation order across connections
(PostgreSQL's sequences do; CockroachDB's should, being one counter; YugabyteDB
caches values per connection unless ``ysql_sequence_cache_minval=1``).

A writer occasionally trims the log (`trim_log`): entries beyond `log_keep`
that are older than twice `gap_timeout` are deleted and ``log_floor`` raised
in the same transaction. A reader whose ``high`` or oldest gap is at or below
the floor rebuilds its cache from its snapshot instead of catching up.

Portability. Only primary keys, foreign keys, ``ON CONFLICT``, identity
columns, arrays, ``SELECT ... FOR UPDATE`` and plain transactions are used: no
advisory locks, no LISTEN/NOTIFY, no PostgreSQL-only functions on the data
path. Verified on PostgreSQL 15 (see docs/postgres.md for the others).

Forking: a backend opened before ``fork()`` refuses calls in the child (its
pooled connections belong to the parent); open another one there.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

try:
    import psycopg
    import psycopg.conninfo
    import psycopg.errors
    import psycopg_pool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'hippograph[postgres]'"
    ) from exc

from ..engine.checks import Embedding, Progress, check_id
from ..engine.columns import (
    ColumnsCopy,
    TypeColumns,
    retire,
    stop_background_builds,
)
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from ..errors import ConfigError, HippographError, IngestionError, StorageError, ValidationError
from ..graph import codec
from ..graph.changeset import Changeset, check_changeset, normalised_links
from ..graph.model import (
    ORPHAN_TYPES,
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    as_edge_type,
    as_node_type,
    as_node_types,
)
from ..graph.recall import build_vector_indexes, find_candidates, usage_of
from ..graph.value import ValueFunctionConfig
from ._base import BackendBase, RWLock, check_ids, check_metadata_updates, check_record

__all__ = ["DSN_ENV", "SCHEMA_VERSION", "Postgres", "drop_repo"]

T = TypeVar("T")
Row = tuple[Any, ...]
Conn = psycopg.Connection[Row]

DSN_ENV: Final = "HIPPOGRAPH_PG_DSN"
"""The environment variable read when no DSN is passed."""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_REPO_BYTES = 255
_TRIM_EVERY = 1024
"""A writer whose log seq is a multiple of this trims the log afterwards."""
_REBUILD_WINDOW = 10_000
"""A rebuilt cache treats missing seqs among the newest this many as gaps."""
_MAX_GAPS = 10_000
_MIGRATION_ATTEMPTS = 20

# -- schema ---------------------------------------------------------------------------------
# `{s}` is the quoted schema name (validated against _SCHEMA_NAME before use).

_MIGRATIONS: Final[tuple[tuple[int, str, tuple[str, ...]], ...]] = (
    (
        1,
        "repos, nodes, embeddings, links, metadata, ingestion records, change log",
        (
            """CREATE TABLE {s}.repos (
                repo text PRIMARY KEY,
                dim integer CHECK (dim > 0),
                created_at timestamptz NOT NULL DEFAULT clock_timestamp()
            )""",
            """CREATE TABLE {s}.nodes (
                repo text NOT NULL,
                id bytea NOT NULL,
                type text NOT NULL,
                record bytea NOT NULL,
                created_at timestamptz NOT NULL,
                PRIMARY KEY (repo, id)
            )""",
            """CREATE TABLE {s}.embeddings (
                repo text NOT NULL,
                id bytea NOT NULL,
                vec bytea NOT NULL,
                PRIMARY KEY (repo, id),
                FOREIGN KEY (repo, id) REFERENCES {s}.nodes (repo, id) ON DELETE CASCADE
            )""",
            """CREATE TABLE {s}.links (
                repo text NOT NULL,
                a bytea NOT NULL,
                edge text NOT NULL,
                b bytea NOT NULL,
                PRIMARY KEY (repo, a, edge, b),
                FOREIGN KEY (repo, a) REFERENCES {s}.nodes (repo, id) ON DELETE CASCADE,
                FOREIGN KEY (repo, b) REFERENCES {s}.nodes (repo, id) ON DELETE CASCADE
            )""",
            "CREATE INDEX links_by_b ON {s}.links (b, repo)",
            """CREATE TABLE {s}.metadata (
                repo text NOT NULL,
                id bytea NOT NULL,
                record bytea NOT NULL,
                PRIMARY KEY (repo, id)
            )""",
            """CREATE TABLE {s}.ingestion (
                repo text NOT NULL,
                source_id bytea NOT NULL,
                record bytea NOT NULL,
                token bytea NOT NULL,
                stored_at timestamptz NOT NULL,
                PRIMARY KEY (repo, source_id)
            )""",
            """CREATE TABLE {s}.changes (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                repo text NOT NULL,
                ids bytea[] NOT NULL,
                at timestamptz NOT NULL DEFAULT clock_timestamp()
            )""",
            "CREATE TABLE {s}.log_floor (id integer PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL)",
            "INSERT INTO {s}.log_floor (id, seq) VALUES (1, 0)",
        ),
    ),
)

SCHEMA_VERSION: Final = _MIGRATIONS[-1][0]
"""The schema version this release creates and understands."""

_SQL: Final[dict[str, str]] = {
    # repo state
    "register": "INSERT INTO {s}.repos (repo) VALUES (%s) ON CONFLICT (repo) DO NOTHING",
    "dim": "SELECT dim FROM {s}.repos WHERE repo = %s",
    "fix_dim": (
        "INSERT INTO {s}.repos (repo, dim) VALUES (%s, %s) ON CONFLICT (repo) "
        "DO UPDATE SET dim = COALESCE({s}.repos.dim, EXCLUDED.dim) RETURNING dim"
    ),
    "state": (
        "SELECT f.seq, r.dim, r.created_at FROM {s}.log_floor f LEFT JOIN {s}.repos r ON r.repo = %s WHERE f.id = 1"
    ),
    # nodes
    "unlink": "DELETE FROM {s}.links WHERE repo = %s AND (a = ANY(%s) OR b = ANY(%s))",
    "put_node": (
        "INSERT INTO {s}.nodes (repo, id, type, record, created_at) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, record = EXCLUDED.record, "
        "created_at = EXCLUDED.created_at"
    ),
    "put_emb": (
        "INSERT INTO {s}.embeddings (repo, id, vec) VALUES (%s, %s, %s) "
        "ON CONFLICT (repo, id) DO UPDATE SET vec = EXCLUDED.vec"
    ),
    "del_emb": "DELETE FROM {s}.embeddings WHERE repo = %s AND id = ANY(%s)",
    "existing": "SELECT id FROM {s}.nodes WHERE repo = %s AND id = ANY(%s)",
    "put_link": "INSERT INTO {s}.links (repo, a, edge, b) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
    "del_nodes": "DELETE FROM {s}.nodes WHERE repo = %s AND id = ANY(%s) RETURNING id",
    "lock_nodes": "SELECT id, type FROM {s}.nodes WHERE repo = %s AND id = ANY(%s) ORDER BY id FOR UPDATE",
    "linked_any": "SELECT DISTINCT a FROM {s}.links WHERE repo = %s AND a = ANY(%s)",
    # Reads by id look the embedding and metadata up per node (a correlated subquery on the primary
    # key) rather than joining: no planner estimate, however stale, turns that into a scan of the repo.
    "nodes_by_id": (
        "SELECT n.id, n.record, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id) "
        "FROM {s}.nodes n WHERE n.repo = %s AND n.id = ANY(%s)"
    ),
    "nodes_with_meta": (
        "SELECT n.id, n.record, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "(SELECT m.record FROM {s}.metadata m WHERE m.repo = n.repo AND m.id = n.id) "
        "FROM {s}.nodes n WHERE n.repo = %s AND n.id = ANY(%s)"
    ),
    "links_of": "SELECT a, edge, b FROM {s}.links WHERE repo = %s AND a = ANY(%s)",
    "neighbours": "SELECT DISTINCT b FROM {s}.links WHERE repo = %s AND a = ANY(%s)",
    "neighbours_by_edge": "SELECT DISTINCT b FROM {s}.links WHERE repo = %s AND a = ANY(%s) AND edge = %s",
    "ids_of_types": "SELECT id FROM {s}.nodes WHERE repo = %s AND type = ANY(%s::text[])",
    # scoring inputs (the cache)
    "scoring_rows": (
        "SELECT n.id, n.type, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "(SELECT m.record FROM {s}.metadata m WHERE m.repo = n.repo AND m.id = n.id) "
        "FROM {s}.nodes n WHERE n.repo = %s AND n.id = ANY(%s)"
    ),
    # whole-repo scans: one table each, joined in Python, so no join plan can go wrong on a big repo
    "repo_types": "SELECT id, type FROM {s}.nodes WHERE repo = %s",
    "repo_nodes": "SELECT id, type, record FROM {s}.nodes WHERE repo = %s",
    "repo_embeddings": "SELECT id, vec FROM {s}.embeddings WHERE repo = %s",
    "repo_metadata": "SELECT id, record FROM {s}.metadata WHERE repo = %s",
    "repo_links": "SELECT a, edge, b FROM {s}.links WHERE repo = %s",
    "repo_records": "SELECT source_id, record FROM {s}.ingestion WHERE repo = %s",
    # metadata
    "put_meta": (
        "INSERT INTO {s}.metadata (repo, id, record) VALUES (%s, %s, %s) "
        "ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record"
    ),
    "del_meta": "DELETE FROM {s}.metadata WHERE repo = %s AND id = ANY(%s) RETURNING id",
    "get_meta": "SELECT id, record FROM {s}.metadata WHERE repo = %s AND id = ANY(%s)",
    # ingestion
    "claim": (
        "INSERT INTO {s}.ingestion (repo, source_id, record, token, stored_at) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (repo, source_id) DO NOTHING RETURNING token"
    ),
    "get_record": "SELECT record, token FROM {s}.ingestion WHERE repo = %s AND source_id = %s",
    "del_record": "DELETE FROM {s}.ingestion WHERE repo = %s AND source_id = %s RETURNING source_id",
    # change log
    "log": "INSERT INTO {s}.changes (repo, ids) VALUES (%s, %s) RETURNING seq",
    "log_new": "SELECT seq, CASE WHEN repo = %s THEN ids END FROM {s}.changes WHERE seq > %s ORDER BY seq",
    "log_new_and_gaps": (
        "SELECT seq, CASE WHEN repo = %s THEN ids END FROM {s}.changes WHERE seq > %s OR seq = ANY(%s) ORDER BY seq"
    ),
    "log_top": "SELECT max(seq) FROM {s}.changes",
    "log_seqs_above": "SELECT seq FROM {s}.changes WHERE seq > %s",
    "trim_cut": (
        "SELECT max(seq) FROM {s}.changes WHERE seq <= %s AND at < clock_timestamp() - %s * interval '1 second'"
    ),
    "trim_floor": "UPDATE {s}.log_floor SET seq = %s WHERE id = 1 AND seq < %s RETURNING seq",
    "trim_delete": "DELETE FROM {s}.changes WHERE seq <= %s",
    # stats and checks
    "count_types": "SELECT type, count(*) FROM {s}.nodes WHERE repo = %s GROUP BY type",
    "count_links": "SELECT count(*) FROM {s}.links WHERE repo = %s",
    "count_records": "SELECT count(*) FROM {s}.ingestion WHERE repo = %s",
    "count_meta": "SELECT count(*) FROM {s}.metadata WHERE repo = %s",
}

_DROP_REPO: Final = (
    "DELETE FROM {s}.nodes WHERE repo = %s",
    "DELETE FROM {s}.metadata WHERE repo = %s",
    "DELETE FROM {s}.ingestion WHERE repo = %s",
    "DELETE FROM {s}.repos WHERE repo = %s",
)

# SQLSTATEs
_CONFLICT_STATES = frozenset({"40001", "40P01"})
_RACE_STATES = frozenset({"23503", "23505"})  # FK / unique violation: a concurrent writer won a race
_TIMEOUT_STATES = frozenset({"57014", "55P03"})
_AMBIGUOUS_STATES = frozenset({"40003"})  # CockroachDB: statement completion unknown
_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})  # shutdowns, idle timeouts


def _key(node_id: str) -> bytes:
    return node_id.encode("utf-8")


def _id(key: bytes | memoryview) -> str:
    return bytes(key).decode("utf-8")


def _resolve_dsn(dsn: str | None) -> str:
    value = dsn if dsn is not None else os.environ.get(DSN_ENV)
    if not value or not value.strip():
        raise ConfigError(f"no PostgreSQL DSN: pass Postgres(dsn=...) or set {DSN_ENV}")
    try:
        psycopg.conninfo.conninfo_to_dict(value)
    except psycopg.Error as exc:
        raise ConfigError(f"invalid PostgreSQL DSN: {_without_secrets(str(exc).strip(), value)}") from None
    return value


_SECRETS = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)|://[^:/@]*:([^@/]*)@|[?&]password=([^&]*)")


def _without_secrets(message: str, dsn: str) -> str:
    """libpq's parse error with any password of `dsn` blanked out: messages end up in logs."""
    for match in _SECRETS.finditer(dsn):
        for secret in match.groups():
            for form in {secret, secret.strip("'")} if secret else ():
                if form:
                    message = message.replace(form, "***")
    return message


def _where(dsn: str) -> str:
    """host:port/dbname of a DSN, for messages (never the password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:  # pragma: no cover - validated before
        return "?"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(f"schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, ≤ 63 chars), got {schema!r}")
    if schema.startswith("pg_") or schema == "information_schema":
        raise ConfigError(f"schema {schema!r} is reserved by PostgreSQL")
    return schema


def _check_repo(repo: object) -> str:
    if not isinstance(repo, str) or not repo.strip():
        raise ConfigError(f"repo must be a non-blank str, got {repo!r}")
    if "\0" in repo:
        raise ConfigError(f"repo name {repo!r} must not contain NUL")
    try:
        size = len(repo.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(f"repo name {repo!r} is not valid UTF-8") from None
    if size > _MAX_REPO_BYTES:
        raise ConfigError(f"repo name {repo[:40]!r}… is longer than {_MAX_REPO_BYTES} bytes")
    return repo


def _seconds(name: str, value: object, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"{name} must be a positive number of seconds{' or None' if allow_none else ''}, got {value!r}"
        )
    return float(value)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _sql_map(schema: str) -> dict[str, str]:
    quoted = f'"{schema}"'
    return {name: text.replace("{s}", quoted) for name, text in _SQL.items()}


class _Retry(Exception):
    """Raised inside a transaction to roll it back and run it again."""


class _Tx:
    """One transaction's connection, with the repo's statements at hand."""

    def __init__(self, conn: Conn, repo: str, sql: Mapping[str, str]) -> None:
        self.conn = conn
        self.repo = repo
        self.sql = sql

    def all(self, name: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.fetchall() if cur.description is not None else []

    def one(self, name: str, params: Sequence[Any] = ()) -> Row | None:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.fetchone() if cur.description is not None else None

    def run(self, name: str, params: Sequence[Any] = ()) -> int:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.rowcount

    def many(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.conn.cursor(binary=True) as cur:
                cur.executemany(self.sql[name], rows)

    # -- shared reads ------------------------------------------------------------------

    def dim(self) -> int | None:
        row = self.one("dim", (self.repo,))
        return None if row is None or row[0] is None else int(row[0])

    def links_of(self, keys: list[bytes]) -> dict[str, dict[EdgeType, set[str]]]:
        out: dict[str, dict[EdgeType, set[str]]] = {}
        for a, edge, b in self.all("links_of", (self.repo, keys)):
            out.setdefault(_id(a), {}).setdefault(EdgeType(edge), set()).add(_id(b))
        return out

    def nodes(self, ids: Iterable[str], *, with_meta: bool = False) -> dict[str, tuple[Node, NodeMetadata | None]]:
        """The nodes (with their current links, and metadata when asked) among `ids`."""
        keys = sorted({_key(i) for i in ids})
        if not keys:
            return {}
        rows = self.all("nodes_with_meta" if with_meta else "nodes_by_id", (self.repo, keys))
        links = self.links_of([bytes(r[0]) for r in rows])
        out: dict[str, tuple[Node, NodeMetadata | None]] = {}
        for row in rows:
            node_id = _id(row[0])
            out[node_id] = (
                _decode_node(node_id, row[1], row[2], links.get(node_id, {})),
                codec.decode_meta(bytes(row[3])) if with_meta and row[3] is not None else None,
            )
        return out


def _decode_node(node_id: str, record: bytes, vec: bytes | None, links: Mapping[EdgeType, set[str]]) -> Node:
    embedding = None if vec is None else codec.decode_embedding(bytes(vec))
    return codec.decode_node(bytes(record), node_id, embedding, {e: frozenset(i) for e, i in links.items()})


class _Write:
    """One write transaction: the changeset steps, then one change-log row naming what it touched."""

    def __init__(self, tx: _Tx) -> None:
        self.tx = tx
        self.touched: set[str] = set()
        self.seq: int | None = None

    def apply(self, cs: Changeset, meta_rows: Mapping[str, bytes]) -> None:
        """Additions, then links, then metadata (the `apply_changeset` order)."""
        tx, repo = self.tx, self.tx.repo
        stored = tx.dim()
        dim = check_changeset(cs, stored)
        if dim is not None and stored is None:
            row = tx.one("fix_dim", (repo, dim))
            fixed = None if row is None else row[0]
            if fixed != dim:  # a concurrent writer fixed another dimension first
                check_changeset(cs, fixed)
        last = {n.id: n for n in cs.additions}
        if last:
            keys = sorted(_key(i) for i in last)
            tx.run("unlink", (repo, keys, keys))
            nodes = sorted(((_key(i), n) for i, n in last.items()), key=lambda kn: kn[0])
            tx.many(
                "put_node",
                [(repo, k, n.node_type.value, codec.encode_node(n), n.created_at) for k, n in nodes],
            )
            bare = [k for k, n in nodes if n.embedding is None]
            if bare:
                tx.run("del_emb", (repo, bare))
            tx.many(
                "put_emb",
                [(repo, k, codec.encode_embedding(n.embedding)) for k, n in nodes if n.embedding is not None],
            )
            self.touched.update(last)
        self.link([(a, b, e) for a, b, e in normalised_links(cs)])
        self.put_meta(meta_rows)

    def link(self, links: list[tuple[str, str, EdgeType]]) -> None:
        """Both directions of every link whose two ends exist; others are no-ops."""
        links = [(a, b, e) for a, b, e in links if a != b]
        if not links:
            return
        ends = sorted({_key(x) for a, b, _ in links for x in (a, b)})
        existing = {bytes(r[0]) for r in self.tx.all("existing", (self.tx.repo, ends))}
        rows: set[tuple[bytes, str, bytes]] = set()
        for a, b, edge in links:
            ka, kb = _key(a), _key(b)
            if ka in existing and kb in existing:
                rows.add((ka, edge.value, kb))
                rows.add((kb, edge.value, ka))
        self.tx.many("put_link", [(self.tx.repo, a, e, b) for a, e, b in sorted(rows)])

    def put_meta(self, meta_rows: Mapping[str, bytes]) -> None:
        rows = sorted((_key(i), data) for i, data in meta_rows.items())
        self.tx.many("put_meta", [(self.tx.repo, k, data) for k, data in rows])
        self.touched.update(meta_rows)

    def delete_nodes(self, ids: Iterable[str]) -> list[str]:
        keys = sorted({_key(i) for i in ids})
        if not keys:
            return []
        gone = [_id(r[0]) for r in self.tx.all("del_nodes", (self.tx.repo, keys))]
        self.touched.update(gone)
        return gone

    def delete_meta(self, ids: Iterable[str]) -> None:
        keys = sorted({_key(i) for i in ids})
        if keys:
            self.touched.update(_id(r[0]) for r in self.tx.all("del_meta", (self.tx.repo, keys)))

    def finish(self) -> None:
        """Logs the touched ids: the transaction's last statement, so its seq is in flight only until COMMIT."""
        if self.touched:
            row = self.tx.one("log", (self.tx.repo, sorted(_key(i) for i in self.touched)))
            self.seq = None if row is None else int(row[0])


class _Cache:
    """This process's derived scoring state for one repo, and how far into the change log it is.

    ``high`` is the highest log seq applied; ``gaps`` maps each seq below it
    that was not visible yet to the monotonic time it was first noticed. See
    the module docstring for why both are needed. Both advance only after the
    rows they stand for were read and applied, so a refresh that fails half-way
    (a lost connection, say) is simply redone by the next one.
    """

    def __init__(self, ann: AnnConfig | None, gap_timeout: float, lock: RWLock) -> None:
        self.ann = ann
        self.lock = lock
        self.gap_timeout = gap_timeout
        self.ready = False
        self.incarnation: object = None
        self.high = 0
        self.gaps: dict[int, float] = {}
        self.rebuilds = 0
        self.index: dict[NodeType, TypeColumns] = {t: TypeColumns(ann, lock) for t in NodeType}
        self.type_of: dict[str, NodeType] = {}
        self.retired: list[threading.Thread] = []
        """Builder threads of type indexes a rebuild replaced, joined on close."""

    def refresh(self, tx: _Tx, floor: int, incarnation: object) -> None:
        if (
            not self.ready
            or incarnation != self.incarnation
            or self.high < floor
            or (self.gaps and min(self.gaps) <= floor)
        ):
            self._rebuild(tx, floor, incarnation)
            return
        if self.gaps:
            rows = tx.all("log_new_and_gaps", (tx.repo, self.high, sorted(self.gaps)))
        else:
            rows = tx.all("log_new", (tx.repo, self.high))
        now = time.monotonic()
        high, gaps = self.high, dict(self.gaps)
        changed: set[bytes] = set()
        for seq, ids in rows:
            if seq > high:
                _open_gaps(gaps, high, seq, now)
                high = seq
            else:
                gaps.pop(seq, None)
            if ids:
                changed.update(bytes(k) for k in ids)
        if changed:
            keys = sorted(changed)
            loaded = _scoring_rows(tx.all("scoring_rows", (tx.repo, keys)))
            for node_id, (node_type, embedding, meta) in loaded.items():
                self._upsert(node_id, node_type, embedding, meta)
            for key in keys:
                node_id = _id(key)
                old = None if node_id in loaded else self.type_of.pop(node_id, None)
                if old is not None:
                    self.index[old].remove(node_id)
        self.high = high
        self.gaps = {s: t for s, t in gaps.items() if now - t < self.gap_timeout}

    def _upsert(
        self, node_id: str, node_type: NodeType, embedding: Embedding | None, meta: NodeMetadata | None
    ) -> None:
        old = self.type_of.get(node_id)
        if old is not None and old != node_type:
            self.index[old].remove(node_id)
        self.index[node_type].upsert(node_id, embedding, usage_of(meta))
        self.type_of[node_id] = node_type

    def _rebuild(self, tx: _Tx, floor: int, incarnation: object) -> None:
        """Everything from the snapshot; gaps among the newest log seqs are noticed now."""
        row = tx.one("log_top")
        top = 0 if row is None or row[0] is None else int(row[0])
        low = max(floor, top - _REBUILD_WINDOW)
        visible = {int(r[0]) for r in tx.all("log_seqs_above", (low,))}
        types = {bytes(k): NodeType(t) for k, t in tx.all("repo_types", (tx.repo,))}
        vecs = {bytes(k): bytes(v) for k, v in tx.all("repo_embeddings", (tx.repo,))}
        metas = {bytes(k): bytes(v) for k, v in tx.all("repo_metadata", (tx.repo,))}
        loaded = _scoring_rows([(k, t.value, vecs.get(k), metas.get(k)) for k, t in types.items()])
        index = {nt: TypeColumns(self.ann, self.lock) for nt in NodeType}
        type_of: dict[str, NodeType] = {}
        for node_id, (node_type, embedding, meta) in loaded.items():
            index[node_type].upsert(node_id, embedding, usage_of(meta))
            type_of[node_id] = node_type
        now = time.monotonic()
        self.retired = retire(self.index.values(), self.retired)
        self.index, self.type_of = index, type_of
        self.high = max(top, floor)
        self.gaps = {s: now for s in range(max(low + 1, top - _MAX_GAPS), top) if s not in visible}
        self.incarnation = incarnation
        self.ready = True
        self.rebuilds += 1


def _open_gaps(gaps: dict[int, float], high: int, seq: int, now: float) -> None:
    """Records the seqs strictly between `high` and `seq` as gaps noticed `now` (at most _MAX_GAPS in all)."""
    for missing in range(max(high + 1, seq - _MAX_GAPS), seq):
        gaps[missing] = now
    if len(gaps) > _MAX_GAPS:
        for old in sorted(gaps)[: len(gaps) - _MAX_GAPS]:
            del gaps[old]


def _scoring_rows(rows: list[Row]) -> dict[str, tuple[NodeType, Embedding | None, NodeMetadata | None]]:
    """(id, type, vec, metadata record) rows decoded, before anything in the cache changes."""
    return {
        _id(key): (
            NodeType(node_type),
            None if vec is None else codec.decode_embedding(bytes(vec)),
            None if meta is None else codec.decode_meta(bytes(meta)),
        )
        for key, node_type, vec, meta in rows
    }


class Postgres(BackendBase):
    """The `GraphBackend` contract on PostgreSQL, shared by any number of processes and hosts.

    `dsn`: a libpq connection string or URI; when None, ``$HIPPOGRAPH_PG_DSN``
    (neither → `ConfigError`). `repo`: the memory to use in that database
    (several live side by side). `schema`: where the tables live (created when
    missing). `pool_size`/`min_connections`: the connection pool's bounds;
    `timeout`: seconds to wait for a pooled connection. `connect_timeout` and
    `statement_timeout` (seconds; None leaves the server's setting) bound a
    dead server and a stuck statement. `retries`: attempts after a
    serialization failure, deadlock or safe-to-retry connection loss.
    `gap_timeout`: how long a change-log seq may stay invisible before the
    cache stops waiting for it (see the module docstring). `log_keep`: log
    entries kept by trimming. `ann`: HNSW settings of the in-process index,
    as for `LMDB`. `application_name` labels the connections in
    ``pg_stat_activity``; `connect_kwargs` go to libpq as they are.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        repo: str = "default",
        schema: str = "hippograph",
        pool_size: int = 10,
        min_connections: int = 1,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout: float | None = 60.0,
        retries: int = 10,
        gap_timeout: float = 30.0,
        log_keep: int = 100_000,
        ann: AnnConfig | None = DEFAULT_ANN,
        application_name: str = "hippograph",
        connect_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.dsn = _resolve_dsn(dsn)
        self.repo = _check_repo(repo)
        self.schema = _check_schema(schema)
        self._pool_size = _positive_int("pool_size", pool_size)
        min_size = _positive_int("min_connections", min_connections)
        if min_size > self._pool_size:
            raise ConfigError(f"min_connections ({min_size}) exceeds pool_size ({self._pool_size})")
        self._timeout = _seconds("timeout", timeout, allow_none=False) or 30.0
        connect = _seconds("connect_timeout", connect_timeout, allow_none=False) or 10.0
        stmt = _seconds("statement_timeout", statement_timeout, allow_none=True)
        self._gap_timeout = _seconds("gap_timeout", gap_timeout, allow_none=False) or 30.0
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {retries!r}")
        self._retries = retries
        self._log_keep = _positive_int("log_keep", log_keep)
        self._sql = _sql_map(self.schema)
        self._pid = os.getpid()
        self._cache_lock = RWLock()
        self._cache = _Cache(ann, self._gap_timeout, self._cache_lock)
        self._trim_lock = threading.Lock()
        self._where = _where(self.dsn)
        kwargs: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(connect)),
            "application_name": application_name,
            **(connect_kwargs or {}),
            "autocommit": True,  # transactions are explicit: BEGIN ... COMMIT
        }
        settings = []
        if stmt is not None:
            settings.append(f"SET statement_timeout = '{math.ceil(stmt * 1000)}ms'")
        self._write_begin = (
            f"BEGIN; SET LOCAL idle_in_transaction_session_timeout = '{math.ceil(self._gap_timeout * 500)}ms'"
        )

        def configure(conn: Conn) -> None:
            for statement in settings:
                conn.execute(statement)

        self._open_and_migrate(kwargs, configure)
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self.dsn,
            kwargs=kwargs,
            min_size=min_size,
            max_size=self._pool_size,
            open=False,
            configure=configure,
            timeout=self._timeout,
            name=f"hippograph:{self.repo}",
        )
        try:
            self._pool.open(wait=True, timeout=max(self._timeout, connect))
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {self._where}: {exc}", operation="open") from None

    # -- opening ---------------------------------------------------------------------------

    def _open_and_migrate(self, kwargs: Mapping[str, Any], configure: Callable[[Conn], None]) -> None:
        """Connects once (for a clear error when the server is unreachable), migrates, registers the repo."""
        try:
            conn: Conn = psycopg.connect(self.dsn, **kwargs)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL at {self._where}: {exc}", operation="open") from None
        try:
            with conn:
                configure(conn)
                _migrate(conn, self.schema)
                conn.execute(self._sql["register"], (self.repo,))
        except psycopg.Error as exc:
            raise StorageError(f"cannot prepare schema {self.schema!r}: {exc}", operation="open") from None

    # -- transactions ----------------------------------------------------------------------

    def _guard(self, operation: str) -> None:
        self._check_open(operation)
        if os.getpid() != self._pid:
            raise StorageError(
                "this PostgreSQL backend was opened before fork(); open it again in the child process",
                operation=operation,
            )

    def _backoff(self, attempt: int) -> None:
        time.sleep(min(1.0, 0.005 * 2 ** min(attempt, 8)) * random.uniform(0.5, 1.5))

    def _transaction(
        self,
        operation: str,
        fn: Callable[[_Tx], T],
        *,
        write: bool,
        snapshot: bool = True,
        resolves_doubt: bool = False,
    ) -> T:
        """Runs `fn` in one transaction, retrying what is safe to retry (see the module docstring).

        `snapshot` (reads): one REPEATABLE READ READ ONLY transaction; without
        it the statements run in autocommit (use for single-statement reads).
        `resolves_doubt` (writes): `fn` can tell on a rerun whether an attempt
        whose COMMIT got no answer took effect, so that case is retried too.
        """
        self._guard(operation)
        attempt = 0
        while True:
            attempt += 1
            committing = False
            try:
                with self._pool.connection(timeout=self._timeout) as conn:
                    transactional = write or snapshot
                    if write:
                        conn.execute(self._write_begin)
                    elif snapshot:
                        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    try:
                        result = fn(_Tx(conn, self.repo, self._sql))
                    except BaseException:
                        if transactional:
                            _rollback(conn)
                        raise
                    if transactional:
                        committing = True
                        conn.execute("COMMIT")
                return result
            except HippographError:
                raise
            except _Retry:
                if attempt > self._retries:
                    raise StorageError("gave up after repeated concurrent changes", operation=operation) from None
                self._backoff(attempt)
            except psycopg_pool.PoolTimeout:
                raise StorageError(
                    f"no PostgreSQL connection available within {self._timeout:g} s ({self._where})",
                    operation=operation,
                ) from None
            except psycopg_pool.PoolClosed:
                raise StorageError("the backend is closed", operation=operation) from None
            except psycopg.Error as exc:
                kind = _kind(exc, write)
                if kind == "connection":
                    self._check_pool()
                    if write and committing and not resolves_doubt:
                        raise StorageError(
                            f"connection to {self._where} lost while committing; the change may or may not "
                            f"have been applied: {exc}",
                            operation=operation,
                        ) from None
                elif kind == "ambiguous" and write and not resolves_doubt:
                    raise StorageError(
                        f"the database could not tell whether the change was applied: {exc}", operation=operation
                    ) from None
                elif kind == "timeout":
                    raise StorageError(f"timed out: {exc}", operation=operation) from None
                elif kind == "fatal":
                    raise StorageError(f"{type(exc).__name__}: {exc}", operation=operation) from None
                if attempt > self._retries:
                    raise StorageError(
                        f"gave up after {attempt} attempts; last error {type(exc).__name__}: {exc}",
                        operation=operation,
                    ) from None
                self._backoff(attempt)

    def _check_pool(self) -> None:
        """After a lost connection, drop the pool's other dead connections before retrying."""
        with contextlib.suppress(psycopg.Error, psycopg_pool.PoolClosed):
            self._pool.check()

    def _read(self, operation: str, fn: Callable[[_Tx], T], *, snapshot: bool = True) -> T:
        return self._transaction(operation, fn, write=False, snapshot=snapshot)

    def _write(self, operation: str, fn: Callable[[_Write], T], *, resolves_doubt: bool = False) -> T:
        seq: list[int | None] = [None]

        def run(tx: _Tx) -> T:
            w = _Write(tx)
            result = fn(w)
            w.finish()
            seq[0] = w.seq
            return result

        result = self._transaction(operation, run, write=True, resolves_doubt=resolves_doubt)
        if seq[0] is not None and seq[0] % _TRIM_EVERY == 0:
            with contextlib.suppress(StorageError):  # housekeeping: the next trigger tries again
                self.trim_log()
        return result

    # -- writes ----------------------------------------------------------------------------

    @staticmethod
    def _encode_meta(updates: Mapping[str, NodeMetadata]) -> dict[str, bytes]:
        return {node_id: codec.encode_meta(meta) for node_id, meta in updates.items()}

    def apply_changeset(self, cs: Changeset) -> None:
        self._guard("apply_changeset")
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)
        self._write("apply_changeset", lambda w: w.apply(cs, encoded))

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self._guard("delete_nodes")
        wanted = check_ids(ids)
        self._write("delete_nodes", lambda w: w.delete_nodes(wanted))

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        self._guard("update_metadata")
        encoded = self._encode_meta(check_metadata_updates(updates))
        self._write("update_metadata", lambda w: w.put_meta(encoded))

    def delete_metadata(self, ids: Iterable[str]) -> None:
        self._guard("delete_metadata")
        wanted = check_ids(ids)
        self._write("delete_metadata", lambda w: w.delete_meta(wanted))

    def modify_metadata(
        self, ids: Iterable[str], fn: Callable[[str, NodeMetadata | None], NodeMetadata | None]
    ) -> None:
        """Read-modify-write the metadata of existing nodes in one transaction.

        The nodes' rows are locked first (in id order), so concurrent callers
        on any host queue per node and their increments add up; `fn` may run
        again when the transaction is retried.
        """
        self._guard("modify_metadata")
        wanted = check_ids(ids)

        def run(w: _Write) -> None:
            keys = sorted({_key(i) for i in wanted})
            if not keys:
                return
            live = {_id(r[0]) for r in w.tx.all("lock_nodes", (w.tx.repo, keys))}
            current = {_id(k): codec.decode_meta(bytes(v)) for k, v in w.tx.all("get_meta", (w.tx.repo, keys))}
            updates: dict[str, NodeMetadata] = {}
            for node_id in wanted:
                if node_id in live and node_id not in updates:
                    new = fn(node_id, current.get(node_id))
                    if new is not None:
                        updates[node_id] = new
            w.put_meta(self._encode_meta(check_metadata_updates(updates)))

        self._write("modify_metadata", run)

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Maintenance in one transaction: delete nodes with their metadata, apply
        `cs`, then delete the tag and intent nodes among `orphan_candidates`
        left without links (with their metadata). Returns the orphans deleted.

        Candidates are locked before their links are counted, so a concurrent
        writer cannot link to an orphan that is about to go.
        """
        self._guard("rewrite")
        doomed = check_ids(delete_ids)
        candidates = sorted(set(check_ids(orphan_candidates)))
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)

        def run(w: _Write) -> list[str]:
            w.delete_nodes(doomed)
            w.delete_meta(doomed)
            w.apply(cs, encoded)
            if not candidates:
                return []
            keys = [_key(c) for c in candidates]
            kinds = {_id(k): NodeType(t) for k, t in w.tx.all("lock_nodes", (w.tx.repo, keys))}
            linked = {_id(r[0]) for r in w.tx.all("linked_any", (w.tx.repo, keys))}
            orphans = [c for c in candidates if kinds.get(c) in ORPHAN_TYPES and c not in linked]
            w.delete_nodes(orphans)
            w.delete_meta(orphans)
            return orphans

        return self._write("rewrite", run)

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        self._guard("commit_ingestion")
        check_record(record, cs, None)
        encoded_meta = self._encode_meta(cs.metadata)
        encoded_record = codec.encode_record(record)
        key = _key(record.source_id)
        token = secrets.token_bytes(16)

        def run(w: _Write) -> tuple[Outcome, IngestionReceipt]:
            claimed = w.tx.one("claim", (w.tx.repo, key, encoded_record, token, record.receipt.stored_at))
            if claimed is not None:
                w.apply(cs, encoded_meta)
                return Outcome.INSERTED, record.receipt
            row = w.tx.one("get_record", (w.tx.repo, key))
            if row is None:  # forgotten between our claim and this read: claim again
                raise _Retry
            stored = codec.decode_record(record.source_id, bytes(row[0]))
            if bytes(row[1]) == token:  # an earlier attempt of this call committed, unanswered
                return Outcome.INSERTED, stored.receipt
            if (
                stored.payload_digest == record.payload_digest
                and stored.fingerprint_version == record.fingerprint_version
            ):
                return Outcome.EXISTING, stored.receipt
            raise IngestionError(
                "source_conflict",
                "a different payload (digest or fingerprint version) is already recorded",
                source_id=record.source_id,
            )

        return self._write("commit_ingestion", run, resolves_doubt=True)

    def delete_ingestion(self, source_id: str) -> bool:
        self._guard("delete_ingestion")
        key = _key(check_id(source_id, "source_id"))
        return self._write("delete_ingestion", lambda w: w.tx.one("del_record", (w.tx.repo, key)) is not None)

    def trim_log(self, *, older_than: float | None = None) -> int:
        """Deletes change-log entries beyond the newest `log_keep` that are older
        than `older_than` seconds (default: twice `gap_timeout`); returns the log
        floor afterwards.

        Writers call it now and then by themselves; readers that were further
        behind rebuild their cache. The log is shared by every repo of the
        schema. An `older_than` below every process's `gap_timeout` may trim the
        entry of a transaction still committing, which a reader would then miss.
        """
        self._guard("trim_log")
        age = 2 * self._gap_timeout if older_than is None else older_than
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not age >= 0:
            raise ConfigError(f"older_than must be a number of seconds >= 0, got {older_than!r}")

        def run(tx: _Tx) -> int:
            state = tx.one("state", (tx.repo,))
            floor = 0 if state is None else int(state[0])
            top_row = tx.one("log_top")
            top = 0 if top_row is None or top_row[0] is None else int(top_row[0])
            if top - self._log_keep <= floor:
                return floor
            row = tx.one("trim_cut", (top - self._log_keep, float(age)))
            if row is None or row[0] is None or int(row[0]) <= floor:
                return floor
            cut = int(row[0])
            if tx.one("trim_floor", (cut, cut)) is None:  # someone else trimmed further
                state = tx.one("state", (tx.repo,))
                return floor if state is None else int(state[0])
            tx.run("trim_delete", (cut,))
            return cut

        with self._trim_lock:
            return self._transaction("trim_log", run, write=True)

    # -- reads -----------------------------------------------------------------------------

    def _refreshed(self, tx: _Tx) -> int | None:
        """Brings the cache up to the transaction's snapshot; returns the repo's dimension."""
        state = tx.one("state", (tx.repo,))
        floor, dim, created = (0, None, None) if state is None else state
        with self._cache_lock.write():
            self._cache.refresh(tx, int(floor), created)
        return None if dim is None else int(dim)

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: ValueFunctionConfig | Mapping[str, Any] | None,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> list[tuple[Node, float]]:
        self._guard("find_candidates")

        def run(tx: _Tx) -> list[tuple[Node, float]]:
            dim = self._refreshed(tx)

            def hydrate(ids: list[str]) -> dict[str, tuple[Node, NodeMetadata | None]]:
                return tx.nodes(ids, with_meta=True)

            with self._cache_lock.read():
                return find_candidates(
                    self._cache.index, types, query, tags, value_function, now, dim, hydrate, exact=exact
                )

        return self._read("find_candidates", run)

    def snapshot(self, node_type: NodeType | str) -> ColumnsCopy:
        """A copy of one type's ids, embeddings and usage columns, as of now (maintenance reads it)."""
        self._guard("snapshot")
        wanted = as_node_type(node_type)

        def run(tx: _Tx) -> ColumnsCopy:
            self._refreshed(tx)
            with self._cache_lock.read():
                return self._cache.index[wanted].copy()

        return self._read("snapshot", run)

    def vector_index_stats(self) -> dict[str, dict[str, Any]]:
        """Per type: whether an HNSW index is built, vectors held, live nodes, reclaimable marks."""
        self._guard("vector_index_stats")

        def run(tx: _Tx) -> dict[str, dict[str, Any]]:
            self._refreshed(tx)
            with self._cache_lock.read():
                return {nt.value: self._cache.index[nt].vector_index_stats() for nt in NodeType}

        return self._read("vector_index_stats", run)

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, progress: Progress | None = None
    ) -> list[str]:
        """Builds now, rather than at the first non-exact query, the HNSW index of each requested
        type (None: all) large enough to use one; returns the types built."""
        self._guard("build_vector_index")
        self._read("build_vector_index", self._refreshed)
        with self._cache_lock.read():
            return build_vector_indexes(self._cache.index, types, progress)

    def reclaim_vector_index(self) -> list[str]:
        """Rebuilds HNSW indexes that carry deletion marks; returns the types rebuilt."""
        self._guard("reclaim_vector_index")
        with self._cache_lock.write():
            return [nt.value for nt in NodeType if self._cache.index[nt].reclaim_vector_index()]

    def get_node(self, node_id: str) -> Node | None:
        self._guard("get_node")
        check_id(node_id)

        def run(tx: _Tx) -> Node | None:
            got = tx.nodes([node_id]).get(node_id)
            return None if got is None else got[0]

        return self._read("get_node", run)

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        self._guard("get_linked_nodes")
        wanted = sorted({_key(i) for i in check_ids(ids)})
        edge = None if edge_type is None else as_edge_type(edge_type)

        def run(tx: _Tx) -> list[Node]:
            if not wanted:
                return []
            if edge is None:
                rows = tx.all("neighbours", (tx.repo, wanted))
            else:
                rows = tx.all("neighbours_by_edge", (tx.repo, wanted, edge.value))
            found = tx.nodes(_id(r[0]) for r in rows)
            return [found[i][0] for i in sorted(found)]

        return self._read("get_linked_nodes", run)

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        self._guard("get_nodes_by_type")
        wanted = list(dict.fromkeys(as_node_types(types)))

        def run(tx: _Tx) -> list[Node]:
            if not wanted:
                return []
            ids = [_id(r[0]) for r in tx.all("ids_of_types", (tx.repo, [t.value for t in wanted]))]
            by_type: dict[NodeType, list[Node]] = {t: [] for t in wanted}
            for node, _ in tx.nodes(ids).values():
                by_type[node.node_type].append(node)
            return [n for t in wanted for n in sorted(by_type[t], key=lambda n: n.id)]

        return self._read("get_nodes_by_type", run)

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        self._guard("get_metadata")
        keys = sorted({_key(i) for i in check_ids(ids)})

        def run(tx: _Tx) -> dict[str, NodeMetadata]:
            if not keys:
                return {}
            return {_id(k): codec.decode_meta(bytes(v)) for k, v in tx.all("get_meta", (tx.repo, keys))}

        return self._read("get_metadata", run, snapshot=False)

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        self._guard("get_ingestion")
        key = _key(check_id(source_id, "source_id"))

        def run(tx: _Tx) -> IngestionRecord | None:
            row = tx.one("get_record", (tx.repo, key))
            return None if row is None else codec.decode_record(source_id, bytes(row[0]))

        return self._read("get_ingestion", run, snapshot=False)

    @property
    def dimension(self) -> int | None:
        self._guard("dimension")
        return self._read("dimension", lambda tx: tx.dim(), snapshot=False)

    def stats(self) -> dict[str, Any]:
        """Counts for `Repo.stats`: nodes per type, links, records, metadata, dimension.

        ``disk_bytes`` is None: the tables are shared by every repo of the schema.
        """
        self._guard("stats")

        def run(tx: _Tx) -> dict[str, Any]:
            counts = {nt.value: 0 for nt in NodeType}
            for node_type, n in tx.all("count_types", (tx.repo,)):
                counts[str(node_type)] = int(n)

            def count(name: str) -> int:
                row = tx.one(name, (tx.repo,))
                return 0 if row is None else int(row[0])

            return {
                "nodes": counts,
                "links": count("count_links") // 2,
                "ingestion_records": count("count_records"),
                "metadata": count("count_meta"),
                "dimension": tx.dim(),
                "disk_bytes": None,
            }

        return self._read("stats", run)

    def verify_storage(self) -> tuple[list[str], int]:
        """Storage-level checks for `Repo.verify`: every record decodes, every
        embedding has the recorded dimension and every link has its mirror.
        (Foreign keys already rule out embeddings and links of missing nodes.)
        Returns (problems, ingestion records checked).
        """
        self._guard("verify")

        def run(tx: _Tx) -> tuple[list[str], int]:
            problems: list[str] = []
            dim = tx.dim()
            vecs = {bytes(k): bytes(v) for k, v in tx.all("repo_embeddings", (tx.repo,))}
            nodes = tx.all("repo_nodes", (tx.repo,))
            for key, node_type, record in nodes:
                vec = vecs.get(bytes(key))
                shown = bytes(key).decode("utf-8", "replace")
                try:
                    node = codec.decode_node(bytes(record), _id(key), None, {})
                    if node.node_type.value != node_type:
                        problems.append(f"node {shown!r} is stored as {node_type!r} but is a {node.node_type.value}")
                except (StorageError, UnicodeDecodeError) as exc:
                    problems.append(f"node {shown!r}: {exc}")
                if vec is not None and (dim is None or len(vec) != 4 * dim):
                    problems.append(f"embedding of {shown!r} has {len(vec)} bytes, dim {dim}")
            links = {(bytes(a), e, bytes(b)) for a, e, b in tx.all("repo_links", (tx.repo,))}
            for a, e, b in sorted(links):
                if (b, e, a) not in links:
                    problems.append(
                        f"{e} link {a.decode('utf-8', 'replace')!r} -> {b.decode('utf-8', 'replace')!r} has no mirror"
                    )
                try:
                    EdgeType(e)
                except ValueError:
                    problems.append(f"link with unknown edge type {e!r}")
            for key, data in tx.all("repo_metadata", (tx.repo,)):
                try:
                    codec.decode_meta(bytes(data))
                except StorageError as exc:
                    problems.append(f"metadata of {bytes(key).decode('utf-8', 'replace')!r}: {exc}")
            records = tx.all("repo_records", (tx.repo,))
            for key, data in records:
                try:
                    codec.decode_record(_id(key), bytes(data))
                except (StorageError, ValidationError, UnicodeDecodeError) as exc:
                    problems.append(f"ingestion record {bytes(key).decode('utf-8', 'replace')!r}: {exc}")
            return problems, len(records)

        return self._read("verify", run)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            stop_background_builds(self._cache.index.values(), self._cache.retired)
            if os.getpid() == self._pid:
                self._pool.close()


def _rollback(conn: Conn) -> None:
    with contextlib.suppress(psycopg.Error):  # a lost connection is rolled back by the server
        conn.execute("ROLLBACK")


def _kind(exc: psycopg.Error, write: bool) -> str:
    """conflict | race | ambiguous | timeout | connection | fatal, from a psycopg error."""
    state = exc.sqlstate
    if state in _CONFLICT_STATES:
        return "conflict"
    if write and state in _RACE_STATES:
        return "race"
    if state in _AMBIGUOUS_STATES:
        return "ambiguous"
    if state in _TIMEOUT_STATES:
        return "timeout"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and (
        state is None or state.startswith("08") or state in _CONNECTION_STATES
    ):
        return "connection"
    return "fatal"


# -- schema management ----------------------------------------------------------------------


def _migrate(conn: Conn, schema: str) -> None:
    """Brings `schema` to `SCHEMA_VERSION`; safe when many processes open at once.

    The schema and the migrations table are created with ``IF NOT EXISTS``
    (a lost creation race is retried). Pending migrations then run in one
    transaction, each claimed by inserting its version with ``ON CONFLICT DO
    NOTHING``: a concurrent migrator blocks on the first claimed row until the
    winner commits, then finds every version present and applies nothing.
    """
    quoted = f'"{schema}"'
    for attempt in range(1, _MIGRATION_ATTEMPTS + 1):
        try:
            version = _schema_version(conn, quoted)
            if version is not None and version > SCHEMA_VERSION:
                raise StorageError(
                    f"schema {schema!r} is at version {version}; this hippograph understands up to "
                    f"{SCHEMA_VERSION} (upgrade hippograph)",
                    operation="open",
                )
            if version == SCHEMA_VERSION:
                return
            if version is None:
                _bootstrap(conn, schema, quoted)
                continue
            conn.execute("BEGIN")
            try:
                for number, description, statements in _MIGRATIONS:
                    claimed = conn.execute(
                        f"INSERT INTO {quoted}.migrations (version, description) VALUES (%s, %s) "
                        "ON CONFLICT (version) DO NOTHING RETURNING version",
                        (number, description),
                    ).fetchone()
                    if claimed is not None:
                        for statement in statements:
                            conn.execute(statement.replace("{s}", quoted))
            except BaseException:
                _rollback(conn)
                raise
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            if exc.sqlstate not in _CONFLICT_STATES | _RACE_STATES | {"42P06", "42P07", "42710"}:
                raise
            time.sleep(0.01 * attempt * random.uniform(0.5, 1.5))
    raise StorageError(f"could not migrate schema {schema!r}: too many concurrent attempts", operation="open")


def _schema_version(conn: Conn, quoted: str) -> int | None:
    """The highest applied migration, or None when the migrations table does not exist yet."""
    try:
        row = conn.execute(f"SELECT max(version) FROM {quoted}.migrations").fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return None
    return 0 if row is None or row[0] is None else int(row[0])


def _bootstrap(conn: Conn, schema: str, quoted: str) -> None:
    exists = conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)).fetchone()
    if exists is None:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {quoted}.migrations ("
        "version integer PRIMARY KEY, description text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )


def drop_repo(dsn: str | None = None, *, repo: str, schema: str = "hippograph") -> bool:
    """Deletes every node, link, embedding, metadata and ingestion record of one
    repo, in one transaction; returns whether the repo existed.

    Processes that have the repo open see it empty from their next call (their
    caches notice the repo was dropped and rebuild). Other repos are untouched.
    """
    dsn = _resolve_dsn(dsn)
    repo = _check_repo(repo)
    quoted = f'"{_check_schema(schema)}"'
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            if _schema_version(conn, quoted) is None:
                return False
            with conn.transaction():
                existed = conn.execute(
                    f"SELECT 1 FROM {quoted}.repos WHERE repo = %s",
                    (repo,),
                ).fetchone()
                for statement in _DROP_REPO:
                    conn.execute(statement.replace("{s}", quoted), (repo,))
            return existed is not None
    except psycopg.Error as exc:
        raise StorageError(f"cannot drop repo {repo!r}: {exc}", operation="drop_repo") from None
