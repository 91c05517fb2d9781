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

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ValidationError
from .calibration import Calibration
from .checks import as_embedding
from .columns import TypeColumns
from .vector_index import VectorIndex

__all__ = [
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
Hits = list[tuple[int, float]]

RowValues = Callable[[list[str], F32], F64]
"""A custom value function over rows: ``values(ids, relevance)`` → one value per row (NaN: leave the row out)."""

Walk = Callable[[npt.NDArray[np.uint32], float, int], "Hits | None"]
"""(pool rows, relevance bound of every other row, scoring budget) → the exact top rows, or None past the budget."""


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


def _vector(value: object, what: str) -> F32:
    """`value` as a query vector: a 1-D float32 array is taken as it is (checked for NaN and
    infinities once stacked, in `prepare_queries`), anything else through `as_embedding`."""
    if type(value) is np.ndarray and value.dtype == np.float32 and value.ndim == 1 and value.size:
        return value
    return as_embedding(value, what)


def prepare_queries(query: object, tags: Iterable[object], dim: int | None) -> F32:
    """The query and tag vectors as one `m × dim` matrix, validated."""
    vectors = [_vector(query, "query")]
    if isinstance(tags, np.ndarray) and tags.ndim == 2:
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
) -> list[tuple[str, float]]:
    """Ids and scores of the best rows, best first (ties by id).

    `now`: unix seconds. `values`: a custom value function (None: the default, in Rust).
    `approximate`: candidates may come from the vector index (the value function never exceeds
    relevance); the answer is still certified exact up to the HNSW graph's neighbour recall.
    """
    if not columns.ids or params.top_k == 0:
        return []
    if queries.shape[0] and columns.dim == 0:
        queries = np.zeros((0, 0), np.float32)
    ann = columns.vector_index_for(approximate)
    if ann is not None and ann.needs_calibration():
        with columns.calibrating:  # one thread measures (under the caller's shared lock: no write runs)
            if ann.needs_calibration():
                calibrate(columns, ann, params, now)
    if ann is not None and ann.calibration is not None and ann.calibration.usable:
        walk = _walk(columns, queries, params, now, values)
        got = certified_scan(columns, ann, queries, params.top_k, params.threshold, walk)
        if got is not None:
            return [(columns.ids[r], s) for r, s in got]
    idx, scores = _score(columns, None, queries, params, now, values)
    return [(columns.ids[i], float(s)) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]


