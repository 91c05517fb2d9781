"""A scoped store's entries in the LMDB environment of a graph store (docs/lmdb.md, entries).

Three databases beside the graph's: ``entries`` (key: the scope's 16-byte digest, then the entry key
in UTF-8, or 0xFF and its SHA-256 when longer than `layout.MAX_PLAIN_KEY`; value: the msgpack entry),
``escopes`` (scope digest → the scope's segments, one record per scope holding entries, so a subtree
is the scopes under it, each a prefix range of ``entries``) and ``elog`` (change counter → the refs
one write transaction changed). The counter itself is ``info/entry_seq``. Everything a write
changes, its log record included, commits in its one LMDB transaction.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Iterator
from typing import Any

import msgpack

from ..._core import log_pruned
from ...engine.codec import packb
from ...errors import StorageError
from ...store.codec import decode_entry, encode_entry
from ...store.model import Entry, Scope, in_scope
from . import layout

__all__ = ["ENTRY_DBS", "LmdbEntryTxn"]

ENTRY_DBS = ("entries", "escopes", "elog")
_SEQ = b"entry_seq"
Ref = tuple[Scope, str]


@functools.lru_cache(maxsize=4096)
def _scope_record(scope: Scope) -> tuple[bytes, bytes]:
    """The scope's digest (the key prefix of its entries) and its record in ``escopes``."""
    packed = msgpack.packb(list(scope))
    return hashlib.sha256(packed).digest()[:16], packed


def _scope_digest(scope: Scope) -> bytes:
    return _scope_record(scope)[0]


def _entry_key(scope: Scope, key: str) -> bytes:
    return _scope_digest(scope) + layout._key(key)


class LmdbEntryTxn:
    """`hippograph.store.EntryTxn` over one LMDB transaction; a write transaction notes the refs it
    changed for `finish` to log."""

    def __init__(self, txn: Any, dbs: dict[str, Any], writable: bool) -> None:
        self.txn = txn
        self.dbs = dbs
        self.writable = writable
        self.changed: set[Ref] = set()
        self._seq: int | None = None  # the counter as this transaction sees it (only `finish` moves it)

    def _db(self, name: str) -> Any:
        return self.dbs.get(name)

    def get(self, scope: Scope, key: str) -> Entry | None:
        db = self._db("entries")
        raw = None if db is None else self.txn.get(_entry_key(scope, key), db=db)
        return None if raw is None else decode_entry(bytes(raw))

    def _scopes(self) -> Iterator[tuple[bytes, Scope]]:
        db = self._db("escopes")
        if db is None:
            return
        with self.txn.cursor(db=db) as cur:
            for k, v in cur:
                try:
                    segments = msgpack.unpackb(bytes(v))
                except (ValueError, msgpack.UnpackException) as exc:
                    raise StorageError(f"corrupt scope record: {exc}", operation="decode") from None
                yield bytes(k), tuple(segments)

    def scan(self, scope: Scope) -> Iterator[Entry]:
        db = self._db("entries")
        if db is None:
            return
        for digest, found in list(self._scopes()):
            if not in_scope(found, scope):
                continue
            with self.txn.cursor(db=db) as cur:
                if not cur.set_range(digest):
                    continue
                for k, v in cur:
                    if not bytes(k).startswith(digest):
                        break
                    yield decode_entry(bytes(v))

    def _check(self) -> None:
        if not self.writable:
            raise StorageError("a read transaction cannot write", operation="entry_read")

    def put(self, entry: Entry) -> None:
        self._check()
        digest, record = _scope_record(entry.scope)
        self.txn.put(digest + layout._key(entry.key), encode_entry(entry), db=self.dbs["entries"])
        # The scope's record is the same bytes whenever it exists: written only when it does not.
        self.txn.put(digest, record, db=self.dbs["escopes"], overwrite=False)
        self.changed.add(entry.ref)

    def delete(self, scope: Scope, key: str) -> bool:
        self._check()
        digest = _scope_digest(scope)
        if not self.txn.delete(digest + layout._key(key), db=self.dbs["entries"]):
            return False
        with self.txn.cursor(db=self.dbs["entries"]) as cur:
            if not cur.set_range(digest) or not bytes(cur.key()).startswith(digest):
                self.txn.delete(digest, db=self.dbs["escopes"])  # the scope's last entry
        self.changed.add((scope, key))
        return True

    def seq(self) -> int:
        if self._seq is None:
            raw = self.txn.get(_SEQ, db=self.dbs["info"])
            self._seq = 0 if raw is None else layout._number(bytes(raw), ">Q", "entry change counter")
        return self._seq

    def changes(self, since: int) -> tuple[int, list[Ref] | None]:
        seq = self.seq()
        if since >= seq:
            return seq, []
        db = self._db("elog")
        if db is None or since < 0:
            return seq, None
        refs: list[Ref] = []
        with self.txn.cursor(db=db) as cur:
            if not cur.set_key(layout._seq_key(since + 1)):
                return seq, None  # trimmed: the caller rescans
            for _, v in cur:
                try:
                    refs.extend((tuple(s), k) for s, k in msgpack.unpackb(bytes(v)))
                except (ValueError, TypeError, msgpack.UnpackException) as exc:
                    raise StorageError(f"corrupt entry change log: {exc}", operation="decode") from None
        return seq, refs

    def finish(self) -> None:
        """Bumps the counter and logs the refs changed (nothing when nothing changed)."""
        if not self.changed:
            return
        seq = self.seq() + 1
        self.txn.put(_SEQ, struct.pack(">Q", seq), db=self.dbs["info"])
        self._seq = seq
        changed = self.changed
        refs = [[list(s), k] for s, k in (changed if len(changed) == 1 else sorted(changed))]
        self.txn.put(layout._seq_key(seq), packb(refs), db=self.dbs["elog"])
        first, last = log_pruned(seq, layout.LOG_KEEP)
        for old in range(first, last + 1):
            self.txn.delete(layout._seq_key(old), db=self.dbs["elog"])
