"""Deciding from samples before a build whether a vector index can win (`hippograph.engine.index_probe`).

Every decision here is made on recall and depth alone (`min_speedup=0`), never on timings."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.engine.index_probe import probe
from hippograph.engine.vector_index import AnnConfig

NOW = datetime(2025, 6, 1, tzinfo=UTC)
DIM = 96


def gaussian(n: int, seed: int = 0) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def clustered(n: int, seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, DIM)) * 4
    return (centres[rng.integers(0, 8, n)] + 0.3 * rng.standard_normal((n, DIM))).astype(np.float32)


# Sparse graphs and a shallow search limit: on unclustered rows none reaches the target within it.
SHALLOW = AnnConfig(probe_rows=512, min_speedup=0, max_ef_search=24, M=4, ef_construction=16)


def test_too_few_rows_are_not_probed() -> None:
    assert probe(gaussian(4 * 512 - 1), SHALLOW) is None
    assert probe(gaussian(4096), AnnConfig(probe_rows=0, min_speedup=0, max_ef_search=24)) is None


def test_unclustered_rows_that_no_shallow_search_serves_are_ruled_out() -> None:
    found = probe(gaussian(4096), SHALLOW)
    assert found is not None
    assert found.rows == 4096 and found.sample == 512
    assert "not built" in found.reason and "sample" in found.reason


def test_clustered_rows_pass() -> None:
    assert probe(clustered(4096), AnnConfig(probe_rows=512, min_speedup=0)) is None


def test_zero_rows_in_the_sample_are_left_out() -> None:
    rows = clustered(4096)
    rows[::3] = 0.0
    assert probe(rows, AnnConfig(probe_rows=512, min_speedup=0)) is None


@pytest.mark.parametrize("explicit", [True, False])
def test_a_type_the_sample_rules_out_answers_exactly_and_says_why(explicit: bool) -> None:
    config = dataclasses.replace(SHALLOW, min_nodes=100, background=False)
    b = InMemory(ann=config)
    rows = gaussian(4096, seed=3)
    b.apply_changeset(hg.Changeset().add_nodes([hg.Semantic(id=f"n{i:05d}", proposition="p", confidence=0.5,
                                                            embedding=v) for i, v in enumerate(rows)]))  # fmt: skip
    if explicit:
        assert b.build_vector_index() == []
    query = gaussian(1, seed=9)[0]
    params = {"params": {"semantic": {"threshold": 0.0, "top_k": 10}}}
    got = b.find_candidates(["semantic"], query, [], params, now=NOW)
    want = b.find_candidates(["semantic"], query, [], params, now=NOW, exact=True)
    assert [n.id for n, _ in got] == [n.id for n, _ in want]
    stats = b.vector_index_stats()["semantic"]
    assert stats["exact_fallback"] is True and not stats["available"]
    assert "sample" in stats["fallback_reason"]
    # Nothing is built until the type doubles; then the samples are drawn again.
    b.find_candidates(["semantic"], query, [], params, now=NOW)
    assert b.vector_index_stats()["semantic"]["vectors"] == 0


@given(st.integers(min_value=0, max_value=1 << 24))
def test_probe_rows_takes_any_count_up_to_its_limit(rows: int) -> None:
    assert AnnConfig(probe_rows=rows).probe_rows == rows


@given(
    st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=(1 << 24) + 1),
        st.booleans(),
        st.floats(allow_nan=True),
        st.text(max_size=3),
    )
)
def test_probe_rows_refuses_anything_else(bad: object) -> None:
    with pytest.raises(hg.ConfigError, match="probe_rows"):
        AnnConfig(probe_rows=bad)  # type: ignore[arg-type]
