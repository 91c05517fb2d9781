"""Approximate recall (HNSW candidates): same answers as the exact scan, never a dead id, persisted for LMDB."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import hnswlib
import msgpack
import numpy as np
import numpy.typing as npt
import pytest

import hippograph as hg
from hippograph import _core
from hippograph.backends import LMDB, InMemory
from hippograph.backends import lmdb as lmdb_module
from hippograph.engine import vector_files
from hippograph.engine.files import TREE_CHUNK, TreeHash
from hippograph.engine.mapped_ids import encode_ids
from hippograph.engine.vector_index import AnnConfig, build_rows
from pg_server import pg_dsn, pg_store, repo_for

if TYPE_CHECKING:
    from hippograph.backends.postgres import Postgres

__all__ = ["pg_dsn", "pg_store"]

DIM = 16
NOW = datetime(2025, 6, 1, tzinfo=UTC)
# Large ef_search on graphs of a few hundred nodes: HNSW's own recall is perfect, so answers must be exact.
# min_speedup=0: graphs of a few hundred nodes scan exactly faster than HNSW searches, and these tests
# are about the approximate path answering (test_calibration.py covers the speed rule).
# ENGINE: the core's graph by default; tests/test_ann_hnswlib.py runs this module again on hnswlib.
ENGINE = os.environ.get("HIPPOGRAPH_TEST_ANN_ENGINE", "core")
CFG = AnnConfig(min_nodes=50, ef_search=512, ef_construction=200, background=False, min_speedup=0, engine=ENGINE)
Backend: TypeAlias = "InMemory | LMDB | Postgres"
Make = Callable[..., Backend]
Hits = list[tuple[str, float]]


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Path, pg_store: Callable[..., Any]) -> Iterator[Make]:
    """Opens the test's store (every call the same one) on each backend that keeps a vector index."""
    opened: list[Backend] = []

    def factory(ann: AnnConfig | None = CFG, cls: type[InMemory] = InMemory) -> Backend:
        if request.param == "postgres":
            return pg_store(ann=ann)
        b: Backend = cls(ann=ann) if request.param == "memory" else LMDB(tmp_path / "store", ann=ann)
        opened.append(b)
        return b

    yield factory
    for b in opened:
        b.close()


