"""What a backend implements to hold a scoped store (`EntryBackend`): entries in transactions, and a
change counter so every process's derived indexes catch up with the others' writes.

Backends store and return entries; everything else (validation, the lexical and vector indexes,
fusion, filters, lifecycle verbs) lives in `hippograph.store.Store`, the same for every backend.
`hippograph.testing.StoreConformance` holds a backend to this contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, runtime_checkable

from .model import Entry, Scope

__all__ = ["EntryBackend", "EntryTxn"]

T = TypeVar("T")


class EntryTxn(Protocol):
    """One transaction over the entries: a consistent snapshot; writes (in `EntryBackend.entry_write`)
    become visible to others all at once, or not at all if the function raises."""

    def get(self, scope: Scope, key: str) -> Entry | None:
        """The entry at `(scope, key)`, whatever its status, or None."""
        ...

    def scan(self, scope: Scope) -> Iterable[Entry]:
        """Every entry at `scope` or below it (whole segments), whatever its status, in any order."""
        ...

    def put(self, entry: Entry) -> None:
        """Inserts or replaces the entry at `entry.ref`."""
        ...

    def delete(self, scope: Scope, key: str) -> bool:
        """Removes the entry at `(scope, key)`; False when there was none."""
        ...

    def changes(self, since: int) -> tuple[int, list[tuple[Scope, str]] | None]:
        """The change counter of this snapshot and the refs written or deleted after `since` (each
        at least once, any order); None instead of the refs when the log no longer reaches back
        that far (the caller rescans)."""
        ...


@runtime_checkable
class EntryBackend(Protocol):
    """A backend that holds a scoped store's entries (InMemory, LMDB and PostgreSQL do)."""

    def entry_write(self, fn: Callable[[EntryTxn], T]) -> T:
        """Runs `fn` in one write transaction, durable before this returns (in the durable mode);
        nothing is written if `fn` raises. Writers are serialised."""
        ...

    def entry_read(self, fn: Callable[[EntryTxn], T]) -> T:
        """Runs `fn` on a read-only snapshot (`put` and `delete` refused)."""
        ...


@runtime_checkable
class CountsWrites(Protocol):
    """Optional for an `EntryBackend`: `entry_write` that also reports the change counter before
    and after its transaction, so a store indexes its own write without reading it back."""

    def entry_write_counted(self, fn: Callable[[EntryTxn], T]) -> tuple[T, int, int]:
        """`entry_write(fn)`, and the counter its transaction started from and ended at (equal when
        nothing changed)."""
        ...
