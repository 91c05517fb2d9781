"""The Rust scorer (`hippograph._core`) against a plain numpy version of the scoring rules (docs/architecture.md)."""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph import ValidationError, _core
from hippograph.testing.graphs import assert_selection

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
NOW = 1_717_243_200.0  # unix seconds

SETTINGS = settings(max_examples=150, deadline=None)


# -- the reference, in float64 numpy -----------------------------------------


def np_relevance(matrix: F32, queries: F32) -> F64:
    m = matrix.astype(np.float64)
    q = queries.astype(np.float64)
    if m.shape[0] == 0 or q.shape[0] == 0:
        return np.zeros(m.shape[0])
    rows = np.linalg.norm(m, axis=1)
    cols = np.linalg.norm(q, axis=1)
    denom = rows[:, None] * cols[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(denom > 0, (m @ q.T) / np.where(denom > 0, denom, 1.0), 0.0)
    out: F64 = np.clip(cos.max(axis=1), 0.0, 1.0)
    return out


def np_values(rel: F64, meta: Meta, p: Params) -> F64:
    hours = np.maximum(0.0, (NOW - meta.timestamp) / 3600.0)
    recency = np.exp(-p.lam * hours)
    denom = meta.access_count + p.k
    with np.errstate(invalid="ignore", divide="ignore"):
        freq = np.where(denom > 0, meta.access_count / np.where(denom > 0, denom, 1.0), 0.0)
        avg = np.where(meta.reward_count > 0, meta.cumulative_reward / np.maximum(meta.reward_count, 1), 0.0)
    reward = np.where(meta.reward_count > 0, 1.0 / (1.0 + np.exp(-p.beta * avg)), 1.0)
    scored = rel * recency * np.maximum(p.base_floor, freq) * reward
    return np.where(meta.has_meta != 0, scored, rel)


def py_select(scores: list[float], threshold: float, top_k: int, rank: list[int] | None) -> list[int]:
    keys = rank if rank is not None else list(range(len(scores)))
    kept = [i for i, s in enumerate(scores) if not math.isnan(s) and s >= threshold]
    return sorted(kept, key=lambda i: (-scores[i], keys[i]))[:top_k]


# -- generated inputs ------------------------------------------------------


@dataclass
class Meta:
    has_meta: npt.NDArray[np.uint8]
    timestamp: F64
    access_count: F64
    reward_count: F64
    cumulative_reward: F64

    @classmethod
    def empty(cls, n: int) -> Meta:
        return cls(np.zeros(n, np.uint8), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n))

    def usage(self) -> _core.UsageColumns:
        return _core.UsageColumns(self.has_meta, self.timestamp, self.access_count, self.reward_count,
                                  self.cumulative_reward)  # fmt: skip


@dataclass
class Params:
    lam: float
    k: float
    base_floor: float
    beta: float

    def core(self) -> _core.ValueParams:
        return _core.ValueParams(self.lam, self.k, self.base_floor, self.beta)


DEFAULTS = Params(lam=0.01, k=5.0, base_floor=0.3, beta=1.0)


def values(rel: F32, meta: Meta, p: Params) -> F64:
    return _core.default_values(rel, meta.usage(), NOW, p.core())


def scan(
    matrix: F32,
    norms: F32,
    queries: F32,
    meta: Meta,
    p: Params,
    rank: npt.NDArray[np.uint32] | None,
    threshold: float,
    top_k: int,
    gate: Literal["score", "relevance"] = "score",
) -> tuple[npt.NDArray[np.int64], F64]:
    selection = _core.Selection(threshold, gate, top_k)
    return _core.scan_default(matrix, norms, queries, meta.usage(), rank, NOW, p.core(), selection)


