"""A scoped store's entries in the PostgreSQL schema of a graph store (docs/postgres.md, Scoped-store entries).

Three tables (migration 2): ``entries`` (one row per entry: the scope as a byte string whose prefix
ranges are subtrees, the key's UTF-8 bytes, the msgpack record), ``entry_counters`` (per repo: the
change counter and the floor of its log) and ``entry_changes`` (per repo and counter value: the refs
one write transaction changed). A write transaction locks its repo's counter row before anything
else, so entry writers of one repo run one after another: a lifecycle verb's scan-then-delete is
atomic, and counter values are handed out in commit order without gaps, which lets a reader trust
that a snapshot at counter ``n`` holds every log row up to ``n``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import msgpack
import psycopg

from ...errors import StorageError
from ...store.codec import decode_entry, encode_entry
from ...store.model import Entry, Scope, in_scope
from .tx import _Tx

__all__ = ["LOG_KEEP", "PgEntryTxn"]

Ref = tuple[Scope, str]

LOG_KEEP = 50_000
"""Log rows kept per repo: a store further behind than this rescans."""
_PLAIN_SCOPE = 992
"""Longest scope key stored as it is; a longer one keeps this many bytes then its SHA-256, so the
primary key stays well under PostgreSQL's index row limit (about 2.7 kB) for every valid ref."""


def _scope_bytes(scope: Scope) -> bytes:
    """Each segment's UTF-8 bytes then a NUL (segments hold no NUL): a subtree is a byte prefix."""
    return b"".join(s.encode("utf-8") + b"\0" for s in scope)


def _scope_col(scope: Scope) -> bytes:
    raw = _scope_bytes(scope)
    if len(raw) <= _PLAIN_SCOPE:
        return raw
    return raw[:_PLAIN_SCOPE] + hashlib.sha256(raw).digest()


def _encode_refs(refs: set[Ref]) -> bytes:
    return bytes(msgpack.packb([[list(s), k] for s, k in sorted(refs)], use_bin_type=True))


def _decode_refs(raw: bytes) -> list[Ref]:
    try:
        return [(tuple(s), k) for s, k in msgpack.unpackb(raw, raw=False)]
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"corrupt entry change log: {exc}", operation="decode") from None


class PgEntryTxn:
    """`hippograph.store.EntryTxn` over one PostgreSQL transaction. A write transaction calls `lock`
    first and `finish` last; in between it notes the refs it changed for `finish` to log."""

    def __init__(self, tx: _Tx, writable: bool) -> None:
        self.tx = tx
        self.writable = writable
        self.changed: set[Ref] = set()
        self.floor = 0
        self.before = self.after = 0
        """The counter when `lock` took it, and once `finish` bumped it."""

    def get(self, scope: Scope, key: str) -> Entry | None:
        row = self.tx.one("entry_get", (self.tx.repo, _scope_col(scope), key.encode("utf-8")))
        return None if row is None else decode_entry(bytes(row[0]))

    def scan(self, scope: Scope) -> Iterator[Entry]:
        """Rows are fetched now, decoded as the caller iterates (after the transaction too)."""
        low = _scope_bytes(scope)
        prefix = low[:_PLAIN_SCOPE]
        if not prefix:
            rows = self.tx.all("entry_scan_all", (self.tx.repo,))
        else:
            high = prefix[:-1] + bytes([prefix[-1] + 1])  # UTF-8 and NUL bytes are below 0xFF
            rows = self.tx.all("entry_scan", (self.tx.repo, prefix, high))
        exact = len(low) <= _PLAIN_SCOPE  # else the prefix range may hold scopes beside the subtree
        return (e for e in (decode_entry(bytes(r[0])) for r in rows) if exact or in_scope(e.scope, scope))

    def _check(self) -> None:
        if not self.writable:
            raise StorageError("a read transaction cannot write", operation="entry_read")

    def put(self, entry: Entry) -> None:
        self._check()
        params = (self.tx.repo, _scope_col(entry.scope), entry.key.encode("utf-8"), encode_entry(entry))
        self.tx.run("entry_put", params)
        self.changed.add(entry.ref)

    def delete(self, scope: Scope, key: str) -> bool:
        self._check()
        if self.tx.one("entry_delete", (self.tx.repo, _scope_col(scope), key.encode("utf-8"))) is None:
            return False
        self.changed.add((scope, key))
        return True

    def changes(self, since: int) -> tuple[int, list[Ref] | None]:
        """None for a `since` below the floor (trimmed, or the repo dropped since) or above the
        counter (the counter went back: the schema was recreated); either way the caller rescans."""
        row = self.tx.one("entry_counter", (self.tx.repo,))
        seq, floor = (0, 0) if row is None else (int(row[0]), int(row[1]))
        if since == seq:
            return seq, []
        if since < floor or since > seq:
            return seq, None
        refs: list[Ref] = []
        for (raw,) in self.tx.all("entry_log_since", (self.tx.repo, since)):
            refs.extend(_decode_refs(bytes(raw)))
        return seq, refs

    def lock(self) -> None:
        """Locks the repo's counter row (creating it on the repo's first write): entry writers of one
        repo queue here, and each statement after it sees every write committed before."""
        row = self.tx.one("entry_lock", (self.tx.repo,))
        if row is None:
            self.tx.run("entry_counter_new", (self.tx.repo,))
            row = self.tx.one("entry_lock", (self.tx.repo,))
        if row is None:
            raise StorageError("the entry change counter vanished", operation="entry_write")
        self.floor = int(row[1])
        self.before = self.after = int(row[0])

    def finish(self) -> None:
        """Bumps the counter, logs the refs changed and trims the log (nothing when nothing changed).

        A statement that failed inside `fn` (its error caught there) has aborted the transaction,
        whose COMMIT would quietly roll back: that is refused here instead.
        """
        if self.tx.conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            raise StorageError("a statement failed in the transaction; nothing was written", operation="entry_write")
        if not self.changed:
            return
        row = self.tx.one("entry_bump", (LOG_KEEP, self.tx.repo))
        if row is None:
            raise StorageError("the entry change counter vanished", operation="entry_write")
        seq, floor = int(row[0]), int(row[1])
        self.after = seq
        self.tx.run("entry_log", (self.tx.repo, seq, _encode_refs(self.changed)))
        if floor > self.floor:
            self.tx.run("entry_log_trim", (self.tx.repo, floor))
