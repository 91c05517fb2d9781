"""What `Repo.recall` costs on top of the backend's `find_candidates`.

Recall notes an access on every returned node and writes the counts in
batches off the hot path; these two benches, on the same LMDB (sync) store,
show how much of that bookkeeping leaks into the call. The periodic flushes
are included as they happen (flush timer and count threshold at their
defaults), so compare the medians for the steady cost and the means for the
amortised one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _benchdata import SCANNED, TOP_K, Dataset, build_lmdb, make_dataset
from pytest_benchmark.fixture import BenchmarkFixture

from hippograph import Repo

N = 10_000


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return make_dataset(N)


@pytest.fixture(scope="module")
def repo(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repo]:
    store = build_lmdb(dataset, Path(tmp_path_factory.mktemp("recall")) / "store", "sync")
    with Repo(store) as r:
        yield r


def test_find_candidates_lmdb_sync(benchmark: BenchmarkFixture, repo: Repo, dataset: Dataset) -> None:
    benchmark.group = "recall-overhead-10k"
    hits = benchmark(repo.backend.find_candidates, [SCANNED], dataset.query, dataset.tags, None, exact=True)
    assert len(hits) == TOP_K


def test_recall_lmdb_sync(benchmark: BenchmarkFixture, repo: Repo, dataset: Dataset) -> None:
    benchmark.group = "recall-overhead-10k"
    hits = benchmark(repo.recall, dataset.query, dataset.tags, [SCANNED], exact=True)
    assert len(hits) == TOP_K