@dataclass
class Case:
    matrix: F32
    norms: F32
    queries: F32
    meta: Meta
    params: Params
    rank: npt.NDArray[np.uint32]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(0, 40))
    dim = draw(st.integers(1, 12))
    m = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    matrix = rng.normal(size=(n, dim)).astype(np.float32)
    matrix[rng.random(n) < 0.1] = 0.0
    queries = rng.normal(size=(m, dim)).astype(np.float32)
    if draw(st.booleans()):
        queries[0] = 0.0
    meta = Meta(
        has_meta=(rng.random(n) < 0.7).astype(np.uint8),
        timestamp=NOW - rng.uniform(-7200.0, 3600.0 * 500, n),
        access_count=rng.integers(0, 40, n).astype(np.float64),
        reward_count=rng.integers(0, 5, n).astype(np.float64),
        cumulative_reward=rng.uniform(-4.0, 4.0, n),
    )
    params = Params(
        lam=draw(st.floats(0.0, 0.1)),
        k=draw(st.floats(0.0, 10.0)),
        base_floor=draw(st.floats(0.0, 1.0)),
        beta=draw(st.floats(0.0, 3.0)),
    )
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1).astype(np.float32)
    return Case(matrix, norms, queries, meta, params, rng.permutation(n).astype(np.uint32))


# -- properties -------------------------------------------------------------


@SETTINGS
@given(cases())
def test_relevance_matches_numpy(case: Case) -> None:
    got = _core.relevance(case.matrix, case.norms, case.queries)
    assert got.dtype == np.float32 and got.shape == (case.matrix.shape[0],)
    np.testing.assert_allclose(got, np_relevance(case.matrix, case.queries), rtol=0, atol=1e-5)


@SETTINGS
@given(cases(), st.integers(0, 2**32 - 1), st.integers(0, 12), st.booleans())
def test_top_relevance_keeps_the_best_k_positive_rows_and_their_ties(
    case: Case, seed: int, k: int, listed: bool
) -> None:
    """Against numpy: every returned row is positive and at least the k-th best; every row scoring
    above the k-th is returned; at most k rows plus those tied with the k-th."""
    n = case.matrix.shape[0]
    rng = np.random.default_rng(seed)
    rows = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).astype(np.uint32) if listed else None
    got_rows, got_sims = _core.top_relevance(case.matrix, case.norms, case.queries, k, rows)
    candidates = np.arange(n, dtype=np.uint32) if rows is None else rows
    full = _core.relevance(case.matrix, case.norms, case.queries)
    np.testing.assert_array_equal(got_sims, full[got_rows])
    assert len(set(got_rows.tolist())) == len(got_rows) and set(got_rows.tolist()) <= set(candidates.tolist())
    positive = np.sort(full[candidates][full[candidates] > 0])[::-1]
    if k == 0 or not len(positive):
        assert len(got_rows) == 0
        return
    kth = positive[min(k, len(positive)) - 1]
    assert (got_sims >= kth).all() and (got_sims > 0).all()
    assert len(got_rows) == int((full[candidates] >= kth).sum())
    np.testing.assert_allclose(
        _core.relevance_of_rows(case.matrix, case.norms, case.queries, candidates), full[candidates], atol=0
    )


