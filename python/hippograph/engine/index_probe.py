"""Whether a vector index can win on a type's data, judged from samples before the build.

Two nested random samples (a quarter of `AnnConfig.probe_rows` rows, then all of them) each get a
graph, searched from the configured depth upwards until its recall@20 on queries near stored rows
reaches the target. How much deeper the larger sample had to search says how the depth grows with
the rows: on clustered data hardly at all, on unclustered high-dimensional data (where the nearest
rows are barely nearer than the rest) in proportion. That growth carried to the type's rows gives
the depth, and the search time, the full index would need; when that depth passes
``max_ef_search`` or the search would not be ``min_speedup`` times faster than the exact scan of
every row, the index is not built: the whole build and its calibration are spared. A sample that
passes proves nothing; the full index is built and calibrated, and calibration still decides.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .vector_index import AnnConfig, hnsw_index

__all__ = ["Probe", "Unpromising", "probe"]

QUERIES = 64
"""Sample queries: stored rows moved a little, as calibration's near queries are."""

_NOISE = 0.2
_K = 20


@dataclass(frozen=True)
class Probe:
    """What the sample showed: over `sample` of the type's `rows` rows, the least depth `ef`
    reaching `recall` (the best found when none reached the target), and the estimated speed-up
    over the exact scan there."""

    rows: int
    sample: int
    ef: int
    recall: float
    speedup: float
    reason: str


class Unpromising(Exception):
    """The sample ruled the index out: the exact scan answers (`probe` says why)."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(probe.reason)
        self.probe = probe


def probe(matrix: npt.NDArray[np.float32], config: AnnConfig) -> Probe | None:
    """A `Probe` that rules the index out, or None (too few rows to sample, or the samples passed)."""
    rows, size = len(matrix), config.probe_rows
    if size == 0 or rows < 4 * size:
        return None
    rng = np.random.default_rng(rows)
    picked = matrix[np.sort(rng.choice(rows, size, replace=False))]
    picked = np.ascontiguousarray(picked[np.linalg.norm(picked, axis=1) > 0], np.float32)
    if len(picked) < 8 * _K:
        return None
    unit = picked / np.linalg.norm(picked, axis=1, keepdims=True)
    base = unit[rng.choice(len(unit), QUERIES, replace=False)]
    shift = rng.standard_normal(base.shape)
    shift *= _NOISE / np.linalg.norm(shift, axis=1, keepdims=True)
    queries = np.ascontiguousarray(base + shift, np.float32)
    start = time.perf_counter()
    for q in queries[:16]:
        unit @ q
    # The exact scan of every row, estimated from one matrix-vector product per query over the sample.
    exact_each = (time.perf_counter() - start) / 16 * rows / len(unit)
    small = _depth(picked[: len(picked) // 4], unit[: len(picked) // 4], queries, config)
    large = _depth(picked, unit, queries, config)
    if small is None or large is None:
        found = large or small or (config.max_ef_search, 0.0, 0.0)
        return Probe(
            rows, len(picked), found[0], found[1], exact_each / found[2] if found[2] else 0.0,
            f"a graph over a sample of {len(picked) if large is None else len(picked) // 4} rows did not reach "
            f"recall@{_K} {config.target_recall} at any ef_search up to {config.max_ef_search}; not built",
        )  # fmt: skip
    # Depth per doubling of the rows, from a quarter of the sample to all of it, carried to `rows`.
    growth = max(1.0, large[0] / small[0]) ** 0.5
    doublings = np.log2(rows / len(picked))
    ef = float(large[0] * growth**doublings)
    speedup = float(exact_each / (large[2] * ef / large[0]))
    if ef <= config.max_ef_search and speedup >= config.min_speedup:
        return None
    return Probe(
        rows, len(picked), int(ef), large[1], speedup,
        f"graphs over samples of {len(picked) // 4} and {len(picked)} rows needed ef_search {small[0]} and "
        f"{large[0]} for recall@{_K} {config.target_recall}; at {rows} rows that grows to about {ef:.0f}, "
        f"where a search would be {speedup:.1f}x faster than the exact scan (needs {config.min_speedup}x, "
        f"ef_search at most {config.max_ef_search}); not built",
    )  # fmt: skip


def _depth(
    rows: npt.NDArray[np.float32], unit: npt.NDArray[np.float32], queries: npt.NDArray[np.float32], config: AnnConfig
) -> tuple[int, float, float] | None:
    """The least depth (by calibration's steps of half) at which a graph over `rows` finds the
    exact top 20 of `queries` at `target_recall`, with that recall and the seconds per search;
    None when no depth up to ``max_ef_search`` does."""
    truth = np.argsort(-(queries @ unit.T), axis=1)[:, :_K]
    graph = hnsw_index(rows.shape[1], config, len(rows), rows)
    if config.threads:
        graph.set_num_threads(config.threads)
    graph.add_items(rows, np.arange(len(rows)))
    ef = max(config.ef_search, _K)
    while True:
        graph.set_ef(ef)
        start = time.perf_counter()
        found = [graph.knn_query(queries[i : i + 1], k=_K)[0][0] for i in range(len(queries))]
        each = (time.perf_counter() - start) / len(queries)
        hits = [len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True)]
        recall = float(np.mean(hits)) / _K
        if recall >= config.target_recall:
            return ef, recall, each
        if ef >= min(config.max_ef_search, len(rows)):
            return None
        ef = min(ef + max(1, ef // 2), config.max_ef_search)
