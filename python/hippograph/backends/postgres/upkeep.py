"""Upkeep of the server's HNSW indexes: settling the pending rows writers leave out of them, and
folding reweighed rows into the value-weighted index.

Writers put new and changed vectors in a pending segment the indexes leave out (queries scan it
exactly), so a write never waits for HNSW inserts; `settle` clears the flag in small chunks in the
background, which is where the inserts happen. ``docs/postgres.md`` (Writes) tells why.
"""

from __future__ import annotations

import threading
import time

from psycopg import sql

from ...graph.model import NodeType
from .tx import Conn, _rollback
from .vectors import (
    drop_leftovers,
    earlier_value_index_names,
    existing_indexes,
    index_lock,
    no_timeout,
    value_index_name,
)

__all__ = ["fold", "fold_at", "pending", "reweighed", "settle", "unweighted"]


def unweighted(conn: Conn, schema: str, repo: str, node_type: NodeType, most: int) -> int:
    """How many of the type's vectors have no weight (their node has no metadata), counted up to `most`."""
    return _count(conn, schema, "valued", "val IS NULL", repo, node_type, most)


def reweighed(conn: Conn, schema: str, repo: str, node_type: NodeType, most: int) -> int:
    """How many of the type's rows wait in ``{s}.reweighed`` for a `fold`, counted up to `most`."""
    return _count(conn, schema, "reweighed", "true", repo, node_type, most)


def _count(conn: Conn, schema: str, table: str, condition: str, repo: str, node_type: NodeType, most: int) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {s}.{t} WHERE repo = %s AND type = %s AND {c} LIMIT %s) x").format(
            s=sql.Identifier(schema), t=sql.Identifier(table), c=sql.SQL(condition)
        ),
        (repo, node_type.value, most),
    ).fetchone()
    return 0 if row is None else int(row[0])


FOLD_LEAST = 2000
"""`fold_at` never less: each pool scans the reweighed rows of its type (about 0.3 µs a row and
query vector on 100k × 128), so 2,000 cost well under a millisecond."""


def fold_at(rows: int) -> int:
    """How many reweighed rows of a type of `rows` rows start a `fold`: a rebuild of its index costs
    in proportion to its rows, so the larger the type, the more rows wait for one."""
    return max(FOLD_LEAST, rows // 200)


FOLD_CHUNK = 256
"""Rows a fold writes per transaction: the usage writers of those nodes wait for one chunk's index
inserts at most (milliseconds a row), not for the whole fold's."""


def fold(conn: Conn, schema: str, repo: str, node_type: NodeType, dim: int, stop: threading.Event | None) -> bool:
    """Writes the type's reweighed rows into ``{s}.valued`` (`FOLD_CHUNK` per transaction) and
    rebuilds its value-weighted index (``REINDEX CONCURRENTLY``: the old one serves meanwhile, and
    the new one holds no dead versions); returns whether it ran. `conn`: autocommit. Another
    process building or folding the same index (its advisory lock) or `stop` set skips it; `stop`
    set on the way ends it between steps, and the rows written so far leave their dead versions in
    the index until the next fold rebuilds it."""
    have = existing_indexes(conn, schema, repo)
    serving = [n for n in (value_index_name(repo, node_type, dim), *earlier_value_index_names(repo, node_type, dim))]
    name = next((n for n in serving if have.get(n) is True), serving[0])
    lock = index_lock(schema, name)
    if stop is not None and stop.is_set():
        return False
    got = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()
    if got is None or not got[0]:
        return False
    s = sql.Identifier(schema)
    # The weighted rows first, in key order, as the usage trigger locks them; rows reweighed meanwhile
    # wait for the next fold.
    take = sql.SQL(
        "SELECT w.id FROM {s}.valued w JOIN {s}.reweighed c ON c.repo = w.repo AND c.id = w.id "
        "WHERE c.repo = %s AND c.type = %s ORDER BY w.id LIMIT %s FOR UPDATE OF w"
    ).format(s=s)
    write = sql.SQL(
        "WITH gone AS (DELETE FROM {s}.reweighed c WHERE c.repo = %s AND c.id = ANY(%s) RETURNING c.id, c.val) "
        "UPDATE {s}.valued w SET val = gone.val FROM gone WHERE w.repo = %s AND w.id = gone.id"
    ).format(s=s)
    try:
        for _ in range(reweighed(conn, schema, repo, node_type, 2**62) // FOLD_CHUNK + 1):
            if stop is not None and stop.is_set():
                return True
            conn.execute("BEGIN")
            try:
                keys = [bytes(k) for (k,) in conn.execute(take, (repo, node_type.value, FOLD_CHUNK)).fetchall()]
                conn.execute(write, (repo, keys, repo))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            if len(keys) < FOLD_CHUNK:
                break
        drop_leftovers(conn, schema, repo, name)
        with no_timeout(conn):
            conn.execute(sql.SQL("REINDEX INDEX CONCURRENTLY {}.{}").format(s, sql.Identifier(name)))
        return True
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))


