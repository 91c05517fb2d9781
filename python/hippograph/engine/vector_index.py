"""The vector index: HNSW graphs that offer candidates, as derived data.

Two engines draw the graph: ``"core"`` (the default, `hippograph._core.Hnsw`, compiled into
every wheel), which keeps each unit vector as f16 codes in its own mapped file and leaves the
exact rows to the scoring columns, and ``"hnswlib"`` (the `ann` extra), which keeps its own f32 copy.

A `VectorIndex` mirrors one type's embeddings. It is only ever a source of
*candidates*: every candidate is rescored exactly in Rust until the ranking is
certified (`hippograph.engine.query`), so the only error left is the HNSW
graph's own neighbour recall. Labels are stable integers, never rows: a label
maps back to an id only while that id is live in the owning `TypeColumns`, so
a deleted node is never returned; re-embedding marks the old label deleted and
adds a new one; deletions are marks, counted as ``reclaimable`` until a rebuild.
hnswlib is not safe to add to while searching: every engine call runs under
`VectorIndex.lock`. A write does not insert into the graph: it marks the old
label deleted and puts the id in the *pending* segment, which queries score
exactly beside the graph's candidates until the owner's upkeep thread has
inserted it (`insert` without any other lock, then `publish`). Saving and
loading these graphs is `hippograph.engine.vector_files`.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ConfigError
from .checks import check_choice

try:
    import hnswlib
except ImportError:  # the `ann` extra is not installed: every query is answered by the exact scan
    hnswlib = None

NO_HNSWLIB = (
    "hnswlib is not installed (pip install 'hippograph[ann]'; it builds from source, so it needs a C++ "
    "compiler): the exact scan answers every query; AnnConfig(engine='core'), the default, needs nothing"
)
"""What `vector_index_stats()` says when the configured engine is hnswlib and it cannot be imported."""

ENGINES = ("core", "hnswlib")
"""The vector-index engines: the core's own graph (every wheel) and hnswlib (the `ann` extra)."""

__all__ = [
    "DEFAULT_ANN",
    "NO_HNSWLIB",
    "AnnConfig",
    "VectorIndex",
    "ann_available",
    "build_rows",
    "check_ann",
    "hnsw_index",
    "replay",
]


def check_ann(value: object) -> AnnConfig | None:
    """An `ann` argument: an `AnnConfig`, or None for no vector index."""
    if value is not None and not isinstance(value, AnnConfig):
        raise ConfigError(f"ann must be an AnnConfig or None, got {type(value).__name__}")
    return value


def ann_available(config: AnnConfig | None = None) -> bool:
    """Whether `config`'s engine (None: the default, the core's) can build an index here."""
    return config is None or config.engine == "core" or hnswlib is not None


def hnsw_index(dim: int, config: AnnConfig, capacity: int, sample: npt.NDArray[np.float32] | None = None) -> Any:
    """An empty graph of `config`'s engine over cosine similarity; `sample` (rows like those to come)
    sets the core's code scales."""
    if config.engine == "core":
        rows = np.zeros((0, dim), np.float32) if sample is None else np.ascontiguousarray(sample[:_SCALE_SAMPLE])
        return _core.Hnsw(dim, config.M, config.ef_construction, rows)
    if hnswlib is None:
        raise ConfigError(NO_HNSWLIB)
    index = hnswlib.Index(space="cosine", dim=dim)
    index.init_index(max_elements=max(capacity, 1024), M=config.M, ef_construction=config.ef_construction)
    return index


def engine_version(config: AnnConfig) -> str:
    """What a saved index of `config`'s engine must have been written by to be read back."""
    if config.engine == "core":
        return "core/1"
    try:
        return "hnswlib/" + importlib.metadata.version("hnswlib")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - built from source without metadata
        return "hnswlib/unknown"


_SCALE_SAMPLE = 16_384
"""Rows that set the core engine's per-dimension code scales."""


