"""Scoring columns: one type's rows as contiguous numpy columns, derived data every family uses.

A `TypeColumns` holds what a scan reads: the embedding matrix (zero rows for
rows without one), cached row norms, the usage columns the default value
function reads (`USAGE_COLUMNS`), the tie-break rank of each row, and the
type's vector index with its background build. Backends keep it in step with
their writes; it can always be rebuilt from the store. The columns know
nothing of nodes: a family maps its records onto ids, vectors and `Usage`.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ValidationError
from . import vector_index
from .checks import Embedding
from .vector_index import AnnConfig, VectorIndex

__all__ = [
    "USAGE_COLUMNS",
    "ColumnsCopy",
    "SharedLock",
    "TypeColumns",
    "Usage",
    "UsageArrays",
    "catch_up",
    "retire",
    "stop_background_builds",
]

_RANK_MERGE_MAX = 4096
"""New rows merged into the tie-break order incrementally; more trigger one full sort."""

F64 = npt.NDArray[np.float64]
UsageArrays = tuple[npt.NDArray[np.uint8], F64, F64, F64, F64]
"""The usage columns in `USAGE_COLUMNS` order, typed for the Rust core."""
USAGE_COLUMNS = ("has_meta", "timestamp", "access_count", "reward_count", "cumulative_reward")

Usage = tuple[float, float, float, float]
"""One row's usage: (unix seconds of the last use or of creation, access count, reward count,
cumulative reward). A row without usage (None) scores its relevance."""


def _usage_row(usage: Usage | None) -> tuple[int, float, float, float, float]:
    return (0, 0.0, 0.0, 0.0, 0.0) if usage is None else (1, *usage)


@dataclass
class _UsageOrder:
    """Rows sorted by their time-independent usage bound (`_core.usage_order`), for the certified ANN walk.

    Writes do not re-sort: they append the rows they touch to `stale`, which
    the walk checks on their current metadata. Past `_STALE_MAX` of them the
    next query merges them in (one pass in Rust); past a sixteenth of the
    type, it sorts afresh.
    """

    params: _core.ValueParams
    rows: npt.NDArray[np.uint32]
    keys: npt.NDArray[np.float64]
    stale: list[int] = dataclasses.field(default_factory=list)


_STALE_MAX = 1024

_CATCH_UP_ROUNDS = 8
_CATCH_UP_UNDER_LOCK = 1024
"""A background build replays writes made meanwhile in rounds without the lock while more than this many
ids changed, so the final replay, which holds the backend's lock, stays short."""


@dataclass(frozen=True)
class ColumnsCopy:
    """A copy of one type's scoring columns, for maintenance passes."""

    ids: list[str]
    matrix: npt.NDArray[np.float32]
    norms: npt.NDArray[np.float32]
    columns: dict[str, npt.NDArray[Any]]


class SharedLock(Protocol):
    """The owning backend's lock over its type indexes: readers share it, writers hold it alone."""

    def read(self) -> AbstractContextManager[None]: ...


