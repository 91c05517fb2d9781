"""Links across forgetting and consolidation: what `Repo.forget` and `Repo.consolidate` keep.

Both verbs run through the backend (its native ``rewrite`` where it has one),
so the rules are part of every backend's conformance:

- forget removes the ingestion's own nodes, except tag and intent nodes that a
  node outside the ingestion still links to;
- consolidation moves every link of a merged-away node onto its survivor,
  including links between two nodes merged away in the same pass;
- neither ever leaves a link to a deleted node, nor removes a link between
  two surviving nodes (other than the merged pair's own).

`run_operations` drives a repo through a sequence of ingestions, forgets and
consolidations and checks those rules after every step; the suite runs it on
seeded sequences, and property tests can draw the sequences.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..engine.checks import Embedding
from ..graph.changeset import Changeset
from ..graph.maintenance import Merge
from ..graph.model import EdgeType, Intent, NodeMetadata, NodeType, Semantic, Tag
from ..graph.protocol import GraphBackend
from ..graph.repo import Repo
from ..graph.trajectory import Step, Trajectory
from .graphs import NOW, make_node, vec

__all__ = ["Link", "LinkConformance", "Operation", "link_set", "lost_links", "random_operations", "run_operations"]

Link = tuple[str, str, EdgeType]
"""An undirected link, its ends in id order."""

Operation = tuple[Literal["ingest", "forget", "consolidate"], int]
"""("ingest", n) ingests source n; ("forget", n) forgets source n if ingested; ("consolidate", 0) merges."""

_DIM = 4
_CLUSTERS = [vec(1, 0, 0, 0), vec(0, 1, 0, 0), vec(0, 0, 1, 0)]


def link_set(backend: GraphBackend) -> set[Link]:
    """Every link the backend holds, each once."""
    out: set[Link] = set()
    for node in backend.get_nodes_by_type(list(NodeType)):
        for edge, ids in node.links.items():
            out |= {(min(node.id, other), max(node.id, other), edge) for other in ids}
    return out


def lost_links(before: Iterable[Link], after: set[Link], present: set[str], survivor: Mapping[str, str]) -> list[str]:
    """What broke the link rules between two states: links to missing nodes, and links between
    surviving nodes (ends mapped through `survivor`, merged-away id → survivor id) that vanished."""
    problems = [f"{e.value} link {a!r}-{b!r} ends at a deleted node" for a, b, e in sorted(after) if {a, b} - present]
    for a, b, edge in sorted(before):
        x, y = survivor.get(a, a), survivor.get(b, b)
        if x != y and x in present and y in present and (min(x, y), max(x, y), edge) not in after:
            problems.append(f"{edge.value} link {a!r}-{b!r} was lost (expected between {x!r} and {y!r})")
    return problems


def _present(backend: GraphBackend) -> set[str]:
    return {n.id for n in backend.get_nodes_by_type(list(NodeType))}


@dataclass
class _Scenario:
    """Deterministic structuring: source n's memories, tags shared through a small pool."""

    repo: Repo
    seed: int

    def structure(self, trajectory: Trajectory) -> Changeset:
        n = int(trajectory.source_id.removeprefix("src-"))
        rng = random.Random(self.seed * 1_000 + n)
        cs = Changeset()
        backend = self.repo.backend
        mine = [f"s{n}-{j}" for j in range(rng.randint(1, 3))]
        for node_id in mine:
            base = _CLUSTERS[rng.randrange(len(_CLUSTERS))]
            emb = base + np.float32(0.05) * np.asarray([rng.random() for _ in range(_DIM)], np.float32)
            cs.add_node(Semantic(id=node_id, proposition=node_id, confidence=0.5, embedding=emb))
        for tag_id in rng.sample(["tag-0", "tag-1", "tag-2"], rng.randint(1, 2)):
            if backend.get_node(tag_id) is None:  # the first ingestion to use a tag creates it
                cs.add_node(Tag(id=tag_id, label=tag_id, embedding=_CLUSTERS[int(tag_id[-1])]))
            for node_id in mine:
                cs.add_link(node_id, tag_id, EdgeType.MEMBERSHIP)
        if rng.random() < 0.5:
            cs.add_node(Intent(id=f"i{n}", description="goal", embedding=vec(0, 0, 0, 1)))
            cs.add_link(f"i{n}", mine[0], EdgeType.HIERARCHICAL)
        earlier = sorted(n.id for n in backend.get_nodes_by_type([NodeType.SEMANTIC]))
        for node_id in mine:
            if earlier and rng.random() < 0.7:
                cs.add_link(node_id, rng.choice(earlier), rng.choice([EdgeType.SIBLING, EdgeType.PROVENANCE]))
        return cs

    def ingest(self, n: int) -> None:
        trajectory = Trajectory(f"src-{n}", f"goal {n}", [Step("saw", "did")])
        self.repo.ingest(trajectory, structure=self.structure)

    def forget(self, n: int) -> list[str]:
        backend = self.repo.backend
        record = backend.get_ingestion(f"src-{n}")
        if record is None:
            return []
        before, own = link_set(backend), set(record.receipt.node_ids)
        summary = self.repo.forget(f"src-{n}")
        after, present = link_set(backend), _present(backend)
        problems = lost_links(before, after, present, {})
        for node_id in summary.kept_ids:
            node = backend.get_node(node_id)
            if node is None or node.node_type not in (NodeType.TAG, NodeType.INTENT) or not node.linked_ids() - own:
                problems.append(f"forget kept {node_id!r}, which nothing outside the ingestion links to")
        for node_id in set(summary.deleted_ids) | set(summary.orphan_ids):
            if node_id in present:
                problems.append(f"forget reported {node_id!r} deleted, but it is still stored")
        for node_id in own & present:
            if node_id not in summary.kept_ids:
                problems.append(f"forget left {node_id!r} of the forgotten ingestion without reporting it kept")
        return problems

    def consolidate(self) -> list[str]:
        backend = self.repo.backend
        before = link_set(backend)

        summary = self.repo.consolidate(_keep_first, threshold=0.5, now=NOW)
        survivor = {gone: keep for keep, gone in summary.merges}
        return lost_links(before, link_set(backend), _present(backend), survivor)