@SETTINGS
@given(cases(), st.integers(0, 2**32 - 1), st.integers(0, 12), st.booleans(), st.booleans())
def test_the_shadowed_top_relevance_answers_exactly_as_the_f32_one(
    case: Case, seed: int, k: int, listed: bool, duplicates: bool
) -> None:
    """Same rows, same f32 relevances, on any data: ties, duplicated rows and zero rows included."""
    matrix = case.matrix.copy()
    n = matrix.shape[0]
    rng = np.random.default_rng(seed)
    if duplicates and n > 1:
        matrix[rng.integers(0, n, size=n // 2)] = matrix[0]
    norms = _core.row_norms(matrix)
    half, residual = _core.shadow_rows(matrix)
    assert half.dtype == np.uint16 and half.shape == matrix.shape and residual.shape == (n,)
    rows = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).astype(np.uint32) if listed else None
    want = _core.top_relevance(matrix, norms, case.queries, k, rows)
    got = _core.top_relevance_shadowed(matrix, norms, half, residual, case.queries, k, rows)
    assert sorted(zip(*(a.tolist() for a in got), strict=True)) == sorted(zip(*(a.tolist() for a in want), strict=True))


def test_a_shadow_out_of_shape_is_refused() -> None:
    matrix = np.eye(3, dtype=np.float32)
    norms = _core.row_norms(matrix)
    half, residual = _core.shadow_rows(matrix)
    q = matrix[:1]
    with pytest.raises(ValidationError, match="shadow"):
        _core.top_relevance_shadowed(matrix, norms, half[:2], residual[:2], q, 1)
    with pytest.raises(ValidationError, match="dimension"):
        _core.top_relevance_shadowed(matrix, norms, half[:, :2].copy(), residual, q, 1)
    with pytest.raises(ValidationError, match="past"):
        _core.top_relevance_shadowed(matrix, norms, half, residual, q, 1, np.array([3], np.uint32))


@SETTINGS
@given(cases())
def test_row_norms_match_numpy(case: Case) -> None:
    np.testing.assert_allclose(_core.row_norms(case.matrix), case.norms, rtol=1e-6)


@SETTINGS
@given(cases())
def test_default_values_match_numpy(case: Case) -> None:
    rel = np_relevance(case.matrix, case.queries).astype(np.float32)
    got = values(rel, case.meta, case.params)
    want = np_values(rel.astype(np.float64), case.meta, case.params)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert np.all(got <= rel + 1e-12)


@SETTINGS
@given(cases(), st.floats(0.0, 1.0), st.integers(0, 45))
def test_scan_default_selects_like_numpy(case: Case, threshold: float, top_k: int) -> None:
    idx, scores = scan(case.matrix, case.norms, case.queries, case.meta, case.params, case.rank, threshold, top_k)
    assert idx.dtype == np.int64 and scores.dtype == np.float64
    want = np_values(np_relevance(case.matrix, case.queries), case.meta, case.params)
    # Name each row by its rank so that "ties by id" means "ties by rank".
    name = [f"{r:06d}" for r in case.rank.tolist()]
    actual = [(name[i], s) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]
    assert_selection(actual, {name[i]: float(s) for i, s in enumerate(want)}, threshold, top_k, tol=1e-5)


@SETTINGS
@given(cases(), st.floats(0.0, 1.0), st.integers(0, 45))
def test_relevance_gate_selects_by_score_among_relevant_rows(case: Case, threshold: float, top_k: int) -> None:
    """Under the relevance gate the threshold filters on relevance; the score still ranks."""
    idx, scores = scan(
        case.matrix, case.norms, case.queries, case.meta, case.params, case.rank, threshold, top_k, "relevance"
    )
    rel = np_relevance(case.matrix, case.queries)
    want = np_values(rel, case.meta, case.params)
    name = [f"{r:06d}" for r in case.rank.tolist()]
    actual = [(name[i], s) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]
    universe = {name[i]: float(s) for i, s in enumerate(want)}
    gated = {name[i]: float(r) for i, r in enumerate(rel)}
    assert_selection(actual, universe, threshold, top_k, tol=1e-5, gated=gated)


def test_unknown_gate_is_a_validation_error() -> None:
    matrix = np.eye(2, dtype=np.float32)
    with pytest.raises(ValidationError, match="gate must be 'score' or 'relevance'"):
        scan(matrix, np.ones(2, np.float32), matrix[:1].copy(), Meta.empty(2), DEFAULTS, None, 0.0, 5, "x")  # type: ignore[arg-type]


@SETTINGS
@given(
    scores=st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.5, 0.9, 1.0, math.nan, -0.2]), max_size=30),
    threshold=st.sampled_from([-1.0, 0.0, 0.1, 0.5, 0.9, 1.0, 2.0]),
    top_k=st.integers(0, 35),
    ranked=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_select_top_equals_a_sort(scores: list[float], threshold: float, top_k: int, ranked: bool, seed: int) -> None:
    rank = np.random.default_rng(seed).permutation(len(scores)).astype(np.uint32) if ranked else None
    got = _core.select_top(np.array(scores, dtype=np.float64), threshold, top_k, rank)
    assert got.tolist() == py_select(scores, threshold, top_k, None if rank is None else rank.tolist())


# -- fixed cases ------------------------------------------------------------


