"""The schema: its numbered migrations and `SCHEMA_VERSION`, every statement the backend runs (by
name, in `_SQL`), the migration run at open, and `drop_repo`.

The backend creates and migrates its own tables on first open, safely when many processes open
at once; ``docs/postgres.md`` (Design: Layout) describes the tables and the migration protocol.
"""

from __future__ import annotations

import random
import re
import time
from typing import Final

import psycopg
import psycopg.errors

from ...errors import ConfigError, StorageError
from . import vectors
from .config import _check_repo, _resolve_dsn
from .functions import _NODE_ROWS, _WRITE_GRAPH, _WRITE_GRAPH_5, _WRITE_GRAPH_6, _WRITE_GRAPH_7
from .statistics import TABLES
from .tx import _CONFLICT_STATES, _RACE_STATES, Conn, _rollback

__all__ = ["SCHEMA_VERSION", "drop_repo"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MIGRATION_ATTEMPTS = 20


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
    (
        2,
        "scoped-store entries, their change counters and change log",
        (
            """CREATE TABLE {s}.entries (
                repo text NOT NULL,
                scope_key bytea NOT NULL,
                key bytea NOT NULL,
                record bytea NOT NULL,
                PRIMARY KEY (repo, scope_key, key)
            )""",
            """CREATE TABLE {s}.entry_counters (
                repo text PRIMARY KEY,
                seq bigint NOT NULL DEFAULT 0,
                floor bigint NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE {s}.entry_changes (
                repo text NOT NULL,
                seq bigint NOT NULL,
                refs bytea NOT NULL,
                PRIMARY KEY (repo, seq)
            )""",
        ),
    ),
    (
        3,
        "context store spaces and their writers' lock",
        (
            """CREATE TABLE {s}.context_kv (
                repo text NOT NULL,
                space text NOT NULL,
                k bytea NOT NULL,
                v bytea NOT NULL,
                PRIMARY KEY (repo, space, k)
            )""",
            "CREATE TABLE {s}.context_locks (repo text PRIMARY KEY)",
        ),
    ),
    (
        4,
        "graph writes in one statement: write_graph",
        (_WRITE_GRAPH,),
    ),
    (
        5,
        "write_graph keeps server-side vectors (pgvector) when the schema has them",
        (
            _WRITE_GRAPH_5,
            # A process of the previous release still calls the old signature: it sends no vectors,
            # so where the schema keeps them its writes are refused (HG002) rather than left out.
            "CREATE OR REPLACE FUNCTION {s}.write_graph(p_repo text, p_claim_key bytea, p_claim_record bytea, "
            "p_token bytea, p_stored_at timestamptz, p_dim integer, p_node_keys bytea[], p_types text[], "
            "p_records bytea[], p_created timestamptz[], p_emb_keys bytea[], p_vecs bytea[], p_bare bytea[], "
            "p_link_a bytea[], p_link_edge text[], p_link_b bytea[], p_meta_keys bytea[], p_meta_records bytea[], "
            "p_touched bytea[], OUT claimed boolean, OUT stored_dim integer, OUT seq bigint) LANGUAGE sql AS "
            "$fn$ SELECT * FROM {s}.write_graph(p_repo, p_claim_key, p_claim_record, p_token, p_stored_at, p_dim, "
            "p_node_keys, p_types, p_records, p_created, p_emb_keys, p_vecs, p_bare, p_link_a, p_link_edge, "
            "p_link_b, p_meta_keys, p_meta_records, p_touched, NULL::real[], NULL::float8[]) $fn$",
        ),
    ),
    (
        6,
        "write_graph checks link ends by key lookups",
        (_WRITE_GRAPH_6,),
    ),
    (
        7,
        "links and embeddings without foreign keys: write_graph locks the nodes they reference, a trigger "
        "deletes them with their node",
        (*_NODE_ROWS, *_WRITE_GRAPH_7),
    ),
)

SCHEMA_VERSION: Final = _MIGRATIONS[-1][0]
"""The schema version this release creates and understands."""

_LINKS = (
    " LEFT JOIN LATERAL (SELECT array_agg(x.edge) AS edges, array_agg(x.b) AS targets FROM {s}.links x "
    "WHERE x.repo = n.repo AND x.a = n.id) l ON true "
)