class TypeColumns:
    """Rows of one node type, in insertion order with swap-remove on delete.

    With an `AnnConfig`, a type holding more than `min_nodes` rows answers
    non-exact queries from an HNSW candidate pool (built on first use, kept in
    step with every write, certified by `ann.certified_scan`).

    `lock` is the backend's lock under which it calls these columns (reads
    shared, writes exclusive). Given one, the first non-exact query of a large
    type starts a background build (`AnnConfig.background`): the thread first
    lets `load_saved` adopt a saved index (LMDB), else copies the rows under
    the shared side, builds without any lock, then under the shared side
    again (so no write is in between) replays the ids written meanwhile and
    publishes the index. Until then queries scan exactly.
    """

    def __init__(
        self,
        ann_config: AnnConfig | None = None,
        lock: SharedLock | None = None,
        load_saved: Callable[[TypeColumns, threading.Event], bool] | None = None,
    ) -> None:
        self.ann_config = ann_config
        self.ann: VectorIndex | None = None
        self._lock = lock
        self._load_saved = load_saved
        """A background build first offers the backend to adopt a saved index (True: it did)."""
        self._ann_build = threading.Lock()
        self.calibrating = threading.Lock()
        """Held by the one thread measuring this type's vector index (`hippograph.engine.query`)."""
        self._builder: threading.Thread | None = None
        self._cancel = threading.Event()
        self._changed: set[str] | None = None
        """Ids written while a background build runs (vectors changed or removed), for its catch-up."""
        self._builds_closed = False
        self.build_error: BaseException | None = None
        """Why the last background build failed; the type then stays on exact scans until an explicit build."""
        self._rank_lock = threading.Lock()
        self.ids: list[str] = []
        self.row: dict[str, int] = {}
        self.dim = 0
        self._mat: npt.NDArray[np.float32] = np.zeros((0, 0), np.float32)
        self._norms: npt.NDArray[np.float32] = np.zeros(0, np.float32)
        self._cols: dict[str, npt.NDArray[Any]] = {
            name: np.zeros(0, np.uint8 if name == "has_meta" else np.float64) for name in USAGE_COLUMNS
        }
        self._rank: npt.NDArray[np.uint32] | None = None
        self._sorted: list[str] | None = None
        self._order: _UsageOrder | None = None
        self._usage: tuple[int, _core.UsageColumns] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def _grow(self, need: int) -> None:
        cap = self._norms.shape[0]
        if need <= cap:
            return
        new_cap = max(need, 2 * cap, 64)
        mat = np.zeros((new_cap, self.dim), np.float32)
        mat[:cap] = self._mat
        self._mat = mat
        self._norms = np.resize(self._norms, new_cap)
        for name, col in self._cols.items():
            self._cols[name] = np.resize(col, new_cap)
        self._usage = None

    def _ensure_dim(self, dim: int) -> None:
        if self.dim == dim:
            return
        if self.dim != 0:
            raise ValidationError(f"embedding dimension {dim} does not match the columns' dimension {self.dim}")
        self.dim = dim
        self._mat = np.zeros((self._norms.shape[0], dim), np.float32)

    def upsert(self, node_id: str, embedding: Embedding | None, usage: Usage | None) -> None:
        if embedding is not None:
            self._ensure_dim(embedding.shape[0])
        r = self.row.get(node_id)
        unchanged = r is not None and (
            bool(np.array_equal(self._mat[r], embedding)) if embedding is not None else not self._norms[r]
        )
        if r is None:
            r = len(self.ids)
            self._grow(r + 1)
            self.ids.append(node_id)
            self.row[node_id] = r
        if embedding is None:
            self._mat[r] = 0.0
            self._norms[r] = 0.0
        else:
            self._mat[r] = embedding
            self._norms[r] = np.sqrt(np.dot(embedding.astype(np.float64), embedding.astype(np.float64)))
        if not unchanged:
            self._note_change(node_id)
            if self.ann is not None:
                if embedding is None:
                    self.ann.discard(node_id)
                else:
                    self.ann.add_many([node_id], embedding[None, :], np.array([r], np.int64))
        self.set_usage(node_id, usage)

    def current(self, ids: Iterable[str]) -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Those of `ids` this index holds, in row order, with a copy of their vectors and their rows."""
        held = sorted((i for i in ids if i in self.row), key=self.row.__getitem__)
        rows = np.array([self.row[i] for i in held], np.int64)
        return held, self.matrix()[rows], rows

    def _note_change(self, node_id: str) -> None:
        changed = self._changed  # a background build may drop the set at any moment
        if changed is not None:
            changed.add(node_id)

    def set_usage(self, node_id: str, usage: Usage | None) -> None:
        r = self.row.get(node_id)
        if r is None:
            return
        for name, value in zip(USAGE_COLUMNS, _usage_row(usage), strict=True):
            self._cols[name][r] = value
        self._stale(r)

    def _stale(self, r: int) -> None:
        """Row `r` changed (metadata, or now holds another node): the usage order must look at it itself."""
        if self._order is not None:
            self._order.stale.append(r)

    def remove(self, node_id: str) -> None:
        r = self.row.pop(node_id, None)
        if r is None:
            return
        last = len(self.ids) - 1
        if r != last:
            moved = self.ids[last]
            self.ids[r] = moved
            self.row[moved] = r
            self._mat[r] = self._mat[last]
            self._norms[r] = self._norms[last]
            for col in self._cols.values():
                col[r] = col[last]
            self._stale(r)
            if self.ann is not None:
                self.ann.moved(moved, r)
        self.ids.pop()
        self._rank = self._sorted = None
        self._note_change(node_id)
        if self.ann is not None:
            self.ann.discard(node_id)

    def rank(self) -> npt.NDArray[np.uint32]:
        """Each row's position in id order: the tie-break of equal scores.

        Rows appended since the last call (new ids; removals reset it) are
        merged in by binary search, so an ingest followed by a recall does
        not pay a full sort of the type's ids. Readers call this concurrently
        under a backend's shared lock, so the merge itself is serialised.
        """
        with self._rank_lock:
            return self._ranked()

    def _ranked(self) -> npt.NDArray[np.uint32]:
        n = len(self.ids)
        ranked = 0 if self._rank is None else len(self._rank)
        if self._rank is not None and self._sorted is not None and 0 < n - ranked <= _RANK_MERGE_MAX:
            fresh = self.ids[ranked:]
            before = np.array([bisect.bisect_left(self._sorted, i) for i in fresh], np.int64)
            by_id = np.argsort(np.array(fresh, dtype=object), kind="stable")
            within = np.empty(len(fresh), np.int64)
            within[by_id] = np.arange(len(fresh))
            shift = np.searchsorted(np.sort(before), self._rank, side="right")
            self._rank = np.concatenate([self._rank + shift, before + within]).astype(np.uint32)
            for i in fresh:
                bisect.insort(self._sorted, i)
        elif self._rank is None or ranked != n:
            positions = sorted(range(n), key=self.ids.__getitem__)
            rank = np.empty(n, np.uint32)
            rank[positions] = np.arange(n, dtype=np.uint32)
            self._rank = rank
            self._sorted = [self.ids[i] for i in positions]
        return self._rank

    def matrix(self) -> npt.NDArray[np.float32]:
        return self._mat[: len(self.ids)]

    def norms(self) -> npt.NDArray[np.float32]:
        return self._norms[: len(self.ids)]

    def copy(self) -> ColumnsCopy:
        return ColumnsCopy(
            list(self.ids),
            self.matrix().copy(),
            self.norms().copy(),
            {name: self.column(name).copy() for name in USAGE_COLUMNS},
        )

    def column(self, name: str) -> npt.NDArray[Any]:
        return self._cols[name][: len(self.ids)]

    def vector_index_for(self, approximate: bool) -> VectorIndex | None:
        """The vector index to draw candidates from (building it on first use), or None for the exact scan.

        `approximate`: the caller may use candidates (a non-exact query whose value function never
        exceeds relevance). In the background mode the first such call starts a build and returns None.
        """
        if not approximate or not self.wants_vector_index():
            return None
        if self.ann is None:
            if self.ann_config is not None and self.ann_config.background and self._lock is not None:
                self._start_background_build()
                return None
            self.build_vector_index()
        return self.ann

    def _start_background_build(self) -> None:
        """Starts the builder thread once (a failure to start is reported like a failed build)."""
        with self._ann_build:
            if self._builds_closed or self.ann is not None or self.build_error is not None:
                return
            if self._builder is not None:
                if self._builder.is_alive():
                    return
                self._builder = None  # a thread that did not survive fork()
            try:
                self._cancel = cancel = threading.Event()
                thread = threading.Thread(
                    target=self._build_in_background, args=(cancel,), name="hippograph-vector-index", daemon=True
                )
                thread.start()
            except Exception as exc:  # no thread to be had: this query scans exactly
                self._failed(exc)
                return
            self._builder = thread

    def _build_in_background(self, cancel: threading.Event) -> None:
        config, lock = self.ann_config, self._lock
        try:
            if config is None or lock is None:
                return
            if self._load_saved is not None and self._load_saved(self, cancel):
                return
            with lock.read():  # no writer runs: the copy is the state `_changed` starts from
                if cancel.is_set() or self.ann is not None:
                    return
                ids, matrix = list(self.ids), self.matrix().copy()
                self._changed = set()
            built = vector_index.build_rows(ids, matrix, config, cancelled=cancel.is_set)
            del ids, matrix  # the copy lives only as long as hnswlib needs it
            if built is None:
                return
            for _ in range(_CATCH_UP_ROUNDS):  # many writes meanwhile: replay most of them between lock holds
                with lock.read():
                    changed = self._changed
                    if changed is None or len(changed) <= _CATCH_UP_UNDER_LOCK:
                        break
                    self._changed = set()
                    current = self.current(changed)
                if cancel.is_set():
                    return
                vector_index.replay(built, changed, current)  # hnswlib's work, with no lock held
            with lock.read(), self._ann_build:  # no write runs: the copy plus `_changed` is the current state
                if not cancel.is_set() and self.ann is None and not self._builds_closed:
                    self.ann = catch_up(self, built, self._changed or set())
        except Exception as exc:  # queries go on scanning exactly; vector_index_stats reports it
            self._failed(exc)
        finally:
            with self._ann_build:
                if self._builder is threading.current_thread():
                    self._builder = None
                    self._changed = None

    def _failed(self, exc: BaseException) -> None:
        self.build_error = exc
        warnings.warn(
            f"hippograph: background vector index build failed ({type(exc).__name__}); this type answers with "
            "exact scans until build_vector_index() succeeds",
            RuntimeWarning,
            stacklevel=1,
        )

    def cancel_background_build(self) -> None:
        """Asks a running background build to stop (another index was adopted); later queries may start one."""
        self._cancel.set()

    def close_background_builds(self) -> threading.Thread | None:
        """Stops background builds for good; returns a running builder's thread, to join outside any lock."""
        with self._ann_build:
            self._builds_closed = True
            self._cancel.set()
            return self._builder

    def wants_vector_index(self) -> bool:
        """True when non-exact queries of this type use an HNSW index (configured, embedded, large enough)."""
        config = self.ann_config
        return config is not None and self.dim > 0 and len(self.ids) > config.min_nodes

    def build_vector_index(self, progress: Callable[[int, int], None] | None = None) -> bool:
        """Builds the HNSW index now rather than at the first non-exact query; True when this call built it.

        A background build still running is cancelled: this one answers sooner than waiting for it.
        """
        if self.ann_config is None or not self.wants_vector_index():
            return False
        with self._ann_build:
            if self.ann is not None:
                return False
            self._cancel.set()
            self.ann = _build(self, self.ann_config, progress)
            self.build_error = None
            return True

    def vector_index_stats(self) -> dict[str, Any]:
        stats = self.ann.stats() if self.ann is not None else {"vectors": 0, "live": 0, "reclaimable": 0}
        building = self._builder is not None and self._builder.is_alive() and self.ann is None
        error = None if self.build_error is None else f"{type(self.build_error).__name__}: {self.build_error}"
        return {
            "available": self.ann is not None,
            "building": building,
            "error": error,
            "nodes": len(self.ids),
            **stats,
        }

    def reclaim_vector_index(self) -> bool:
        """Rebuilds the HNSW graph without its deletion marks; True when it had any."""
        if self.ann is None or not self.ann.reclaimable or self.ann_config is None:
            return False
        self.ann = _build(self, self.ann_config)
        return True

    def usage_arrays(self) -> UsageArrays:
        """The usage columns in `USAGE_COLUMNS` order, typed for the Rust core."""
        return (
            self.column("has_meta"),
            self.column("timestamp"),
            self.column("access_count"),
            self.column("reward_count"),
            self.column("cumulative_reward"),
        )

    def usage(self) -> _core.UsageColumns:
        """The usage columns as the Rust core takes them: views of the live columns, so one bundle
        serves every query until rows are added or removed or the columns grow."""
        n = len(self.ids)
        cached = self._usage  # readers may rebuild it concurrently; any of their bundles is current
        if cached is None or cached[0] != n:
            cached = self._usage = (n, _core.UsageColumns(*self.usage_arrays()))
        return cached[1]

    def usage_order(self, params: _core.ValueParams) -> _UsageOrder:
        """The usage order for value-function `params`, sorted afresh when missing, for other
        parameters, or too stale."""
        order = self._order
        # Readers may run this concurrently: each builds a new object, none is changed in place.
        if order is None or order.params != params or len(order.stale) > len(self.ids) // 16:
            order = self._order = _UsageOrder(params, *_core.usage_order(self.usage(), params))
        elif len(order.stale) > _STALE_MAX:
            stale = np.array(order.stale, np.uint32)
            order = self._order = _UsageOrder(
                params, *_core.merge_usage_order(order.rows, order.keys, stale, self.usage(), params)
            )
        return order


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
    stopped = [t for t in (c.close_background_builds() for c in columns) if t is not None]
    return [t for t in retired if t.is_alive()] + stopped


def _build(columns: TypeColumns, config: AnnConfig, progress: Callable[[int, int], None] | None = None) -> VectorIndex:
    """An HNSW graph over every embedded row of `columns`, reporting ``progress(rows_done, rows)``."""
    built = vector_index.build_rows(list(columns.ids), columns.matrix(), config, progress)
    if built is None:  # pragma: no cover - only a `cancelled` callback stops a build
        raise RuntimeError("vector index build cancelled")
    return built


def catch_up(columns: TypeColumns, ann: VectorIndex, changed: set[str]) -> VectorIndex:
    """`ann`, built from an earlier copy of `columns`' rows, made to mirror `columns` now.

    `changed` must hold every id whose vector changed or that was removed
    since the copy: their old labels are marked deleted and their current
    vectors added. Every other label's row is looked up afresh (swap-removes
    moved rows since).
    """
    vector_index.replay(ann, changed, columns.current(changed))
    for node_id in [i for i in ann.label_of if i not in columns.row]:  # defensive: a removal not reported
        ann.discard(node_id)
    rows = np.full(len(ann.row_of_label), -1, np.int64)
    for node_id, label in ann.label_of.items():
        rows[label] = columns.row[node_id]
    ann.row_of_label = rows
    return ann
