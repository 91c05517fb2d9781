"""The deterministic workload the crash and concurrency tests run, and the state checks they share.

Everything a child process does is a pure function of an operation descriptor
(a small JSON dict), so the parent can replay the acknowledged descriptors on an
`InMemory` shadow and compare whole states. Timestamps are pinned (derived from
the source index or carried in the descriptor) so the two backends compute the
same usage scores, the same decay victims and the same consolidation merges.

Ingestion goes through `Repo.ingest` with the built-in
`hippograph.graph.structuring.episodic(HashingEmbedder(dim=32))`; its output is kept
node for node, only with ``created_at`` pinned, and every second source also
gets a small "fact" layer (a tag with two or three near-duplicate semantic
nodes) so that `Repo.consolidate` has pairs to merge and `Repo.decay` has
semantic nodes and orphaned tags to delete.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import hippograph as hg
from hippograph.embedding import HashingEmbedder
from hippograph.graph.changeset import Changeset
from hippograph.graph.maintenance import Merge
from hippograph.graph.model import NodeType
from hippograph.graph.structuring import episodic
from hippograph.testing.graphs import Snapshot, snapshot

DIM = 32
T0 = datetime(2025, 1, 1, tzinfo=UTC)
EMBED = HashingEmbedder(dim=DIM)
_EPISODIC = episodic(EMBED)
DECAY_TYPES = (NodeType.SEMANTIC, NodeType.EPISODIC)
DECAY_THRESHOLD = 0.1
CONSOLIDATE_THRESHOLD = 0.7
REWARDS = (1.0, -4.0)
"""Exactly representable, so sums do not depend on the order rewards arrive in."""

_VERBS = ("restart", "rotate", "rebuild", "migrate", "patch", "scale", "drain", "audit")
_NOUNS = ("worker pool", "cache", "database", "queue", "certificate", "index", "gateway", "cluster")
_OBS = ("error rate rises", "latency spikes", "disk is full", "job times out", "health check fails", "all green")
_ACT = ("roll back", "add capacity", "clear the backlog", "page the owner", "open a ticket", "wait")


def source_id(i: int) -> str:
    return f"src-{i:06d}"


def index_of(source: str) -> int:
    return int(source.split("-", 1)[1].split(":", 1)[0])


def owner_of(node_id: str) -> str:
    """The source whose ingestion created `node_id` (ids are ``<source>:...``)."""
    return node_id.split(":", 1)[0]


def pinned(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def trajectory(i: int, variant: int = 0) -> hg.Trajectory:
    """Source `i`'s trajectory; another `variant` is a different payload for the same source."""
    rng = random.Random(i * 7919 + variant)
    goal = f"{rng.choice(_VERBS)} the {rng.choice(_NOUNS)}" + (f" (variant {variant})" if variant else "")
    steps = [hg.Step(rng.choice(_OBS), rng.choice(_ACT)) for _ in range(rng.randint(1, 3))]
    return hg.Trajectory(source_id(i), goal, steps, {"i": i, "variant": variant})


def structure(t: hg.Trajectory) -> Changeset:
    """`episodic` with pinned timestamps, plus a fact layer for every second source."""
    i = index_of(t.source_id)
    when = pinned(i)
    base = _EPISODIC(t)
    cs = Changeset()
    for node in base.additions:
        cs.add_node(dataclasses.replace(node, created_at=when))
    cs.links = list(base.links)
    if i % 2 == 0:
        tag = f"{t.source_id}:tag"
        texts = [f"{t.goal} holds", f"{t.goal} holds again", f"{t.goal} holds again today"][: 2 + (i % 4 == 0)]
        vectors = EMBED(texts)
        cs.add_node(hg.Tag(id=tag, label=t.goal, embedding=EMBED([t.goal])[0], created_at=when))
        for k, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            fact = f"{t.source_id}:fact:{k}"
            cs.add_node(hg.Semantic(id=fact, proposition=text, confidence=0.5, embedding=vector, created_at=when))
            cs.add_link(fact, tag, hg.EdgeType.MEMBERSHIP)
    for node_id in cs.node_ids:
        cs.put_metadata(node_id, hg.NodeMetadata(created_at=when))
    return cs


def metadata_for(k: int) -> hg.NodeMetadata:
    """The whole record an ``update_metadata`` operation number `k` writes."""
    return hg.NodeMetadata(
        created_at=T0,
        access_count=k % 7,
        last_accessed_at=T0 + timedelta(minutes=k % 50),
        cumulative_reward=float(k % 5) - 2.0,
        reward_count=k % 3 + 1,
        custom={"k": k, "list": [k, "x", None, 1.5], "nested": {"ok": True, "blob": b"\x00\xff"}},
    )