_SQL: Final[dict[str, str]] = {
    # Parameters are sent in binary (`%b`): arrays of keys, records and vectors go as they are, where
    # text would quote and escape every element on the client.
    # repo state
    "register": "INSERT INTO {s}.repos (repo) VALUES (%b) ON CONFLICT (repo) DO NOTHING",
    "dim": "SELECT dim FROM {s}.repos WHERE repo = %b",
    "state": (
        "SELECT f.seq, r.dim, r.created_at FROM {s}.log_floor f LEFT JOIN {s}.repos r ON r.repo = %b WHERE f.id = 1"
    ),
    # nodes
    "write_graph": (
        "SELECT claimed, stored_dim, seq FROM {s}.write_graph(%b, %b, %b, %b, %b, %b, %b::bytea[], %b::text[], "
        "%b::bytea[], %b::timestamptz[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::text[], "
        "%b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::real[], %b::float8[])"
    ),
    "del_nodes": "DELETE FROM {s}.nodes WHERE repo = %b AND id = ANY(%b) RETURNING id",
    "lock_nodes": "SELECT id, type FROM {s}.nodes WHERE repo = %b AND id = ANY(%b) ORDER BY id FOR UPDATE",
    "linked_any": "SELECT DISTINCT a FROM {s}.links WHERE repo = %b AND a = ANY(%b)",
    # Reads by id look the embedding and metadata up per node (a correlated subquery on the primary
    # key) rather than joining: no planner estimate, however stale, turns that into a scan of the repo.
    # A node with its vector and its links (edge and target arrays) in one row: one statement, one snapshot.
    "nodes_by_id": (
        "SELECT n.id, n.record, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "l.edges, l.targets FROM {s}.nodes n" + _LINKS + "WHERE n.repo = %b AND n.id = ANY(%b)"
    ),
    "node_by_id": (
        "SELECT n.id, n.record, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "l.edges, l.targets FROM {s}.nodes n" + _LINKS + "WHERE n.repo = %b AND n.id = %b"
    ),
    "nodes_with_meta": (
        "SELECT n.id, n.record, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "(SELECT m.record FROM {s}.metadata m WHERE m.repo = n.repo AND m.id = n.id), "
        "l.edges, l.targets FROM {s}.nodes n" + _LINKS + "WHERE n.repo = %b AND n.id = ANY(%b)"
    ),
    "neighbours": "SELECT DISTINCT b FROM {s}.links WHERE repo = %b AND a = ANY(%b)",
    "neighbours_by_edge": "SELECT DISTINCT b FROM {s}.links WHERE repo = %b AND a = ANY(%b) AND edge = %b",
    "ids_of_types": "SELECT id FROM {s}.nodes WHERE repo = %b AND type = ANY(%b::text[])",
    # scoring inputs (the cache)
    "scoring_rows": (
        "SELECT n.id, n.type, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
        "(SELECT m.record FROM {s}.metadata m WHERE m.repo = n.repo AND m.id = n.id) "
        "FROM {s}.nodes n WHERE n.repo = %b AND n.id = ANY(%b)"
    ),
    # whole-repo scans: one table each, joined in Python, so no join plan can go wrong on a big repo
    "repo_types": "SELECT id, type FROM {s}.nodes WHERE repo = %b",
    "repo_nodes": "SELECT id, type, record FROM {s}.nodes WHERE repo = %b",
    "repo_embeddings": "SELECT id, vec FROM {s}.embeddings WHERE repo = %b",
    "repo_metadata": "SELECT id, record FROM {s}.metadata WHERE repo = %b",
    "repo_vectors": "SELECT id, type, vec::real[] FROM {s}.vectors WHERE repo = %b",
    # a schema an earlier release enabled, without reweighed rows, is checked once this release opens it
    "has_weights": "SELECT to_regclass('{s}.reweighed') IS NOT NULL",
    # the current weighted vector: the reweighed row's, which only a lighter indexed one may stand behind
    "repo_weight_problems": (
        "SELECT v.id, w.id IS NULL FROM {s}.vectors v LEFT JOIN {s}.valued w ON w.repo = v.repo AND w.id = v.id "
        "LEFT JOIN {s}.reweighed c ON c.repo = v.repo AND c.id = v.id "
        "LEFT JOIN {s}.metadata m ON m.repo = v.repo AND m.id = v.id WHERE v.repo = %b AND (w.id IS NULL "
        "OR w.type IS DISTINCT FROM v.type OR coalesce(c.val, w.val) IS DISTINCT FROM "
        "{s}.hg_valued(v.vec, {s}.hg_weight(m.ts, m.accesses, m.reward_count, m.reward_sum)) "
        "OR (c.id IS NOT NULL AND (c.type IS DISTINCT FROM v.type OR w.val IS NULL "
        "OR NOT {s}.hg_heavier(c.val, w.val))))"
    ),
    "repo_meta_usage": "SELECT id, record, ts, accesses, reward_count, reward_sum FROM {s}.metadata WHERE repo = %b",
    "repo_links": "SELECT a, edge, b FROM {s}.links WHERE repo = %b",
    "repo_records": "SELECT source_id, record FROM {s}.ingestion WHERE repo = %b",
    # metadata
    "del_meta": "DELETE FROM {s}.metadata WHERE repo = %b AND id = ANY(%b) RETURNING id",
    "get_meta": "SELECT id, record FROM {s}.metadata WHERE repo = %b AND id = ANY(%b)",
    # ingestion
    "get_record": "SELECT record, token FROM {s}.ingestion WHERE repo = %b AND source_id = %b",
    "del_record": "DELETE FROM {s}.ingestion WHERE repo = %b AND source_id = %b RETURNING source_id",
    # change log
    "log": "INSERT INTO {s}.changes (repo, ids) VALUES (%b, %b) RETURNING seq",
    "log_new": "SELECT seq, CASE WHEN repo = %b THEN ids END FROM {s}.changes WHERE seq > %b ORDER BY seq",
    "log_new_and_gaps": (
        "SELECT seq, CASE WHEN repo = %b THEN ids END FROM {s}.changes WHERE seq > %b OR seq = ANY(%b) ORDER BY seq"
    ),
    "log_top": "SELECT max(seq) FROM {s}.changes",
    "log_seqs_above": "SELECT seq FROM {s}.changes WHERE seq > %b",
    "trim_cut": (
        "SELECT max(seq) FROM {s}.changes WHERE seq <= %b AND at < clock_timestamp() - %b * interval '1 second'"
    ),
    "trim_floor": "UPDATE {s}.log_floor SET seq = %b WHERE id = 1 AND seq < %b RETURNING seq",
    "trim_delete": "DELETE FROM {s}.changes WHERE seq <= %b",
    # stats and checks
    "count_types": "SELECT type, count(*) FROM {s}.nodes WHERE repo = %b GROUP BY type",
    "count_links": "SELECT count(*) FROM {s}.links WHERE repo = %b",
    "count_records": "SELECT count(*) FROM {s}.ingestion WHERE repo = %b",
    "count_meta": "SELECT count(*) FROM {s}.metadata WHERE repo = %b",
    # scoped-store entries (`entries.PgEntryTxn`)
    "entry_get": "SELECT record FROM {s}.entries WHERE repo = %b AND scope_key = %b AND key = %b",
    "entry_scan": "SELECT record FROM {s}.entries WHERE repo = %b AND scope_key >= %b AND scope_key < %b",
    "entry_scan_all": "SELECT record FROM {s}.entries WHERE repo = %b",
    "entry_put": (
        "INSERT INTO {s}.entries (repo, scope_key, key, record) VALUES (%b, %b, %b, %b) "
        "ON CONFLICT (repo, scope_key, key) DO UPDATE SET record = EXCLUDED.record"
    ),
    "entry_delete": "DELETE FROM {s}.entries WHERE repo = %b AND scope_key = %b AND key = %b RETURNING 1",
    "entry_lock": "SELECT seq, floor FROM {s}.entry_counters WHERE repo = %b FOR UPDATE",
    "entry_counter_new": "INSERT INTO {s}.entry_counters (repo) VALUES (%b) ON CONFLICT (repo) DO NOTHING",
    "entry_counter": "SELECT seq, floor FROM {s}.entry_counters WHERE repo = %b",
    "entry_bump": (
        "UPDATE {s}.entry_counters SET seq = seq + 1, floor = GREATEST(floor, seq + 1 - %b) "
        "WHERE repo = %b RETURNING seq, floor"
    ),
    "entry_log": "INSERT INTO {s}.entry_changes (repo, seq, refs) VALUES (%b, %b, %b)",
    "entry_log_trim": "DELETE FROM {s}.entry_changes WHERE repo = %b AND seq <= %b",
    "entry_log_since": "SELECT refs FROM {s}.entry_changes WHERE repo = %b AND seq > %b ORDER BY seq",
    # context store spaces (`context.PgKvTxn`); a range is read in batches, each starting past the last
    "ctx_lock": "SELECT 1 FROM {s}.context_locks WHERE repo = %b FOR UPDATE",
    "ctx_lock_new": "INSERT INTO {s}.context_locks (repo) VALUES (%b) ON CONFLICT (repo) DO NOTHING",
    "ctx_get": "SELECT v FROM {s}.context_kv WHERE repo = %b AND space = %b AND k = %b",
    "ctx_put": (
        "INSERT INTO {s}.context_kv (repo, space, k, v) VALUES (%b, %b, %b, %b) "
        "ON CONFLICT (repo, space, k) DO UPDATE SET v = EXCLUDED.v"
    ),
    "ctx_delete": "DELETE FROM {s}.context_kv WHERE repo = %b AND space = %b AND k = %b RETURNING 1",
    "ctx_up": "SELECT k, v FROM {s}.context_kv WHERE repo = %b AND space = %b AND k >= %b ORDER BY k LIMIT %b",
    "ctx_up_to": (
        "SELECT k, v FROM {s}.context_kv WHERE repo = %b AND space = %b AND k >= %b AND k < %b ORDER BY k LIMIT %b"
    ),
    "ctx_down": "SELECT k, v FROM {s}.context_kv WHERE repo = %b AND space = %b AND k >= %b ORDER BY k DESC LIMIT %b",
    "ctx_down_to": (
        "SELECT k, v FROM {s}.context_kv WHERE repo = %b AND space = %b AND k >= %b AND k < %b ORDER BY k DESC LIMIT %b"
    ),
}

