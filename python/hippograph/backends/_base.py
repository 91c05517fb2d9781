"""Pieces every built-in backend shares: argument checks, closing, locking."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Self

from ..engine.checks import check_id, check_ids
from ..errors import StorageError, ValidationError
from ..graph.changeset import Changeset, check_changeset
from ..graph.model import IngestionRecord, NodeMetadata

__all__ = ["BackendBase", "RWLock", "check_ids", "check_metadata_updates", "check_record"]


def check_metadata_updates(updates: Mapping[str, NodeMetadata]) -> dict[str, NodeMetadata]:
    if not isinstance(updates, Mapping):
        raise ValidationError(f"metadata updates must be a mapping of id to NodeMetadata, got {type(updates).__name__}")
    for node_id, meta in updates.items():
        check_id(node_id, "metadata id")
        if not isinstance(meta, NodeMetadata):
            raise ValidationError(f"metadata of {node_id!r} must be NodeMetadata, got {type(meta).__name__}")
    return dict(updates)


def check_record(record: IngestionRecord, cs: Changeset, dim: int | None) -> int | None:
    if not isinstance(record, IngestionRecord):
        raise ValidationError(f"expected an IngestionRecord, got {type(record).__name__}")
    return check_changeset(cs, dim)


class RWLock:
    """Many readers or one writer; a waiting writer goes before new readers so it never starves."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class BackendBase:
    """Context-manager protocol and the closed-state guard."""

    _closed = False

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StorageError("the backend is closed", operation=operation)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
