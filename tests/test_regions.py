"""Regions bound relevance: no row placed in a region is more relevant to a query than the region's bound."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.engine.regions import NO_REGION, Regions, partition


def _data(seed: int, n: int, dim: int, clustered: bool) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    if not clustered:
        return rng.standard_normal((n, dim)).astype(np.float32)
    centres = rng.standard_normal((4, dim))
    return (centres[rng.integers(0, 4, n)] + 0.3 * rng.standard_normal((n, dim))).astype(np.float32)


def _assert_bounds_hold(regions: Regions, matrix: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]) -> None:
    bounds = regions.bounds(queries)
    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    norms = np.linalg.norm(matrix, axis=1)
    for r in np.flatnonzero(regions.of_row[: len(matrix)] != NO_REGION):
        relevance = float(np.clip((unit_q @ (matrix[r] / norms[r])).max(), 0.0, 1.0))
        assert relevance <= bounds[regions.of_row[r]], f"row {r}"


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(8, 400),
    dim=st.integers(2, 24),
    clustered=st.booleans(),
    queries=st.integers(1, 4),
)
def test_no_member_exceeds_its_regions_bound(seed: int, n: int, dim: int, clustered: bool, queries: int) -> None:
    matrix = _data(seed, n, dim, clustered)
    matrix[::7] = 0.0  # rows without a vector are in no region
    norms = np.linalg.norm(matrix, axis=1).astype(np.float32)
    regions = partition(matrix, norms, seed)
    assert regions is not None
    assert (regions.of_row[norms == 0] == NO_REGION).all()
    q = np.random.default_rng(seed + 1).standard_normal((queries, dim)).astype(np.float32)
    _assert_bounds_hold(regions, matrix, q)
    _assert_bounds_hold(regions, matrix, matrix[1:2] + 0.01)  # a query next to a stored row


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(16, 300), dim=st.integers(2, 16))
def test_rows_placed_forgotten_and_moved_keep_the_bounds(seed: int, n: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = _data(seed, n, dim, clustered=True)
    regions = partition(matrix, np.linalg.norm(matrix, axis=1).astype(np.float32), seed)
    assert regions is not None
    # New vectors in some rows: they leave their regions, and are placed back only where they fit.
    changed = rng.choice(n, size=n // 4, replace=False)
    matrix[changed] = _data(seed + 1, len(changed), dim, clustered=bool(seed % 2)) * 3
    for r in changed.tolist():
        regions.forget(r)
    regions.place(changed.astype(np.int64), matrix[changed])
    # A swap-remove: the last row moves into row 0.
    last = n - 1
    regions.moved(0, last)
    matrix[0] = matrix[last]
    matrix = matrix[:last]
    q = rng.standard_normal((2, dim)).astype(np.float32)
    _assert_bounds_hold(regions, matrix, q)
    assert regions.of_row[last] == NO_REGION
