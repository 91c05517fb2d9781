"""Locks the scoring columns' upkeep thread takes to publish: the owning backend's, seen as a `SharedLock`."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["HeldLock", "SharedLock"]


class SharedLock(Protocol):
    """The owning backend's lock over its type indexes: readers share it, writers hold it alone."""

    def read(self) -> AbstractContextManager[None]: ...


class HeldLock:
    """One plain lock offered as a `SharedLock`: for an owner whose readers and writers all hold
    the same lock, so the upkeep thread publishes only while no search or write runs."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock

    def read(self) -> AbstractContextManager[None]:
        return self._lock  # type: ignore[return-value]
