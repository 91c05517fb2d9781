"""A context store's spaces held in process memory (`MemoryContext`), what `InMemory` serves the
`ContextBackend` protocol with, and the argument checks every backend's `KvTxn` shares.

Each space is a dict and the sorted list of its keys (kept with `bisect`). A write transaction
changes them in place under the write side of a readers-writer lock and remembers each key's value
before its first change: if the function raises, those are put back before the lock is released,
so no reader ever sees a half-applied or abandoned write.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..context.protocol import SPACES
from ..errors import StorageError, ValidationError
from ._base import RWLock

__all__ = ["MAX_KEY", "MemoryContext", "check_put", "check_space", "storable"]

T = TypeVar("T")

MAX_KEY = 511
"""The longest key, in bytes: LMDB's limit, held by every backend so that a store moves between them."""
_SPACES = frozenset(SPACES)


def check_space(space: object) -> str:
    """The space, refused unless the contract names it (a typo would otherwise be a silent space)."""
    if not isinstance(space, str) or space not in _SPACES:
        raise ValidationError(f"unknown context space {space!r:.80}")
    return space


def _check_bytes(what: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise ValidationError(f"a context {what} must be bytes, got {type(value).__name__}")
    return value


def check_put(space: object, key: object, value: object) -> tuple[str, bytes, bytes]:
    """The arguments of a put, refused before anything is written: every backend stores the same
    keys (1 to `MAX_KEY` bytes) and values (bytes)."""
    checked = check_space(space)
    k = _check_bytes("key", key)
    if not 1 <= len(k) <= MAX_KEY:
        raise ValidationError(f"a context key must be 1 to {MAX_KEY} bytes, got {len(k)}")
    return checked, k, _check_bytes("value", value)


def storable(key: object) -> bool:
    """Whether `key` (which must be bytes) could be stored: a lookup of any other key finds nothing
    without asking the storage, which may refuse such a key."""
    return 1 <= len(_check_bytes("key", key)) <= MAX_KEY


def check_bounds(start: object, stop: object) -> tuple[bytes, bytes | None]:
    """The bounds of a range, checked."""
    return _check_bytes("range start", start), None if stop is None else _check_bytes("range stop", stop)


def read_only(operation: str) -> StorageError:
    return StorageError("a read transaction cannot write", operation=operation)


def ended(operation: str) -> StorageError:
    """What using a transaction after its function returned raises (its lock or connection is gone)."""
    return StorageError("the transaction has ended: use it inside the function given", operation=operation)


class _Space:
    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def set(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            if self.values.pop(key, None) is not None:
                del self.keys[bisect.bisect_left(self.keys, key)]
        else:
            if key not in self.values:
                bisect.insort(self.keys, key)
            self.values[key] = value


class _MemoryTxn:
    """`KvTxn` over `MemoryContext`; a write transaction notes each key's value before it first
    changed it, for `MemoryContext.write` to restore if the function raises."""

    def __init__(self, spaces: dict[str, _Space], writable: bool) -> None:
        self._spaces = spaces
        self._writable = writable
        self.live = True
        self.undo: dict[tuple[str, bytes], bytes | None] = {}

    def _alive(self) -> None:
        if not self.live:
            raise ended("context")

    def _space(self, space: str) -> _Space:
        self._alive()
        return self._spaces[check_space(space)]

    def get(self, space: str, key: bytes) -> bytes | None:
        return self._space(space).values.get(key) if storable(key) else None

    def _write(self, space: str, key: bytes, value: bytes | None) -> bytes | None:
        s = self._space(space)
        old = s.values.get(key)
        self.undo.setdefault((space, key), old)
        s.set(key, value)
        return old

    def put(self, space: str, key: bytes, value: bytes) -> None:
        if not self._writable:
            raise read_only("context_read")
        self._write(*check_put(space, key, value))

    def delete(self, space: str, key: bytes) -> bool:
        if not self._writable:
            raise read_only("context_read")
        self._space(space)
        return storable(key) and self._write(space, key, None) is not None

    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        s = self._space(space)
        lo, hi = check_bounds(start, stop)
        return self._walk(s, lo, hi, reverse)

    def _walk(self, s: _Space, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        # Each step looks its position up again, so nothing breaks when the space changes meanwhile.
        keys = s.keys
        if reverse:
            at = len(keys) if hi is None else bisect.bisect_left(keys, hi)
            while at > 0:
                self._alive()
                key = keys[at - 1]
                if key < lo:
                    return
                yield key, s.values[key]
                at = bisect.bisect_left(keys, key)
        else:
            at = bisect.bisect_left(keys, lo)
            while at < len(keys):
                self._alive()
                key = keys[at]
                if hi is not None and key >= hi:
                    return
                yield key, s.values[key]
                at = bisect.bisect_right(keys, key)


class MemoryContext:
    """Every space of `SPACES`, ordered key-value maps changed in atomic transactions (thread-safe)."""

    def __init__(self) -> None:
        self._lock = RWLock()
        self._spaces = {name: _Space() for name in SPACES}

    def write(self, fn: Callable[[_MemoryTxn], T]) -> T:
        """`fn`'s result; everything it changed is put back if it raises."""
        with self._lock.write():
            t = _MemoryTxn(self._spaces, True)
            try:
                return fn(t)
            except BaseException:
                for (space, key), old in t.undo.items():
                    self._spaces[space].set(key, old)
                raise
            finally:
                t.live = False

    def read(self, fn: Callable[[_MemoryTxn], T]) -> T:
        with self._lock.read():
            t = _MemoryTxn(self._spaces, False)
            try:
                return fn(t)
            finally:
                t.live = False
