"""Explained recalls and `why_not`: the parts recombine to the score, asking changes nothing, and
every node left out gets a true reason (checked against the exact answer)."""

from __future__ import annotations

import math
import pickle
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.engine.vector_index import AnnConfig
from hippograph.graph.model import NodeType
from hippograph.testing.graphs import NOW, make_node, random_graph
from pg_server import pg_dsn, pg_store, pgvector_dsn  # noqa: F401  (fixtures)

TYPES = [t.value for t in NodeType]


def check_explained(hits: Sequence[tuple[hg.Node, float]], queries: int) -> None:
    """Each hit's explanation is its own, recombines to its score exactly and passed its gate."""
    ranks: dict[NodeType, int] = {}
    for hit in hits:
        assert isinstance(hit, hg.ExplainedHit)
        node, score = hit
        e = hit.explanation
        assert (e.node_id, e.node_type, e.score) == (node.id, node.node_type, score)
        ranks[node.node_type] = ranks.get(node.node_type, 0) + 1
        assert e.rank == ranks[node.node_type]
        assert len(e.similarities) == queries
        assert e.relevance == max([0.0, *e.similarities])
        if e.value_function == "default":
            assert e.recombined() == score
            if e.value is not None:
                v = e.value
                assert 0.0 <= v.recency <= 1.0 and v.hours >= 0.0
                assert v.frequency == max(v.base_floor, v.access_count / (v.access_count + v.k))
        assert e.passes_gate


def check_why_not(repo: hg.Repo, query: Any, tags: Any, vf: Any, types: list[str], exact: bool, every: int = 1) -> None:
    """`why_not` of every stored node (every `every`-th) agrees with the answer and its own numbers."""
    answer = repo.backend.find_candidates(types, query, tags, vf, now=NOW, exact=exact)
    returned = {n.id: s for n, s in answer}
    by_type: dict[NodeType, list[tuple[str, float]]] = {}
    for n, s in answer:
        by_type.setdefault(n.node_type, []).append((n.id, s))
    cfg = hg.graph.value.resolve_config(vf)
    for node in repo.backend.get_nodes_by_type(list(NodeType))[::every]:
        why = repo.why_not(node.id, query, tags, types, vf, NOW, exact=exact)
        if node.id in returned:
            assert why.reason == "returned" and why.explanation is not None
            assert why.explanation.score == returned[node.id]
            continue
        if node.node_type.value not in types:
            assert why.reason == "type_not_requested"
            continue
        e = why.explanation
        assert e is not None and e.rank is None
        tp = cfg.params[node.node_type]
        hits = by_type.get(node.node_type, [])
        if why.reason == "below_threshold":
            assert tp.gate == "score" and e.score < tp.threshold
        elif why.reason == "gated_out":
            assert tp.gate == "relevance" and e.relevance < tp.threshold
        elif why.reason == "outranked":
            assert e.passes_gate
            if tp.top_k:
                assert len(hits) == tp.top_k and list(why.outranked_by) == hits
                kth_id, kth = hits[-1]
                assert e.score < kth or (e.score == kth and node.id > kth_id)
                assert why.margin == kth - e.score
        else:
            assert why.reason == "missed_by_index" and not exact, why


vectors = st.integers(0, 2**32 - 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=vectors,
    tags=st.integers(0, 8),
    top_k=st.integers(0, 6),
    threshold=st.sampled_from([0.0, 0.05, 0.2, 0.5]),
    gate=st.sampled_from(["score", "relevance"]),
    dtype=st.sampled_from(["float32", "float16"]),
)
def test_explained_answers_equal_the_plain_ones_and_recombine(
    seed: int, tags: int, top_k: int, threshold: float, gate: str, dtype: Any
) -> None:
    g = random_graph(seed, n=60, dim=12, queries=1)
    backend = InMemory(ann=None, vector_dtype=dtype)
    backend.apply_changeset(g.changeset)
    rng = np.random.default_rng(seed)
    query = rng.normal(size=12).astype(np.float32)
    tag_vectors = [rng.normal(size=12).astype(np.float32) for _ in range(tags)]
    params = {"top_k": top_k, "threshold": threshold, "gate": gate, "lambda": float(rng.uniform(0, 0.05))}
    vf = {"params": {t: params for t in TYPES}}
    for exact in (True, False):
        plain = backend.find_candidates(TYPES, query, tag_vectors, vf, now=NOW, exact=exact)
        explained = backend.find_candidates(TYPES, query, tag_vectors, vf, now=NOW, exact=exact, explain=True)
        assert explained == plain
        assert [s for _, s in explained] == [s for _, s in plain]
        check_explained(explained, 1 + tags)
    check_why_not(hg.Repo(backend), query, tag_vectors, vf, ["semantic", "episodic", "procedural"], exact=True)


class Halved:
    """A custom value function: half the relevance, NaN for nodes without metadata."""

    bounded_by_relevance = True

    def score(self, relevance: float, node: hg.Node, metadata: Any, params: Mapping[str, Any]) -> float:
        return math.nan if metadata is None else relevance / 2


