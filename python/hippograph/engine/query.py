"""The query over one type's scoring columns: relevance, value, gate, top-k; exact or certified.

`scan` answers with the best rows of a `TypeColumns` for a set of query
vectors. The default value function runs in Rust (`_core.scan_default`); a
custom one is handed in as `RowValues`. Where the type has a vector index and
the value function never exceeds relevance, `certified_scan` draws candidate
pools from it and finishes them exactly (`_core.certified_walk`); anything it
cannot certify falls back to the exact scan. docs/architecture.md explains
why the certified answer equals the exact one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ValidationError
from . import routes
from .calibration import Calibration
from .checks import as_embedding
from .columns import TypeColumns
from .usage_order import UsageOrder, keys_at, regions_at, stale_at
from .vector_index import VectorIndex

__all__ = [
    "COSINE",
    "GATES",
    "Gate",
    "RowValues",
    "ScanParams",
    "Walk",
    "calibrate",
    "certified_scan",
    "prepare_queries",
    "scan",
]

Gate = Literal["score", "relevance"]
GATES: tuple[Gate, ...] = ("score", "relevance")

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
Hits = tuple[list[int], list[float]]
"""Rows and their exact scores, best first (two lists, as the core hands them back)."""

RowValues = Callable[[list[str], F32], F64]
"""A custom value function over rows: ``values(ids, relevance)`` → one value per row (NaN: leave the row out)."""

Walk = Callable[[npt.NDArray[np.uint32], float, int], "Hits | None"]
"""(pool rows, relevance bound of every other row, scoring budget) → the exact top rows, or None past
the budget. The pool may repeat rows and hold rows past the last (labels no row holds): they are
ignored."""

Searched = Callable[[VectorIndex, int | None, int, float, npt.NDArray[np.uint32], float], tuple[float, "Hits | None"]]
"""(index, search depth or None for its own, first pool per query vector, similarity error, rows the
search cannot bound, floor) → `certified_scan`'s similarity rounds and walks in one step of the core
(`_core.Hnsw.similarity_walk`): the first round's largest similarity and the certified rows, or None.
"""

Valued = Callable[[F32, int, float, npt.NDArray[np.uint32], float], tuple[float, "Hits | None"]]
"""(queries, search depth, similarity error, rows the search cannot bound, floor) → the largest
similarity a value-weighted search found, and the exact top rows certified from its pool (and those
rows), or None when they are not certified or that similarity is below the floor
(`_core.Hnsw.valued_walk`)."""


@dataclass(frozen=True)
class ScanParams:
    """What one type's query selects with: threshold (compared as `gate` says), top_k, and the default
    value function's lambda (per hour), k, base_floor and beta."""

    threshold: float
    top_k: int
    gate: Gate
    lam: float
    k: float
    base_floor: float
    beta: float

    @cached_property
    def core_params(self) -> _core.ValueParams:
        """The value function's params as the Rust core takes them, built once per resolved config."""
        return _core.ValueParams(self.lam, self.k, self.base_floor, self.beta)

    @cached_property
    def core_selection(self) -> _core.Selection:
        """Threshold, gate and top_k as the Rust core takes them, built once per resolved config."""
        return _core.Selection(self.threshold, self.gate, self.top_k)


COSINE = ScanParams(threshold=float(np.nextafter(0.0, 1.0)), top_k=1, gate="relevance", lam=0.0, k=1.0,
                    base_floor=1.0, beta=0.0)  # fmt: skip
"""Relevance alone: rows without usage metadata score their cosine, and only those above 0 count."""


def _vector(value: object, what: str) -> F32:
    """`value` as a query vector: a 1-D float32 array is taken as it is (checked for NaN and
    infinities once stacked, in `prepare_queries`), anything else through `as_embedding`."""
    if type(value) is np.ndarray and value.dtype == np.float32 and value.ndim == 1 and value.size:
        return value
    return as_embedding(value, what)