def certified_scan(
    columns: TypeColumns, ann: VectorIndex, queries: F32, top_k: int, threshold: float, walk: Walk
) -> Hits | None:
    """Top rows by exact score from vector-index candidate pools, or None when the exact scan must answer.

    A row outside the pool has relevance at most `bound`, the smallest
    similarity the index returned per query vector (maximised over them).
    `walk` scores the pool and every other row whose value could still reach
    the k-th best under that bound. Past an eighth of the type a deeper pool
    is cheaper; past a quarter the exact scan is. When too few rows score
    above zero while the threshold admits zero, the remaining slots belong to
    zero-score rows in id order, which only the exact scan enumerates: None.
    """
    n = len(columns.ids)
    pool = max(top_k, 16)  # per query vector; the walk makes a deeper first pool rarely worth its search cost
    while True:
        found = ann.knn(queries, pool)
        if found is None:
            return None
        labels, sims = found
        exhausted = labels.shape[1] >= len(ann)
        hits = ann.row_of_label[labels.ravel().astype(np.int64)]
        rows = np.unique(hits[hits >= 0]).astype(np.uint32)
        # Float noise between hnswlib's and the Rust core's cosine is far below this margin.
        bound = 0.0 if exhausted else max(0.0, float(sims[:, -1].max())) + 1e-6
        got = walk(rows, bound, max(n // 8, 1))
        if got is not None:
            return None if len(got) < top_k and threshold <= 0.0 else got
        if exhausted or 4 * pool > n // 4:
            return None
        pool *= 4


def _walk(columns: TypeColumns, queries: F32, params: ScanParams, now: float, values: RowValues | None) -> Walk:
    """How `certified_scan` finishes a pool: in Rust for the default value function, else in Python."""
    if values is not None:

        def bounded(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> Hits | None:
            # The function never exceeds relevance: rows outside the pool stay below `bound`,
            # and under either gate a row passes only with a value (or relevance) >= threshold.
            picked, scores = _score(columns, pool.astype(np.int64), queries, params, now, values)
            cutoff = float(scores[params.top_k - 1]) if len(picked) >= params.top_k else params.threshold
            if bound >= cutoff:
                return None
            return list(zip(picked.tolist(), scores.tolist(), strict=True))

        return bounded

    def walk(pool: npt.NDArray[np.uint32], bound: float, budget: int) -> Hits | None:
        order = columns.usage_order(params.core_params)
        got = _core.certified_walk(
            columns.matrix(),
            columns.norms(),
            queries,
            columns.usage(),
            columns.rank(),
            now,
            params.core_params,
            params.core_selection,
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

    mat, norms, rank = take(columns.matrix()), take(columns.norms()), take(columns.rank())
    if values is None:
        usage = columns.usage() if rows is None else _core.UsageColumns(*(take(c) for c in columns.usage_arrays()))
        idx, scores = _core.scan_default(
            mat, norms, queries, usage, rank, now, params.core_params, params.core_selection
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
"""Sample queries are stored vectors moved by this fraction of their length in a random direction:
near the memories, as an agent's queries are, without finding a row equal to the query."""


def _approximate_recalls(
    columns: TypeColumns,
    ann: VectorIndex,
    samples: list[F32],
    truth: list[set[int]],
    params: ScanParams,
    now: float,
) -> tuple[list[float | None], float]:
    """Each sample's recall of the exact answer through the certified path (None: it handed the
    query to the exact scan), and the seconds they took."""
    out: list[float | None] = []
    start = time.perf_counter()
    for q, want in zip(samples, truth, strict=True):
        got = certified_scan(columns, ann, q, params.top_k, params.threshold, _walk(columns, q, params, now, None))
        out.append(None if got is None else len({r for r, _ in got} & want) / len(want) if want else 1.0)
    return out, time.perf_counter() - start


def calibrate(columns: TypeColumns, ann: VectorIndex, params: ScanParams, now: float) -> Calibration:
    """Measures the approximate path against the exact one and picks `ann`'s ``ef_search``.

    Queries are drawn from the stored vectors (`_NOISE`), scored with `params` (the default value
    function) both ways; ``ef_search`` grows by half from the configured value until the approximate
    answers' mean recall reaches the target or ``max_ef_search``. Sets and returns
    ``ann.calibration``. Call where no write can run (the backend's shared lock held).
    """
    config = ann.config
    embedded = np.flatnonzero(columns.norms() > 0)
    rng = np.random.default_rng(len(columns.ids))  # the same sample for the same rows: repeatable
    rows = rng.choice(embedded, size=min(config.calibration_queries, len(embedded)), replace=False)
    base = columns.matrix()[rows] / columns.norms()[rows, None]
    noise = rng.standard_normal(base.shape).astype(np.float32)
    noise *= _NOISE / np.maximum(np.linalg.norm(noise, axis=1, keepdims=True), 1e-12)
    samples = [np.ascontiguousarray((base[i] + noise[i])[None, :], dtype=np.float32) for i in range(len(rows))]
    k = max(1, params.top_k)
    start = time.perf_counter()
    truth = [set(_score(columns, None, q, params, now, None)[0].tolist()) for q in samples]
    exact_seconds = time.perf_counter() - start
    ef, most = config.ef_search, max(config.ef_search, config.max_ef_search)
    while True:
        ann.ef_search = ef
        recalls, seconds = _approximate_recalls(columns, ann, samples, truth, params, now)
        # A query the certified path hands over is answered by the exact scan: it costs that scan.
        seconds += exact_seconds / max(len(samples), 1) * sum(1 for r in recalls if r is None)
        mean = float(np.mean([1.0 if r is None else r for r in recalls])) if recalls else 1.0
        if mean >= config.target_recall or ef >= most:
            break
        ef = min(ef + max(1, ef // 2), most)  # steps of half: a doubling overshoots the depth needed
    worst = min((1.0 if r is None else r for r in recalls), default=1.0)
    speedup = exact_seconds / seconds if seconds > 0 else float("inf")
    reason = None
    if mean < config.target_recall:
        reason = f"mean recall@{k} {mean:.3f} below the target {config.target_recall} at ef_search {ef}"
    elif speedup < config.min_speedup:
        reason = f"only {speedup:.1f}x faster than the exact scan at the recall target (needs {config.min_speedup}x)"
    result = Calibration(
        ef, k, config.target_recall, config.min_speedup, mean, worst, speedup,
        len(columns.ids), len(samples), reason is None, reason,
    )  # fmt: skip
    ann.calibration, ann.changes = result, 0
    return result