def test_a_custom_value_function_is_explained_by_its_own_scores() -> None:
    g = random_graph(5, n=80, dim=8, queries=1)
    backend = InMemory(ann=None)
    backend.apply_changeset(g.changeset)
    query, tags = g.queries[0]
    vf = {"function": Halved(), "params": {"semantic": {"top_k": 3}}}
    hits = backend.find_candidates(TYPES, query, tags, vf, now=NOW, explain=True)
    assert hits == backend.find_candidates(TYPES, query, tags, vf, now=NOW)
    for hit in hits:
        assert isinstance(hit, hg.ExplainedHit)
        e = hit.explanation
        assert e.value is None and e.value_function == "Halved" and e.recombined() == e.score == hit[1]
        assert e.score == e.relevance / 2
    repo = hg.Repo(backend)
    reasons = {repo.why_not(n, query, tags, TYPES, vf, NOW).reason for n in g.nodes}
    assert "not_scored" in reasons and reasons <= {
        "returned",
        "not_scored",
        "outranked",
        "below_threshold",
        "gated_out",
    }


def test_recall_hits_carry_explanations_and_unpack_as_before(tmp_path: Path) -> None:
    g = random_graph(11, n=60, dim=8, queries=1)
    with hg.Repo(LMDB(tmp_path / "s")) as repo:
        repo.backend.apply_changeset(g.changeset)
        query, tags = g.queries[0]
        plain = repo.recall(query, tags, types=TYPES, now=NOW)
        assert all(h.explanation is None for h in plain)
        explained = repo.recall(query, tags, types=TYPES, now=NOW, explain=True)
        assert [(n.id, s) for n, s in explained] == [(h.node.id, h.score) for h in plain]
        assert all(h.explanation is not None and h.explanation.path.startswith("exact scan") for h in explained)
        check_explained(explained, 1 + len(tags))
        first = explained[0]
        assert str(first.explanation).startswith(first.node.id)
        again = pickle.loads(pickle.dumps(first))
        assert type(again) is hg.ExplainedHit and again == first and again.explanation == first.explanation
        with pytest.raises(hg.NotFoundError):
            repo.why_not("no-such-node", query)
        with pytest.raises(hg.ValidationError):
            repo.recall(query, explain="yes")  # type: ignore[arg-type]


ANN = AnnConfig(min_nodes=50, ef_search=64, background=False, min_speedup=0)


@pytest.fixture(params=["memory", "lmdb", "postgres", "postgres-server"])
def indexed(request: pytest.FixtureRequest, tmp_path: Path, pg_store: Callable[..., Any]) -> Iterator[Any]:  # noqa: F811
    """A backend with a vector index (InMemory, LMDB, PostgreSQL in-process and server-side)."""
    if request.param == "postgres":
        yield pg_store(ann=ANN)
        return
    if request.param == "postgres-server":
        import psycopg

        from hippograph.backends.postgres import Postgres

        dsn, schema = request.getfixturevalue("pgvector_dsn"), f"t_{uuid.uuid4().hex[:16]}"
        server = Postgres(
            dsn, repo="r", schema=schema, ann=AnnConfig(min_nodes=1, background=False, min_speedup=0.0), search="server"
        )
        yield server
        server.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        return
    b = InMemory(ann=ANN) if request.param == "memory" else LMDB(tmp_path / "s", ann=ANN)
    yield b
    b.close()


def test_every_backend_explains_index_and_exact_answers_without_changing_them(indexed: Any) -> None:
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 16)).astype(np.float32)
    cs = hg.Changeset()
    for i in range(400):
        emb = centres[i % 4] + 0.3 * rng.normal(size=16).astype(np.float32)
        cs.add_node(make_node(NodeType.SEMANTIC, f"s{i:04d}", emb))
        if i % 3:
            meta = hg.NodeMetadata(created_at=NOW, access_count=int(rng.integers(0, 9)))
            cs.put_metadata(f"s{i:04d}", meta)
    indexed.apply_changeset(cs)
    indexed.build_vector_index(["semantic"])
    paths = set()
    for q in range(12):
        query = centres[q % 4] + 0.2 * rng.normal(size=16).astype(np.float32)
        tags = [centres[(q + 1) % 4]] if q % 2 else []
        for exact in (True, False):
            plain = indexed.find_candidates(["semantic"], query, tags, None, now=NOW, exact=exact)
            explained = indexed.find_candidates(["semantic"], query, tags, None, now=NOW, exact=exact, explain=True)
            assert explained == plain
            check_explained(explained, 1 + len(tags))
            paths |= {h.explanation.path for h in explained}
    assert len(paths) >= 2, paths  # the exact scan and the index both answered
    vf = {"params": {"semantic": {"top_k": 5, "threshold": 0.05}}}
    check_why_not(hg.Repo(indexed), query, tags, vf, ["semantic"], exact=True, every=20)
    check_why_not(hg.Repo(indexed), query, tags, vf, ["semantic"], exact=False, every=20)
    none = {"params": {"semantic": {"top_k": 0}}}
    why = hg.Repo(indexed).why_not("s0001", query, tags, ["semantic"], none, NOW)
    assert why.reason == "outranked" and why.explanation is not None and not why.outranked_by