_DROP_REPO: Final = (
    "DELETE FROM {s}.links WHERE repo = %s",  # at once, rather than by the nodes' trigger
    "DELETE FROM {s}.embeddings WHERE repo = %s",
    "DELETE FROM {s}.nodes WHERE repo = %s",
    "DELETE FROM {s}.metadata WHERE repo = %s",
    "DELETE FROM {s}.ingestion WHERE repo = %s",
    "DELETE FROM {s}.repos WHERE repo = %s",
)

_DROP_ENTRIES: Final = (
    # The counter row stays, moved past every seq handed out with its floor raised to match: a store
    # still open on the repo finds its position below the floor and rescans (an empty repo), where a
    # counter restarting at 0 would let it skip the new repo's first writes.
    "UPDATE {s}.entry_counters SET seq = seq + 1, floor = seq + 1 WHERE repo = %s",
    "DELETE FROM {s}.entries WHERE repo = %s",
    "DELETE FROM {s}.entry_changes WHERE repo = %s",
)
_ENTRIES_SINCE: Final = 2
"""The schema version that added the entry tables (`drop_repo` on an older schema skips them)."""

_DROP_CONTEXT: Final = (
    # Taken like a context writer takes it, so that no context write straddles the drop.
    "SELECT 1 FROM {s}.context_locks WHERE repo = %s FOR UPDATE",
    "DELETE FROM {s}.context_kv WHERE repo = %s",
)
_CONTEXT_SINCE: Final = 3
"""The schema version that added the context tables."""


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(f"schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, ≤ 63 chars), got {schema!r}")
    if schema.startswith("pg_") or schema == "information_schema":
        raise ConfigError(f"schema {schema!r} is reserved by PostgreSQL")
    return schema


