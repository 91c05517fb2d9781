"""Derived scoring state shared by the built-in backends.

A `TypeIndex` holds, for one node type, what a scan needs as contiguous numpy
columns: the embedding matrix (zero rows for nodes without one), cached row
norms, and the metadata columns the default value function reads. Backends keep
it in step with their writes; it is derived data and can always be rebuilt.
`find_candidates` implements the DESIGN §3 query on top of it.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ValidationError
from ..graph.model import Node, NodeMetadata, NodeType, as_node_types
from ..graph.value import ResolvedConfig, TypeParams, ValueFunctionConfig, resolve_config
from . import vector_index as ann_module
from .checks import Embedding, Progress, as_datetime, as_embedding, check_progress, utcnow
from .vector_index import AnnConfig, AnnIndex

__all__ = [
    "META_COLUMNS",
    "SharedLock",
    "TypeIndex",
    "TypeSnapshot",
    "build_vector_indexes",
    "find_candidates",
    "meta_columns",
    "prepare_queries",
    "retire",
    "stop_background_builds",
]

Hydrate = Callable[[list[str]], Mapping[str, tuple[Node, NodeMetadata | None]]]

_RANK_MERGE_MAX = 4096
"""New rows merged into the tie-break order incrementally; more trigger one full sort."""

F64 = npt.NDArray[np.float64]
MetaArrays = tuple[npt.NDArray[np.uint8], F64, F64, F64, F64]
META_COLUMNS = ("has_meta", "timestamp", "access_count", "reward_count", "cumulative_reward")


def meta_columns(meta: NodeMetadata | None) -> tuple[int, float, float, float, float]:
    """The metadata of one node as the value function's numeric columns."""
    if meta is None:
        return (0, 0.0, 0.0, 0.0, 0.0)
    return (
        1,
        meta.reference_time.timestamp(),
        float(meta.access_count),
        float(meta.reward_count),
        meta.cumulative_reward,
    )


@dataclass
class _UsageOrder:
    """Rows sorted by their time-independent usage bound (`_core.usage_order`), for the certified ANN walk.

    Writes do not re-sort: they append the rows they touch to `stale`, which
    the walk checks on their current metadata. Past `_STALE_MAX` of them the
    next query merges them in (one pass in Rust); past a sixteenth of the
    type, it sorts afresh.
    """

    params: tuple[float, float, float, float]
    rows: npt.NDArray[np.uint32]
    keys: npt.NDArray[np.float64]
    stale: list[int] = dataclasses.field(default_factory=list)


_STALE_MAX = 1024

_CATCH_UP_ROUNDS = 8
_CATCH_UP_UNDER_LOCK = 1024
"""A background build replays writes made meanwhile in rounds without the lock while more than this many
ids changed, so the final replay, which holds the backend's lock, stays short."""


@dataclass(frozen=True)
class TypeSnapshot:
    """A copy of one type's scoring columns, for maintenance passes."""

    ids: list[str]
    matrix: npt.NDArray[np.float32]
    norms: npt.NDArray[np.float32]
    columns: dict[str, npt.NDArray[Any]]


class SharedLock(Protocol):
    """The owning backend's lock over its type indexes: readers share it, writers hold it alone."""

    def read(self) -> AbstractContextManager[None]: ...


