"""A context store's spaces in the PostgreSQL schema of a graph store (docs/postgres.md, Context spaces).

Two tables (migration 3): ``context_kv`` (per repo and space, a key and its value, both bytea, whose
comparison is bytewise: the order the contract asks for) and ``context_locks`` (one row per repo).
A write transaction locks its repo's row before anything else, so context writers of one repo run
one after another on every connection and host, and each statement after the lock sees every
write committed before it: a read-modify-write such as claiming the first queued job is never done
twice. The lock is a row lock (``SELECT ... FOR UPDATE``), like the entry writers' counter row,
so the backend keeps to portable SQL. A range reads in batches by key, each starting past the last
key read, so a caller that stops early reads no further.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg

from ...errors import StorageError
from .._context import check_bounds, check_put, check_space, ended, read_only, storable
from .tx import _Tx

__all__ = ["PgKvTxn"]

_FIRST_BATCH = 16
_MAX_BATCH = 1024
"""Rows a range reads per statement: few at first (a caller often wants one), doubling up to this."""


class PgKvTxn:
    """`hippograph.context.KvTxn` over one PostgreSQL transaction. A write transaction calls `lock`
    first and `finish` last."""

    def __init__(self, tx: _Tx, writable: bool) -> None:
        self.tx = tx
        self.writable = writable
        self.live = True

    def _alive(self) -> _Tx:
        if not self.live:  # the connection is back in the pool, perhaps serving another call
            raise ended("context")
        return self.tx

    def get(self, space: str, key: bytes) -> bytes | None:
        tx = self._alive()
        check_space(space)
        if not storable(key):
            return None
        row = tx.one("ctx_get", (tx.repo, space, key))
        return None if row is None else bytes(row[0])

    def put(self, space: str, key: bytes, value: bytes) -> None:
        if not self.writable:
            raise read_only("context_read")
        space, key, value = check_put(space, key, value)
        tx = self._alive()
        tx.run("ctx_put", (tx.repo, space, key, value))

    def delete(self, space: str, key: bytes) -> bool:
        if not self.writable:
            raise read_only("context_read")
        tx = self._alive()
        check_space(space)
        return storable(key) and tx.one("ctx_delete", (tx.repo, space, key)) is not None

    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._alive()
        check_space(space)
        lo, hi = check_bounds(start, stop)
        if hi is not None and hi <= lo:
            return iter(())
        return self._batches(space, lo, hi, reverse)

    def _batches(self, space: str, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        size = _FIRST_BATCH
        while True:
            tx = self._alive()
            if reverse:
                name, params = ("ctx_down", (lo,)) if hi is None else ("ctx_down_to", (lo, hi))
            else:
                name, params = ("ctx_up", (lo,)) if hi is None else ("ctx_up_to", (lo, hi))
            rows = tx.all(name, (tx.repo, space, *params, size))
            for k, v in rows:
                yield bytes(k), bytes(v)
            if len(rows) < size:
                return
            last = bytes(rows[-1][0])
            if reverse:
                hi = last
            else:
                lo = last + b"\0"  # the least key above `last`
            size = min(2 * size, _MAX_BATCH)

    def lock(self) -> None:
        """Locks the repo's context row (creating it on the repo's first context write): context
        writers of one repo queue here."""
        tx = self.tx
        if tx.one("ctx_lock", (tx.repo,)) is None:
            tx.run("ctx_lock_new", (tx.repo,))
            if tx.one("ctx_lock", (tx.repo,)) is None:
                raise StorageError("the context lock row vanished", operation="context_write")

    def finish(self) -> None:
        """Refuses to commit a transaction a failed statement aborted (its error caught inside the
        function): its COMMIT would quietly roll back."""
        if self.tx.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            raise StorageError("a statement failed in the transaction; nothing was written", operation="context_write")