_SQL.update({f"analyze_{table}": f"ANALYZE {{s}}.{table}" for table in TABLES})


def _sql_map(schema: str) -> dict[str, str]:
    quoted = f'"{schema}"'
    return {name: text.replace("{s}", quoted) for name, text in _SQL.items()}


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
    repo, its scoped-store entries with their change log, and its context store
    spaces, in one transaction; returns whether the repo existed.

    Processes that have the repo open see it empty from their next call (their
    caches notice the repo was dropped and rebuild). Other repos are untouched.
    """
    dsn = _resolve_dsn(dsn)
    repo = _check_repo(repo)
    quoted = f'"{_check_schema(schema)}"'
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            version = _schema_version(conn, quoted)
            if version is None:
                return False
            statements = (
                (_DROP_CONTEXT if version >= _CONTEXT_SINCE else ())
                + (_DROP_ENTRIES if version >= _ENTRIES_SINCE else ())
                + _DROP_REPO
            )
            conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED  # `drop_node_rows` requires it
            with conn.transaction():
                existed = conn.execute(
                    f"SELECT 1 FROM {quoted}.repos WHERE repo = %s",
                    (repo,),
                ).fetchone()
                for statement in statements:
                    conn.execute(statement.replace("{s}", quoted), (repo,))
            if vectors.kept(conn, schema):
                vectors.drop_indexes(conn, schema, repo)
            return existed is not None
    except psycopg.Error as exc:
        raise StorageError(f"cannot drop repo {repo!r}: {exc}", operation="drop_repo") from None