def rng_vec(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    return rng.standard_normal(DIM).astype(np.float32)


def semantic(node_id: str, embedding: npt.NDArray[np.float32] | None, confidence: float = 0.5) -> hg.Semantic:
    return hg.Semantic(id=node_id, proposition=node_id, confidence=confidence, embedding=embedding)


def random_graph(seed: int, n: int = 240) -> hg.Changeset:
    """Semantic and subgoal nodes: some without embedding, some zero vectors, half with usage metadata."""
    rng = np.random.default_rng(seed)
    cs = hg.Changeset()
    for i in range(n):
        roll = rng.random()
        emb = None if roll < 0.04 else np.zeros(DIM, np.float32) if roll < 0.06 else rng_vec(rng)
        node_id = f"n{i:04d}"
        if i % 4 == 3:
            cs.add_node(hg.Subgoal(id=node_id, description="d", embedding=emb))
        else:
            cs.add_node(semantic(node_id, emb, float(rng.random())))
        if rng.random() < 0.5:
            accessed = NOW - timedelta(hours=float(rng.uniform(0, 300)))
            meta = hg.NodeMetadata(
                created_at=accessed - timedelta(hours=1),
                access_count=int(rng.integers(0, 30)),
                last_accessed_at=accessed if rng.random() < 0.7 else None,
                cumulative_reward=float(rng.uniform(-3, 3)),
                reward_count=int(rng.integers(0, 4)),
            )
            cs.put_metadata(node_id, meta)
    return cs


def find(
    b: Backend,
    query: npt.NDArray[np.float32],
    *,
    exact: bool = False,
    tags: list[npt.NDArray[np.float32]] | None = None,
    types: list[str] | None = None,
    vf: Mapping[str, Any] | None = None,
) -> Hits:
    got = b.find_candidates(types or ["semantic"], query, tags or [], vf, now=NOW, exact=exact)
    return [(node.id, score) for node, score in got]


def params(threshold: float, top_k: int) -> dict[str, Any]:
    return {"params": {"semantic": {"threshold": threshold, "top_k": top_k}, "subgoal": {"threshold": 0.0}}}


def record_valued_answers(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Wraps the value-weighted search and walk (`_valued`'s callable, one native call); one entry
    per call: True when its pool certified an answer."""
    calls: list[bool] = []
    real = hg.engine.query._valued

    def spy(*args: Any) -> Any:
        valued = real(*args)
        if valued is None:
            return None

        def recorded(*call: Any) -> Any:
            top, got = valued(*call)
            calls.append(got is not None)
            return top, got

        return recorded

    monkeypatch.setattr(hg.engine.query, "_valued", spy)
    return calls


def record_answers(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[bool]:
    """Wraps `owner.name`; one entry per call: True when it answered, False when it returned None."""
    calls: list[bool] = []
    real = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(owner, name, spy)
    return calls


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per certified ANN scan: True when it answered, False when it handed over to the exact scan.

    Equality with the exact path proves nothing if the exact path gave both answers.
    """
    return record_answers(monkeypatch, hg.engine.query, "certified_scan")


def available(b: Backend, node_type: str = "semantic") -> bool:
    return bool(b.vector_index_stats()[node_type]["available"])


def calibrated(b: Backend, node_type: str = "semantic") -> bool:
    """The index is published and measured: non-exact queries may use it."""
    return "recall_estimate" in b.vector_index_stats()[node_type]


def stats(b: Backend, node_type: str = "semantic") -> dict[str, Any]:
    keys = ("available", "nodes", "vectors", "live", "reclaimable")
    return {k: b.vector_index_stats()[node_type][k] for k in keys}


# -- the ANN path answers exactly what the exact scan answers ------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_ann_results_equal_exact_results_on_random_graphs(make: Make, seed: int, answered: list[bool]) -> None:
    b = make()
    b.apply_changeset(random_graph(seed))
    rng = np.random.default_rng(100 + seed)
    for threshold, top_k in [(0.0, 5), (0.1, 17), (0.3, 40), (0.0, 1), (0.05, 90)]:
        vf = params(threshold, top_k)
        query, tags = rng_vec(rng), [rng_vec(rng) for _ in range(int(rng.integers(0, 3)))]
        ann = find(b, query, tags=tags, vf=vf, types=["semantic", "subgoal"])
        assert ann == find(b, query, tags=tags, vf=vf, types=["semantic", "subgoal"], exact=True)
    assert available(b) and available(b, "subgoal")
    assert sum(answered) >= len(answered) / 2, f"the ANN path answered only {sum(answered)} of {len(answered)} scans"


@pytest.mark.parametrize("seed", range(3))
def test_relevance_gate_on_the_ann_path_equals_the_exact_scan(make: Make, seed: int, answered: list[bool]) -> None:
    """The certified walk gates on relevance as the exact scan does: same answers, few scans handed over."""
    b = make()
    cs = random_graph(seed)
    b.apply_changeset(cs)
    rng = np.random.default_rng(200 + seed)
    stored = [n.embedding for n in cs.additions if n.embedding is not None and np.any(n.embedding)]
    for threshold, top_k in [(0.5, 5), (0.7, 20), (0.3, 3), (0.9, 10)]:
        gated = {"gate": "relevance", "threshold": threshold, "top_k": top_k}
        vf = {"params": {"semantic": gated, "subgoal": gated}}
        near = stored[int(rng.integers(len(stored)))] + 0.05 * rng_vec(rng)
        ann = find(b, near, vf=vf, types=["semantic", "subgoal"])
        assert ann == find(b, near, vf=vf, types=["semantic", "subgoal"], exact=True)
        assert ann, "a query next to a stored vector passes a relevance gate"
    assert sum(answered) >= len(answered) / 2, f"the ANN path answered only {sum(answered)} of {len(answered)} scans"


def test_ann_results_stay_exact_while_metadata_nodes_and_vectors_change(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The certified walk's usage order is sorted once and then only patched: every write must keep it sound."""
    walked = record_answers(monkeypatch, hg._core, "certified_walk")
    valued = record_valued_answers(monkeypatch)
    merges: list[int] = []
    real_merge = hg._core.merge_usage_order

    def merge(*args: Any) -> Any:
        merges.append(len(args[2]))
        return real_merge(*args)

    monkeypatch.setattr(hg._core, "merge_usage_order", merge)
    monkeypatch.setattr(hg.engine.usage_order, "STALE_MAX", 6)  # merges (7–18 stale rows) as well as re-sorts (more)
    b = make()
    b.apply_changeset(random_graph(7, n=300))
    rng = np.random.default_rng(7)
    ids = [f"n{i:04d}" for i in range(300) if i % 4 != 3]
    for step in range(40):
        picked = [str(i) for i in rng.choice(ids, int(rng.choice([2, 5, 9, 40])), replace=False)]
        hours = rng.uniform(-48, 400, len(picked))  # some timestamps in the future
        b.update_metadata(
            {
                i: hg.NodeMetadata(
                    created_at=NOW - timedelta(hours=float(h) + 1),
                    access_count=int(rng.integers(0, 40)),
                    last_accessed_at=NOW - timedelta(hours=float(h)),
                    cumulative_reward=float(rng.uniform(-3, 3)),
                    reward_count=int(rng.integers(0, 4)),
                )
                for i, h in zip(picked, hours, strict=True)
            }
        )
        if step % 5 == 1:
            gone = str(rng.choice(ids))
            b.delete_nodes([gone])
            ids.remove(gone)
        if step % 5 == 3:
            fresh = f"x{step:03d}"
            b.apply_changeset(hg.Changeset().add_node(semantic(fresh, rng_vec(rng))))
            ids.append(fresh)
        if step % 7 == 5:
            moved = str(rng.choice(ids))
            b.apply_changeset(hg.Changeset().add_node(semantic(moved, rng_vec(rng))))
        vf = params(float(rng.choice([0.01, 0.05, 0.2])), int(rng.integers(1, 30)))
        query, tags = rng_vec(rng), [rng_vec(rng) for _ in range(int(rng.integers(0, 3)))]
        assert find(b, query, tags=tags, vf=vf) == find(b, query, tags=tags, vf=vf, exact=True), f"step {step}"
    assert any(walked) or any(valued), "the certified walk never answered"
    assert merges, "stale rows were never merged into the usage order"


def test_a_node_whose_usage_rises_after_a_query_outranks_closer_nodes(make: Make) -> None:
    """The walk stops early on rows it knows are stale-proof; a node used since must still be looked at."""
    rng = np.random.default_rng(11)
    axis = np.eye(DIM, dtype=np.float32)
    fresh = hg.NodeMetadata(created_at=NOW)
    old = hg.NodeMetadata(created_at=NOW - timedelta(hours=1000))
    cs = hg.Changeset()
    for i in range(40):  # closest to the query, barely used: score ~0.97 × 0.3
        cs.add_node(semantic(f"a{i:02d}", axis[0] + 0.1 * rng_vec(rng))).put_metadata(f"a{i:02d}", fresh)
    cs.add_node(semantic("x", axis[0] + 0.5 * axis[1])).put_metadata("x", old)  # cosine 0.89, long unused
    for i in range(300):
        emb = rng_vec(rng)
        emb[0] = 0.0
        cs.add_node(semantic(f"b{i:03d}", emb)).put_metadata(f"b{i:03d}", old)
    used = hg.NodeMetadata(created_at=NOW, access_count=20, last_accessed_at=NOW)
    cs.add_node(semantic("z", axis[0] + 0.5 * axis[2])).put_metadata("z", used)  # cosine 0.89, in use
    b = make()
    b.apply_changeset(cs)
    vf = params(0.01, 5)
    before = find(b, axis[0], vf=vf)
    assert before[0][0] == "z" and "x" not in [i for i, _ in before]
    assert before == find(b, axis[0], vf=vf, exact=True)
    b.delete_nodes(["b000"])  # the last row ("z") moves into the deleted one's place
    assert find(b, axis[0], vf=vf) == before
    b.update_metadata({"x": used})
    after = find(b, axis[0], vf=vf)
    assert [i for i, _ in after[:2]] == ["x", "z"]
    assert after == find(b, axis[0], vf=vf, exact=True)


def test_index_is_not_built_at_or_below_min_nodes(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(0, n=50))
    find(b, np.ones(DIM, np.float32))
    assert not available(b)


def test_exact_true_never_builds_the_index(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(1))
    for _ in range(3):
        find(b, np.ones(DIM, np.float32), exact=True)
    assert not available(b)


# -- never a dead id, never an old vector ----------------------------------------------------


def test_deleted_ids_are_never_returned(make: Make, answered: list[bool]) -> None:
    b = make()
    b.apply_changeset(random_graph(2))
    query = np.ones(DIM, np.float32)
    top = [i for i, _ in find(b, query, vf=params(0.0, 5))]
    b.delete_nodes(top[:3])
    got = find(b, query, vf=params(0.0, 5))
    assert answered[-1], "the exact scan answered instead of the vector index"
    assert not set(top[:3]) & {i for i, _ in got}
    assert got == find(b, query, vf=params(0.0, 5), exact=True)


CHILD_DELETE = """
import os, sys
from hippograph.backends import LMDB
from hippograph.backends.postgres import Postgres
kind, where, *ids = sys.argv[1:]
if kind == "lmdb":
    b = LMDB(where, ann=None)
else:
    b = Postgres(os.environ["HIPPOGRAPH_PG_DSN"], repo=where, ann=None)
with b:
    b.delete_nodes(ids)
"""


@pytest.mark.parametrize("make", ["lmdb", "postgres"], indirect=True)  # the backends processes share
def test_ids_deleted_by_another_process_are_never_returned(
    make: Make, request: pytest.FixtureRequest, tmp_path: Path, answered: list[bool]
) -> None:
    kind = request.node.callspec.params["make"]
    b = make()
    b.apply_changeset(random_graph(3))
    query = np.ones(DIM, np.float32)
    top = [i for i, _ in find(b, query, vf=params(0.0, 5))]
    assert available(b)
    where = str(tmp_path / "store") if kind == "lmdb" else repo_for(tmp_path)
    child = [sys.executable, "-c", textwrap.dedent(CHILD_DELETE), kind, where, *top[:3]]
    assert subprocess.run(child, check=False).returncode == 0
    got = find(b, query, vf=params(0.0, 5))
    assert answered[-1], "the exact scan answered instead of the vector index"
    assert not set(top[:3]) & {i for i, _ in got}
    assert got == find(b, query, vf=params(0.0, 5), exact=True)


def test_reembedded_node_ranks_by_its_new_vector(make: Make, answered: list[bool]) -> None:
    b = make()
    b.apply_changeset(random_graph(4))
    rng = np.random.default_rng(44)
    old, new = rng_vec(rng), rng_vec(rng)
    b.apply_changeset(hg.Changeset().add_node(semantic("mover", old)))
    assert find(b, old, vf=params(0.0, 5))[0][0] == "mover"
    b.apply_changeset(hg.Changeset().add_node(semantic("mover", new)))
    near_old = find(b, old, vf=params(0.0, 5))
    assert answered[-1], "the exact scan answered instead of the vector index"
    assert near_old[0][0] != "mover"
    assert near_old == find(b, old, vf=params(0.0, 5), exact=True)
    top_id, top_score = find(b, new, vf=params(0.0, 5))[0]
    assert top_id == "mover" and top_score == pytest.approx(1.0, abs=1e-5)


def test_threads_recalling_while_another_thread_writes_never_see_acknowledged_deletes(
    make: Make, answered: list[bool]
) -> None:
    """hnswlib must not be searched while it is being added to: readers stay correct under a concurrent writer."""
    b = make()
    b.apply_changeset(random_graph(5))
    find(b, np.ones(DIM, np.float32), vf=params(0.0, 10))
    assert available(b)
    deleted: set[str] = set()
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        rng = np.random.default_rng(55)
        try:
            for i in range(60):
                cs = hg.Changeset()
                for j in range(5):
                    cs.add_node(semantic(f"w{i:03d}-{j}", rng_vec(rng)))
                cs.add_node(semantic(f"n{4 * i:04d}", rng_vec(rng)))
                b.apply_changeset(cs)
                if i >= 2:
                    gone = [f"w{i - 2:03d}-{j}" for j in range(3)]
                    b.delete_nodes(gone)
                    deleted.update(gone)
        except BaseException as e:  # reported to the main thread
            errors.append(e)
        finally:
            done.set()

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not done.is_set():
                acknowledged = set(deleted)
                got = find(b, rng_vec(rng), tags=[rng_vec(rng)], vf=params(0.0, 15))
                ids = [i for i, _ in got]
                assert not acknowledged & set(ids), acknowledged & set(ids)
                assert len(ids) == len(set(ids)) == 15
                assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        except BaseException as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(s,)) for s in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(answered) >= 3, f"the ANN path answered only {sum(answered)} of {len(answered)} scans"
    rng = np.random.default_rng(66)
    for _ in range(5):
        query = rng_vec(rng)
        assert find(b, query, vf=params(0.0, 15)) == find(b, query, vf=params(0.0, 15), exact=True)


def test_metadata_updates_leave_no_deletion_marks(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(5))
    find(b, np.ones(DIM, np.float32))
    b.update_metadata({"n0000": hg.NodeMetadata(created_at=NOW, access_count=3)})
    find(b, np.ones(DIM, np.float32))
    assert stats(b)["reclaimable"] == 0


# -- semantics the ANN path must hand back to the exact scan ---------------------------------


def test_zero_score_nodes_fill_remaining_slots_in_id_order(make: Make) -> None:
    b = make()
    axis = np.eye(DIM, dtype=np.float32)[0]
    cs = hg.Changeset()
    for i in range(120):  # pointing away from the query: relevance 0
        cs.add_node(semantic(f"z{i:03d}", -axis + 0.1 * np.eye(DIM, dtype=np.float32)[1 + i % 5]))
    for i, w in enumerate([0.9, 0.5, 0.2]):
        cs.add_node(semantic(f"p{i}", w * axis + np.eye(DIM, dtype=np.float32)[2]))
    b.apply_changeset(cs)
    got = find(b, axis, vf=params(0.0, 10))
    assert [i for i, _ in got] == ["p0", "p1", "p2", *[f"z{i:03d}" for i in range(7)]]
    assert [s for _, s in got[3:]] == [0.0] * 7
    assert got == find(b, axis, vf=params(0.0, 10), exact=True)
    assert available(b)


class Confidence:
    """relevance × confidence: never above relevance, but says nothing about it."""

    def score(self, relevance: float, node: hg.Node, metadata: hg.NodeMetadata | None, p: Mapping[str, Any]) -> float:
        return relevance * float(getattr(node, "confidence", 1.0))


class BoundedConfidence(Confidence):
    bounded_by_relevance = True


def test_custom_value_function_without_bound_uses_the_exact_path(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(6))
    vf = {"function": Confidence(), **params(0.05, 8)}
    query = np.ones(DIM, np.float32)
    assert find(b, query, vf=vf) == find(b, query, vf=vf, exact=True)
    assert not available(b)


def test_custom_value_function_declaring_its_bound_uses_the_ann_path(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(6))
    vf = {"function": BoundedConfidence(), **params(0.05, 8)}
    query = np.ones(DIM, np.float32)
    assert find(b, query, vf=vf) == find(b, query, vf=vf, exact=True)
    assert available(b)


class Hiding(InMemory):
    """A store whose hydration loses one node, as a stale index would."""

    hidden = "n0006"  # a semantic node (every fourth is a subgoal) with an embedding

    def _hydrate(self, ids: list[str], metadata: bool) -> dict[str, tuple[hg.Node, hg.NodeMetadata | None]]:
        out = super()._hydrate(ids, metadata)
        out.pop(self.hidden, None)
        return out


def test_hydration_misses_do_not_count_toward_top_k() -> None:
    full, hiding = InMemory(ann=CFG), Hiding(ann=CFG)
    for b in (full, hiding):
        b.apply_changeset(random_graph(7))
    node = full.get_node(Hiding.hidden)
    assert node is not None and node.embedding is not None
    ranked = find(full, node.embedding, vf=params(0.0, 6), exact=True)
    assert Hiding.hidden in [i for i, _ in ranked[:5]], "the hidden node must take one of the five slots"
    expected = [h for h in ranked if h[0] != Hiding.hidden]
    assert find(hiding, node.embedding, vf=params(0.0, 5)) == expected[:5]
    assert find(hiding, node.embedding, vf=params(0.0, 5), exact=True) == expected[:5]
    assert available(hiding)


# -- stats and compaction --------------------------------------------------------------------


def test_vector_index_stats_count_vectors_nodes_and_marks(make: Make) -> None:
    b = make()
    cs = hg.Changeset()
    rng = np.random.default_rng(8)
    for i in range(100):
        emb = None if i < 10 else np.zeros(DIM, np.float32) if i < 15 else rng_vec(rng)
        cs.add_node(semantic(f"s{i:03d}", emb))
    b.apply_changeset(cs)
    assert stats(b) == {"available": False, "nodes": 100, "vectors": 0, "live": 0, "reclaimable": 0}
    find(b, np.ones(DIM, np.float32))
    assert stats(b) == {"available": True, "nodes": 100, "vectors": 85, "live": 85, "reclaimable": 0}
    b.delete_nodes([f"s{i:03d}" for i in range(20, 27)])
    b.apply_changeset(hg.Changeset().add_node(semantic("s050", rng_vec(rng))))
    absorbed(b)  # the new vector waits in the pending segment (scored exactly) until the graph absorbs it
    assert stats(b) == {"available": True, "nodes": 93, "vectors": 86, "live": 78, "reclaimable": 8}


def test_build_vector_index_builds_now_reporting_progress_and_queries_reuse_it(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = make()
    b.apply_changeset(random_graph(12, n=400))  # 300 semantic, 100 subgoal: both above min_nodes
    calls: list[tuple[str, int, int]] = []
    assert b.build_vector_index(["semantic"], lambda *a: calls.append(a)) == ["semantic"]
    assert available(b) and not available(b, "subgoal")
    assert calls and all(phase == "vector index semantic" for phase, _, _ in calls)
    assert [done for _, done, _ in calls] == sorted(done for _, done, _ in calls)
    assert calls[-1][1] == calls[-1][2] == stats(b)["nodes"]
    built = []
    real_build = hg.engine.columns.build_rows_index
    monkeypatch.setattr(hg.engine.columns, "build_rows_index", lambda *a, **k: built.append(1) or real_build(*a, **k))
    assert b.build_vector_index() == ["subgoal"]  # semantic is built already
    assert b.build_vector_index() == []
    find(b, rng_vec(np.random.default_rng(1)))
    assert built == [1]  # the query reused the index built ahead of it
    with pytest.raises(hg.ValidationError):
        b.build_vector_index(["no-such-type"])


def test_build_vector_index_below_min_nodes_or_without_ann_builds_nothing(make: Make) -> None:
    for b in (make(), make(ann=None)):
        b.apply_changeset(random_graph(13, n=60))  # 45 semantic nodes: at most min_nodes
        assert b.build_vector_index() == []
        assert not available(b)


def test_lmdb_build_vector_index_saves_and_a_reopened_store_adopts_the_files(tmp_path: Path) -> None:
    with LMDB(tmp_path / "s", ann=CFG) as b:
        b.apply_changeset(random_graph(14))
        assert b.build_vector_index(["semantic"]) == ["semantic"]
        assert (tmp_path / "s" / "ann" / "semantic.json").is_file()
    with LMDB(tmp_path / "s", ann=CFG) as b:
        assert b.build_vector_index(["semantic"]) == []
        assert b.vector_index_stats()["semantic"]["loaded"] is True


def test_a_reopened_store_gets_its_regions_back_with_the_saved_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regions are saved with the index: a store opened from the files bounds its rows by their
    regions at once, without computing them again; a row whose vector changed since the save
    starts in none, and every row placed lies within its region's bound."""
    with LMDB(tmp_path / "s", ann=CFG) as b:
        b.apply_changeset(random_graph(16))
        b.build_vector_index(["semantic"])
        saved = type_index(b).regions
        assert saved is not None
    moved = rng_vec(np.random.default_rng(16)) * 3
    with LMDB(tmp_path / "s", ann=None) as b:  # a write the saved files do not hold: the change log has it
        b.apply_changeset(hg.Changeset().add_nodes([semantic("n0001", moved)]))

    def partition(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("regions computed again")

    monkeypatch.setattr(hg.engine.regions, "partition", partition)
    with LMDB(tmp_path / "s", ann=CFG) as b:
        assert b.build_vector_index(["semantic"]) == []
        assert b.vector_index_stats()["semantic"]["loaded"] is True
        columns = type_index(b)
        regions = columns.regions
        assert regions is not None and np.array_equal(regions.centres, saved.centres)
        assert regions.of_row[columns.row["n0001"]] == hg.engine.regions.NO_REGION
        n = len(columns.ids)
        placed = np.flatnonzero(regions.of_row[:n] != hg.engine.regions.NO_REGION)
        assert len(placed) >= n // 2
        queries = np.random.default_rng(17).standard_normal((4, DIM)).astype(np.float32)
        bounds = regions.bounds(queries)
        unit = columns.matrix()[placed] / columns.norms()[placed, None]
        relevance = np.clip((unit @ (queries / np.linalg.norm(queries, axis=1, keepdims=True)).T).max(axis=1), 0, 1)
        assert (relevance <= bounds[regions.of_row[placed]]).all()
        vf = params(0.0, 10)
        assert find(b, moved, vf=vf) == find(b, moved, vf=vf, exact=True)


def test_repo_build_vector_index_delegates_or_reports_nothing(tmp_path: Path) -> None:
    with hg.Repo(InMemory(ann=CFG), flush_interval=0) as repo:
        repo.backend.apply_changeset(random_graph(15))
        seen: list[str] = []
        assert repo.build_vector_index("semantic", progress=lambda phase, *_: seen.append(phase)) == ["semantic"]
        assert set(seen) == {"vector index semantic"}
        assert repo.build_vector_index() == ["subgoal"]

    class Plain(InMemory):
        build_vector_index = None  # type: ignore[assignment]  # a backend without the extension

    with hg.Repo(Plain(ann=CFG), flush_interval=0) as repo:
        assert repo.build_vector_index() == []


def test_reclaim_vector_index_compacts_and_keeps_results(make: Make) -> None:
    b = make()
    b.apply_changeset(random_graph(9))
    query = np.ones(DIM, np.float32)
    find(b, query)
    b.delete_nodes([f"n{i:04d}" for i in range(0, 40, 3)])
    before = find(b, query, vf=params(0.0, 12))
    assert stats(b)["reclaimable"] > 0
    assert b.reclaim_vector_index() == ["semantic"]
    after = stats(b)
    assert after["reclaimable"] == 0 and after["vectors"] == after["live"]
    assert find(b, query, vf=params(0.0, 12)) == before
    assert b.reclaim_vector_index() == []


@pytest.mark.parametrize(
    "bad",
    [
        {"min_nodes": 0},
        {"M": -1},
        {"ef_construction": True},
        {"ef_search": 2.5},
        {"threads": -1},
        {"threads": "4"},
        {"M": 2**40},
        {"ef_search": 2**63},
        {"ef_construction": 2**31},
        {"threads": 10**6},
        {"min_nodes": 2**64},
    ],
)
def test_ann_config_rejects_invalid_values(bad: dict[str, Any]) -> None:
    with pytest.raises(hg.ConfigError):
        AnnConfig(**bad)


# -- LMDB: the saved index --------------------------------------------------------------------

QUERY = np.random.default_rng(77).standard_normal(DIM).astype(np.float32)


class SpyIndex(hnswlib.Index):  # type: ignore[misc]
    """Counts the files an engine reads: hnswlib's loads, and the core's opens that got past the hash
    (the core hashes the mapping before it parses a byte of it). Both wait while `SpyCore.opening`
    is clear."""

    loads = 0

    def load_index(self, *args: Any, **kwargs: Any) -> None:
        SpyCore.opening.wait(timeout=60)
        type(self).loads += 1
        super().load_index(*args, **kwargs)


class SpyCore:
    """Stands in for `hippograph._core` in `vector_files`, counting the graphs it opened. An open
    waits (at most a minute) while `opening` is clear: a test holds the saved graph back that way."""

    opening = threading.Event()

    def __init__(self) -> None:
        real = _core.Hnsw
        SpyCore.opening.set()

        class Hnsw:
            @staticmethod
            def open(path: Any, sha256: str | None = None) -> Any:
                SpyCore.opening.wait(timeout=60)
                graph = real.open(path, sha256)
                SpyIndex.loads += 1
                return graph

        self.Hnsw = Hnsw


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> type[SpyIndex]:
    monkeypatch.setattr(SpyIndex, "loads", 0)
    monkeypatch.setattr(hnswlib, "Index", SpyIndex)
    monkeypatch.setattr(vector_files, "_core", SpyCore())
    return SpyIndex


def saved_store(path: Path, seed: int = 10) -> Path:
    """A store whose semantic HNSW index was built, then saved by close()."""
    with LMDB(path, ann=CFG) as b:
        b.apply_changeset(random_graph(seed))
        find(b, QUERY)
        assert available(b)
    return path


def files(path: Path) -> tuple[Path, Path, Path]:
    ann = path / "ann"
    return ann / "semantic.bin", ann / "semantic.labels.msgpack", ann / "semantic.json"


def sidecar(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(files(path)[2].read_bytes())
    return doc


def reopen_and_query(path: Path, ann: AnnConfig = CFG) -> tuple[bool, Hits, Hits]:
    """(loaded from the files?, ANN hits, exact hits) in a fresh process view of the store."""
    with LMDB(path, ann=ann) as b:
        vf = params(0.0, 15)
        hits = find(b, QUERY, vf=vf)
        info = b.vector_index_stats()["semantic"]
        assert info["available"]
        return bool(info["loaded"]), hits, find(b, QUERY, vf=vf, exact=True)


def test_close_saves_the_index_as_private_verified_files(tmp_path: Path) -> None:
    path = saved_store(tmp_path / "store")
    bin_path, labels_path, _ = files(path)
    doc = sidecar(path)
    assert stat.S_IMODE(os.stat(path / "ann").st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files(path))
    assert {k: doc[k] for k in ("format", "type", "dim", "M", "ef_construction")} == {
        "format": 3,
        "type": "semantic",
        "dim": DIM,
        "M": CFG.M,
        "ef_construction": CFG.ef_construction,
    }
    assert doc["seq"] >= 1 and doc["count"] == doc["live"] > CFG.min_nodes
    assert doc["bin_tree_sha256"] == tree_sha256(bin_path.read_bytes())
    assert doc["labels_sha256"] == hashlib.sha256(labels_path.read_bytes()).hexdigest()
    assert not [f for f in (path / "ann").iterdir() if f.name.endswith(".tmp")]


def test_saved_index_is_loaded_on_reopen_not_rebuilt(tmp_path: Path, spy: type[SpyIndex]) -> None:
    path = saved_store(tmp_path / "store")
    loaded, hits, exact = reopen_and_query(path)
    assert loaded and spy.loads == 1
    assert hits == exact


def test_save_vector_index_saves_without_closing_and_only_once(tmp_path: Path) -> None:
    with LMDB(tmp_path / "store", ann=CFG) as b:
        b.apply_changeset(random_graph(11))
        assert b.save_vector_index() == []
        find(b, QUERY, types=["semantic", "subgoal"])
        assert b.save_vector_index() == ["semantic", "subgoal"]
        assert b.save_vector_index() == []
    assert reopen_and_query(tmp_path / "store")[0]


def test_unchanged_loaded_index_is_not_rewritten_on_close(tmp_path: Path) -> None:
    path = saved_store(tmp_path / "store")
    inode = os.stat(files(path)[0]).st_ino
    assert reopen_and_query(path)[0]
    assert os.stat(files(path)[0]).st_ino == inode


def flip_byte(f: Path, at: int) -> None:
    data = bytearray(f.read_bytes())
    data[at] ^= 0xFF
    f.write_bytes(bytes(data))


def flip_middle_byte(f: Path) -> None:
    flip_byte(f, f.stat().st_size // 2)


def tree_sha256(data: bytes, piece: int | None = None) -> str:
    tree = TreeHash()
    for start in range(0, len(data), piece or max(1, len(data))):
        tree.update(data[start : start + (piece or len(data))])
    return tree.hexdigest()


def truncate_half(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


DAMAGE: dict[str, Callable[[Path], object]] = {
    "corrupt_index": lambda p: flip_middle_byte(files(p)[0]),
    "truncated_index": lambda p: truncate_half(files(p)[0]),
    "empty_index": lambda p: files(p)[0].write_bytes(b""),
    "corrupt_labels": lambda p: flip_middle_byte(files(p)[1]),
    "truncated_labels": lambda p: truncate_half(files(p)[1]),
    "garbage_sidecar": lambda p: files(p)[2].write_bytes(b"{not json"),
    "missing_sidecar": lambda p: files(p)[2].unlink(),
    "sidecar_from_the_future": lambda p: files(p)[2].write_text(json.dumps({**sidecar(p), "seq": 10**6})),
    "other_format_version": lambda p: files(p)[2].write_text(json.dumps({**sidecar(p), "format": 99})),
    "corrupt_last_leaf": lambda p: flip_byte(files(p)[0], -1),
    "plain_sha256_root": lambda p: files(p)[2].write_text(
        json.dumps({**sidecar(p), "bin_tree_sha256": hashlib.sha256(files(p)[0].read_bytes()).hexdigest()})
    ),
    "format_2_sidecar": lambda p: files(p)[2].write_text(
        json.dumps({**sidecar(p), "format": 2, "bin_sha256": hashlib.sha256(files(p)[0].read_bytes()).hexdigest()})
    ),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_index_files_are_rebuilt_and_never_read_by_hnswlib(
    tmp_path: Path, spy: type[SpyIndex], damage: str
) -> None:
    path = saved_store(tmp_path / "store")
    DAMAGE[damage](path)
    loaded, hits, exact = reopen_and_query(path)
    assert not loaded and spy.loads == 0
    assert hits == exact


def test_index_saved_with_other_parameters_is_rebuilt(tmp_path: Path, spy: type[SpyIndex]) -> None:
    path = saved_store(tmp_path / "store")
    loaded, hits, exact = reopen_and_query(path, dataclasses.replace(CFG, M=8))
    assert not loaded and spy.loads == 0
    assert hits == exact


def test_index_files_of_another_store_are_never_adopted(tmp_path: Path) -> None:
    mine, other = saved_store(tmp_path / "mine", seed=12), saved_store(tmp_path / "other", seed=13)
    assert sidecar(mine)["seq"] == sidecar(other)["seq"]
    for f in files(other):
        f.replace(files(mine)[files(other).index(f)])
    loaded, hits, exact = reopen_and_query(mine)
    assert not loaded
    assert hits == exact


def split_ids(doc: dict[str, Any]) -> list[bytes]:
    ends = np.frombuffer(doc["ends"], "<u8").tolist()
    return [doc["ids"][a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def join_ids(doc: dict[str, Any], ids: list[bytes]) -> None:
    doc["ids"] = b"".join(ids)
    doc["ends"] = np.cumsum([len(i) for i in ids], dtype=np.uint64).astype("<u8").tobytes()


def as_format_1(doc: dict[str, Any]) -> None:
    """The labels file as format 1 wrote it: one msgpack item per label and per id."""
    ids = split_ids(doc)
    doc["labels"] = np.frombuffer(doc["labels"], "<u8").tolist()
    doc["ids"] = [i.decode() for i in ids]
    del doc["ends"]


def relabel(doc: dict[str, Any], change: Callable[[npt.NDArray[np.uint64]], object], key: str = "labels") -> None:
    values = np.frombuffer(doc[key], "<u8").copy()
    change(values)
    doc[key] = values.tobytes()


def reend(doc: dict[str, Any], change: Callable[[npt.NDArray[np.uint64]], object]) -> None:
    relabel(doc, change, "ends")


FORGED: dict[str, tuple[Callable[[dict[str, Any]], object], int | None]] = {
    "format_1": (as_format_1, 1),
    "repeated_id": (lambda d: join_ids(d, [split_ids(d)[0], *split_ids(d)[:1], *split_ids(d)[2:]]), None),
    "labels_out_of_order": (lambda d: relabel(d, lambda a: a.__setitem__(slice(None), a[::-1].copy())), None),
    "label_past_count": (lambda d: relabel(d, lambda a: a.__setitem__(-1, 10**6)), None),
    "ends_past_the_blob": (lambda d: d.__setitem__("ids", d["ids"][:-1]), None),
    "ends_decreasing": (lambda d: reend(d, lambda a: a.__setitem__(slice(0, 2), a[1::-1].copy())), None),
    "no_ends": (lambda d: d.pop("ends"), None),
}


def forge_labels(path: Path, forge: str) -> None:
    """Rewrites the labels file through `FORGED[forge]` with a sidecar vouching for the new bytes: damage
    that no hash catches, which the checks of the contents must."""
    change, fmt = FORGED[forge]
    labels_path = files(path)[1]
    doc = msgpack.unpackb(labels_path.read_bytes())
    change(doc)
    raw = msgpack.packb(doc)
    labels_path.write_bytes(raw)
    side = sidecar(path) | {"labels_sha256": hashlib.sha256(raw).hexdigest(), "labels_bytes": len(raw)}
    files(path)[2].write_text(json.dumps(side if fmt is None else side | {"format": fmt}))


@pytest.mark.parametrize("forge", FORGED)
def test_labels_files_that_hash_but_do_not_hold_are_rebuilt(tmp_path: Path, forge: str) -> None:
    path = saved_store(tmp_path / "store")
    forge_labels(path, forge)
    loaded, hits, exact = reopen_and_query(path)
    assert not loaded
    assert hits == exact
    assert reopen_and_query(path)[0]  # the rebuilt index was saved afresh, in the current format


def test_the_hash_tree_binds_every_leaf_and_the_core_checks_the_same_root(tmp_path: Path) -> None:
    data = np.random.default_rng(16).integers(0, 256, 2 * TREE_CHUNK + 123, np.uint8).tobytes()
    root = tree_sha256(data)
    assert tree_sha256(data, 1_000_003) == tree_sha256(data, TREE_CHUNK) == root
    assert root != hashlib.sha256(data).hexdigest()
    for at in (0, TREE_CHUNK, len(data) - 1):  # a byte of the first, second and last (partial) leaf
        changed = bytearray(data)
        changed[at] ^= 1
        assert tree_sha256(bytes(changed)) != root
    assert tree_sha256(data[:-1]) != root and tree_sha256(data + b"\0") != root
    rows = np.random.default_rng(17).standard_normal((300, DIM)).astype(np.float32)
    graph = _core.Hnsw(DIM, 8, 50, rows)
    graph.add_items(rows, np.arange(300))
    path = tmp_path / "g.bin"
    graph.save_index(str(path))
    saved = path.read_bytes()
    assert _core.Hnsw.open(path, tree_sha256(saved)).element_count == 300
    with pytest.raises(ValueError, match="tree"):
        _core.Hnsw.open(path, hashlib.sha256(saved).hexdigest())


def test_an_id_table_finds_ids_and_refuses_repeats_and_bad_offsets() -> None:
    table, needles = _core.IdTable(*encode_ids(["a", "bb", "c"])), encode_ids(["c", "a", "zz", "bb", ""])
    assert len(table) == 3 and table.positions(*needles).tolist() == [2, 0, -1, 1, -1]
    with pytest.raises(ValueError, match="repeats"):
        _core.IdTable(*encode_ids(["a", "b", "a"]))
    blob = encode_ids(["a", "bb", "c"])[0]
    for ends in ([1, 9, 4], [3, 1, 4]):
        with pytest.raises(ValueError, match="outside"):
            _core.IdTable(blob, np.array(ends, np.uint64))
        with pytest.raises(ValueError, match="outside"):
            table.positions(blob, np.array(ends, np.uint64))


def test_adopted_labels_serve_before_their_maps_are_built() -> None:
    rows = np.random.default_rng(15).standard_normal((3, DIM)).astype(np.float32)
    ann = build_rows(["a", "b", "c"], rows, CFG)
    assert ann is not None
    ann.adopt_labels(iter(["c", "a"]), np.array([2, 0], np.int64))
    assert len(ann) == 2 and ann._maps is None
    assert ann.label_of == {"c": 2, "a": 0} and ann.id_of == {2: "c", 0: "a"}
    ann.discard("a")
    assert len(ann) == 1 and ann.id_of == {2: "c"} and ann.reclaimable == 1


def test_index_stale_by_later_writes_is_caught_up_from_the_change_log(tmp_path: Path) -> None:
    path = saved_store(tmp_path / "store")
    rng = np.random.default_rng(14)
    with LMDB(path, ann=None) as writer:
        writer.delete_nodes([i for i, _ in find(writer, QUERY, vf=params(0.0, 3), exact=True)])
        writer.apply_changeset(hg.Changeset().add_node(semantic("newcomer", QUERY)))
        writer.apply_changeset(hg.Changeset().add_node(semantic("n0000", rng_vec(rng))))
        writer.update_metadata({"n0001": hg.NodeMetadata(created_at=NOW, access_count=9)})
    loaded, hits, exact = reopen_and_query(path)
    assert loaded
    assert hits == exact and hits[0][0] == "newcomer"


def test_caught_up_index_is_saved_again_on_close(tmp_path: Path) -> None:
    path = saved_store(tmp_path / "store")
    with LMDB(path, ann=None) as writer:
        writer.apply_changeset(hg.Changeset().add_node(semantic("newcomer", QUERY)))
    before = sidecar(path)["seq"]
    assert reopen_and_query(path)[0]
    assert sidecar(path)["seq"] == before + 1
    assert reopen_and_query(path)[0]


def test_index_stale_beyond_the_change_log_is_rebuilt(
    tmp_path: Path, spy: type[SpyIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = saved_store(tmp_path / "store")
    monkeypatch.setattr(lmdb_module.layout, "LOG_KEEP", 2)
    with LMDB(path, ann=None) as writer:
        for i in range(4):
            writer.apply_changeset(hg.Changeset().add_node(semantic(f"late{i}", QUERY * (i + 1))))
    loaded, hits, exact = reopen_and_query(path)
    assert not loaded and spy.loads == 0
    assert hits == exact


def test_close_warns_but_closes_when_the_index_cannot_be_saved(tmp_path: Path) -> None:
    path = tmp_path / "store"
    b = LMDB(path, ann=CFG)
    b.apply_changeset(random_graph(15))
    find(b, QUERY)
    (path / "ann").write_bytes(b"in the way")
    with pytest.warns(RuntimeWarning, match="vector index not saved"):
        b.close()
    with pytest.raises(hg.StorageError, match="closed"):
        find(b, QUERY)
    (path / "ann").unlink()
    assert reopen_and_query(path)[0] is False


def test_temp_files_a_killed_save_left_are_swept_by_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with LMDB(path, ann=CFG) as b:
        b.apply_changeset(random_graph(9))
        b.build_vector_index()
    stale, fresh = path / "ann" / ".semantic.dead.tmp", path / "ann" / ".semantic.busy.tmp"
    for leftover in (stale, fresh):
        leftover.write_bytes(b"x" * 4096)
    hour_ago = os.stat(stale).st_mtime - 2 * 3600
    os.utime(stale, (hour_ago, hour_ago))
    with LMDB(path, ann=CFG) as b:
        b.apply_changeset(hg.Changeset().add_node(semantic("later", np.ones(DIM, np.float32))))
        find(b, np.ones(DIM, np.float32))
    assert not stale.exists(), "a leftover from a killed save survived"
    assert fresh.exists(), "a temp file that may be another process's save in progress was removed"


# -- background builds (the default) --------------------------------------------------------

BACKGROUND = dataclasses.replace(CFG, background=True)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Polls `condition`: the build runs in another thread (the timeout only guards a hang)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


class HeldBuild:
    """Holds background builds at their start until `release()`, so writes can land while one is running.

    `stubborn`: the held build ignores cancellation and builds in full once released.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stubborn: bool = False) -> None:
        self.go = threading.Event()
        self.started = threading.Event()
        self.finished = threading.Event()
        real = hg.engine.vector_index.build_rows

        def held(*args: Any, cancelled: Callable[[], bool] | None = None, **kwargs: Any) -> Any:
            if cancelled is None:  # an explicit build_vector_index(): not held
                return real(*args, **kwargs)
            self.started.set()
            try:
                while not self.go.wait(0.005):
                    if cancelled() and not stubborn:
                        return None
                return real(*args, cancelled=None if stubborn else cancelled, **kwargs)
            finally:
                self.finished.set()

        monkeypatch.setattr(hg.engine.vector_index, "build_rows", held)

    def release(self) -> None:
        self.go.set()


@pytest.fixture
def builder_threads() -> Callable[[], list[threading.Thread]]:
    """The vector-index builder threads started during this test."""
    before = set(threading.enumerate())
    return lambda: [t for t in threading.enumerate() if t.name == "hippograph-vector-index" and t not in before]


def test_first_non_exact_query_scans_exactly_while_the_index_builds_in_the_background(
    make: Make, monkeypatch: pytest.MonkeyPatch, answered: list[bool]
) -> None:
    held = HeldBuild(monkeypatch)
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(21))
    query, vf = np.ones(DIM, np.float32), params(0.0, 8)
    first = find(b, query, vf=vf)
    assert held.started.wait(60) and answered == [], "the first query must not wait for the index"
    assert first == find(b, query, vf=vf, exact=True)
    info = b.vector_index_stats()["semantic"]
    assert (info["available"], info["building"]) == (False, True)
    held.release()
    wait_until(lambda: calibrated(b), "the background build published its index, which was then measured")
    # The index answers (after its calibration, off the query path, ran the certified path on its samples).
    assert find(b, query, vf=vf) == first and answered[-1] is True
    assert not b.vector_index_stats()["semantic"]["building"]


@pytest.mark.parametrize("under_lock", [1024, 5], ids=["one-replay", "rounds"])
def test_writes_made_during_a_background_build_are_in_the_index_it_publishes(
    make: Make, monkeypatch: pytest.MonkeyPatch, answered: list[bool], under_lock: int
) -> None:
    """Few writes are replayed under the lock at once; past `_CATCH_UP_UNDER_LOCK` in rounds without it first."""
    monkeypatch.setattr(hg.engine.columns, "_CATCH_UP_UNDER_LOCK", under_lock)
    rounds = record_answers(monkeypatch, hg.engine.vector_index, "replay")
    held = HeldBuild(monkeypatch)
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(22))
    rng = np.random.default_rng(22)
    query, vf = rng_vec(rng), params(0.0, 10)
    b.apply_changeset(hg.Changeset().add_node(semantic("mover", old := rng_vec(rng))))
    top = [i for i, _ in find(b, query, vf=vf) if i != "mover"]  # the build's copy holds "mover" at `old`
    assert held.started.wait(60)
    new = rng_vec(rng)
    b.delete_nodes(top[:4])
    b.apply_changeset(hg.Changeset().add_nodes([semantic(f"late{i}", rng_vec(rng)) for i in range(30)]))
    b.apply_changeset(hg.Changeset().add_node(semantic("mover", new)))
    b.apply_changeset(hg.Changeset().add_node(hg.Subgoal(id="n0000", description="now a subgoal", embedding=old)))
    find(b, query, vf=vf, exact=True)  # the backend's cache takes in the writes before the build finishes
    held.release()
    wait_until(lambda: calibrated(b), "the background build published its index, which was then measured")
    for q in [query, old, new, *(rng_vec(rng) for _ in range(9))]:
        got = find(b, q, vf=vf)
        assert not set(top[:4]) & {i for i, _ in got}
        assert got == find(b, q, vf=vf, exact=True)
    assert any(answered), "the vector index never answered"
    assert find(b, new, vf=vf)[0][0] == "mover" and find(b, old, vf=vf)[0][0] != "mover"
    assert "n0000" not in {i for i, _ in find(b, old, vf=vf)}
    assert_index_mirrors_the_rows(b)
    assert len(rounds) == (2 if under_lock < 30 else 1), "a round before the final replay, only past the threshold"


def absorbed(b: Backend, node_type: str = "semantic") -> None:
    """Waits until the graph has absorbed every pending vector (the timeout only guards a hang)."""
    deadline = time.monotonic() + 60
    while b.vector_index_stats()[node_type]["pending"]:
        assert time.monotonic() < deadline, "pending vectors were never absorbed"
        time.sleep(0.01)


def type_index(b: Backend, node_type: str = "semantic") -> Any:
    indexes = b._derived.columns
    return indexes[hg.NodeType(node_type)]


def assert_index_mirrors_the_rows(b: Backend) -> None:
    """Every live embedded node is either pending or in the published HNSW index, at its current row, with
    its current vector."""
    index = type_index(b)
    ann = index.ann
    embedded = {index.ids[r] for r in np.flatnonzero(index.norms() > 0).tolist()}
    assert set(ann.label_of) | set(ann.pending) == embedded and not set(ann.label_of) & set(ann.pending)
    graphed = sorted(ann.label_of)
    labels = [ann.label_of[i] for i in graphed]
    rows = [index.row[i] for i in graphed]
    assert ann.row_of_label[labels].tolist() == rows
    assert ann.holds(labels, index.matrix()[rows]).all()


def test_close_cancels_a_running_background_build(
    make: Make, monkeypatch: pytest.MonkeyPatch, builder_threads: Callable[[], list[threading.Thread]]
) -> None:
    held = HeldBuild(monkeypatch)
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(23))
    find(b, np.ones(DIM, np.float32))
    assert held.started.wait(60) and builder_threads()
    b.close()
    assert builder_threads() == []


def test_an_explicit_build_does_not_wait_for_a_background_build_nor_is_replaced_by_it(
    make: Make, monkeypatch: pytest.MonkeyPatch, builder_threads: Callable[[], list[threading.Thread]]
) -> None:
    held = HeldBuild(monkeypatch, stubborn=True)
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(24))
    query, vf = np.ones(DIM, np.float32), params(0.0, 8)
    find(b, query, vf=vf)
    assert held.started.wait(60)
    done: list[list[str]] = []
    explicit = threading.Thread(target=lambda: done.append(b.build_vector_index(["semantic"])))
    explicit.start()
    explicit.join(60)
    assert done == [["semantic"]] and available(b), "the explicit build waited for the background one"
    mine = type_index(b).ann
    held.release()
    assert held.finished.wait(60)
    wait_until(lambda: not builder_threads(), "the background build ended")
    assert type_index(b).ann is mine, "the cancelled background build replaced the explicit one"
    assert find(b, query, vf=vf) == find(b, query, vf=vf, exact=True)


def test_a_failed_background_build_is_reported_leaves_exact_answers_and_an_explicit_build_recovers(
    make: Make, monkeypatch: pytest.MonkeyPatch, builder_threads: Callable[[], list[threading.Thread]]
) -> None:
    attempts: list[int] = []
    real = hg.engine.vector_index.build_rows

    def fail(*args: Any, cancelled: Callable[[], bool] | None = None, **kwargs: Any) -> Any:
        if cancelled is None:
            return real(*args, **kwargs)
        attempts.append(1)
        raise MemoryError("hnswlib could not allocate")

    monkeypatch.setattr(hg.engine.vector_index, "build_rows", fail)
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(25))
    query, vf = np.ones(DIM, np.float32), params(0.0, 8)
    exact = find(b, query, vf=vf, exact=True)
    with pytest.warns(RuntimeWarning, match="background vector index build failed"):
        assert find(b, query, vf=vf) == exact
        wait_until(lambda: bool(attempts) and not builder_threads(), "the failed build ended")
    for _ in range(3):
        assert find(b, query, vf=vf) == exact
    info = b.vector_index_stats()["semantic"]
    assert (info["available"], info["building"]) == (False, False) and "MemoryError" in str(info["error"])
    assert len(attempts) == 1, "a failing build must not be retried by every query"
    assert b.build_vector_index(["semantic"]) == ["semantic"] and available(b)
    assert b.vector_index_stats()["semantic"]["error"] is None
    assert find(b, query, vf=vf) == exact


def test_a_query_racing_close_starts_no_build_that_outlives_it(
    make: Make, monkeypatch: pytest.MonkeyPatch, builder_threads: Callable[[], list[threading.Thread]]
) -> None:
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(26))
    index = type_index(b)
    for thread in index.close_background_builds():
        assert thread is None
    index.vector_index_for(approximate=True)  # what a query past the closed check would do
    assert builder_threads() == [] and index.ann is None


def reopen_in_background(path: Path, answered: list[bool]) -> tuple[bool, Hits, Hits]:
    """As `reopen_and_query`, with the default background mode: the first query scans while the saved
    graph is held back, the index arrives later."""
    SpyCore.opening.clear()
    try:
        with LMDB(path, ann=BACKGROUND) as b:
            vf = params(0.0, 15)
            first = find(b, QUERY, vf=vf)
            assert not available(b), "the first query waited for the saved index"
            SpyCore.opening.set()
            wait_until(lambda: available(b), "the saved index was adopted or rebuilt in the background")
            hits = find(b, QUERY, vf=vf)
            exact = find(b, QUERY, vf=vf, exact=True)
            assert first == exact
            return bool(b.vector_index_stats()["semantic"]["loaded"]), hits, exact
    finally:
        SpyCore.opening.set()


def test_a_saved_index_is_adopted_in_the_background_and_caught_up(
    tmp_path: Path, spy: type[SpyIndex], answered: list[bool]
) -> None:
    path = saved_store(tmp_path / "store")
    with LMDB(path, ann=None) as writer:
        writer.delete_nodes([i for i, _ in find(writer, QUERY, vf=params(0.0, 3), exact=True)])
        writer.apply_changeset(hg.Changeset().add_node(semantic("newcomer", QUERY)))
    loaded, hits, exact = reopen_in_background(path, answered)
    assert loaded and spy.loads == 1
    assert hits == exact and hits[0][0] == "newcomer"


def test_a_background_adoption_builds_the_id_and_row_maps_after_publishing_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hg.engine.column_files, "SAVE_MIN_ROWS", 10)  # the columns reopen mapped, no row map
    path = saved_store(tmp_path / "store")
    with LMDB(path, ann=BACKGROUND) as b:
        find(b, QUERY, exact=True)
        assert b._cache.columns[hg.NodeType.SEMANTIC]._row is None
        find(b, QUERY)
        wait_until(lambda: available(b), "the saved index was adopted in the background")
        columns = b._cache.columns[hg.NodeType.SEMANTIC]
        ann = columns.ann
        assert ann is not None and ann.loaded
        wait_until(lambda: ann._maps is not None and columns._row is not None, "the builder built the maps")
        gone = find(b, QUERY, vf=params(0.0, 3), exact=True)[0][0]
        b.delete_nodes([gone])
        b.apply_changeset(hg.Changeset().add_node(semantic("newcomer", QUERY)))
        assert gone not in ann.label_of
        hits = find(b, QUERY, vf=params(0.0, 15))
        assert hits == find(b, QUERY, vf=params(0.0, 15), exact=True) and hits[0][0] == "newcomer"


@pytest.mark.parametrize("damage", ["corrupt_index", "truncated_labels", "sidecar_from_the_future"])
def test_damaged_index_files_are_rebuilt_in_the_background_never_read_by_hnswlib(
    tmp_path: Path, spy: type[SpyIndex], answered: list[bool], damage: str
) -> None:
    path = saved_store(tmp_path / "store")
    DAMAGE[damage](path)
    loaded, hits, exact = reopen_in_background(path, answered)
    assert not loaded and spy.loads == 0
    assert hits == exact


def test_a_failure_reading_the_saved_index_in_the_background_falls_back_to_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: list[bool]
) -> None:
    path = saved_store(tmp_path / "store")

    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hg.engine.vector_files, "read_saved", unreadable)
    loaded, hits, exact = reopen_in_background(path, answered)
    assert not loaded and hits == exact


def test_a_cancelled_verified_copy_stops_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = saved_store(tmp_path / "store")
    doc = sidecar(path)
    ann_dir = path / "ann"
    before = set(ann_dir.iterdir())
    copy = hg.engine.vector_files._verified_copy(
        files(path)[0], ann_dir, "semantic", doc["bin_bytes"], doc["bin_tree_sha256"], lambda: True
    )
    assert copy is None and set(ann_dir.iterdir()) == before
    copy = hg.engine.vector_files._verified_copy(
        files(path)[0], ann_dir, "semantic", doc["bin_bytes"], doc["bin_tree_sha256"]
    )
    assert copy is not None and copy.read_bytes() == files(path)[0].read_bytes()
    copy.unlink()


# -- upkeep off the read path: pending vectors, calibration, the similarity floor ------------------


def test_vectors_written_after_the_build_are_answered_before_the_graph_absorbs_them(
    make: Make, monkeypatch: pytest.MonkeyPatch, answered: list[bool]
) -> None:
    """A write does not insert into the graph: until the upkeep thread does, the pending segment is
    scored exactly beside the graph's candidates, so the new node ranks as the exact scan ranks it."""
    monkeypatch.setattr(hg.engine.columns.TypeColumns, "absorb_pending", lambda *a, **k: False)  # never absorbed
    b = make()
    b.apply_changeset(random_graph(41))
    b.build_vector_index()
    index = type_index(b)
    index.ann.calibration = dataclasses.replace(index.ann.calibration, min_similarity=-np.inf)
    node = b.get_node("n0000")
    assert node is not None and node.embedding is not None
    query, vf = np.asarray(node.embedding, np.float32), params(0.0, 10)
    b.apply_changeset(hg.Changeset().add_nodes([semantic("fresh", query * 2), semantic("n0001", -query)]))
    assert b.vector_index_stats()["semantic"]["pending"] == 2
    got = find(b, query, vf=vf)
    assert got[0][0] == "fresh" and got == find(b, query, vf=vf, exact=True)
    assert "n0001" not in {i for i, _ in got}, "a re-embedded node's old vector must not answer"
    assert answered and answered[-1] is True, "the certified path must have answered"


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_vectors_written_while_a_calibration_runs_join_the_graph_before_it_ends(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibration takes seconds on a large type and writes go on meanwhile: their vectors join the
    graph between its sample queries, so queries do not score a growing pending segment all that time.
    (The backends whose columns take in a write as it is made; PostgreSQL's take it in at the next read.)"""
    b = InMemory(ann=BACKGROUND) if kind == "memory" else LMDB(tmp_path / "store", ann=BACKGROUND)
    b.apply_changeset(random_graph(44))
    b.build_vector_index()
    pending: list[int] = []
    real = hg.engine.query._trials
    rng = np.random.default_rng(44)

    def trials(columns: Any, ann: Any, *args: Any) -> Any:
        if not pending:  # a write between two steps of the calibration (it holds no lock here)
            b.apply_changeset(hg.Changeset().add_nodes([semantic(f"w{i}", rng_vec(rng)) for i in range(3)]))
            pending.append(len(ann.pending))
        got = real(columns, ann, *args)
        pending.append(len(ann.pending))
        return got

    monkeypatch.setattr(hg.engine.query, "_trials", trials)
    index = type_index(b)
    index.ann.calibration = None  # measured again, by the upkeep thread, at the next approximate query
    node = b.get_node("n0000")
    assert node is not None and node.embedding is not None
    find(b, np.asarray(node.embedding, np.float32), vf=params(0.0, 5))
    wait_until(lambda: calibrated(b), "the upkeep thread measured the index again")
    assert pending[0] == 3, "the write's vectors were pending when the calibration went on"
    assert pending[1] == 0, "they joined the graph during the calibration's sample queries"
    b.close()


def test_queries_answered_during_a_calibration_keep_the_depth_last_chosen(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calibration measures each search depth on its own calls: the index's depth, which every
    other query uses meanwhile, changes only once the calibration has chosen."""
    b = make()
    b.apply_changeset(random_graph(45))
    b.build_vector_index()
    ann = type_index(b).ann
    ann.ef_search, ann.calibration = 700, None
    seen: list[tuple[int, int]] = []
    real = hg.engine.query._trials

    def trials(columns: Any, index: Any, *args: Any) -> Any:
        seen.append((index.ef_search, args[5]))  # (samples, truth, params, now, hold, ef, weighted)
        return real(columns, index, *args)

    monkeypatch.setattr(hg.engine.query, "_trials", trials)
    node = b.get_node("n0000")
    assert node is not None and node.embedding is not None
    find(b, np.asarray(node.embedding, np.float32), vf=params(0.0, 5))  # calibrates first: background is off
    assert seen and seen[0][1] == CFG.ef_search, "the first depth measured is the configured one"
    assert all(depth == 700 for depth, _ in seen), "the index kept its depth while it was measured"
    assert ann.ef_search in {ef for _, ef in seen}, "then took the depth chosen"


def test_queries_near_nothing_stored_go_to_the_exact_scan(make: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    b = make()
    b.apply_changeset(random_graph(42))
    b.build_vector_index()
    index = type_index(b)
    floor = 0.99
    index.ann.calibration = dataclasses.replace(index.ann.calibration, min_similarity=floor)
    answered = record_answers(monkeypatch, hg.engine.query, "certified_scan")
    node = b.get_node("n0000")
    assert node is not None and node.embedding is not None
    near, far = np.asarray(node.embedding, np.float32), rng_vec(np.random.default_rng(42))
    stored = index.matrix()[index.norms() > 0]
    nearest = float((stored @ far / np.linalg.norm(stored, axis=1)).max() / np.linalg.norm(far))
    assert nearest < floor, "the far query must be far"
    vf = params(0.0, 5)
    assert find(b, near, vf=vf) == find(b, near, vf=vf, exact=True) and answered == [True]
    assert find(b, far, vf=vf) == find(b, far, vf=vf, exact=True) and answered == [True, False]


def test_a_background_index_is_calibrated_off_the_query_path(
    make: Make, monkeypatch: pytest.MonkeyPatch, answered: list[bool]
) -> None:
    b = make(ann=BACKGROUND)
    b.apply_changeset(random_graph(43))
    callers: list[str] = []
    real = hg.engine.query.calibrate

    def calibrate(*args: Any, **kwargs: Any) -> Any:
        callers.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(hg.engine.query, "calibrate", calibrate)
    node = b.get_node("n0000")
    assert node is not None and node.embedding is not None
    query, vf = np.asarray(node.embedding, np.float32), params(0.0, 5)
    find(b, query, vf=vf)  # starts the build; later queries ask for the measurement, never wait for it
    wait_until(lambda: calibrated(b), "the background build published its index, which was then measured")
    assert callers and threading.main_thread().name not in callers
    assert find(b, query, vf=vf) == find(b, query, vf=vf, exact=True) and answered[-1] is True


@pytest.mark.skipif(ENGINE != "core", reason="the value-weighted pool is the core engine's")
def test_calibration_leaves_out_a_value_weighted_pool_whose_answers_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the weighted search cannot reach the rows of most value, its pools certify wrong
    answers; calibration measures that and answers through the similarity path instead."""
    real = hg.engine.query._valued

    def missing(*args: Any) -> Any:
        pool = real(*args)
        if pool is None:
            return None

        def wrong(*call: Any) -> Any:
            top, got = pool(*call)
            if not got or not got[0]:
                return top, got
            # the better half missed, rows of no better score in its place, the answer called certified
            rows, scores = got
            held, half = set(rows), len(rows) // 2 + 1
            others = [r for r in range(len(held) + half) if r not in held][:half]
            return top, (rows[half:] + others, scores[half:] + [scores[-1]] * len(others))

        return wrong

    monkeypatch.setattr(hg.engine.query, "_valued", missing)
    b = InMemory(ann=CFG)
    b.apply_changeset(random_graph(46))
    b.build_vector_index()
    stats = b.vector_index_stats()["semantic"]
    assert stats["value_weighted_search"] is False and not stats["exact_fallback"]
    rng = np.random.default_rng(46)
    for _ in range(10):
        query = rng_vec(rng)
        assert find(b, query, vf=params(0.0, 5)) == find(b, query, vf=params(0.0, 5), exact=True)