@dataclass(frozen=True)
class AnnConfig:
    """When and how to build HNSW indexes.

    `engine`: ``"core"`` (the default: compiled into every wheel, f16 codes of unit vectors beside
    the scoring columns, its saved graph mapped and shared between processes) or ``"hnswlib"`` (the
    `ann` extra, which keeps an f32 copy of every vector).
    `min_nodes`: a type holding more nodes than this (counted with or without
    an embedding) uses the index; below it the exact scan is faster. `M`, `ef_construction`,
    `ef_search` are HNSW's parameters (links per node, build and search beam widths); `ef_search`
    is raised to the pool size per query (at least 16, and top_k). It is where calibration
    starts: the certified rescoring makes a shallow search enough on clustered data, and
    calibration deepens it only as far as the recall target needs.
    `threads`: build threads (0: the engine's default, all cores).
    `target_recall`: each index is calibrated (`hippograph.engine.query.calibrate`) after an
    explicit build, at its first approximate query otherwise, and again after a quarter of its
    rows changed: ``ef_search`` is raised until the approximate answers' mean recall@k on
    `calibration_queries` queries near stored vectors reaches this (`max_ef_search` bounds it).
    An index that cannot, or only at less than `min_speedup` times the exact scan's speed, is
    not used: the exact scan answers and `vector_index_stats()` says why.
    `probe_rows`: before building for a type of at least four times as many rows, a graph over a
    random sample of this many is searched (`hippograph.engine.index_probe`); when it cannot reach
    `target_recall` at `min_speedup` (judged against the exact scan of every row), the index is
    not built, the exact scan answers and `vector_index_stats()` says why, until the type doubles.
    0: always build.
    `background`: a non-exact query that finds no index answers with the exact
    scan and starts building one in a background thread, which takes no lock
    while the engine works (a million nodes take minutes); writes made meanwhile
    are replayed into it before queries use it. False: that query builds the
    index first, holding up the store's other callers. `build_vector_index()`
    always builds at once.
    """

    min_nodes: int = 20_000
    M: int = 16
    ef_construction: int = 100
    ef_search: int = 16
    threads: int = 0
    background: bool = True
    target_recall: float = 0.95
    min_speedup: float = 3.0
    calibration_queries: int = 100
    max_ef_search: int = 2048
    engine: str = "core"
    probe_rows: int = 8192

    def __post_init__(self) -> None:
        check_choice(self.engine, ENGINES, "AnnConfig.engine", ConfigError)
        if not isinstance(self.background, bool):
            raise ConfigError(f"AnnConfig.background must be a bool, got {self.background!r}")
        for name, least, most in (("target_recall", 0.0, 1.0), ("min_speedup", 0.0, 1e6)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not least <= value <= most:
                raise ConfigError(f"AnnConfig.{name} must be a number from {least} to {most}, got {value!r}")
        for name, most in _ANN_LIMITS.items():
            value = getattr(self, name)
            least = 0 if name in ("threads", "probe_rows") else 1
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise ConfigError(f"AnnConfig.{name} must be an int from {least} to {most}, got {value!r}")


_ANN_LIMITS = {
    "min_nodes": 2**62,
    "M": 2048,
    "ef_construction": 1 << 20,
    "ef_search": 1 << 20,
    "threads": 4096,
    "calibration_queries": 1 << 16,
    "max_ef_search": 1 << 20,
    "probe_rows": 1 << 24,
}
"""Upper bounds of what reaches an engine (hnswlib's C++ would overflow or allocate without limit beyond them)."""


DEFAULT_ANN: AnnConfig | None = AnnConfig()
"""The built-in backends' default: the core's HNSW graph above 20k nodes of a type."""


class VectorIndex:
    """One type's HNSW graph with stable labels."""

    def __init__(
        self,
        dim: int,
        config: AnnConfig,
        capacity: int,
        hnsw: Any = None,
        sample: npt.NDArray[np.float32] | None = None,
    ) -> None:
        """An empty index (`sample`: rows like those to come), or (`hnsw`) one around a graph
        `vector_files` has read and verified."""
        self.dim = dim
        self.config = config
        self.lock = threading.Lock()
        self.index = hnsw_index(dim, config, capacity, sample) if hnsw is None else hnsw
        if config.threads:
            self.index.set_num_threads(config.threads)
        self._maps: tuple[dict[str, int], dict[int, str]] | None = ({}, {})
        self._adopted: tuple[Iterable[str], npt.NDArray[np.int64]] | None = None
        """Adopted ids and their labels not yet in the maps (`adopt_labels`)."""
        self._maps_lock = threading.Lock()
        self.row_of_label = np.full(max(capacity, 1024), -1, np.int64)
        self.next_label = 0
        self.reclaimable = 0
        self.loaded = False
        """True when this index was read from saved files rather than built here."""
        self.persisted: tuple[int, str] | None = None
        self.ef_search = config.ef_search
        """The search depth queries use: the configured one until a calibration raises it."""
        self.calibration: Any = None
        """The last `hippograph.engine.calibration.Calibration` of this index (None: not measured yet)."""
        self.changes = 0
        """Vectors added or marked deleted since the last calibration."""
        self.pending: dict[str, int] = {}
        """Ids whose current vector the graph does not hold yet, each with the token of its latest write."""
        self.pending_version = 0
        """Moves whenever `pending` or the rows of its ids change: the owner's cached pending rows follow it."""
        self._pending_lock = threading.Lock()
        self._token = 0
        self._recent: deque[npt.NDArray[np.float32]] = deque(maxlen=_RECENT_QUERIES)
        self._error: tuple[int, float, npt.NDArray[np.int64]] | None = None
        self.handovers: deque[bool] = deque(maxlen=_ASKED_WINDOW)
        """Per approximate query since the last calibration (the last `_ASKED_WINDOW`): whether the
        certified path handed it over to the exact scan."""

    def __len__(self) -> int:
        adopted = self._adopted
        return len(self.label_of) if adopted is None else len(adopted[1])

    @property
    def label_of(self) -> dict[str, int]:
        """Each live id's label."""
        maps = self._maps
        return (maps if maps is not None else self.build_maps())[0]

    @property
    def id_of(self) -> dict[int, str]:
        """Each live label's id."""
        maps = self._maps
        return (maps if maps is not None else self.build_maps())[1]

    def adopt_labels(self, ids: Iterable[str], labels: npt.NDArray[np.int64]) -> None:
        """Makes the i-th of `ids` (distinct, iterated once) live under `labels[i]` (distinct), in place
        of any other. The maps are built when first asked for: queries only read `row_of_label`, so an
        adopted index of a million labels serves them without an object per label."""
        with self._maps_lock:
            self._maps, self._adopted = None, (ids, labels)

    def build_maps(self) -> tuple[dict[str, int], dict[int, str]]:
        """`label_of` and `id_of`, built from the adopted labels if they were not yet (any thread may;
        the others wait for the one building)."""
        with self._maps_lock:
            maps, adopted = self._maps, self._adopted
            if maps is None:
                assert adopted is not None  # set together by `adopt_labels`
                keys, values = list(adopted[0]), adopted[1].tolist()
                self._maps = maps = (dict(zip(keys, values, strict=True)), dict(zip(values, keys, strict=True)))
                self._adopted = None
            return maps

    def sim_error(self) -> tuple[float, npt.NDArray[np.uint32]]:
        """The most a similarity `knn` reports may differ from the exact cosine (the core's codes), and
        the rows exempt from that bound, which a certified answer scores exactly whatever the search
        found (at most `_EXEMPT` rows whose codes are far less exact than the rest's, and only when
        leaving them out at least halves the bound)."""
        if self.config.engine != "core":
            return 0.0, np.zeros(0, np.uint32)
        count = int(self.index.element_count)
        cached = self._error
        if cached is None or cached[0] != count:
            # Carried forward in the core over the ids added since the last split: a few per write.
            # Ids of an insert still running are not covered until it returns; meanwhile they are
            # pending, so every query scores them exactly, and the next query asks again.
            bound, labels, covered = self.index.error_split(_EXEMPT)
            if 2 * bound > self.index.max_error:  # not worth scoring them on every query (f16 codes)
                bound, labels = self.index.max_error, labels[:0]
            self._error = cached = (covered, float(bound), labels.astype(np.int64))
        if not len(cached[2]):
            return cached[1], _NO_ROWS
        rows = self.row_of_label[cached[2]]
        return cached[1], rows[rows >= 0].astype(np.uint32)

    def holds(self, labels: list[int], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        """Per label, whether the graph holds `vectors[i]` (as far as its stored form can tell)."""
        if self.config.engine == "core":
            held: npt.NDArray[np.bool_] = self.index.holds(
                np.array(labels, np.uint32), np.ascontiguousarray(vectors, np.float32)
            )
            return held
        stored = np.asarray(self.index.get_items(labels), np.float32)
        same: npt.NDArray[np.bool_] = np.all(np.abs(_unit(stored) - _unit(vectors)) <= 1e-5, axis=1)
        return same

    def _reserve(self, extra: int) -> None:
        need = self.index.element_count + extra
        cap = self.index.get_max_elements()
        if need > cap:
            self.index.resize_index(max(need, 2 * cap))

    def add_many(self, ids: list[str], vectors: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]) -> None:
        """Adds (or re-adds under a fresh label) each id's vector at its row; zero vectors are skipped."""
        norms = np.linalg.norm(vectors, axis=1) if len(ids) else np.zeros(0)
        keep = [i for i in range(len(ids)) if norms[i] > 0]
        for node_id in ids:
            self.discard(node_id)
        if not keep:
            return
        self.persisted = None
        self.changes += len(keep)
        with self.lock:
            labels = np.arange(self.next_label, self.next_label + len(keep), dtype=np.int64)
            self.next_label += len(keep)
            self._reserve(len(keep))
            self._map_rows(labels)
            self.index.add_items(np.ascontiguousarray(vectors[keep]), labels)
        self.row_of_label[labels] = rows[keep]
        for label, i in zip(labels.tolist(), keep, strict=True):
            self.label_of[ids[i]] = label
            self.id_of[label] = ids[i]

    def _map_rows(self, labels: npt.NDArray[np.int64]) -> None:
        """Grows `row_of_label` to hold `labels` (a new array: readers keep the one they took)."""
        if self.next_label > len(self.row_of_label):
            grown = np.full(max(self.next_label, 2 * len(self.row_of_label)), -1, np.int64)
            grown[: len(self.row_of_label)] = self.row_of_label
            self.row_of_label = grown

    def stage(self, node_id: str) -> None:
        """`node_id` has a new vector: its old label is marked deleted and it waits in `pending`."""
        self.discard(node_id)
        self.changes += 1
        with self._pending_lock:
            self._token += 1
            self.pending[node_id] = self._token
            self.pending_version += 1

    def unstage(self, node_id: str) -> None:
        """`node_id` lost its vector or was removed: neither the graph nor `pending` holds it."""
        self.discard(node_id)
        with self._pending_lock:
            if self.pending.pop(node_id, None) is not None:
                self.pending_version += 1

    def rows_moved(self) -> None:
        """A swap-remove moved a row: cached pending rows must be looked up again."""
        self.pending_version += 1

    def take_pending(self, most: int) -> list[tuple[str, int]]:
        """Up to `most` pending ids with their tokens, oldest first."""
        with self._pending_lock:
            return list(itertools.islice(self.pending.items(), most))

    def insert(self, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
        """Adds `vectors` to the graph under fresh labels no query maps to a row yet (see `publish`)."""
        with self.lock:
            labels = np.arange(self.next_label, self.next_label + len(vectors), dtype=np.int64)
            self.next_label += len(vectors)
            self._reserve(len(vectors))
            self._map_rows(labels)  # before hnswlib can return them: a search must find them unmapped
            self.index.add_items(np.ascontiguousarray(vectors), labels, num_threads=1)
        return labels

    def publish(self, taken: list[tuple[str, int]], labels: npt.NDArray[np.int64], rows: list[int | None]) -> None:
        """Maps the labels `insert` gave to `taken` ids onto their current `rows`, for each id still
        pending with the same token; a label whose id was written again (or removed) meanwhile is
        marked deleted. Call where no write runs (the owner's shared lock)."""
        stale: list[int] = []
        with self._pending_lock:
            for (node_id, token), label, row in zip(taken, labels.tolist(), rows, strict=True):
                if row is None or self.pending.get(node_id) != token:
                    stale.append(label)
                    continue
                self.row_of_label[label] = row
                self.label_of[node_id] = label
                self.id_of[label] = node_id
                del self.pending[node_id]
            self.pending_version += 1
            self.persisted = None
        with self.lock:
            for label in stale:
                self.index.mark_deleted(label)
        self.reclaimable += len(stale)

    def moved(self, node_id: str, row: int) -> None:
        """The owning index moved `node_id` to `row` (swap-remove)."""
        label = self.label_of.get(node_id)
        if label is not None:
            self.row_of_label[label] = row

    def discard(self, node_id: str) -> None:
        label = self.label_of.pop(node_id, None)
        if label is not None:
            self.persisted = None
            self.changes += 1
            self.id_of.pop(label, None)
            self.row_of_label[label] = -1
            with self.lock:
                self.index.mark_deleted(label)
            self.reclaimable += 1

    def knn(
        self, queries: npt.NDArray[np.float32], k: int, ef: int | None = None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[Any]] | None:
        """Labels and cosine similarities (within `sim_error`) of the k nearest per query, or None if the
        engine cannot answer.
        `ef`: the search depth (None: `ef_search`; at least k either way)."""
        k = min(k, len(self))
        if k == 0:
            return None
        with self.lock:
            self.index.set_ef(max(self.ef_search if ef is None else ef, k))
            try:
                labels, distances = self.index.knn_query(queries, k=k)
            except RuntimeError:
                return None
        return labels, 1.0 - distances

    def remember(self, queries: npt.NDArray[np.float32], handed: bool) -> None:
        """Keeps an approximate query for the next calibration (`recent_queries`), and whether the
        certified path handed it over to the exact scan."""
        self._recent.append(queries)
        self.handovers.append(handed)

    def recent_queries(self) -> list[npt.NDArray[np.float32]]:
        """The last approximate queries answered, oldest first: samples of what this index is asked."""
        return list(self._recent)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vectors": int(self.index.element_count),
            "live": len(self),
            "reclaimable": self.reclaimable,
            "pending": len(self.pending),
        }
        return out | (self.calibration.stats() if self.calibration is not None else {"ef_search": self.ef_search})

    def needs_calibration(self) -> bool:
        """Never measured, a quarter of its rows changed since, or enough queries asked since to
        measure it on them when it was measured before any were asked or most were handed over to the
        exact scan (the queries asked are not like those it was measured on)."""
        if self.calibration is None or self.changes > max(len(self), 1) // 4:
            return True
        window = self.handovers
        return len(window) == _ASKED_WINDOW and (self.calibration.asked == 0 or 2 * sum(window) > len(window))


_RECENT_QUERIES = 128
"""Approximate queries an index keeps for its next calibration."""

_NO_ROWS = np.zeros(0, np.uint32)
_NO_ROWS.setflags(write=False)
"""No exempt rows (one array, shared read-only)."""

_EXEMPT = 64
"""Most rows `sim_error` exempts from its bound: each query scores them exactly."""

_ASKED_WINDOW = 64
"""Approximate queries after which an index is measured again on them: once after a measurement made
before any were asked, and whenever most of them were handed over to the exact scan."""

_BUILD_CHUNK = 16_384
"""Rows handed to the engine per call while building: progress is reported between calls."""


def build_rows(
    ids: list[str],
    matrix: npt.NDArray[np.float32],
    config: AnnConfig,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> VectorIndex | None:
    """An HNSW graph over `matrix` (row i is `ids[i]`); None when `cancelled()` turned true between chunks."""
    n = len(ids)
    ann = VectorIndex(matrix.shape[1], config, capacity=n, sample=_nonzero(matrix[:_SCALE_SAMPLE]))
    for start in range(0, n, _BUILD_CHUNK):
        if cancelled is not None and cancelled():
            return None
        stop = min(n, start + _BUILD_CHUNK)
        ann.add_many(ids[start:stop], matrix[start:stop], np.arange(start, stop, dtype=np.int64))
        if progress is not None:
            progress(stop, n)
    return ann


def replay(
    ann: VectorIndex, changed: set[str], current: tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]
) -> None:
    """Marks `changed` ids deleted in `ann` and re-adds those still held, from `current` (`TypeColumns.current`:
    ids, vectors, rows). The rows may go stale afterwards; `catch_up` fixes every row again."""
    present, vectors, rows = current
    for node_id in changed.difference(present):
        ann.discard(node_id)
    ann.add_many(present, vectors, rows)


def _nonzero(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return rows[np.linalg.norm(rows, axis=1) > 0] if len(rows) else rows


def _unit(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    v = vectors.astype(np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)
