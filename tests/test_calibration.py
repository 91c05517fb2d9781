"""Calibrated vector indexes: the stated recall holds on held-out queries, and an index that cannot
meet its target (or only slowly) leaves the answer to the exact scan, saying so."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.engine import query
from hippograph.engine.vector_index import AnnConfig

TOP = {"params": {"semantic": {"threshold": 0.0, "top_k": 20}}}
STATS = (
    "recall_estimate",
    "recall_worst",
    "index_recall",
    "min_similarity",
    "ef_search",
    "speedup_estimate",
    "calibrated_rows",
    "calibrated_on_queries_asked",
    "exact_fallback",
)


def unclustered(n: int, dim: int, seed: int) -> hg.Changeset:
    """Gaussian vectors: no clusters for the graph to exploit, the hard case for HNSW."""
    rng = np.random.default_rng(seed)
    cs = hg.Changeset()
    for i in range(n):
        emb = rng.standard_normal(dim).astype(np.float32)
        cs.add_node(hg.Semantic(id=f"n{i:05d}", proposition="p", confidence=0.5, embedding=emb))
    return cs


def ids(b: hg.GraphBackend, q: npt.NDArray[np.float32], exact: bool) -> list[str]:
    return [n.id for n, _ in b.find_candidates(["semantic"], q, [], TOP, exact=exact)]


def spy(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    calls: list[Any] = []
    real = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        calls.append(got)
        return got

    monkeypatch.setattr(owner, name, wrapped)
    return calls


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1500, 3000), dim=st.sampled_from([48, 64]), seed=st.integers(0, 10_000))
def test_the_calibrated_index_meets_its_recall_target_on_held_out_queries(n: int, dim: int, seed: int) -> None:
    # A sparse graph (M=4) searched shallowly (ef_search=4) misses neighbours of unclustered vectors:
    # calibration raises ef_search as far as the target needs.
    config = AnnConfig(min_nodes=100, ef_search=4, M=4, background=False, min_speedup=0)
    b = InMemory(ann=config)
    b.apply_changeset(unclustered(n, dim, seed))
    b.build_vector_index()
    stats = b.vector_index_stats()["semantic"]
    assert not stats["exact_fallback"] and stats["recall_estimate"] >= 0.95 and stats["ef_search"] > 4
    rng = np.random.default_rng(seed + 1)
    recalls = []
    for _ in range(30):
        q = rng.standard_normal(dim).astype(np.float32)
        truth = set(ids(b, q, exact=True))
        recalls.append(len(truth & set(ids(b, q, exact=False))) / len(truth))
    # 30 held-out queries: their mean may sit a little under the 100-vector estimate by chance alone.
    assert np.mean(recalls) >= 0.95 - 0.04
    assert abs(np.mean(recalls) - stats["recall_estimate"]) <= 0.06


def test_an_index_too_slow_to_pay_leaves_queries_to_the_exact_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    b = InMemory(ann=AnnConfig(min_nodes=100, background=False, min_speedup=1e6))
    b.apply_changeset(unclustered(400, 16, 3))
    b.build_vector_index()
    stats = b.vector_index_stats()["semantic"]
    assert stats["available"] and stats["exact_fallback"]
    assert "faster than the exact scan" in stats["fallback_reason"]
    answered = spy(monkeypatch, query, "certified_scan")
    q = np.random.default_rng(4).standard_normal(16).astype(np.float32)
    assert ids(b, q, exact=False) == ids(b, q, exact=True)
    assert answered == []


def test_an_index_that_cannot_reach_its_target_is_not_used_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    config = AnnConfig(min_nodes=100, ef_search=1, max_ef_search=1, M=2, background=False, min_speedup=0)
    b = InMemory(ann=dataclasses.replace(config, target_recall=1.0))
    b.apply_changeset(unclustered(1500, 32, 5))
    b.build_vector_index()
    stats = b.vector_index_stats()["semantic"]
    # Non-exact queries get the exact answers; the index's own measured recall says why.
    assert stats["exact_fallback"] and stats["index_recall"] < 1.0 and stats["recall_estimate"] == 1.0
    assert "below the target 1.0" in stats["fallback_reason"]
    answered = spy(monkeypatch, query, "certified_scan")
    q = np.random.default_rng(6).standard_normal(32).astype(np.float32)
    assert ids(b, q, exact=False) == ids(b, q, exact=True) and answered == []


def test_stats_report_the_calibration() -> None:
    b = InMemory(ann=AnnConfig(min_nodes=100, background=False, min_speedup=0))
    b.apply_changeset(unclustered(300, 8, 7))
    assert "recall_estimate" not in b.vector_index_stats()["semantic"]
    b.build_vector_index()
    stats = b.vector_index_stats()["semantic"]
    assert set(STATS) <= set(stats) and stats["calibrated_rows"] == 300 and stats["fallback_reason"] is None
    assert 0.0 <= stats["recall_worst"] <= stats["recall_estimate"] <= 1.0 and stats["speedup_estimate"] > 0
    assert 0.0 <= stats["index_recall"] <= 1.0 and stats["available"] and not stats["building"]
    floor = stats["min_similarity"]
    assert floor is None or -1.0 <= floor <= 1.0


def test_the_index_is_measured_again_after_a_quarter_of_its_rows_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    b = InMemory(ann=AnnConfig(min_nodes=100, background=False, min_speedup=0))
    b.apply_changeset(unclustered(400, 8, 8))
    b.build_vector_index()
    measured = spy(monkeypatch, query, "calibrate")
    q = np.ones(8, np.float32)
    more = [_renamed(n, "m") for n in unclustered(140, 8, 9).additions]
    b.apply_changeset(hg.Changeset(additions=more[:50]))
    ids(b, q, exact=False)
    assert measured == []  # 50 changes in 450 rows: not yet a quarter
    b.apply_changeset(hg.Changeset(additions=more[50:]))
    ids(b, q, exact=False)
    assert len(measured) == 1 and b.vector_index_stats()["semantic"]["calibrated_rows"] == 540


def _ask(b: hg.GraphBackend, queries: list[npt.NDArray[np.float32]]) -> None:
    for q in queries:
        b.find_candidates(["semantic"], q[0], list(q[1:]), TOP, exact=False)


def test_an_index_is_measured_again_on_the_queries_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    b = InMemory(ann=AnnConfig(min_nodes=100, background=False, min_speedup=0))
    b.apply_changeset(unclustered(400, 8, 10))
    b.build_vector_index()
    assert b.vector_index_stats()["semantic"]["calibrated_on_queries_asked"] == 0
    measured = spy(monkeypatch, query, "calibrate")
    rng = np.random.default_rng(11)
    asked = [rng.standard_normal((3, 8)).astype(np.float32) for _ in range(64)]
    _ask(b, asked)
    assert measured == []  # 64 queries asked, none measured yet: the next one asks for it
    _ask(b, asked[:1])
    # The queries asked, three vectors each, were a kind of their own in that measurement.
    assert len(measured) == 1 and measured[0].sample == 200 + 64 and measured[0].asked == 64
    assert b.vector_index_stats()["semantic"]["calibrated_on_queries_asked"] == 64
    real = query.certified_scan
    _ask(b, asked + asked)  # like those measured, and answered by the index: nothing to measure again
    assert len(measured) == 1
    monkeypatch.setattr(query, "certified_scan", lambda *a, **k: None)  # every query handed over
    _ask(b, asked)
    monkeypatch.setattr(query, "certified_scan", real)
    _ask(b, asked[:1])
    assert len(measured) == 2


def test_speedup_on_the_queries_asked_counts_those_handed_over() -> None:
    near = [query.Trial(1.0, 0.001, 0.9) for _ in range(50)]
    asked = [query.Trial(None, 0.002, 0.2) for _ in range(50)]  # far from everything: handed over
    routing = query.route(near + asked, [0] * 50 + [1] * 50, 0.01, 0.95, {0, 1}, asked=1)
    assert routing.meets and routing.asked_speedup is not None
    assert routing.asked_speedup < 1.0 < 3.0 < query._speedup(near, 0.01)
    # Sent to the exact scan by the floor, they cost what the exact scan costs: no speed-up, no loss.
    routed = query.route(near + asked, [0] * 50 + [1] * 50, 0.01, 0.95, {0, 1}, asked=None)
    assert routed.asked_speedup is None
    assert query._speedup(asked, 0.01, floor=0.5) == pytest.approx(1.0)


def _renamed(node: hg.Node, prefix: str) -> hg.Node:
    assert isinstance(node, hg.Semantic)
    return hg.Semantic(id=prefix + node.id, proposition="p", confidence=0.5, embedding=node.embedding)


def test_a_saved_index_keeps_its_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = AnnConfig(min_nodes=100, background=False, min_speedup=0)
    with LMDB(tmp_path / "s", ann=config) as b:
        b.apply_changeset(unclustered(300, 8, 10))
        b.build_vector_index()
        before = b.vector_index_stats()["semantic"]
    measured = spy(monkeypatch, query, "calibrate")
    with LMDB(tmp_path / "s", ann=config) as b:
        ids(b, np.ones(8, np.float32), exact=False)
        after = b.vector_index_stats()["semantic"]
    assert after["loaded"] and measured == []
    assert {k: after[k] for k in STATS} == {k: before[k] for k in STATS}


def test_a_saved_calibration_for_other_targets_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = AnnConfig(min_nodes=100, background=False, min_speedup=0)
    with LMDB(tmp_path / "s", ann=config) as b:
        b.apply_changeset(unclustered(300, 8, 11))
        b.build_vector_index()
    measured = spy(monkeypatch, query, "calibrate")
    with LMDB(tmp_path / "s", ann=dataclasses.replace(config, target_recall=0.9)) as b:
        ids(b, np.ones(8, np.float32), exact=False)
        assert b.vector_index_stats()["semantic"]["loaded"]
    assert len(measured) == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"target_recall": 1.5},
        {"target_recall": -0.1},
        {"target_recall": "high"},
        {"min_speedup": -1},
        {"min_speedup": True},
        {"calibration_queries": 0},
        {"max_ef_search": 0},
    ],
)
def test_calibration_settings_are_checked(bad: dict[str, Any]) -> None:
    with pytest.raises(hg.ConfigError):
        AnnConfig(**bad)


def test_threads_still_measuring_at_exit_are_stopped_and_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exit hook stops a calibration at its next step and joins the upkeep thread, so no thread is
    left inside hnswlib when the interpreter goes away (a daemon thread frozen there aborts the process)."""
    import threading

    from hippograph.engine import shutdown

    inside, steps = threading.Event(), []

    def slow(cols: Any, ann: Any, params: Any, now: float, hold: Any = None) -> None:
        inside.set()
        while True:  # a calibration that never ends by itself: only the exit hook stops it
            with hold():
                steps.append(1)
            time.sleep(0.001)

    b = InMemory(ann=AnnConfig(min_nodes=100, min_speedup=0))
    b.apply_changeset(unclustered(400, 8, 12))
    b.build_vector_index()
    monkeypatch.setattr(query, "calibrate", slow)
    type_columns = b._derived.columns[hg.NodeType.SEMANTIC]
    type_columns.ann.changes = 10_000  # the index asks to be measured again
    ids(b, np.ones(8, np.float32), exact=False)
    assert inside.wait(30)
    worker = type_columns._worker
    assert worker is not None and worker.is_alive()
    import weakref

    monkeypatch.setattr(shutdown, "_LIVE", weakref.WeakSet([type_columns]))  # other tests' owners stay open
    shutdown._stop_all_threads()
    assert not worker.is_alive() and type_columns.upkeep_error is None and steps