class TypeIndex:
    """Rows of one node type, in insertion order with swap-remove on delete.

    With an `AnnConfig`, a type holding more than `min_nodes` rows answers
    non-exact queries from an HNSW candidate pool (built on first use, kept in
    step with every write, certified by `ann.certified_scan`).

    `lock` is the backend's lock under which it calls this index (reads
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
        load_saved: Callable[[TypeIndex, threading.Event], bool] | None = None,
    ) -> None:
        self.ann_config = ann_config
        self.ann: AnnIndex | None = None
        self._lock = lock
        self._load_saved = load_saved
        """A background build first offers the backend to adopt a saved index (True: it did)."""
        self._ann_build = threading.Lock()
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
            name: np.zeros(0, np.uint8 if name == "has_meta" else np.float64) for name in META_COLUMNS
        }
        self._rank: npt.NDArray[np.uint32] | None = None
        self._sorted: list[str] | None = None
        self._order: _UsageOrder | None = None

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

    def _ensure_dim(self, dim: int) -> None:
        if self.dim == dim:
            return
        if self.dim != 0:
            raise ValidationError(f"embedding dimension {dim} does not match the index dimension {self.dim}")
        self.dim = dim
        self._mat = np.zeros((self._norms.shape[0], dim), np.float32)

    def upsert(self, node_id: str, embedding: Embedding | None, meta: NodeMetadata | None) -> None:
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
        self.set_meta(node_id, meta)

    def current(self, ids: Iterable[str]) -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Those of `ids` this index holds, in row order, with a copy of their vectors and their rows."""
        held = sorted((i for i in ids if i in self.row), key=self.row.__getitem__)
        rows = np.array([self.row[i] for i in held], np.int64)
        return held, self.matrix()[rows], rows

    def _note_change(self, node_id: str) -> None:
        changed = self._changed  # a background build may drop the set at any moment
        if changed is not None:
            changed.add(node_id)

    def set_meta(self, node_id: str, meta: NodeMetadata | None) -> None:
        r = self.row.get(node_id)
        if r is None:
            return
        for name, value in zip(META_COLUMNS, meta_columns(meta), strict=True):
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

    def snapshot(self) -> TypeSnapshot:
        return TypeSnapshot(
            list(self.ids),
            self.matrix().copy(),
            self.norms().copy(),
            {name: self.column(name).copy() for name in META_COLUMNS},
        )

    def column(self, name: str) -> npt.NDArray[Any]:
        return self._cols[name][: len(self.ids)]

    def _ann_for(self, cfg: ResolvedConfig, exact: bool) -> AnnIndex | None:
        """The HNSW index to draw candidates from, building it on first use; None for the exact scan."""
        bounded = cfg.is_default or getattr(cfg.function, "bounded_by_relevance", False) is True
        if exact or not bounded or not self.wants_vector_index():
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
            built = ann_module.build_rows(ids, matrix, config, cancelled=cancel.is_set)
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
                ann_module.replay(built, changed, current)  # hnswlib's work, with no lock held
            with lock.read(), self._ann_build:  # no write runs: the copy plus `_changed` is the current state
                if not cancel.is_set() and self.ann is None and not self._builds_closed:
                    self.ann = ann_module.catch_up(self, built, self._changed or set())
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
            self.ann = ann_module.build(self, self.ann_config, progress)
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
        self.ann = ann_module.build(self, self.ann_config)
        return True

    def _meta(self) -> MetaArrays:
        """The metadata columns in `META_COLUMNS` order, typed for the Rust core."""
        return (
            self.column("has_meta"),
            self.column("timestamp"),
            self.column("access_count"),
            self.column("reward_count"),
            self.column("cumulative_reward"),
        )

    def _usage_order(self, tp: TypeParams) -> _UsageOrder:
        """The usage order for `tp`'s parameters, sorted afresh when missing, for other parameters, or too stale."""
        params = (tp.lam, tp.k, tp.base_floor, tp.beta)
        order = self._order
        # Readers may run this concurrently: each builds a new object, none is changed in place.
        if order is None or order.params != params or len(order.stale) > len(self.ids) // 16:
            order = self._order = _UsageOrder(params, *_core.usage_order(*self._meta(), *params))
        elif len(order.stale) > _STALE_MAX:
            stale = np.array(order.stale, np.uint32)
            order = self._order = _UsageOrder(
                params, *_core.merge_usage_order(order.rows, order.keys, stale, *self._meta(), *params)
            )
        return order

    def _walk(
        self, queries: npt.NDArray[np.float32], cfg: ResolvedConfig, tp: TypeParams, now: datetime, hydrate: Hydrate
    ) -> ann_module.Walk:
        """How `certified_scan` finishes a pool: in Rust for the default value function, else in Python."""
        if not cfg.is_default:

            def bounded(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> list[tuple[int, float]] | None:
                # The function never exceeds relevance: rows outside the pool stay below `bound`.
                picked, scores = self._score(pool.astype(np.int64), queries, cfg, tp, now, hydrate)
                cutoff = float(scores[tp.top_k - 1]) if len(picked) >= tp.top_k else tp.threshold
                if bound >= cutoff:
                    return None
                return list(zip(picked.tolist(), scores.tolist(), strict=True))

            return bounded

        def walk(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> list[tuple[int, float]] | None:
            order = self._usage_order(tp)
            got = _core.certified_walk(
                self.matrix(),
                self.norms(),
                queries,
                *self._meta(),
                self.rank(),
                now.timestamp(),
                tp.lam,
                tp.k,
                tp.base_floor,
                tp.beta,
                tp.threshold,
                tp.gate,
                tp.top_k,
                pool,
                bound,
                order.rows,
                order.keys,
                np.array(order.stale, np.uint32),
                budget,
            )
            if got is None:
                return None
            return list(zip(got[0].tolist(), got[1].tolist(), strict=True))

        return walk

    def _score(
        self,
        rows: npt.NDArray[np.int64] | None,
        queries: npt.NDArray[np.float32],
        cfg: ResolvedConfig,
        tp: TypeParams,
        now: datetime,
        hydrate: Hydrate,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Best rows (all, or the subset `rows`) by exact score, best first."""

        def take(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
            return arr if rows is None else np.ascontiguousarray(arr[rows])

        mat, norms, rank = take(self.matrix()), take(self.norms()), take(self.rank())
        if cfg.is_default:
            idx, scores = _core.scan_default(
                mat,
                norms,
                queries,
                has_meta=take(self.column("has_meta")),
                timestamp=take(self.column("timestamp")),
                access_count=take(self.column("access_count")),
                reward_count=take(self.column("reward_count")),
                cumulative_reward=take(self.column("cumulative_reward")),
                rank=rank,
                now=now.timestamp(),
                lambda_=tp.lam,
                k=tp.k,
                base_floor=tp.base_floor,
                beta=tp.beta,
                threshold=tp.threshold,
                gate=tp.gate,
                top_k=tp.top_k,
            )
        else:
            ids = self.ids if rows is None else [self.ids[r] for r in rows.tolist()]
            rel = _core.relevance(mat, norms, queries)
            loaded = hydrate(list(ids))
            params = {**tp.raw, "now": now}
            values = np.full(len(ids), np.nan, np.float64)
            for r, node_id in enumerate(ids):
                got = loaded.get(node_id)
                if got is not None:
                    values[r] = float(cfg.function.score(float(rel[r]), got[0], got[1], params))
            least = tp.threshold
            if tp.gate == "relevance":
                values[rel.astype(np.float64) < tp.threshold] = np.nan  # NaN is never selected
                least = -np.inf
            idx = _core.select_top(values, least, tp.top_k, rank)
            scores = values[idx]
        return (idx if rows is None else rows[idx]), scores

    def scan(
        self,
        queries: npt.NDArray[np.float32],
        cfg: ResolvedConfig,
        tp: TypeParams,
        now: datetime,
        hydrate: Hydrate,
        exact: bool = True,
    ) -> list[tuple[str, float]]:
        """Ids and scores of the best rows, best first (ties by id)."""
        if not self.ids or tp.top_k == 0:
            return []
        if queries.shape[0] and self.dim == 0:
            queries = np.zeros((0, 0), np.float32)
        ann = self._ann_for(cfg, exact)
        if ann is not None:
            got = ann_module.certified_scan(
                self, ann, queries, tp.top_k, tp.threshold, self._walk(queries, cfg, tp, now, hydrate)
            )
            if got is not None:
                return [(self.ids[r], s) for r, s in got]
        idx, scores = self._score(None, queries, cfg, tp, now, hydrate)
        return [(self.ids[i], float(s)) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]


def stop_background_builds(
    indexes: Iterable[TypeIndex], retired: Iterable[threading.Thread] = (), timeout: float = 60.0
) -> None:
    """Stops background builds for good and waits for them and for `retired` ones (cancelled earlier).

    Call holding none of the backend's locks: a builder may be waiting for one to publish.
    """
    for thread in retire(indexes, retired):
        thread.join(timeout)


def retire(indexes: Iterable[TypeIndex], retired: Iterable[threading.Thread] = ()) -> list[threading.Thread]:
    """Stops the builds of type indexes a cache replaces; their threads plus those of `retired` still
    running, for the backend's close to join."""
    stopped = [t for t in (index.close_background_builds() for index in indexes) if t is not None]
    return [t for t in retired if t.is_alive()] + stopped


def prepare_queries(query: object, tags: Iterable[object], dim: int | None) -> npt.NDArray[np.float32]:
    """The query and tag vectors as one `m × dim` matrix, validated."""
    vectors = [as_embedding(query, "query")]
    if isinstance(tags, np.ndarray) and tags.ndim == 2:
        tags = list(tags)
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise ValidationError(f"tags must be a collection of vectors (pass () for none), got {type(tags).__name__}")
    vectors += [as_embedding(t, f"tag vector {i}") for i, t in enumerate(tags)]
    width = vectors[0].shape[0]
    for i, v in enumerate(vectors):
        expected = dim or width
        if v.shape[0] != expected:
            what = "query" if i == 0 else f"tag vector {i - 1}"
            raise ValidationError(f"{what} has dimension {v.shape[0]}, the store holds dimension {expected}")
    return np.ascontiguousarray(np.stack(vectors))


def build_vector_indexes(indexes: Mapping[NodeType, TypeIndex], types: object, progress: Progress | None) -> list[str]:
    """Builds the HNSW index of every requested type (None: all) that uses one and lacks it; the types built."""
    progress = check_progress(progress)
    built: list[str] = []
    for node_type in list(NodeType) if types is None else as_node_types(types):

        def report(done: int, total: int, phase: str = f"vector index {node_type.value}") -> None:
            if progress is not None:
                progress(phase, done, total)

        if indexes[node_type].build_vector_index(report):
            built.append(node_type.value)
    return built


def find_candidates(
    indexes: Mapping[NodeType, TypeIndex],
    types: Sequence[NodeType | str],
    query: object,
    tags: Iterable[object],
    value_function: ValueFunctionConfig | Mapping[str, Any] | None,
    now: datetime | None,
    dim: int | None,
    hydrate: Hydrate,
    *,
    exact: bool = True,
) -> list[tuple[Node, float]]:
    """The DESIGN §3 query over a backend's type indexes.

    `hydrate` loads nodes (and metadata) for ids; an id it cannot load is
    skipped and does not count toward top_k (the type is scanned again for
    more), so a stale index can never surface a node the store lost.
    """
    wanted = as_node_types(types)
    queries = prepare_queries(query, tags, dim)
    when = utcnow() if now is None else as_datetime(now, "now")
    cfg = resolve_config(value_function)
    out: list[tuple[Node, float]] = []
    seen: set[str] = set()
    for node_type in wanted:
        index = indexes.get(node_type)
        if index is None:
            continue
        tp = cfg.params[node_type]
        ask = tp.top_k
        while True:
            scanned = index.scan(queries, cfg, dataclasses.replace(tp, top_k=ask), when, hydrate, exact)
            picked = [(i, s) for i, s in scanned if i not in seen]
            loaded = hydrate([i for i, _ in picked])
            live = [(loaded[i][0], s) for i, s in picked if i in loaded]
            if len(live) == len(picked) or len(scanned) < ask:
                break
            ask += len(picked) - len(live)
        for node, score in live[: tp.top_k]:
            seen.add(node.id)
            out.append((node, score))
    return out
