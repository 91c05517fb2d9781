"""Regions bound relevance: no row placed in a region is more relevant to a query than the region's bound."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.engine import columns as columns_module
from hippograph.engine import vector_files
from hippograph.engine.columns import TypeColumns
from hippograph.engine.regions import NO_REGION, Regions, partition
from hippograph.engine.vector_index import AnnConfig, ann_available


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


class _WritesBetweenHolds:
    """A shared lock whose `at`-th hold is preceded by `write`: a writer that ran between two holds."""

    def __init__(self, at: int, write: Callable[[], None]) -> None:
        self.holds, self.at, self.write = 0, at, write

    @contextmanager
    def read(self) -> Iterator[None]:
        self.holds += 1
        if self.holds == self.at:
            self.write()
        yield


@pytest.mark.skipif(not ann_available(), reason="regions are built beside an HNSW index (the ann extra)")
@pytest.mark.parametrize("at", [2, 5, 9, 10])  # before the first chunk, a middle one, the last one, publishing
def test_regions_computed_while_rows_come_and_go_bound_every_member(monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """The upkeep thread copies the rows in short holds; writes between them add rows, remove rows
    (swap-removes move later rows into copied ones) and give rows new vectors. The regions must
    still be built, and every row they place must lie within its region's bound."""
    monkeypatch.setattr(columns_module, "_COPY_CHUNK", 16)
    rng = np.random.default_rng(at)
    dim = 8
    cols = TypeColumns(AnnConfig(min_nodes=1, background=False))
    for i, v in enumerate(_data(at, 120, dim, clustered=True)):
        cols.upsert(f"n{i:03d}", v, None)
    assert cols.build_vector_index()
    cols.regions = None  # as after loading a saved index: the upkeep thread computes them

    def write() -> None:
        for i, v in enumerate(_data(at + 1, 60, dim, clustered=False) * 5):
            cols.upsert(f"m{i:03d}", v, None)
        for node_id in rng.choice(cols.ids[:100], size=30, replace=False).tolist():
            cols.remove(node_id)
        for node_id in cols.ids[:10]:
            cols.upsert(node_id, rng.standard_normal(dim).astype(np.float32), None)

    cols._build_regions(_WritesBetweenHolds(at, write))
    regions = cols.regions
    assert regions is not None
    n = len(cols.ids)
    assert n == 120 + 60 - 30
    placed = regions.of_row[: min(n, len(regions.of_row))] != NO_REGION
    assert placed.sum() >= 20, "the rows no write touched keep their regions"
    queries = rng.standard_normal((3, dim)).astype(np.float32)
    _assert_bounds_hold(regions, cols.matrix()[:n], queries)
    for r in range(0, n, 7):
        _assert_bounds_hold(regions, cols.matrix()[:n], cols.matrix()[r : r + 1] + 0.01)


_blobs = st.one_of(st.binary(max_size=64), st.integers(), st.none(), st.text(max_size=4))


@settings(max_examples=200, deadline=None)
@given(
    count=st.one_of(st.integers(-2, 4), st.booleans(), st.none(), st.floats(allow_nan=True)),
    dim=st.integers(1, 3),
    live=st.integers(0, 3),
    centres=_blobs,
    radius=_blobs,
    of_label=_blobs,
    well_formed=st.booleans(),
)
def test_saved_regions_are_read_whole_or_refused(
    count: object, dim: int, live: int, centres: object, radius: object, of_label: object, well_formed: bool
) -> None:
    """A labels file's regions either read as arrays of the sizes its index needs, every region
    number in range and every value finite, or are refused (the saved index is then rebuilt)."""
    if well_formed and type(count) is int and count >= 1:
        rng = np.random.default_rng(count)
        centres = rng.standard_normal((count, dim)).astype("<f4").tobytes()
        radius = rng.uniform(-1, 1, count).astype("<f8").tobytes()
        of_label = rng.integers(0, count + 1, live).astype("<u4").tobytes()
    got = {"count": count, "centres": centres, "cos_radius": radius, "of_label": of_label}
    try:
        regions = vector_files._read_regions(got, dim, live)
    except ValueError:
        return
    assert regions is not None
    assert regions.centres.shape == (count, dim) and regions.cos_radius.shape == (count,)
    assert regions.of_label.shape == (live,)
    assert ((regions.of_label < count) | (regions.of_label == NO_REGION)).all()
    assert np.isfinite(regions.centres).all() and np.isfinite(regions.cos_radius).all()


def test_saved_regions_absent_or_not_a_mapping() -> None:
    assert vector_files._read_regions(None, 4, 3) is None
    with pytest.raises(ValueError):
        vector_files._read_regions([1, 2], 4, 3)