def decide(a: hg.Semantic, b: hg.Semantic) -> Merge | None:
    """Deterministic merge rule: merge every pair except those involving a "today" fact."""
    if "today" in a.proposition or "today" in b.proposition:
        return None
    return Merge(proposition=f"{a.proposition} | {b.id}", embedding=a.embedding if a.embedding is not None else [1.0])


def receipt_json(r: hg.IngestionReceipt) -> dict[str, Any]:
    return {"source_id": r.source_id, "node_ids": list(r.node_ids), "stored_at": r.stored_at.isoformat()}


def receipt_from_json(d: dict[str, Any]) -> hg.IngestionReceipt:
    return hg.IngestionReceipt(d["source_id"], tuple(d["node_ids"]), datetime.fromisoformat(d["stored_at"]))


def run_op(repo: hg.Repo, op: dict[str, Any]) -> dict[str, Any]:
    """Run one descriptor against `repo`; returns the acknowledgement payload."""
    kind = op["op"]
    if kind == "ingest":
        return {"receipt": receipt_json(repo.ingest(trajectory(op["i"]), structure))}
    if kind == "batch":
        receipts = repo.ingest_many([trajectory(i) for i in op["is"]], structure)
        return {"receipts": [receipt_json(r) for r in receipts]}
    if kind == "delete":
        repo.backend.delete_nodes(op["ids"])
        return {}
    if kind == "meta":
        repo.backend.update_metadata({op["id"]: metadata_for(op["k"])})
        return {}
    if kind == "reward":
        repo.reward(op["ids"], op["r"])
        return {}
    if kind == "decay":
        now = datetime.fromisoformat(op["now"])
        d = repo.decay(threshold=DECAY_THRESHOLD, types=DECAY_TYPES, now=now)
        return {"deleted": list(d.deleted_ids), "orphans": list(d.orphan_ids)}
    if kind == "consolidate":
        now = datetime.fromisoformat(op["now"])
        c = repo.consolidate(decide, threshold=CONSOLIDATE_THRESHOLD, now=now)
        return {"merges": [list(m) for m in c.merges], "orphans": list(c.orphan_ids)}
    raise ValueError(f"unknown op {kind!r}")


def removed_by(op: dict[str, Any], ack: dict[str, Any]) -> set[str]:
    """Node ids an acknowledged operation deleted."""
    if op["op"] == "delete":
        return set(op["ids"])
    if op["op"] == "decay":
        return set(ack["deleted"]) | set(ack["orphans"])
    if op["op"] == "consolidate":
        return {gone for _, gone in ack["merges"]} | set(ack["orphans"])
    return set()


def touched_metadata(op: dict[str, Any], ack: dict[str, Any] | None) -> set[str] | None:
    """Ids whose metadata `op` may change; None when unknown (an unacknowledged maintenance op)."""
    if op["op"] == "meta":
        return {op["id"]}
    if op["op"] == "reward":
        return set(op["ids"])
    if op["op"] in ("decay", "consolidate"):
        if ack is None:
            return None
        merges = ack.get("merges", [])
        return removed_by(op, ack) | {keep for keep, _ in merges}
    return set()


class Recorder:
    """A backend proxy calling `after()` once each mutating call returns (to capture crash states)."""

    MUTATORS = frozenset(
        {
            "apply_changeset",
            "delete_nodes",
            "update_metadata",
            "modify_metadata",
            "delete_metadata",
            "commit_ingestion",
            "commit_ingestions",
            "delete_ingestion",
            "rewrite",
        }
    )

    def __init__(self, inner: Any, after: Callable[[], None] = lambda: None) -> None:
        self._inner = inner
        self.after = after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.MUTATORS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            self.after()
            return out

        return call


def state(backend: Any, ids: Iterable[str], sources: Iterable[str]) -> Snapshot:
    """The full comparable state: all nodes, the metadata of `ids` and of every node, the records."""
    return snapshot(backend, ids=ids, sources=sources)


def copy_into_memory(backend: Any, ids: Iterable[str], sources: Iterable[str]) -> hg.backends.InMemory:
    """A fresh `InMemory` holding what `backend` holds (nodes, links, metadata of `ids`, records)."""
    snap = state(backend, ids, sources)
    mem = hg.backends.InMemory(ann=None)
    cs = Changeset(additions=list(snap.nodes.values()), metadata=dict(snap.metadata))
    mem.apply_changeset(cs)
    for record in snap.records.values():
        if record is not None:
            mem.commit_ingestion(record, Changeset())
    return mem


def diff(a: Snapshot, b: Snapshot, limit: int = 6) -> list[str]:
    """Human-readable differences between two states (for failure messages)."""
    out: list[str] = []
    for name in ("nodes", "metadata", "records"):
        x, y = getattr(a, name), getattr(b, name)
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                out.append(f"{name}[{key!r}]: {x.get(key)!r:.160} != {y.get(key)!r:.160}")
    return out[:limit]
