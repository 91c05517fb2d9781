"""Write paths: ingestion commits, plain changesets, and the payload fingerprint.

One ingestion is one trajectory's worth of graph (1 subgoal, 4 episodic and 4
source nodes with embeddings, 11 links, metadata on every node), which is what
`Repo.ingest` hands the backend. Each round commits a new source id, so the
insert path is measured, not the replay short-circuit. Changesets are built
in the (untimed) setup: the figure is the backend's own cost.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _benchdata import Ingestion, make_ingestion, sample_trajectory, vector_pool
from pytest_benchmark.fixture import BenchmarkFixture

from hippograph import Outcome, fingerprint
from hippograph.backends import LMDB, InMemory

Backend = InMemory | LMDB


@pytest.fixture(params=["lmdb-sync", "lmdb-fast", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind: str = request.param
    store: Backend = InMemory() if kind == "memory" else LMDB(tmp_path / "store", durability=kind.split("-")[1])
    yield store
    store.close()


def _feed(tag: str) -> Callable[[], tuple[tuple[Ingestion], dict[str, Any]]]:
    """A pedantic setup that hands each round a fresh ingestion."""
    pool = vector_pool()
    counter = itertools.count()

    def setup() -> tuple[tuple[Ingestion], dict[str, Any]]:
        return (make_ingestion(tag, next(counter), pool),), {}

    return setup


def _rounds(store: Backend) -> int:
    return 60 if isinstance(store, LMDB) and store.durability == "sync" else 300


def test_commit_ingestion(benchmark: BenchmarkFixture, backend: Backend) -> None:
    benchmark.group = "commit_ingestion"

    def commit(ing: Ingestion) -> Outcome:
        outcome, _ = backend.commit_ingestion(ing.record, ing.changeset)
        return outcome

    outcome = benchmark.pedantic(commit, setup=_feed("commit"), rounds=_rounds(backend), warmup_rounds=3)
    assert outcome is Outcome.INSERTED


def test_apply_changeset(benchmark: BenchmarkFixture, backend: Backend) -> None:
    benchmark.group = "apply_changeset"
    benchmark.pedantic(
        lambda ing: backend.apply_changeset(ing.changeset),
        setup=_feed("apply"),
        rounds=_rounds(backend),
        warmup_rounds=3,
    )
    assert backend.get_node("apply-subgoal-0000000") is not None


@pytest.mark.parametrize("steps", [4, 64])
def test_fingerprint(benchmark: BenchmarkFixture, steps: int) -> None:
    benchmark.group = "fingerprint"
    digest = benchmark(fingerprint, sample_trajectory(steps))
    assert len(digest) == 32