def run_operations(repo: Repo, operations: Sequence[Operation], seed: int = 0) -> list[str]:
    """Applies `operations` in order; the link-rule violations found after each one (none expected)."""
    scenario = _Scenario(repo, seed)
    problems: list[str] = []
    for step, (kind, n) in enumerate(operations):
        if kind == "ingest":
            scenario.ingest(n)
            found = lost_links((), link_set(repo.backend), _present(repo.backend), {})
        elif kind == "forget":
            found = scenario.forget(n)
        else:
            found = scenario.consolidate()
        problems += [f"step {step} {kind} {n}: {p}" for p in found]
    return problems


def random_operations(seed: int, count: int = 14) -> list[Operation]:
    """A seeded mix of ingestions (mostly), forgets of earlier sources and consolidations."""
    rng = random.Random(seed)
    ops: list[Operation] = []
    sources = 0
    for _ in range(count):
        roll = rng.random()
        if roll < 0.55 or sources == 0:
            ops.append(("ingest", sources))
            sources += 1
        elif roll < 0.8:
            ops.append(("forget", rng.randrange(sources)))
        else:
            ops.append(("consolidate", 0))
    return ops


class LinkConformance:
    """Link rules of forget and consolidation, through a `Repo` over the backend under test."""

    @staticmethod
    def _repo(backend: GraphBackend) -> Repo:
        return Repo(backend, flush_interval=0)

    def test_forget_keeps_a_tag_another_ingestion_links_to(self, backend: GraphBackend) -> None:
        """Forgetting A keeps A's tag that B's memory is a member of, with B's membership link."""
        repo = self._repo(backend)

        def first(_: Trajectory) -> Changeset:
            cs = Changeset().add_nodes([_semantic("sem_a"), Tag(id="shared_tag", label="t", embedding=vec(1, 0, 0, 0))])
            return cs.add_link("sem_a", "shared_tag", EdgeType.MEMBERSHIP)

        def second(_: Trajectory) -> Changeset:
            return Changeset().add_node(_semantic("sem_b")).add_link("sem_b", "shared_tag", EdgeType.MEMBERSHIP)

        repo.ingest(Trajectory("A", "a", [Step("o", "a")]), structure=first)
        repo.ingest(Trajectory("B", "b", [Step("o", "b")]), structure=second)
        summary = repo.forget("A")
        assert (summary.deleted_ids, summary.kept_ids, summary.orphan_ids) == (("sem_a",), ("shared_tag",), ())
        assert backend.get_node("sem_a") is None
        tag = backend.get_node("shared_tag")
        assert tag is not None and dict(tag.links) == {EdgeType.MEMBERSHIP: frozenset({"sem_b"})}
        sem_b = backend.get_node("sem_b")
        assert sem_b is not None and dict(sem_b.links) == {EdgeType.MEMBERSHIP: frozenset({"shared_tag"})}
        assert backend.get_ingestion("A") is None and backend.get_ingestion("B") is not None

    def test_forget_deletes_its_own_tags_and_intents_nothing_else_links_to(self, backend: GraphBackend) -> None:
        """Tags and intents only the forgotten ingestion used go with it."""
        repo = self._repo(backend)

        def only(_: Trajectory) -> Changeset:
            cs = Changeset().add_nodes([_semantic("s"), Tag(id="t", label="t"), Intent(id="i", description="d")])
            return cs.add_link("s", "t", EdgeType.MEMBERSHIP).add_link("i", "t", EdgeType.HIERARCHICAL)

        repo.ingest(Trajectory("A", "a", [Step("o", "a")]), structure=only)
        summary = repo.forget("A")
        assert sorted(summary.deleted_ids) == ["i", "s", "t"] and summary.kept_ids == ()
        assert [backend.get_node(i) for i in ("s", "t", "i")] == [None, None, None]

    def test_chained_merges_remap_links_between_merged_away_nodes(self, backend: GraphBackend) -> None:
        """b merged into a and d into c in one pass, b–d siblings: a–c are siblings afterwards."""
        cs = Changeset().add_nodes([_semantic(i, emb) for i, emb in _CHAIN.items()])
        cs.add_nodes([Tag(id="t1", label="t1"), Tag(id="t2", label="t2")])
        for member, tag in (("a", "t1"), ("b", "t1"), ("c", "t2"), ("d", "t2")):
            cs.add_link(member, tag, EdgeType.MEMBERSHIP)
        backend.apply_changeset(cs.add_link("b", "d", EdgeType.SIBLING).add_link("x", "d", EdgeType.PROVENANCE))
        used = NodeMetadata(created_at=NOW, access_count=20, last_accessed_at=NOW)
        backend.update_metadata({"a": used, "c": used})  # the survivors: more used than their partners
        summary = self._repo(backend).consolidate(_keep_first, now=NOW)
        assert sorted(summary.merges) == [("a", "b"), ("c", "d")]
        a, c, x = backend.get_node("a"), backend.get_node("c"), backend.get_node("x")
        assert a is not None and c is not None and x is not None
        assert a.links.get(EdgeType.SIBLING) == frozenset({"c"}) and c.links.get(EdgeType.SIBLING) == frozenset({"a"})
        assert c.links.get(EdgeType.PROVENANCE) == frozenset({"x"}) and x.links.get(EdgeType.PROVENANCE) == frozenset(
            {"c"}
        )
        assert backend.get_node("b") is None and backend.get_node("d") is None

    def test_random_ingestions_forgets_and_consolidations_keep_the_link_rules(self, backend: GraphBackend) -> None:
        """Seeded sequences: no link to a deleted node, no link between survivors lost."""
        repo = self._repo(backend)
        assert run_operations(repo, random_operations(7, count=24), seed=7) == []
        assert link_set(backend), "the sequence built no links: it would prove nothing"

    def test_fresh_relevant_nodes_of_relevance_gated_types_are_recalled(self, backend: GraphBackend) -> None:
        """Procedural, subgoal, tag and intent gate on relevance: a never-used matching node is found."""
        cs = Changeset()
        unused = NodeMetadata(created_at=NOW)
        for node_type in _GATED:
            for name, emb in (("hit", vec(1, 0.1, 0, 0)), ("miss", vec(0, 1, 0, 0))):
                node = make_node(node_type, f"{node_type.value}-{name}", emb)
                cs.add_node(node).put_metadata(node.id, unused)
        backend.apply_changeset(cs)
        got = backend.find_candidates(list(_GATED), vec(1, 0, 0, 0), [], None, now=NOW)
        assert [n.id for n, _ in got] == [f"{t.value}-hit" for t in _GATED]
        assert all(score < 0.31 for _, score in got), "ordered by the score, which the usage floor caps"
        score_gated = {"params": {t: {"gate": "score"} for t in _GATED}}
        assert backend.find_candidates(list(_GATED), vec(1, 0, 0, 0), [], score_gated, now=NOW) == []


_GATED = (NodeType.PROCEDURAL, NodeType.SUBGOAL, NodeType.TAG, NodeType.INTENT)
_CHAIN = {
    "a": vec(1, 0, 0, 0),
    "b": vec(1, 0.01, 0, 0),
    "c": vec(0, 1, 0, 0),
    "d": vec(0, 1, 0.01, 0),
    "x": vec(0, 0, 0, 1),
}


def _semantic(node_id: str, embedding: Embedding | None = None) -> Semantic:
    emb = vec(1, 0, 0, 0) if embedding is None else embedding
    return Semantic(id=node_id, proposition=node_id, confidence=0.5, embedding=emb)


def _keep_first(a: Semantic, b: Semantic) -> Merge:
    """Merges every pair offered, keeping the first node's vector."""
    return Merge(f"{a.proposition} + {b.proposition}", a.embedding if a.embedding is not None else vec(1, 0, 0, 0))