def prepare_queries(query: object, tags: Iterable[object], dim: int | None) -> F32:
    """The query and tag vectors as one `m × dim` matrix, validated."""
    if type(tags) in (tuple, list) and not tags:  # the common call: a query alone, as a view of it
        first = np.ascontiguousarray(_vector(query, "query"))
        if dim and first.shape[0] != dim:
            raise ValidationError(f"query has dimension {first.shape[0]}, the store holds dimension {dim}")
        if not math.isfinite(_core.vector_norm(first)):  # only NaN and infinities make it so (summed in f64)
            as_embedding(first, "query")  # refused as `as_embedding` words it
        return first[None, :]
    vectors = [_vector(query, "query")]
    if isinstance(tags, np.ndarray) and tags.ndim == 2:
        width = vectors[0].shape[0]
        if tags.dtype == np.float32 and width == (dim or width) and (tags.shape[1] == width or not len(tags)):
            matrix = np.concatenate([vectors[0][None, :], tags.reshape(len(tags), width)])  # one copy
            if math.isfinite(_core.vector_norm(matrix.reshape(-1))):
                return matrix
        tags = list(tags)
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise ValidationError(f"tags must be a collection of vectors (pass () for none), got {type(tags).__name__}")
    vectors += [_vector(t, f"tag vector {i}") for i, t in enumerate(tags)]
    width = vectors[0].shape[0]
    for i, v in enumerate(vectors):
        expected = dim or width
        if v.shape[0] != expected:
            what = "query" if i == 0 else f"tag vector {i - 1}"
            raise ValidationError(f"{what} has dimension {v.shape[0]}, the store holds dimension {expected}")
    matrix = np.stack(vectors)
    if not np.isfinite(matrix).all():
        for i, v in enumerate(vectors):  # the first vector at fault, refused as `as_embedding` words it
            as_embedding(v, "query" if i == 0 else f"tag vector {i - 1}")
    return matrix


def scan(
    columns: TypeColumns,
    queries: F32,
    params: ScanParams,
    now: float,
    values: RowValues | None = None,
    *,
    approximate: bool = False,
    route: list[str] | None = None,
) -> list[tuple[str, float]]:
    """Ids and scores of the best rows, best first (ties by id).

    `now`: unix seconds. `values`: a custom value function (None: the default, in Rust).
    `approximate`: candidates may come from the vector index (the value function never exceeds
    relevance); the answer is still certified exact up to the HNSW graph's neighbour recall.
    `route`: receives the path that answered (`hippograph.engine.routes`), when given.
    """
    if not columns.ids or params.top_k == 0:
        return []
    if queries.shape[0] and columns.dim == 0:
        queries = np.zeros((0, 0), np.float32)
    ann = columns.vector_index_for(approximate)
    if ann is not None and columns.regions is None:
        columns.want_regions()
    if approximate and (ann is None or ann.needs_calibration()) and columns.wants_vector_index():
        # Measured off the query path (once the index is published); until then, answered as before.
        columns.request_calibration(lambda index, hold: calibrate(columns, index, params, now, hold))
    if ann is not None and ann.calibration is not None and ann.calibration.usable:
        walk, searched = _walk(columns, queries, params, now, values)
        floor = ann.calibration.min_similarity
        valued = _valued(columns, ann, params, now, values) if ann.calibration.valued else None
        got = certified_scan(
            columns, ann, queries, params.top_k, params.threshold, walk, floor=floor, valued=valued, searched=searched
        )
        ann.remember(queries.copy(), got is None)  # a copy: the caller's array may change after the call
        if got is not None:
            if route is not None:
                route.append(routes.CERTIFIED)
            return list(zip(map(columns.ids.__getitem__, got[0]), got[1], strict=True))
        if route is not None:
            route.append(routes.UNCERTIFIED)
    elif route is not None:
        route.append(routes.exact_reason(columns, ann) if approximate else routes.EXACT)
    idx, scores = _score(columns, None, queries, params, now, values)
    return list(zip(map(columns.ids.__getitem__, idx.tolist()), scores.tolist(), strict=True))