def _scan(
    matrix: F32,
    queries: F32,
    *,
    threshold: float = 0.0,
    top_k: int = 10,
    meta: Meta | None = None,
    rank: npt.NDArray[np.uint32] | None = None,
) -> list[int]:
    meta = Meta.empty(matrix.shape[0]) if meta is None else meta
    idx, _ = scan(matrix, _core.row_norms(matrix), queries, meta, DEFAULTS, rank, threshold, top_k)
    return [int(i) for i in idx]


def test_ties_are_broken_by_rank() -> None:
    matrix = np.ones((5, 3), np.float32)
    rank = np.array([3, 0, 4, 1, 2], np.uint32)
    assert _scan(matrix, np.ones((1, 3), np.float32), rank=rank) == [1, 3, 4, 0, 2]
    assert _scan(matrix, np.ones((1, 3), np.float32), rank=rank, top_k=2) == [1, 3]
    assert _scan(matrix, np.ones((1, 3), np.float32)) == [0, 1, 2, 3, 4]


def test_threshold_is_inclusive() -> None:
    matrix = np.array([[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.4]], np.float32)
    assert _scan(matrix, matrix[:1].copy(), threshold=1.0) == [0]
    assert _core.select_top(np.array([0.5, 0.25, 0.5]), 0.5, 10).tolist() == [0, 2]


def test_top_k_zero_selects_nothing() -> None:
    matrix = np.ones((4, 2), np.float32)
    assert _scan(matrix, np.ones((1, 2), np.float32), top_k=0) == []
    assert _core.select_top(np.ones(4), 0.0, 0).tolist() == []


def test_nan_scores_are_never_selected() -> None:
    assert _core.select_top(np.array([math.nan, 0.2, math.nan, 0.1]), -math.inf, 10).tolist() == [1, 3]
    meta = Meta.empty(3)
    meta.has_meta[:] = 1
    meta.timestamp[:] = NOW
    meta.reward_count[:] = 1.0  # one reward each: the middle row's is NaN, so its score is NaN
    meta.cumulative_reward[:] = [0.0, math.nan, 0.0]
    assert _scan(np.ones((3, 2), np.float32), np.ones((1, 2), np.float32), meta=meta) == [0, 2]


def test_empty_matrix_selects_nothing() -> None:
    empty = np.zeros((0, 4), np.float32)
    assert _scan(empty, np.ones((1, 4), np.float32)) == []
    assert _core.relevance(empty, np.zeros(0, np.float32), np.ones((1, 4), np.float32)).shape == (0,)


@pytest.mark.parametrize("qdim", [3, 5])
def test_wrong_query_dimension_is_a_validation_error(qdim: int) -> None:
    matrix = np.ones((3, 4), np.float32)
    queries = np.ones((1, qdim), np.float32)
    with pytest.raises(ValidationError):
        _core.relevance(matrix, _core.row_norms(matrix), queries)
    with pytest.raises(ValidationError):
        _scan(matrix, queries)


def test_strided_input_is_a_validation_error() -> None:
    strided = np.ones((4, 8), np.float32)[:, ::2]
    queries = np.ones((1, 4), np.float32)
    with pytest.raises(ValidationError):
        _core.relevance(strided, np.ones(4, np.float32), queries)
    with pytest.raises(ValidationError):
        _core.relevance(np.ones((4, 4), np.float32), np.ones(8, np.float32)[::2], queries)
    with pytest.raises(ValidationError):
        _core.row_norms(strided)
    with pytest.raises(ValidationError):
        _core.select_top(np.ones(8)[::2], 0.0, 3)
    with pytest.raises(ValidationError):
        _scan(strided, queries)


def test_column_major_matrix_is_a_validation_error() -> None:
    """A Fortran-ordered matrix is contiguous but not row-major: reading it as rows would be wrong."""
    fortran = np.asfortranarray(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]], np.float32))
    with pytest.raises(ValidationError):
        _core.relevance(fortran, np.ones(4, np.float32), np.ones((1, 3), np.float32))
    with pytest.raises(ValidationError):
        _core.row_norms(fortran)
    with pytest.raises(ValidationError):
        _scan(fortran, np.ones((1, 3), np.float32))


