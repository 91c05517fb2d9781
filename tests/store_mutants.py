"""Broken scoped-store backends: the reference `InMemory`, each with one promise of `EntryBackend`
broken. tests/test_store_mutations.py checks that `StoreConformance` catches every one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hippograph.backends import InMemory
from hippograph.backends._entries import MemoryEntries, _Txn
from hippograph.store import Entry, Scope


class _PrefixScan(_Txn):
    def scan(self, scope: Scope) -> Iterator[Entry]:
        joined = "/".join(scope)
        for ref in sorted(set(self._owner.entries) | set(self.staged)):
            got = self.get(*ref)
            if got is not None and "/".join(ref[0]).startswith(joined):  # "u4" matches "u42"
                yield got


class _Unlogged(MemoryEntries):
    def write(self, fn: Callable[[Any], Any]) -> Any:
        result = super().write(fn)
        self.log.clear()  # another handle never hears of the change
        return result


class _NotAtomic(MemoryEntries):
    def write(self, fn: Callable[[Any], Any]) -> Any:
        t = _Txn(self, True)
        try:
            return fn(t)
        finally:  # applied even when fn raised
            for ref, got in t.staged.items():
                if got is None:
                    self.entries.pop(ref, None)
                else:
                    self.entries[ref] = got
                self.log.append(ref)


class _ScopeBlindGet(_Txn):
    def get(self, scope: Scope, key: str) -> Entry | None:
        for ref, e in {**self._owner.entries, **self.staged}.items():
            if ref[1] == key and e is not None:
                return e
        return None


class _DeleteAlwaysTrue(_Txn):
    def delete(self, scope: Scope, key: str) -> bool:
        super().delete(scope, key)
        return True


class _WritableReads(MemoryEntries):
    def read(self, fn: Callable[[Any], Any]) -> Any:
        return self.write(fn)


def _with_txn(txn: type[_Txn]) -> type[MemoryEntries]:
    class Entries(MemoryEntries):
        def write(self, fn: Callable[[Any], Any]) -> Any:
            return super().write(lambda t: fn(_swap(t, txn)))

        def read(self, fn: Callable[[Any], Any]) -> Any:
            return super().read(lambda t: fn(_swap(t, txn)))

    return Entries


def _swap(t: _Txn, txn: type[_Txn]) -> _Txn:
    t.__class__ = txn
    return t


def _backend(entries: type[MemoryEntries]) -> type[InMemory]:
    class Mutant(InMemory):
        def __init__(self) -> None:
            super().__init__()
            self._entries = entries()

    return Mutant


MUTANTS: dict[str, type[InMemory]] = {
    "PrefixScan": _backend(_with_txn(_PrefixScan)),
    "Unlogged": _backend(_Unlogged),
    "NotAtomic": _backend(_NotAtomic),
    "ScopeBlindGet": _backend(_with_txn(_ScopeBlindGet)),
    "DeleteAlwaysTrue": _backend(_with_txn(_DeleteAlwaysTrue)),
    "WritableReads": _backend(_WritableReads),
}
