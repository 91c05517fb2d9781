"""Scoring columns: one type's rows as contiguous numpy columns, derived data every family uses.

A `TypeColumns` holds what a scan reads: the embedding matrix (zero rows for
rows without one), cached row norms, the usage columns the default value
function reads (`USAGE_COLUMNS`), the tie-break rank of each row, and the
type's vector index with its background build. Backends keep it in step with
their writes; it can always be rebuilt from the store. The columns know
nothing of nodes: a family maps its records onto ids, vectors and `Usage`.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import StorageError, ValidationError
from . import index_probe, shutdown, vector_index
from . import regions as regions_
from .checks import Embedding
from .column_files import SavedType
from .index_build import build_rows_index, catch_up
from .locks import SharedLock
from .mapped_ids import MappedIds, snapshot
from .regions import Regions
from .rows import RowVectors, VectorDtype
from .tiebreak import TieBreak
from .usage_order import UsageOrder, current_order
from .vector_index import NO_HNSWLIB, AnnConfig, VectorIndex, ann_available

__all__ = [
    "USAGE_COLUMNS",
    "ColumnsCopy",
    "TypeColumns",
    "Usage",
    "UsageArrays",
]


F64 = npt.NDArray[np.float64]
UsageArrays = tuple[npt.NDArray[np.uint8], F64, F64, F64, F64]
"""The usage columns in `USAGE_COLUMNS` order, typed for the Rust core."""
USAGE_COLUMNS = ("has_meta", "timestamp", "access_count", "reward_count", "cumulative_reward")

Usage = tuple[float, float, float, float]
"""One row's usage: (unix seconds of the last use or of creation, access count, reward count,
cumulative reward). A row without usage (None) scores its relevance."""


def _usage_row(usage: Usage | None) -> tuple[int, float, float, float, float]:
    return (0, 0.0, 0.0, 0.0, 0.0) if usage is None else (1, *usage)


_ABSORB_BATCH = 4  # pending vectors inserted per hold of the graph's lock: a query waits for at most so many
_COPY_CHUNK = 8192  # rows the upkeep thread copies per hold of the shared lock (rows written meanwhile: no region)
_SETTLE_S = 0.01  # the upkeep thread starts once no write woke it for this long (or `_ABSORB_NOW` vectors wait)
_ABSORB_NOW = 64
"""Pending vectors at which the upkeep thread absorbs even while writes keep coming: every query
scores the pending segment exactly, so it is kept small (docs/architecture.md, index upkeep)."""
_ABSORB_IDLE_S = 5.0
"""An upkeep thread with nothing to do for this long exits; the next write or query starts another."""


CalibrationJob = Callable[[VectorIndex, Callable[[], AbstractContextManager[None]]], object]
"""Measures a published index (`hippograph.engine.query.calibrate` with the asking query's params)."""


def _ids(taken: list[tuple[str, int]]) -> list[str]:
    return [node_id for node_id, _ in taken]


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
        vector_dtype: VectorDtype = "float32",
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
        self.unpromising: index_probe.Probe | None = None
        """What a sample showed when it ruled the index out: exact scans answer until the type doubles."""
        self._worker: threading.Thread | None = None
        self._calibration_job: CalibrationJob | None = None
        self.regions: Regions | None = None
        """The rows' regions (`hippograph.engine.regions`), built with the vector index or by the upkeep thread."""
        self._regions_tried: VectorIndex | None = None
        """The index the upkeep thread last computed regions for (it tries once per index)."""
        self._region_touched: set[int] | None = None
        """Rows written while the upkeep thread computes regions from a copy: they start in none."""
        self.upkeep_error: BaseException | None = None
        """Why the upkeep thread's last round failed (None: it did not)."""
        self._wake = threading.Event()
        self._woken_at = 0.0  # when a write or query last woke the upkeep thread (monotonic seconds)
        shutdown.track(self)
        self._pending_rows: tuple[VectorIndex, int, npt.NDArray[np.uint32]] | None = None
        self.ids: list[str] | MappedIds = []
        """Row order; saved ids stay mapped (`MappedIds`) until the row map is built, then a list."""
        self._row: dict[str, int] | None = {}  # each id's row; after `adopt`, built on first use
        self._vectors = RowVectors(vector_dtype)
        """The rows' vectors and norms in the precision scans read (`hippograph.engine.rows`)."""
        self._cols: dict[str, npt.NDArray[Any]] = {
            name: np.zeros(0, np.uint8 if name == "has_meta" else np.float64) for name in USAGE_COLUMNS
        }
        self._tiebreak = TieBreak()
        self._order: UsageOrder | None = None
        self._usage: tuple[int, _core.UsageColumns] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self._vectors.dim

    @property
    def vector_dtype(self) -> VectorDtype:
        return self._vectors.dtype

    @property
    def row(self) -> dict[str, int]:
        got = self._row
        if got is None:  # adopted rows: saved distinct, their file hashed since; ids decoded once
            self.ids = ids = list(self.ids)
            got = dict(zip(ids, range(len(ids)), strict=True))
            if len(got) != len(ids):
                raise StorageError("the saved columns list an id twice", operation="map columns")
            self._row = got
        return got

    def _grow(self, need: int) -> None:
        cap = self._vectors.capacity
        if need <= cap:
            return
        new_cap = max(need, 2 * cap, 64)
        self._vectors.grow(new_cap)
        for name, col in self._cols.items():
            self._cols[name] = np.resize(col, new_cap)
        self._usage = None

    def _ensure_dim(self, dim: int) -> None:
        if self.dim == dim:
            return
        if self.dim != 0:
            raise ValidationError(f"embedding dimension {dim} does not match the columns' dimension {self.dim}")
        self._vectors.set_dim(dim)

    def upsert(self, node_id: str, embedding: Embedding | None, usage: Usage | None, norm: float | None = None) -> None:
        if embedding is not None:
            self._ensure_dim(embedding.shape[0])
        r = self.row.get(node_id)
        held = r is not None
        if r is None:
            r = len(self.ids)
            self._grow(r + 1)
            assert isinstance(self.ids, list)  # the row map is built: the ids are a list
            self.ids.append(node_id)
            self.row[node_id] = r
        if embedding is None:
            changed = not (held and self._vectors.empty(r))
            self._vectors.clear(r)
        else:  # the caller's norm, when given, is the same value
            changed = self._vectors.put(r, embedding, len(self.ids), held=held, norm=norm)
        if changed:
            self._note_change(node_id)
            self._leave_region(r)
            ann = self.ann
            if ann is not None:
                if embedding is None or self._vectors.empty(r):
                    ann.unstage(node_id)
                elif self._lock is None:  # no upkeep thread without the owner's lock: insert now
                    ann.add_many([node_id], self.vectors([r]), np.array([r], np.int64))  # as stored
                else:
                    ann.stage(node_id)
                    self._wake_worker()
        self.set_usage(node_id, usage)

    def _leave_region(self, r: int) -> None:
        """Row `r` holds a new vector (or none): whatever region it was in no longer bounds it."""
        if self.regions is not None:
            self.regions.forget(r)
        touched = self._region_touched
        if touched is not None:
            touched.add(r)

    def _build_regions(self, lock: SharedLock) -> None:
        """Computes regions from a copy of the rows with no lock held; publishes them with every row
        written meanwhile in none."""
        with lock.read():
            if self.regions is not None or self.ann is None or self._regions_tried is self.ann:
                return
            self._regions_tried = self.ann
            self._region_touched = set()
            count, dim = len(self.ids), self.dim
        matrix, norms = np.zeros((count, dim), np.float32), np.zeros(count, np.float32)
        for start in range(0, count, _COPY_CHUNK):  # short holds: a writer never waits for the whole copy
            with lock.read():  # rows past `count` came meanwhile and rows past the end went: none of them is copied
                stop = min(start + _COPY_CHUNK, count, len(self.ids))
                matrix[start:stop] = self._vectors.vectors(stop, slice(start, stop))
                norms[start:stop] = self._vectors.norms(stop)[start:stop]
        try:
            built = regions_.partition(matrix, norms, len(matrix))
            del matrix
            with lock.read():
                touched = self._region_touched or set()
                if built is not None and self.regions is None:
                    n = len(self.ids)
                    of_row = built.of_row
                    of_row[n:] = regions_.NO_REGION
                    stale = np.fromiter((r for r in touched if r < len(of_row)), np.int64)
                    of_row[stale] = regions_.NO_REGION
                    self.regions = built
        finally:
            self._region_touched = None

    def pending_rows(self, ann: VectorIndex) -> npt.NDArray[np.uint32]:
        """The rows of `ann`'s pending ids, which queries score exactly beside the graph's candidates.

        Call under the owner's shared lock (rows stable). Take it before searching the graph: an id
        the upkeep thread publishes after this call was in the graph before the search began.
        """
        cached = self._pending_rows
        version = ann.pending_version
        if cached is not None and cached[0] is ann and cached[1] == version:
            return cached[2]
        with ann._pending_lock:
            version = ann.pending_version
            rows = np.fromiter((self.row[i] for i in ann.pending if i in self.row), np.uint32)
        self._pending_rows = (ann, version, rows)
        return rows

    def _wake_worker(self) -> None:
        """Starts the thread that keeps the vector index up (absorbs pending vectors, calibrates), or wakes it."""
        self._woken_at = time.monotonic()
        self._wake.set()
        worker = self._worker
        if worker is not None and worker.is_alive():
            return
        with self._ann_build:
            if self._builds_closed or (self._worker is not None and self._worker.is_alive()):
                return
            try:
                thread = threading.Thread(target=self._work_loop, name="hippograph-vector-upkeep", daemon=True)
                thread.start()
            except Exception:  # no thread to be had: pending vectors wait for the next write or save
                return
            self._worker = thread

    def want_regions(self) -> None:
        """The index has no regions yet (loaded from files, or built in the background): the upkeep
        thread computes them."""
        if self._lock is not None and self._region_touched is None and self._regions_tried is not self.ann:
            self._wake_worker()

    def request_calibration(self, job: CalibrationJob) -> None:
        """Has the upkeep thread run `job(ann, hold)` on the published index (`hold()`: the owner's
        shared lock, taken per sample query so writers are never held up for long; a job asked for
        while the index builds runs once it is published); runs it now without an owner's lock or when the
        index is not readied in the background (`AnnConfig.background` False: callers wait for it)."""
        config = self.ann_config
        if self._lock is None or (config is not None and not config.background):
            if self.ann is not None:
                with self.calibrating:  # the caller asked to wait for the index (or has no lock to share)
                    job(self.ann, nullcontext)
            return
        self._calibration_job = job
        self._wake_worker()

    def _work_loop(self) -> None:
        """Absorbs pending vectors a few at a time (no lock held while hnswlib works), then runs a
        requested calibration; exits when idle."""
        lock = self._lock
        while not self._builds_closed and lock is not None:
            if not self._wake.wait(_ABSORB_IDLE_S):
                with self._ann_build:
                    if not self._wake.is_set():
                        self._worker = None
                        return
                continue
            self._wake.clear()
            self._let_writes_pass()
            self._wake.clear()
            try:
                self._absorb_all()
                if self.ann is not None and self.regions is None and not self._builds_closed:
                    self._build_regions(lock)
                job, ann = self._calibration_job, self.ann
                if job is not None and ann is not None and not self._builds_closed:
                    self._calibration_job = None
                    if ann.needs_calibration():
                        with self.calibrating:
                            job(ann, self._held(lock))
            except shutdown.Closed:
                return
            except Exception as exc:  # queries go on as they are; the next write or query asks again
                self.upkeep_error = exc

    def _let_writes_pass(self) -> None:
        """Waits until no write woke this thread for `_SETTLE_S` (or `_ABSORB_NOW` vectors wait): a burst
        of writes (an ingestion, and the recall that follows it) goes first, and pending vectors are
        answered exactly meanwhile. Sleeping, not waiting on `_wake`: a write wakes no thread."""
        lock = self._lock
        while not self._builds_closed and len(self._pending_of()) < _ABSORB_NOW:
            if lock is not None:
                with lock.read():  # a waiting writer goes first: a write in flight has staged its vectors
                    pass
            if (quiet := time.monotonic() - self._woken_at) >= _SETTLE_S:
                break
            time.sleep(_SETTLE_S - quiet)

    def _absorb_all(self) -> None:
        """Inserts every pending vector, `_ABSORB_BATCH` per hold of the graph's lock (no backend lock held)."""
        while not self._builds_closed and self.absorb_pending(_ABSORB_BATCH, locked=False):
            pass

    def _held(self, lock: SharedLock) -> Callable[[], AbstractContextManager[None]]:
        """`lock.read`, refused once the builds are closed: a calibration stops at its next step.
        Each step first lets writes pass, then has the vectors they wrote join the graph: a calibration
        takes many seconds, and queries would otherwise score a growing pending segment exactly all that
        time, or contend with the calibration's steps right after each write."""

        def hold() -> AbstractContextManager[None]:
            self._let_writes_pass()
            self._absorb_all()
            if self._builds_closed:
                raise shutdown.Closed
            return lock.read()

        return hold

    def _pending_of(self) -> dict[str, int]:
        ann = self.ann
        return {} if ann is None else ann.pending

    def absorb_pending(self, most: int | None = None, *, locked: bool = True) -> bool:
        """Inserts up to `most` (None: all) pending vectors into the graph; True if any were pending.

        `locked`: the caller holds the owner's shared lock (saving the index); otherwise this takes
        it to read the vectors and to publish, and holds no lock while hnswlib inserts.
        """
        lock = self._lock
        shared = nullcontext() if locked or lock is None else lock.read()
        with shared:
            ann = self.ann
            if ann is None or not ann.pending:
                return False
            taken = ann.take_pending(len(ann.pending) if most is None else most)
            vectors = self.vectors([self.row[i] for i in _ids(taken)])  # a copy
        labels = ann.insert(vectors)
        with nullcontext() if locked or lock is None else lock.read():
            if self.ann is ann:
                rows = [self.row.get(i) for i in _ids(taken)]
                ann.publish(taken, labels, rows)
                if self.regions is not None:
                    placed = [r for (i, _), r, label in zip(taken, rows, labels.tolist(), strict=True)
                              if r is not None and ann.label_of.get(i) == label]  # fmt: skip
                    if placed:
                        at = np.array(placed, np.int64)
                        self.regions.place(at, self.vectors(at))
                return True
        return True

    def current(self, ids: Iterable[str]) -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Those of `ids` this index holds, in row order, with a copy of their vectors and their rows."""
        held = sorted((i for i in ids if i in self.row), key=self.row.__getitem__)
        rows = np.array([self.row[i] for i in held], np.int64)
        return held, self.vectors(rows), rows

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
        ids = self.ids
        assert isinstance(ids, list)  # the row map is built: the ids are a list
        last = len(ids) - 1
        if r != last:
            moved = ids[last]
            ids[r] = moved
            self.row[moved] = r
            self._vectors.move(r, last)
            for col in self._cols.values():
                col[r] = col[last]
            self._stale(r)
            if self.ann is not None:
                self.ann.moved(moved, r)
                self.ann.rows_moved()
        if self.regions is not None:
            self.regions.moved(r, last)
        touched = self._region_touched
        if touched is not None:
            touched.update((r, last))
        self._tiebreak.removed(r, node_id, last)
        ids.pop()
        self._note_change(node_id)
        if self.ann is not None:
            self.ann.unstage(node_id)

    def rank(self) -> npt.NDArray[np.uint32]:
        """Each row's tie-break key (`hippograph.engine.tiebreak`): equal scores go to the smaller id."""
        return self._tiebreak.keys(self.ids, lambda: self.row)

    def matrix(self) -> npt.NDArray[np.float32]:
        """Every row's vector in float32 (in half-precision storage: decoded unit vectors, a copy)."""
        return self._vectors.vectors(len(self.ids))

    def vectors(self, rows: npt.NDArray[np.int64] | list[int]) -> npt.NDArray[np.float32]:
        """A copy of the listed rows' vectors in float32."""
        return self._vectors.vectors(len(self.ids), rows)

    def norms(self) -> npt.NDArray[np.float32]:
        return self._vectors.norms(len(self.ids))

    def scanned(self) -> tuple[npt.NDArray[Any], tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]] | None]:
        """The rows as the Rust scans take them, and the shadow to read first (`RowVectors.scanned`)."""
        return self._vectors.scanned(len(self.ids))

    def saved(self, headroom: int, dim: int) -> SavedType:
        """The rows and every scoring column (room for `headroom` more rows; vectors of width `dim`,
        the store's, zero when this type holds none), as `column_files` saves them."""
        n, cap = len(self.ids), len(self.ids) + headroom
        arrays = self._vectors.saved(n, cap, dim)
        for name in USAGE_COLUMNS:
            arrays[name] = np.zeros(cap, self._cols[name].dtype)
            arrays[name][:n] = self._cols[name][:n]
        arrays["rank"] = self.rank().copy()
        return SavedType(snapshot(self.ids), arrays)

    def adopt(self, saved: SavedType, dim: int) -> None:
        """Takes over saved rows (empty columns only): the arrays as they are, mapped or not."""
        a = saved.arrays
        self.ids, self._row = saved.ids, None
        self._vectors.adopt(a, dim)
        self._cols = {name: a[name] for name in USAGE_COLUMNS}
        self._tiebreak.adopt(a["rank"], saved.ids)

    def copy(self) -> ColumnsCopy:
        return ColumnsCopy(
            list(self.ids),
            self._vectors.vectors(len(self.ids), copy=True),
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
                ids, matrix = list(self.ids), self._vectors.vectors(len(self.ids), copy=True)
                self._changed = set()
            self.unpromising = index_probe.probe(matrix, config)
            built = None if self.unpromising else vector_index.build_rows(ids, matrix, config, cancelled=cancel.is_set)
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
            if self.ann is not None and not self._builds_closed:
                self._wake_worker()  # regions, and the calibration a query asked for while the index was built
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

    def close_background_builds(self) -> list[threading.Thread]:
        """Stops background builds and the upkeep thread for good; returns their running threads, to join
        outside any lock."""
        with self._ann_build:
            self._builds_closed = True
            self._cancel.set()
            self._wake.set()
            return [t for t in (self._builder, self._worker) if t is not None]

    def wants_vector_index(self) -> bool:
        """True when non-exact queries of this type use an HNSW index (configured, embedded, large enough)."""
        config, refused = self.ann_config, self.unpromising
        large = config is not None and self.dim > 0 and len(self.ids) > config.min_nodes
        return large and (refused is None or len(self.ids) >= 2 * refused.rows)

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
            try:
                self.ann = build_rows_index(self, self.ann_config, progress, probe=True)
            except index_probe.Unpromising as exc:
                self.unpromising = exc.probe
                return False
            self.build_error = None
            return True

    def vector_index_stats(self) -> dict[str, Any]:
        ann = self.ann
        stats = ann.stats() if ann is not None else {"vectors": 0, "live": 0, "reclaimable": 0, "pending": 0}
        # Available once measured: until its calibration an index answers nothing (the exact scan does).
        measured = ann is not None and ann.calibration is not None
        building = (ann is None and self._builder is not None and self._builder.is_alive()) or (
            ann is not None and not measured
        )
        error = None if self.build_error is None else f"{type(self.build_error).__name__}: {self.build_error}"
        stats |= {} if ann_available(self.ann_config) else {"exact_fallback": True, "fallback_reason": NO_HNSWLIB}
        if ann is None and self.unpromising is not None:
            stats |= {"exact_fallback": True, "fallback_reason": self.unpromising.reason}
        # A new measurement asked for or running (the rows changed, or the queries asked differ from
        # the samples); the last one holds until it is done.
        measuring = measured and (self._calibration_job is not None or self.calibrating.locked())
        return {
            "available": measured,
            "building": building,
            "measuring": measuring,
            "error": error,
            "nodes": len(self.ids),
            **stats,
        }

    def reclaim_vector_index(self) -> bool:
        """Rebuilds the HNSW graph without its deletion marks; True when it had any."""
        old = self.ann
        if old is None or not old.reclaimable or self.ann_config is None:
            return False
        self.ann = build_rows_index(self, self.ann_config)
        # The same rows at the same depth: the measurement still describes the rebuilt graph.
        self.ann.calibration, self.ann.ef_search = old.calibration, old.ef_search
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

    def usage_order(self, params: _core.ValueParams) -> UsageOrder:
        """The usage order for value-function `params` (`usage_order.current_order`)."""
        order = self._order = current_order(self._order, params, self.usage(), len(self.ids))
        return order