SETTLE_CHUNK = 32
"""Pending rows `settle` clears in its first transaction: a writer re-putting one of them waits for
one chunk's HNSW inserts at most (a few milliseconds a row)."""

SETTLE_MOST = 4096
"""Rows a chunk grows to at most: rows no index covers yet (a bulk load before `build_vector_index`)
cost no graph insert, so chunks grow while they stay under `SETTLE_SECONDS`."""

SETTLE_SECONDS = 0.1
"""The time a chunk aims at: the longest a writer re-putting one of its rows waits."""


def settle(conn: Conn, schema: str, repo: str, stop: threading.Event | None = None, wait: bool = False) -> int:
    """Clears the repo's pending rows (`vectors._PENDING`), a chunk per transaction, which inserts them
    into the HNSW indexes; returns how many. `conn`: autocommit. Another process settling the repo
    (its advisory lock) skips it, or with `wait` (before a calibration, which must measure the pools
    queries will see) is waited for; `stop` set ends it; rows a writer holds are left for next time.

    Each chunk resumes in key order where the last ended (the pending index holds (repo, type, id)),
    so a pass costs in proportion to the rows it clears, not to the settled rows before them; a chunk
    starts at `SETTLE_CHUNK` rows and doubles while it takes under half of `SETTLE_SECONDS`, halving
    when over, up to `SETTLE_MOST`."""
    lock = index_lock(schema, "settle:" + repo)
    if wait:
        conn.execute("SELECT pg_advisory_lock(%s)", (lock,))
    else:
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchone()
        if got is None or not got[0]:
            return 0
    s = sql.Identifier(schema)
    done = 0
    try:
        for table in ("vectors", "valued"):  # the order writers lock them in
            step = sql.SQL(
                "WITH taken AS (SELECT y.type, y.id FROM {s}.{t} y WHERE y.repo = %s AND y.pending "
                "AND (y.type, y.id) > (%s, %s) ORDER BY y.type, y.id LIMIT %s FOR UPDATE SKIP LOCKED), "
                "cleared AS (UPDATE {s}.{t} x SET pending = false FROM taken WHERE x.repo = %s "
                "AND x.id = taken.id AND x.pending RETURNING 1) "
                "SELECT (SELECT count(*) FROM taken), (SELECT count(*) FROM cleared), l.type, l.id "
                "FROM (SELECT type, id FROM taken ORDER BY type DESC, id DESC LIMIT 1) l"
            ).format(s=s, t=sql.Identifier(table))
            after: tuple[str, bytes] = ("", b"")
            chunk = SETTLE_CHUNK
            while stop is None or not stop.is_set():
                t0 = time.perf_counter()
                row = conn.execute(step, (repo, *after, chunk, repo)).fetchone()
                took = time.perf_counter() - t0
                if row is None:  # nothing taken
                    break
                taken = int(row[0])
                done += int(row[1])
                after = (str(row[2]), bytes(row[3]))
                if taken < chunk:
                    break
                if took < SETTLE_SECONDS / 2:
                    chunk = min(chunk * 2, SETTLE_MOST)
                elif took > SETTLE_SECONDS:
                    chunk = max(chunk // 2, 1)
        return done
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (lock,))


def pending(conn: Conn, schema: str, repo: str) -> bool:
    """Whether the repo holds pending rows."""
    row = conn.execute(
        sql.SQL(
            "SELECT EXISTS (SELECT 1 FROM {s}.vectors WHERE repo = %s AND pending) OR "
            "EXISTS (SELECT 1 FROM {s}.valued WHERE repo = %s AND pending)"
        ).format(s=sql.Identifier(schema)),
        (repo, repo),
    ).fetchone()
    return bool(row and row[0])
