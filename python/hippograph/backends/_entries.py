"""Entries of a scoped store held in process memory (`MemoryEntries`): what `InMemory` serves the
`EntryBackend` protocol with. A transaction stages its writes and applies them only when its function
returns, so a call that raises writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..errors import StorageError
from ..store.model import Entry, Scope, in_scope

__all__ = ["MemoryEntries"]

T = TypeVar("T")
Ref = tuple[Scope, str]
_LOG_KEEP = 100_000
"""Changes remembered: a reader further behind rescans."""


class _Txn:
    def __init__(self, owner: MemoryEntries, writable: bool) -> None:
        self._owner = owner
        self._writable = writable
        self.staged: dict[Ref, Entry | None] = {}

    def get(self, scope: Scope, key: str) -> Entry | None:
        ref = (scope, key)
        return self.staged[ref] if ref in self.staged else self._owner.entries.get(ref)

    def scan(self, scope: Scope) -> Iterator[Entry]:
        refs = {ref for ref in self._owner.entries if in_scope(ref[0], scope)}
        refs |= {ref for ref in self.staged if in_scope(ref[0], scope)}
        for ref in sorted(refs):
            got = self.get(*ref)
            if got is not None:
                yield got

    def _check(self) -> None:
        if not self._writable:
            raise StorageError("a read transaction cannot write", operation="entry_read")

    def put(self, entry: Entry) -> None:
        self._check()
        self.staged[entry.ref] = entry

    def delete(self, scope: Scope, key: str) -> bool:
        self._check()
        existed = self.get(scope, key) is not None
        if existed:
            self.staged[(scope, key)] = None
        return existed

    def changes(self, since: int) -> tuple[int, list[Ref] | None]:
        o = self._owner
        seq = o.base + len(o.log)
        if since >= seq:
            return seq, []
        if since < o.base:
            return seq, None
        return seq, o.log[since - o.base :]


class MemoryEntries:
    """Entries by (scope, key) and a log of the refs each write changed (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[Ref, Entry] = {}
        self.log: list[Ref] = []
        self.base = 0

    def write(self, fn: Callable[[_Txn], T]) -> tuple[T, int, int]:
        """`fn`'s result, and the change counter before and after (`CountsWrites`)."""
        with self.lock:
            before = self.base + len(self.log)
            t = _Txn(self, True)
            result = fn(t)
            for ref, got in t.staged.items():
                if got is None:
                    self.entries.pop(ref, None)
                else:
                    self.entries[ref] = got
                self.log.append(ref)
            if len(self.log) > 2 * _LOG_KEEP:
                drop = len(self.log) - _LOG_KEEP
                del self.log[:drop]
                self.base += drop
            return result, before, self.base + len(self.log)

    def read(self, fn: Callable[[_Txn], T]) -> T:
        with self.lock:
            return fn(_Txn(self, False))
