"""Transactions: `_Tx` (one transaction's connection with the repo's statements), `_Write` (the
steps of a write, ending with its change-log row) and `_Runner` (the connection pool and the loop
that runs each call's transaction, retrying what is safe to retry).

Which errors are retried, and when a connection lost during ``COMMIT`` may be, is told in
``docs/postgres.md`` (Design: Transactions, Retries and lost connections). The SQLSTATE sets here
sort psycopg's errors for that loop (`_kind`) and for the migrations.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import psycopg
import psycopg_pool

from ...errors import HippographError, StorageError
from ...graph import codec
from ...graph.changeset import Changeset, check_changeset, normalised_links
from ...graph.model import EdgeType, Node, NodeMetadata
from . import prepared
from .arrays import bytea_array, float4_array, float8_array, int4, text_array, timestamptz, timestamptz_array

T = TypeVar("T")
Row = tuple[Any, ...]
Conn = psycopg.Connection[Row]

# SQLSTATEs
_CONFLICT_STATES = frozenset({"40001", "40P01"})
_RACE_STATES = frozenset({"23503", "23505"})  # FK / unique violation: a concurrent writer won a race
_TIMEOUT_STATES = frozenset({"57014", "55P03"})
_AMBIGUOUS_STATES = frozenset({"40003"})  # CockroachDB: statement completion unknown
_CONNECTION_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})  # shutdowns, idle timeouts
_DIMENSION_STATE = "HG001"  # write_graph: the store holds embeddings of another dimension
_VECTORS_STATE = "HG002"  # write_graph: the schema keeps server-side vectors and none were sent

Claim = tuple[bytes, bytes, bytes, Any]
"""An ingestion's claim: source key, encoded record, the call's token, its stored_at."""


def _key(node_id: str) -> bytes:
    return node_id.encode("utf-8")


def _id(key: bytes | memoryview) -> str:
    return bytes(key).decode("utf-8")


class _Retry(Exception):
    """Raised inside a transaction to roll it back and run it again."""


class _Restart(Exception):
    """Raised inside a transaction to roll it back and run it again at once: what made it fail is
    settled (not counted as a retry)."""


class Shared:
    """What every transaction of one backend learns about the schema as it goes."""

    def __init__(self) -> None:
        self.vectors = False
        """Writes send the embeddings as pgvector values too (the schema keeps vectors in the server)."""


class _Tx:
    """One transaction's connection, with the repo's statements at hand."""

    def __init__(
        self,
        conn: Conn,
        repo: str,
        sql: Mapping[str, str],
        shared: Shared | None = None,
        begin: Sequence[bytes] = (),
    ) -> None:
        self._conn = conn
        self.repo = repo
        self.sql = sql
        self.shared = shared or Shared()
        self._begin = begin
        """The transaction's BEGIN (and its SET LOCAL), not sent yet: it goes with the first statement
        (`fetch` pipelines them), or alone before anything else uses the connection."""
        self.began = not begin

    @property
    def conn(self) -> Conn:
        """The connection, inside the transaction."""
        if self._begin:
            begin, self._begin = self._begin, ()
            prepared.command(self._conn, b"; ".join(begin))
            self.began = True
        return self._conn

    def all(self, name: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.fetchall() if _has_rows(cur) else []

    def one(self, name: str, params: Sequence[Any] = ()) -> Row | None:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.fetchone() if _has_rows(cur) else None

    def run(self, name: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> int:
        with self.conn.cursor(binary=True) as cur:
            cur.execute(self.sql[name], params)
            return cur.rowcount

    def fetch(self, name: str, params: Sequence[bytes | None]) -> list[list[bytes | None]]:
        """Statement `name` as a key lookup (`prepared.fetch`): parameters and columns as raw bytes."""
        begin, self._begin = self._begin, ()
        self.began = True  # whatever the statement does, its BEGIN was sent
        return prepared.fetch(self._conn, _STATEMENT_PREFIX + name.encode(), _native(self.sql[name]), params, begin)

    def many(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with self.conn.cursor(binary=True) as cur:
                cur.executemany(self.sql[name], rows)

    # -- shared reads ------------------------------------------------------------------

    def dim(self) -> int | None:
        rows = self.fetch("dim", (self.repo.encode(),))
        return prepared.integer(rows[0][0]) if rows else None

    def nodes(self, ids: Iterable[str], *, with_meta: bool = False) -> dict[str, tuple[Node, NodeMetadata | None]]:
        """The nodes (with their current links, and metadata when asked) among `ids`, in one statement."""
        keys = sorted({_key(i) for i in ids})
        if not keys:
            return {}
        out: dict[str, tuple[Node, NodeMetadata | None]] = {}
        repo = self.repo.encode()
        if len(keys) == 1 and not with_meta:  # a key lookup the planner never turns into a range scan
            rows = self.fetch("node_by_id", (repo, keys[0]))
        else:
            rows = self.fetch("nodes_with_meta" if with_meta else "nodes_by_id", (repo, bytea_array(keys)))
        for row in rows:
            key, record, vec, edges, targets = row[0], row[1], row[2], row[-2], row[-1]
            assert key is not None and record is not None  # primary key and NOT NULL columns
            node_id = _id(key)
            names = [bytes(e or b"").decode() for e in prepared.array_items(edges)]
            ends = [bytes(t or b"") for t in prepared.array_items(targets)]
            meta = row[3] if with_meta else None
            out[node_id] = (
                _decode_node(node_id, record, vec, _links(names, ends)),
                None if meta is None else codec.decode_meta(meta),
            )
        return out


_READ_BEGIN = (b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",)

_STATEMENT_PREFIX = b"hg_"
"""Names of the statements `_Tx.fetch` prepares (psycopg's own are ``_pg3_``...)."""


@functools.cache
def _native(query: str) -> bytes:
    return prepared.native(query)


def _has_rows(cur: psycopg.Cursor[Row]) -> bool:
    """The statement returned rows (asked of its result's status: `description` would describe
    every column first, a read's largest fixed cost after the round trip)."""
    result = cur.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


def _links(edges: Sequence[str] | None, targets: Sequence[bytes] | None) -> dict[EdgeType, set[str]]:
    """A node's links from the arrays a statement aggregated (NULL: none)."""
    links: dict[EdgeType, set[str]] = {}
    for edge, b in zip(edges or (), targets or (), strict=True):
        links.setdefault(EdgeType(edge), set()).add(_id(b))
    return links


def _decode_node(node_id: str, record: bytes, vec: bytes | None, links: Mapping[EdgeType, set[str]]) -> Node:
    embedding = None if vec is None else codec.decode_embedding(bytes(vec))
    return codec.decode_node(bytes(record), node_id, embedding, {e: frozenset(i) for e, i in links.items()})


class _Write:
    """One write transaction: the changeset steps, then one change-log row naming what it touched."""

    def __init__(self, tx: _Tx, one_write: bool = False) -> None:
        self.tx = tx
        self.one_write = one_write
        """`apply` is the transaction's only write: its statement logs the change itself."""
        self.touched: set[str] = set()
        self.seq: int | None = None
        self.rows: Counter[str] = Counter()
        """Rows written per table (for `statistics.Refresher`)."""

    def apply(self, cs: Changeset, meta_rows: Mapping[str, bytes], claim: Claim | None = None) -> bool:
        """Additions, then links, then metadata (the `apply_changeset` order), in one statement
        (`write_graph`), after `claim` when given: False when the source was claimed already
        (nothing written). In a `one_write` transaction the statement logs the change itself."""
        last = {n.id: n for n in cs.additions}
        nodes = sorted(((_key(i), n) for i, n in last.items()), key=lambda kn: kn[0])
        embedded = [(k, n.embedding) for k, n in nodes if n.embedding is not None]
        links = sorted({r for a, b, e in normalised_links(cs) if a != b for r in ((a, e.value, b), (b, e.value, a))})
        meta = sorted((_key(i), data) for i, data in meta_rows.items())
        touched = self.touched | last.keys() | meta_rows.keys()
        logs = self.one_write and bool(touched)
        dim = int(embedded[0][1].shape[0]) if embedded else None
        tx = self.tx
        claim_key, claim_record, token, stored_at = claim if claim is not None else (None, None, None, None)
        params = (  # sent as they are, in binary (`prepared.fetch`)
            tx.repo.encode("utf-8"),
            claim_key,
            claim_record,
            token,
            None if stored_at is None else timestamptz(stored_at),
            None if dim is None else int4(dim),
            bytea_array([k for k, _ in nodes]),
            text_array([n.node_type.value for _, n in nodes]),
            bytea_array([codec.encode_node(n) for _, n in nodes]),
            timestamptz_array([n.created_at for _, n in nodes]),
            bytea_array([k for k, _ in embedded]),
            bytea_array([codec.encode_embedding(e) for _, e in embedded]),
            bytea_array([k for k, n in nodes if n.embedding is None]),
            bytea_array([_key(r[0]) for r in links]),
            text_array([r[1] for r in links]),
            bytea_array([_key(r[2]) for r in links]),
            bytea_array([k for k, _ in meta]),
            bytea_array([data for _, data in meta]),
            bytea_array(sorted(_key(i) for i in touched) if logs else []),
            float4_array(np.concatenate([e for _, e in embedded])) if embedded and tx.shared.vectors else None,
            float8_array([u for _, data in meta for u in codec.usage_of_meta(data)])
            if meta and tx.shared.vectors
            else None,
        )
        try:
            rows = tx.fetch("write_graph", params)
        except psycopg.Error as exc:
            if exc.sqlstate == _DIMENSION_STATE and exc.diag.message_detail:
                check_changeset(cs, int(exc.diag.message_detail))  # raises the ValidationError naming the node
            if exc.sqlstate == _VECTORS_STATE:  # the schema began keeping vectors since this process looked
                tx.shared.vectors = True
                raise _Restart from None
            raise
        row = rows[0] if rows else None
        if row is None or row[0] != b"\x01":
            return False
        self.rows.update(nodes=len(nodes), embeddings=len(embedded), links=len(links), metadata=len(meta))
        if logs:
            self.seq, self.touched = prepared.integer(row[2]), set()
        else:
            self.touched = touched
        return True

    def put_meta(self, meta_rows: Mapping[str, bytes]) -> None:
        self.apply(Changeset(), meta_rows)

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


class _Runner:
    """The connection pool of one `Postgres`, and the loop that runs each call's transaction on it."""

    def __init__(
        self,
        pool: psycopg_pool.ConnectionPool[Conn],
        repo: str,
        sql: Mapping[str, str],
        *,
        timeout: float,
        retries: int,
        where: str,
        write_begin: Sequence[bytes],
        shared: Shared | None = None,
    ) -> None:
        self.shared = shared or Shared()
        self.pool = pool
        self.repo = repo
        self.sql = sql
        self.timeout = timeout
        self.retries = retries
        self.where = where
        self.write_begin = write_begin

    def backoff(self, attempt: int) -> None:
        time.sleep(min(1.0, 0.005 * 2 ** min(attempt, 8)) * random.uniform(0.5, 1.5))

    def run(
        self,
        operation: str,
        fn: Callable[[_Tx], T],
        *,
        write: bool,
        snapshot: bool = True,
        resolves_doubt: bool = False,
        single: bool = False,
    ) -> T:
        """Runs `fn` in one transaction, retrying what is safe to retry.

        `snapshot` (reads): one REPEATABLE READ READ ONLY transaction; without
        it the statements run in autocommit (use for single-statement reads).
        `single` (writes): `fn` writes with one statement, run in autocommit (its
        own transaction, committed when it returns: one round trip in all); any
        other statement of `fn` only reads.
        `resolves_doubt` (writes): `fn` can tell on a rerun whether an attempt
        whose COMMIT got no answer took effect, so that case is retried too.
        """
        attempt = 0
        while True:
            attempt += 1
            committing = False
            try:
                with self.pool.connection(timeout=self.timeout) as conn:
                    transactional = (write and not single) or (snapshot and not write)
                    committing = write and single  # the write statement commits as it returns
                    # The BEGIN goes with the first statement (`_Tx.fetch`), one round trip fewer. Until
                    # COMMIT is sent nothing can have been applied, so a lost connection is retried.
                    begin = (self.write_begin if write else _READ_BEGIN) if transactional else ()
                    tx = _Tx(conn, self.repo, self.sql, self.shared, begin)
                    try:
                        result = fn(tx)
                    except BaseException:
                        if transactional and tx.began:
                            _rollback(conn)
                        raise
                    if transactional and tx.began:
                        committing = True
                        prepared.command(conn, b"COMMIT")
                return result
            except HippographError:
                raise
            except _Restart:
                attempt -= 1
            except _Retry:
                if attempt > self.retries:
                    raise StorageError("gave up after repeated concurrent changes", operation=operation) from None
                self.backoff(attempt)
            except psycopg_pool.PoolTimeout:
                raise StorageError(
                    f"no PostgreSQL connection available within {self.timeout:g} s ({self.where})",
                    operation=operation,
                ) from None
            except psycopg_pool.PoolClosed:
                raise StorageError("the backend is closed", operation=operation) from None
            except psycopg.Error as exc:
                kind = _kind(exc, write)
                if kind == "connection":
                    self.check_pool()
                    if write and committing and not resolves_doubt:
                        raise StorageError(
                            f"connection to {self.where} lost while committing; the change may or may not "
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
                if attempt > self.retries:
                    raise StorageError(
                        f"gave up after {attempt} attempts; last error {type(exc).__name__}: {exc}",
                        operation=operation,
                    ) from None
                self.backoff(attempt)

    def check_pool(self) -> None:
        """After a lost connection, drop the pool's other dead connections before retrying."""
        with contextlib.suppress(psycopg.Error, psycopg_pool.PoolClosed):
            self.pool.check()


def _rollback(conn: Conn) -> None:
    with contextlib.suppress(psycopg.Error):  # a lost connection is rolled back by the server
        prepared.command(conn, b"ROLLBACK")


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
