"""One store's derived scoring state in this process: a `TypeColumns` per kind, and each id's kind.

Every backend keeps one `DerivedColumns` (InMemory writes it with the store,
LMDB and PostgreSQL catch it up from their change logs). It is derived data:
`replace` rebuilds it whole from the store, and the vector-index helpers here
(`stats`, `build`, `reclaim`, `close`) serve every backend. Callers hold
`lock` (readers shared, writers alone) around each call, as `TypeColumns` needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from .checks import Embedding
from .columns import TypeColumns, Usage
from .locks import SharedLock
from .rows import VectorDtype
from .vector_index import AnnConfig

__all__ = ["DerivedColumns", "ReadWriteLock", "Row", "retire", "stop_background_builds"]

K = TypeVar("K", bound=str)

Row = tuple[str, K, Embedding | None, Usage | None]
"""(id, kind, embedding, usage) of one stored item, as `replace` takes them."""


class ReadWriteLock(SharedLock, Protocol):
    """The backend's lock over its derived columns: readers share it, writers hold it alone."""

    def write(self) -> AbstractContextManager[None]: ...


class DerivedColumns(Generic[K]):
    """The columns of every kind (`kinds`), kept in step with a store by its backend."""

    def __init__(
        self,
        kinds: Iterable[K],
        ann: AnnConfig | None,
        lock: ReadWriteLock,
        load_saved: Callable[[TypeColumns, threading.Event], bool] | None = None,
        vector_dtype: VectorDtype = "float32",
    ) -> None:
        self.kinds = tuple(kinds)
        self.ann = ann
        self.vector_dtype: VectorDtype = vector_dtype
        """The precision of every kind's scanned vectors (`hippograph.engine.rows`)."""
        self.lock = lock
        self._load_saved = load_saved
        self.columns: dict[K, TypeColumns] = self._fresh()
        self.retired: list[threading.Thread] = []
        """Builder threads of columns a `replace` retired, joined on close."""

    def _fresh(self) -> dict[K, TypeColumns]:
        return {kind: TypeColumns(self.ann, self.lock, self._load_saved, self.vector_dtype) for kind in self.kinds}

    def put(self, item_id: str, kind: K, embedding: Embedding | None, usage: Usage | None) -> None:
        """The item's current row (moved out of another kind's columns if its kind changed)."""
        old = self.kind_of(item_id)
        if old is not None and old != kind:
            self.columns[old].remove(item_id)
        self.columns[kind].upsert(item_id, embedding, usage)

    def kind_of(self, item_id: str) -> K | None:
        """The kind whose columns hold `item_id` (looked up in each: no second map of every id)."""
        for kind, columns in self.columns.items():
            if item_id in columns.row:
                return kind
        return None

    def set_usage(self, item_id: str, usage: Usage | None) -> None:
        kind = self.kind_of(item_id)
        if kind is not None:
            self.columns[kind].set_usage(item_id, usage)

    def drop(self, item_id: str) -> None:
        kind = self.kind_of(item_id)
        if kind is not None:
            self.columns[kind].remove(item_id)

    def replace(self, rows: Iterable[Row[K]]) -> None:
        """Everything afresh from the store's rows (decode them first: nothing changes if that fails)."""
        columns = self._fresh()
        for item_id, kind, embedding, usage in rows:
            columns[kind].upsert(item_id, embedding, usage)
        self.install(columns)

    def install(self, columns: dict[K, TypeColumns]) -> None:
        """Makes `columns` (from `_fresh`, filled) current, retiring the builds of those they replace."""
        self.retired = retire(self.columns.values(), self.retired)
        self.columns = columns

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per kind: the vector index's state (`TypeColumns.vector_index_stats`) and ``loaded``:
        whether this process read it from saved files instead of building it."""
        out: dict[str, dict[str, Any]] = {}
        for kind in self.kinds:
            columns = self.columns[kind]
            loaded = columns.ann is not None and columns.ann.loaded
            out[str(kind)] = {**columns.vector_index_stats(), "loaded": loaded}
        return out

    def reclaim(self) -> list[str]:
        """Rebuilds the vector indexes that carry deletion marks (hold `lock` for writing); the kinds rebuilt."""
        return [str(kind) for kind in self.kinds if self.columns[kind].reclaim_vector_index()]

    def close(self) -> None:
        """Stops background builds for good and waits for them (hold none of the backend's locks)."""
        stop_background_builds(self.columns.values(), self.retired)


def stop_background_builds(
    columns: Iterable[TypeColumns], retired: Iterable[threading.Thread] = (), timeout: float = 60.0
) -> None:
    """Stops background builds for good and waits for them and for `retired` ones (cancelled earlier).

    Call holding none of the backend's locks: a builder may be waiting for one to publish.
    """
    for thread in retire(columns, retired):
        thread.join(timeout)


def retire(columns: Iterable[TypeColumns], retired: Iterable[threading.Thread] = ()) -> list[threading.Thread]:
    """Stops the builds of columns a cache replaces; their threads plus those of `retired` still
    running, for the backend's close to join."""
    stopped = [t for c in columns for t in c.close_background_builds()]
    return [t for t in retired if t.is_alive()] + stopped
