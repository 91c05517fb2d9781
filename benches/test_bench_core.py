"""Read paths: the exact candidate scan and single-node lookup.

`find_candidates` is what an agent pays on every turn, so it is measured at
every store size on both built-in backends with the default value function
and metadata on every node (the realistic, slowest-to-score case). LMDB is
measured warm: its derived scoring cache is already in step with the file.
"""

from __future__ import annotations

import itertools

import pytest
from _benchdata import NOW, SCANNED, TOP_K, Stores, size_label
from pytest_benchmark.fixture import BenchmarkFixture


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
@pytest.mark.parametrize("mode", ["exact", "default"])
def test_find_candidates(benchmark: BenchmarkFixture, stores: Stores, n: int, backend: str, mode: str) -> None:
    """``exact`` forces the full scan; ``default`` is ``exact=False``, which may use a vector index at large N.

    That index is built (`build_vector_index`) and one call made before timing.
    """
    ds = stores.dataset(n)
    store = stores.memory(n) if backend == "memory" else stores.lmdb(n)
    exact = mode == "exact"
    if not exact:
        store.build_vector_index([SCANNED])
    store.find_candidates([SCANNED], ds.query, ds.tags, None, now=NOW, exact=exact)
    benchmark.group = f"find_candidates-{size_label(n)}"
    hits = benchmark(store.find_candidates, [SCANNED], ds.query, ds.tags, None, now=NOW, exact=exact)
    assert len(hits) == TOP_K


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
def test_get_node(benchmark: BenchmarkFixture, stores: Stores, backend: str) -> None:
    """Lookup by id, cycling over ids so LMDB does not always hit the same page."""
    n = 10_000
    ds = stores.dataset(n)
    store = stores.memory(n) if backend == "memory" else stores.lmdb(n)
    ids = itertools.cycle(ds.ids[::97])
    benchmark.group = "get_node-10k"
    node = benchmark(lambda: store.get_node(next(ids)))
    assert node is not None