def certified_scan(
    columns: TypeColumns,
    ann: VectorIndex,
    queries: F32,
    top_k: int,
    threshold: float,
    walk: Walk,
    *,
    floor: float = -np.inf,
    tops: list[float] | None = None,
    ef: int | None = None,
    valued: Valued | None = None,
    searched: Searched | None = None,
) -> Hits | None:
    """Top rows by exact score from vector-index candidate pools, or None when the exact scan must answer.

    A row outside the pool has relevance at most `bound`, the smallest
    similarity the index returned per query vector (maximised over them);
    rows written since the graph last absorbed them are always in the pool.
    `walk` scores the pool and every other row whose value could still reach
    the k-th best under that bound. Past an eighth of the type a deeper pool
    is cheaper; past a quarter the exact scan is. When too few rows score
    above zero while the threshold admits zero, the remaining slots belong to
    zero-score rows in id order, which only the exact scan enumerates: None.
    A query whose nearest indexed vector is less similar than `floor` (no
    query vector lands near the data, where a graph search misses
    neighbours) goes to the exact scan as well; `tops` receives that
    similarity, for calibration to choose `floor`. `ef`: the search depth to measure (None: the
    index's own), passed per call so queries answered meanwhile keep the depth last chosen.

    `valued` (the default value function on the core's index) first searches by score itself: its
    pool holds the rows of largest relevance × value, and when its bound on every other row's
    score lies below the k-th score found, the pool is the answer with no walk at all. Otherwise
    the similarity search and its walk below decide (`searched`: the rounds in one call of the core).
    """
    n = len(columns.ids)
    pending = columns.pending_rows(ann)  # before the search: see `TypeColumns.pending_rows`
    # The engine's similarities lie within `error` of the exact cosine, except on the exempt rows,
    # which every pool holds (float noise between hnswlib's and the core's cosine is far below 1e-6).
    error, exempt = ann.sim_error()
    pending = np.concatenate([pending.astype(np.uint32), exempt]) if len(exempt) else pending
    if valued is not None:
        depth = max(ann.ef_search if ef is None else ef, 2 * top_k)
        top, got = valued(queries, depth, error, pending.astype(np.uint32, copy=False), floor)
        if tops is not None:
            tops.append(top)
        if top < floor:
            return None
        if got is not None:
            return None if len(got[0]) < top_k and threshold <= 0.0 else got
    # Per query vector: the walk makes a deeper first pool rarely worth its search cost. With tags
    # the answer is shared among the vectors: half as deep each, for searches that cost about as
    # much per vector as they are deep, and the walk finishes the rest.
    first = pool = max(top_k, 16) if len(queries) == 1 else max(top_k // 2, 8)
    if searched is not None and ann.config.engine == "core":  # the rounds below, in one step of the core
        top, got = searched(ann, ef, first, error, pending.astype(np.uint32, copy=False), -np.inf if valued else floor)
        if tops is not None and valued is None and top > -np.inf:
            tops.append(top)
        return None if got is None or (len(got[0]) < top_k and threshold <= 0.0) else got
    while True:
        found = ann.knn(queries, pool, ef)
        if found is None:
            return None
        labels, sims = found
        if pool == first and valued is None:
            top = float(sims[:, 0].max())
            if tops is not None:
                tops.append(top)
            if top < floor:
                return None
        exhausted = labels.shape[1] >= len(ann)
        # A label no row holds maps to -1, past every row as uint32: the walk ignores such rows and repeats.
        hits = ann.row_of_label[labels.ravel()]
        rows = (np.concatenate([hits, pending]) if len(pending) else hits).astype(np.uint32)
        bound = 0.0 if exhausted else max(0.0, float(sims[:, -1].max()) + error) + 1e-6
        got = walk(rows, bound, max(n // 8, 1))
        if got is not None:
            return None if len(got[0]) < top_k and threshold <= 0.0 else got
        if exhausted or 4 * pool > n // 4:
            return None
        pool *= 4


def _walk(
    columns: TypeColumns, queries: F32, params: ScanParams, now: float, values: RowValues | None
) -> tuple[Walk, Searched | None]:
    """How `certified_scan` finishes a pool: in Rust for the default value function, else in Python;
    and for the default function, the similarity rounds with their walks in one step of the core."""
    if values is not None:

        def bounded(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> Hits | None:
            # The function never exceeds relevance: rows outside the pool stay below `bound`,
            # and under either gate a row passes only with a value (or relevance) >= threshold.
            rows = np.unique(pool[pool < len(columns.ids)]).astype(np.int64)  # as the Rust walk takes a pool
            picked, scores = _score(columns, rows, queries, params, now, values)
            cutoff = float(scores[params.top_k - 1]) if len(picked) >= params.top_k else params.threshold
            if bound >= cutoff:
                return None
            return picked.tolist(), scores.tolist()

        return bounded, None

    regions = columns.regions
    bounds: list[F64] = []  # the regions' bounds for these queries, taken by the first walk that reads them

    def ordered(regioned: bool) -> tuple[UsageOrder, tuple[Any, ...] | None]:
        """The usage order, and with `regioned` the regions as the walk takes them."""
        order = columns.usage_order(params.core_params)
        if regions is None or not regioned:
            return order, None
        if not bounds:
            bounds.append(regions.bounds(queries))
        return order, (regions.of_row, bounds[0], regions_at(order, regions))

    def walk(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> Hits | None:
        order, in_regions = ordered(budget > 0)  # a walk without budget only checks the pool
        rows, shadow = columns.scanned()
        got = _core.certified_walk(
            rows, columns.norms(), queries, columns.usage(), columns.rank(), now, params.core_params,
            params.core_selection, pool, bound, order.rows, order.keys, stale_at(order), budget, in_regions, shadow,
        )  # fmt: skip
        if got is None:
            return None
        return got[0].tolist(), got[1].tolist()

    def searched(
        ann: VectorIndex, ef: int | None, first: int, error: float, pending: npt.NDArray[np.uint32], floor: float
    ) -> tuple[float, Hits | None]:
        order, in_regions = ordered(True)
        rows, shadow = columns.scanned()
        depth = ann.ef_search if ef is None else ef
        return ann.index.similarity_walk(  # type: ignore[no-any-return]
            queries, depth, first, error, ann.row_of_label, len(ann), floor, rows, columns.norms(), columns.usage(),
            columns.rank(), now, params.core_params, params.core_selection, pending, order.rows, order.keys,
            stale_at(order), in_regions, shadow,
        )  # fmt: skip

    return walk, searched


def _valued(
    columns: TypeColumns, ann: VectorIndex, params: ScanParams, now: float, values: RowValues | None
) -> Valued | None:
    """The value-weighted search of the core's index under the default value function (None for a
    custom function, whose values only Python knows, or another engine)."""
    if values is not None or ann.config.engine != "core":
        return None
    usage = columns.usage()
    order = columns.usage_order(params.core_params)
    # The largest value factor now among the rows the order holds current (rows without metadata:
    # one); the core adds the stale rows' and scales the codes' error by it.
    most = float(order.keys[0]) - params.core_params.lambda_ * now / 3600.0 if len(order.keys) else 0.0
    ceiling = 1.0 if most >= 0 else math.exp(most)
    keys, stale = keys_at(order), stale_at(order)

    def valued(
        queries: F32, depth: int, error: float, pending: npt.NDArray[np.uint32], floor: float
    ) -> tuple[float, Hits | None]:
        rows, shadow = columns.scanned()
        top, got = ann.index.valued_walk(
            queries,
            depth,
            ceiling * VALUED_CEILING,
            error,
            ann.row_of_label,
            len(ann),
            keys,
            stale,
            ceiling,
            floor,
            rows,
            columns.norms(),
            usage,
            columns.rank(),
            now,
            params.core_params,
            params.core_selection,
            pending,
            order.rows,
            order.keys,
            stale,
            shadow,
        )
        return top, got

    return valued


VALUED_CEILING = 0.0
"""How far past the products the value-weighted search explores, as a share of the largest value
factor (`_core.Hnsw.search_weighted`'s ceiling): at zero the products alone lead it, which on
clustered data with aged usage found the same answers at a third less search time than exploring
every node that could reach the answer at the largest factor; calibration deepens the search
where they do not."""


def _score(
    columns: TypeColumns,
    rows: npt.NDArray[np.int64] | None,
    queries: F32,
    params: ScanParams,
    now: float,
    values: RowValues | None,
) -> tuple[npt.NDArray[np.int64], F64]:
    """Best rows (all, or the subset `rows`) by exact score, best first."""

    def take(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return arr if rows is None else np.ascontiguousarray(arr[rows])

    scanned, whole_shadow = columns.scanned()
    mat, norms, rank = take(scanned), take(columns.norms()), take(columns.rank())
    if values is None:
        usage = columns.usage() if rows is None else _core.UsageColumns(*(take(c) for c in columns.usage_arrays()))
        # A whole type is read through its shadow (the same answer, about half the bytes); a subset
        # of rows is gathered already and read as it is.
        shadow = whole_shadow if rows is None else None
        idx, scores = _core.scan_default(
            mat, norms, queries, usage, rank, now, params.core_params, params.core_selection, shadow
        )
    else:
        ids = columns.ids if rows is None else [columns.ids[r] for r in rows.tolist()]
        rel = _core.relevance(mat, norms, queries)
        got = np.asarray(values(list(ids), rel), np.float64)
        least = params.threshold
        if params.gate == "relevance":
            got[rel.astype(np.float64) < params.threshold] = np.nan  # NaN is never selected
            least = -np.inf
        idx = _core.select_top(got, least, params.top_k, rank)
        scores = got[idx]
    return (idx if rows is None else rows[idx]), scores


_NOISE = 0.2
"""Near samples are stored vectors moved by this fraction of their length in a random direction:
near the memories, as an agent's queries often are, without finding a row equal to the query."""

_SPREAD_ROWS = 4096
"""Rows the spread samples' per-dimension mean and deviation are estimated from."""


def _sample_queries(columns: TypeColumns, ann: VectorIndex, count: int) -> dict[str, list[F32]]:
    """Calibration queries by kind, each a ``1 × dim`` matrix.

    ``near``: stored vectors moved a little (`_NOISE`). ``spread``: drawn from a Gaussian with the
    stored vectors' per-dimension mean and deviation, so they sit where the data does without being
    close to any one row: on unclustered data the hard case for a graph search. ``recent``: the
    last approximate queries this index answered, when there are enough of them.
    """
    embedded = np.flatnonzero(columns.norms() > 0)
    rng = np.random.default_rng(len(columns.ids))  # the same sample for the same rows: repeatable
    rows = rng.choice(embedded, size=min(count, len(embedded)), replace=False)
    base = columns.vectors(rows) / columns.norms()[rows, None]
    noise = rng.standard_normal(base.shape).astype(np.float32)
    noise *= _NOISE / np.maximum(np.linalg.norm(noise, axis=1, keepdims=True), 1e-12)
    fit = columns.vectors(rng.choice(embedded, size=min(_SPREAD_ROWS, len(embedded)), replace=False))
    spread = rng.normal(fit.mean(axis=0), fit.std(axis=0) + 1e-12, (len(rows), columns.dim)).astype(np.float32)
    kinds = {
        "near": [np.ascontiguousarray((base[i] + noise[i])[None, :], np.float32) for i in range(len(rows))],
        "spread": [np.ascontiguousarray(spread[i][None, :]) for i in range(len(rows))],
    }
    recent = ann.recent_queries()
    if len(recent) >= _RECENT_MIN:
        kinds["recent"] = recent[-count:]
    return kinds


_RECENT_MIN = 16
"""Real queries a calibration needs before it measures them as a kind of their own."""


@dataclass(frozen=True)
class Trial:
    """The certified path on one sample query: its recall of the exact answer (None: it handed the
    query over), seconds taken, and the similarity of the nearest indexed vector."""

    recall: float | None
    seconds: float
    top: float


Hold = Callable[[], AbstractContextManager[None]]
"""Takes the owner's shared lock (or nothing) around each step of a calibration."""


def _trials(
    columns: TypeColumns,
    ann: VectorIndex,
    samples: list[F32],
    truth: list[set[int]],
    params: ScanParams,
    now: float,
    hold: Hold,
    ef: int,
    weighted: bool,
) -> list[Trial]:
    out: list[Trial] = []
    for q, want in zip(samples, truth, strict=True):
        tops: list[float] = []
        with hold():
            start = time.perf_counter()
            walk, searched = _walk(columns, q, params, now, None)
            valued = _valued(columns, ann, params, now, None) if weighted else None
            got = certified_scan(
                columns,
                ann,
                q,
                params.top_k,
                params.threshold,
                walk,
                tops=tops,
                ef=ef,
                valued=valued,
                searched=searched,
            )
            seconds = time.perf_counter() - start
        recall = None if got is None else len(set(got[0]) & want) / len(want) if want else 1.0
        out.append(Trial(recall, seconds, tops[0] if tops else np.inf))
    return out


@dataclass(frozen=True)
class Routing:
    """What queries get when those whose nearest indexed vector is less similar than `floor` go to
    the exact scan: each kind's mean recall, the mean recall of the answers the index gives, the
    worst one, and the exact scan's median time over that of the queries the index takes."""

    floor: float
    kind_recalls: list[float]
    index_recall: float
    worst: float
    speedup: float
    cost: float
    """Seconds the queries like an agent's (near and recent ones) take, the exact scan answering
    what the index does not: spread ones must be answered well, but are not what to optimise for."""
    meets: bool
    """Every kind and the index's own answers reach the target, the index taking enough queries."""
    asked_speedup: float | None
    """`speedup` over the recent real queries, those the exact scan answers included (None: too few
    of them yet): an index that speeds up the samples but not what is asked is not worth keeping."""


_DEEPER_GAIN = 0.9
"""A deeper search is kept only if it cuts the sample's cost by a tenth: timing noise never decides."""

_DEPTH_STEPS = 8
"""Calibration narrows the depth it keeps to an eighth of it: closer than that, the sampled
recall's noise decides more than the depth."""

_CONFIDENCE = 1.645
"""Standard errors a kind's sampled mean recall must clear the target by (one-sided 95 %)."""

_MIN_SERVED = 0.25
"""The least share of the sample queries an index must take for it to be used at all."""


def _speedup(trials: list[Trial], exact_each: float, floor: float = -np.inf) -> float:
    """The exact scan's time over the expected time of `trials` under `floor`: medians per outcome
    (a stall on a busy machine decides nothing), weighted by how often each happens (the index
    answers, the certified path hands over after searching, the floor sends the query to the exact
    scan at once)."""
    if not trials:
        return 0.0
    answered = [t.seconds for t in trials if t.top >= floor and t.recall is not None]
    handed = [t.seconds + exact_each for t in trials if t.top >= floor and t.recall is None]
    routed = [exact_each for t in trials if t.top < floor]
    parts = (answered, handed, routed)
    expected = sum(len(part) * float(np.median(part)) for part in parts if part) / len(trials)
    return exact_each / expected if expected > 0 else 0.0


def route(
    trials: list[Trial], kinds: list[int], exact_each: float, target: float, costed: set[int], asked: int | None
) -> Routing:
    """The lowest `floor` at which every kind (by its mean less `_CONFIDENCE` standard errors) and the
    index's own answers meet `target` (as many queries as possible go to the index), taking at least
    `_MIN_SERVED` of them; when none does,
    the routing at the highest floor tried."""
    floors = sorted({t.top for t in trials} | {-np.inf})
    best: Routing | None = None
    for floor in floors:
        took = [t.top >= floor for t in trials]
        if best is not None and sum(took) < _MIN_SERVED * len(trials):
            break
        served = [t for t, on in zip(trials, took, strict=True) if on]
        got = [(1.0 if t.recall is None else t.recall) if on else 1.0 for t, on in zip(trials, took, strict=True)]
        per_kind = [np.array([g for g, k in zip(got, kinds, strict=True) if k == kind]) for kind in set(kinds)]
        kind_recalls = [float(r.mean()) for r in per_kind]
        # Each kind's mean less its sampling error: a target met by this sample is met by the stream too.
        assured = min(float(r.mean() - _CONFIDENCE * r.std() / np.sqrt(len(r))) for r in per_kind)
        own = [1.0 if t.recall is None else t.recall for t in served]
        index_recall = float(np.mean(own)) if own else 1.0
        cost = sum(
            (t.seconds + (exact_each if t.recall is None else 0.0)) if on else exact_each
            for t, on, kind in zip(trials, took, kinds, strict=True)
            if kind in costed
        )
        speedup = _speedup(served, exact_each)
        real = None if asked is None else [t for t, k in zip(trials, kinds, strict=True) if k == asked]
        asked_speedup = None if real is None else _speedup(real, exact_each, floor)
        meets = sum(took) >= _MIN_SERVED * len(trials) and assured >= target and index_recall >= target
        worst = min(own, default=1.0)
        best = Routing(floor, kind_recalls, index_recall, worst, speedup, cost, meets, asked_speedup)
        if meets:
            return best
    assert best is not None
    return best


def calibrate(
    columns: TypeColumns, ann: VectorIndex, params: ScanParams, now: float, hold: Hold = nullcontext
) -> Calibration:
    """Measures the approximate path against the exact one; picks `ann`'s ``ef_search`` and the
    similarity below which queries go to the exact scan.

    Each kind of sample query (`_sample_queries`) is scored with `params` (the default value
    function) both ways. At each ``ef_search`` (growing by half from the configured value up to
    ``max_ef_search``) `route` finds the lowest similarity floor at which every kind's mean
    recall, and that of the index's own answers, meets the target; the depth kept is the one whose
    routing costs the near and recent samples least. The estimate reported is the mean over the kinds, so a query
    stream of any one kind sits within half their spread of it. Sets and returns
    ``ann.calibration``. `hold` is taken around each step (writes may run between them: the rows
    may move a little under the measurement, never within one step).
    """
    config = ann.config
    with hold():
        kinds = _sample_queries(columns, ann, config.calibration_queries)
    samples = [q for qs in kinds.values() for q in qs]
    labels = [i for i, qs in enumerate(kinds.values()) for _ in qs]
    costed = {i for i, kind in enumerate(kinds) if kind != "spread"}
    asked = list(kinds).index("recent") if "recent" in kinds else None
    k = max(1, params.top_k)
    truth, exact_times = [], []
    for q in samples:
        with hold():
            start = time.perf_counter()
            truth.append(set(_score(columns, None, q, params, now, None)[0].tolist()))
            exact_times.append(time.perf_counter() - start)
    exact_each = float(np.median(exact_times)) if exact_times else 0.0

    def measure(ef: int, weighted: bool) -> Routing:
        trials = _trials(columns, ann, samples, truth, params, now, hold, ef, weighted)
        return route(trials, labels, exact_each, config.target_recall, costed, asked)

    def deepen(weighted: bool) -> tuple[int, Routing]:
        """The depth to keep (or the last one tried, when none meets the target) and its routing."""
        ef, most = config.ef_search, max(config.ef_search, config.max_ef_search)
        best: tuple[int, Routing] | None = None
        short = 0  # the deepest search found short of the target (0: none; the configured depth is the least)
        while True:
            routing = measure(ef, weighted)
            meets = routing.meets
            if meets and (best is None or routing.cost < _DEEPER_GAIN * best[1].cost):
                best = (ef, routing)
            elif best is not None:
                break  # deeper searches cost more than the queries they take from the exact scan
            if not meets:
                short = ef
            if ef >= most or (meets and routing.floor == -np.inf):
                break
            if not meets and 0 < routing.speedup < config.min_speedup:
                break  # already too slow short of the target: a deeper search only gets slower
            ef = min(ef + max(1, ef // 2), most)  # steps of half: a doubling overshoots the depth needed
        if best is None:
            return ef, routing
        # Between the deepest search short of the target and the first that met it lies up to a
        # third of the depth kept, and a search's time grows with its depth: halve that gap.
        while short and best[0] - short > max(2, best[0] // _DEPTH_STEPS):
            mid = (short + best[0]) // 2
            routing = measure(mid, weighted)
            if routing.meets and _DEEPER_GAIN * routing.cost <= best[1].cost:
                best = (mid, routing)
            else:
                short = mid
        return best

    # With and without the value-weighted pool: it wins where value varies and the graph reaches the
    # rows of most value; where it cannot (many rows of nearly equal relevance, their order set by
    # value), its answers miss the target or need a deep search, and the similarity path wins.
    weighted = _valued(columns, ann, params, now, None) is not None
    ef, routing = deepen(weighted)
    if weighted:
        plain = deepen(False)
        if plain[1].meets and (not routing.meets or plain[1].cost < routing.cost):
            (ef, routing), weighted = plain, False
    ann.ef_search = ef
    mean = float(np.mean(routing.kind_recalls))
    reason = None
    if not routing.meets:
        reason = f"mean recall@{k} {routing.index_recall:.3f} below the target {config.target_recall} at ef_search {ef}"
    elif routing.speedup < config.min_speedup:
        reason = (
            f"only {routing.speedup:.1f}x faster than the exact scan at the recall target (needs {config.min_speedup}x)"
        )
    elif routing.asked_speedup is not None and routing.asked_speedup < config.min_speedup:
        reason = (
            f"only {routing.asked_speedup:.1f}x faster than the exact scan on the queries asked recently"
            f" (needs {config.min_speedup}x): the index hands most of them over"
        )
    speedup = routing.speedup if routing.asked_speedup is None else min(routing.speedup, routing.asked_speedup)
    result = Calibration(
        ef, k, config.target_recall, config.min_speedup, mean if reason is None else 1.0,
        routing.worst if reason is None else 1.0, speedup, len(columns.ids), len(samples),
        reason is None, reason, float(routing.floor), routing.index_recall, len(kinds.get("recent", [])),
        weighted,
    )  # fmt: skip
    ann.calibration, ann.changes = result, 0
    ann.handovers.clear()
    return result
