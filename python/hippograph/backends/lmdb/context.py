"""A context store's spaces in the LMDB environment of a graph store (docs/lmdb.md, context spaces).

One named database per space of `SPACES`, holding the space's keys and values as they are: LMDB
orders keys bytewise, which is the order the contract asks for. A context write is one write
transaction of the backend (so its durability mode and group commit apply); LMDB runs one writer
at a time across every process sharing the environment.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter
from typing import Any, Literal

from ... import _core
from ...context.protocol import SPACES
from .._context import MAX_KEY, check_bounds, check_put, check_space, ended, read_only, storable

__all__ = ["CONTEXT_DBS", "LmdbKvTxn"]

_KEY = itemgetter(0)

_NATIVE_SPACES = ("ctx_nodes", "ctx_vectors", "ctx_counters", "ctx_jobs", "ctx_job_queue", "ctx_job_state")
"""The spaces `_core.context_document` and `_core.context_job_move` read and write, in the order
they take their handles."""
_NATIVE_HANDLES = itemgetter(*_NATIVE_SPACES)

CONTEXT_DBS = SPACES
"""The databases of the spaces (a store written before they existed, opened read-only, has none)."""


class LmdbKvTxn:
    """`hippograph.context.KvTxn` over one LMDB transaction; a space whose database is missing
    reads as empty. `dbs` maps each space of `SPACES` to its database (None: missing)."""

    __slots__ = ("dbs", "live", "txn", "writable")

    def __init__(self, txn: Any, dbs: dict[str, Any], writable: bool) -> None:
        self.txn = txn
        self.dbs = dbs
        self.writable = writable
        self.live = True

    def _db(self, space: str) -> Any:
        if not self.live:
            raise ended("context")
        try:  # the common space, found in one lookup: every access pays this
            return self.dbs[space]
        except (KeyError, TypeError):
            return self.dbs[check_space(space)]  # refused unless a space of `SPACES`

    def get(self, space: str, key: bytes) -> bytes | None:
        db = self._db(space)
        if db is None or not ((type(key) is bytes and 0 < len(key) <= MAX_KEY) or storable(key)):
            return None  # LMDB refuses to look up a key it could not hold
        got: bytes | None = self.txn.get(key, db=db)  # bytes: the transaction hands out no buffers
        return got

    def put(self, space: str, key: bytes, value: bytes) -> None:
        # Checked here: an LMDB error inside a group commit would fail every write of the group.
        if not self.writable:
            raise read_only("context_read")
        if not (type(key) is bytes and 0 < len(key) <= MAX_KEY and type(value) is bytes):
            space, key, value = check_put(space, key, value)
        self.txn.put(key, value, db=self._db(space))

    def put_document(
        self,
        segments: tuple[str, ...],
        content: str,
        abstract: str | None,
        overview: str | None,
        jobs: list[tuple[str, bytes]],
        now: int,
        max_attempts: int,
    ) -> int | None:
        """`context.protocol.WritesDocuments`: the write planned and made by the core
        (`_core.context_document`) on this transaction."""
        handles = self._native_handles()
        if handles is None:
            return None
        return _core.context_document(
            self.txn, handles, list(segments), content, abstract, overview, jobs, now, max_attempts
        )

    def move_job(self, job_id: int, step: Literal["claim", "complete"], now: int) -> bytes | None:
        """`context.protocol.MovesJobs`: the claim or completion planned and made by the core
        (`_core.context_job_move`) on this transaction."""
        handles = self._native_handles()
        return None if handles is None else _core.context_job_move(self.txn, handles, job_id, step, now)

    def claim_job(self, kinds: list[str], now: int) -> tuple[int, bytes | None] | None:
        """`context.protocol.MovesJobs`: the due job found and claimed by the core
        (`_core.context_job_claim`) on this transaction."""
        handles = self._native_handles()
        return None if handles is None else _core.context_job_claim(self.txn, handles, kinds, now)

    def _native_handles(self) -> tuple[Any, ...] | None:
        if not self.writable:
            raise read_only("context_read")
        if not self.live:
            raise ended("context")
        handles: tuple[Any, ...] = _NATIVE_HANDLES(self.dbs)
        return None if None in handles else handles

    def delete(self, space: str, key: bytes) -> bool:
        if not self.writable:
            raise read_only("context_read")
        db = self._db(space)
        return storable(key) and bool(self.txn.delete(key, db=db))

    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        db = self._db(space)
        lo, hi = check_bounds(start, stop)
        if db is None or (hi is not None and hi <= lo):
            return iter(())
        return self._walk(db, lo, hi, reverse)

    def chunk(self, space: str, start: bytes, stop: bytes | None, n: int) -> tuple[list[tuple[bytes, bytes]], bool]:
        """Up to `n` pairs of `range` read by the cursor at once, with no Python step per pair (a
        scan's batches), and whether more may follow."""
        db = self._db(space)
        lo, hi = check_bounds(start, stop)
        if db is None or (hi is not None and hi <= lo):
            return [], False
        with self.txn.cursor(db=db) as cur:
            if not (cur.set_range(lo[:MAX_KEY]) if lo else cur.first()):
                return [], False
            pairs: list[tuple[bytes, bytes]] = list(islice(cur.iternext(), n))
        more = len(pairs) == n
        if hi is not None and pairs and pairs[-1][0] >= hi:
            del pairs[bisect_left(pairs, hi, key=_KEY) :]
            more = False
        if pairs and pairs[0][0] < lo:  # the MAX_KEY prefix of a longer bound (see `_walk`)
            del pairs[0]
        return pairs, more

    def _walk(self, db: Any, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        # A bound longer than a key can be is positioned by its first MAX_KEY bytes: the one stored
        # key that can sit between the two is that prefix itself, skipped or stepped over below.
        if not self.live:
            raise ended("context")
        with self.txn.cursor(db=db) as cur:
            if reverse:
                if hi is None:
                    ok = cur.last()
                else:
                    ok = cur.set_range(hi[:MAX_KEY]) or cur.last()
                    while ok and bytes(cur.key()) >= hi:
                        ok = cur.prev()
                while ok:
                    key = bytes(cur.key())
                    if key < lo:
                        return
                    yield key, bytes(cur.value())
                    ok = self._step(cur.prev)
            else:
                ok = cur.set_range(lo[:MAX_KEY]) if lo else cur.first()
                while ok:
                    key = bytes(cur.key())
                    if hi is not None and key >= hi:
                        return
                    if key >= lo:
                        yield key, bytes(cur.value())
                    ok = self._step(cur.next)

    def _step(self, move: Any) -> bool:
        if not self.live:
            raise ended("context")
        return bool(move())