def test_mismatched_lengths_are_a_validation_error() -> None:
    matrix = np.ones((3, 2), np.float32)
    queries = np.ones((1, 2), np.float32)
    with pytest.raises(ValidationError):
        _core.relevance(matrix, np.ones(2, np.float32), queries)
    with pytest.raises(ValidationError):
        _scan(matrix, queries, meta=Meta.empty(2))
    with pytest.raises(ValidationError):
        _scan(matrix, queries, rank=np.arange(2, dtype=np.uint32))
    with pytest.raises(ValidationError):
        _core.select_top(np.ones(3), 0.0, 3, np.arange(4, dtype=np.uint32))
    with pytest.raises(ValidationError):
        values(np.ones(3, np.float32), Meta.empty(2), DEFAULTS)


# -- structured arguments -----------------------------------------------------


def test_params_and_selection_are_frozen_values() -> None:
    p = _core.ValueParams(0.01, 5.0, 0.3, 1.0)
    assert (p.lambda_, p.k, p.base_floor, p.beta) == (0.01, 5.0, 0.3, 1.0)
    assert p == _core.ValueParams(lambda_=0.01, k=5.0, base_floor=0.3, beta=1.0)
    assert p != _core.ValueParams(0.02, 5.0, 0.3, 1.0)
    assert hash(p) == hash(_core.ValueParams(0.01, 5.0, 0.3, 1.0))
    assert hash(_core.ValueParams(-0.0, 5.0, 0.3, 1.0)) == hash(_core.ValueParams(0.0, 5.0, 0.3, 1.0))
    s = _core.Selection(0.5, "relevance", 7)
    assert (s.threshold, s.gate, s.top_k) == (0.5, "relevance", 7)
    assert s == _core.Selection(0.5, "relevance", 7) != _core.Selection(0.5, "score", 7)
    assert pickle.loads(pickle.dumps(p)) == p and pickle.loads(pickle.dumps(s)) == s
    assert repr(s) == "Selection(threshold=0.5, gate='relevance', top_k=7)"
    with pytest.raises(AttributeError):
        p.k = 1.0  # type: ignore[misc]


def test_usage_columns_are_checked_when_built() -> None:
    meta = Meta.empty(4)
    with pytest.raises(ValidationError, match="C-contiguous"):
        _core.UsageColumns(
            meta.has_meta, np.zeros(8)[::2], meta.access_count, meta.reward_count, meta.cumulative_reward
        )
    with pytest.raises(ValidationError, match="lengths"):
        _core.UsageColumns(meta.has_meta, np.zeros(3), meta.access_count, meta.reward_count, meta.cumulative_reward)
    with pytest.raises(TypeError):
        _core.UsageColumns(meta.has_meta, np.zeros(4, np.float32), meta.access_count, meta.reward_count,  # type: ignore[arg-type]
                           meta.cumulative_reward)  # fmt: skip
    usage = meta.usage()
    assert len(usage) == 4 and usage.timestamp is meta.timestamp


def test_usage_columns_see_writes_and_recheck_dtype() -> None:
    """The bundle holds the arrays, not a copy; a dtype reassigned in place is caught, not misread."""
    meta = Meta.empty(2)
    usage = meta.usage()
    params = DEFAULTS.core()
    rel = np.ones(2, np.float32)
    assert _core.default_values(rel, usage, NOW, params).tolist() == [1.0, 1.0]
    meta.has_meta[1] = 1
    meta.timestamp[1] = NOW
    assert _core.default_values(rel, usage, NOW, params)[1] == pytest.approx(DEFAULTS.base_floor)
    meta.timestamp.dtype = np.float32  # type: ignore[misc]
    with pytest.raises(TypeError):
        _core.default_values(rel, usage, NOW, params)


def test_default_value_of_one_row_matches_the_columns() -> None:
    meta = Meta(np.ones(1, np.uint8), np.array([NOW - 7200.0]), np.array([3.0]), np.array([2.0]), np.array([1.5]))
    want = values(np.array([0.8], np.float32), meta, DEFAULTS)[0]
    got = _core.default_value(0.8, NOW - 7200.0, 3.0, 2.0, 1.5, NOW, DEFAULTS.core())
    assert got == pytest.approx(want, rel=1e-6)
