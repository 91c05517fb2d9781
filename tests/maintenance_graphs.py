"""Small graphs and backend helpers for the maintenance tests (decay, repair, consolidation)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.graph import codec
from hippograph.graph.maintenance import Merge

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
DIM = 4
Links = Mapping[hg.EdgeType, Iterable[str]]


def vec(values: Sequence[float]) -> npt.NDArray[np.float32]:
    return np.array(values, np.float32)


def frozen(links: Links | None) -> dict[hg.EdgeType, frozenset[str]]:
    return {e: frozenset(ids) for e, ids in (links or {}).items()}


def ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


def semantic(node_id: str, embedding: Sequence[float] = (1.0, 0.0, 0.0, 0.0), links: Links | None = None) -> hg.Node:
    return hg.Semantic(
        id=node_id,
        proposition=f"fact {node_id}",
        confidence=0.5,
        embedding=vec(embedding),
        links=frozen(links),
        created_at=ago(1000),
    )


def procedural(node_id: str, links: Links | None = None) -> hg.Node:
    return hg.Procedural(
        id=node_id,
        instruction="do",
        condition="when",
        expected_outcome="done",
        embedding=vec([0.0, 1.0, 0.0, 0.0]),
        links=frozen(links),
        created_at=ago(1000),
    )


def episodic(node_id: str) -> hg.Node:
    return hg.Episodic(
        id=node_id,
        observation="saw",
        action="act",
        state="s",
        subgoal="g",
        reward=0.0,
        trajectory_id="traj",
        embedding=vec([0.0, 0.0, 1.0, 0.0]),
        created_at=ago(1000),
    )


def tag(node_id: str, *members: str) -> hg.Node:
    return hg.Tag(id=node_id, label=node_id, links=frozen({hg.EdgeType.MEMBERSHIP: members}), created_at=ago(1000))


def intent(node_id: str, *members: str) -> hg.Node:
    return hg.Intent(
        id=node_id, description=node_id, links=frozen({hg.EdgeType.HIERARCHICAL: members}), created_at=ago(1000)
    )


def meta(
    *,
    created: float = 1000.0,
    accessed: float | None = None,
    count: int = 0,
    reward: float = 0.0,
    rewards: int = 0,
    custom: Mapping[str, Any] | None = None,
) -> hg.NodeMetadata:
    """Usage metadata; `created` and `accessed` are hours before NOW."""
    return hg.NodeMetadata(
        created_at=ago(created),
        last_accessed_at=None if accessed is None else ago(accessed),
        access_count=count,
        cumulative_reward=reward,
        reward_count=rewards,
        custom=dict(custom or {}),
    )


def build(
    backend: hg.GraphBackend,
    nodes: Iterable[hg.Node],
    metadata: Mapping[str, hg.NodeMetadata] | None = None,
    links: Iterable[tuple[str, str, hg.EdgeType | str]] = (),
) -> None:
    cs = hg.Changeset().add_nodes(nodes)
    for a, b, edge in links:
        cs.add_link(a, b, edge)
    for node_id, m in (metadata or {}).items():
        cs.put_metadata(node_id, m)
    backend.apply_changeset(cs)


@dataclass
class State:
    """Every node (with links) and every metadata record a backend holds for the given ids."""

    nodes: dict[str, hg.Node]
    metadata: dict[str, hg.NodeMetadata]


def state(backend: hg.GraphBackend, extra_ids: Iterable[str] = ()) -> State:
    nodes = {n.id: n for n in backend.get_nodes_by_type(list(hg.NodeType))}
    return State(nodes, backend.get_metadata(sorted(set(nodes) | set(extra_ids))))


def links_of(backend: hg.GraphBackend, node_id: str) -> dict[hg.EdgeType, frozenset[str]]:
    node = backend.get_node(node_id)
    assert node is not None, f"{node_id!r} is missing"
    return dict(node.links)


class ProtocolOnly:
    """Delegates exactly the `GraphBackend` protocol to another backend, and nothing else."""

    def __init__(self, inner: hg.GraphBackend) -> None:
        self.inner = inner

    def apply_changeset(self, cs: hg.Changeset) -> None:
        self.inner.apply_changeset(cs)

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self.inner.delete_nodes(ids)

    def find_candidates(
        self,
        types: Sequence[hg.NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Any,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> list[tuple[hg.Node, float]]:
        return self.inner.find_candidates(types, query, tags, value_function, now=now, exact=exact)

    def get_node(self, node_id: str) -> hg.Node | None:
        return self.inner.get_node(node_id)

    def get_linked_nodes(self, ids: Iterable[str], edge_type: hg.EdgeType | str | None = None) -> list[hg.Node]:
        return self.inner.get_linked_nodes(ids, edge_type)

    def get_nodes_by_type(self, types: Iterable[hg.NodeType | str]) -> list[hg.Node]:
        return self.inner.get_nodes_by_type(types)

    def get_metadata(self, ids: Iterable[str]) -> dict[str, hg.NodeMetadata]:
        return self.inner.get_metadata(ids)

    def update_metadata(self, updates: Mapping[str, hg.NodeMetadata]) -> None:
        self.inner.update_metadata(updates)

    def delete_metadata(self, ids: Iterable[str]) -> None:
        self.inner.delete_metadata(ids)

    def get_ingestion(self, source_id: str) -> hg.IngestionRecord | None:
        return self.inner.get_ingestion(source_id)

    def commit_ingestion(self, record: hg.IngestionRecord, cs: hg.Changeset) -> tuple[hg.Outcome, hg.IngestionReceipt]:
        return self.inner.commit_ingestion(record, cs)

    def delete_ingestion(self, source_id: str) -> bool:
        return self.inner.delete_ingestion(source_id)

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> ProtocolOnly:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def inject_dangling(backend: hg.GraphBackend, node_id: str, edge: hg.EdgeType, ghost: str) -> None:
    """Adds a one-sided link from `node_id` to the missing `ghost`, behind the backend's API."""
    inner = backend.inner if isinstance(backend, ProtocolOnly) else backend
    if isinstance(inner, InMemory):
        inner._links.setdefault(node_id, {}).setdefault(edge, set()).add(ghost)
    elif isinstance(inner, LMDB):
        key, db = node_id.encode("utf-8"), inner._dbs["links"]
        with inner._env.begin(write=True) as txn:
            links = codec.decode_links(txn.get(key, db=db))
            links.setdefault(edge, set()).add(ghost)
            txn.put(key, codec.encode_links(links), db=db)
    else:
        raise TypeError(f"cannot reach into {type(inner).__name__}")


def merge_into(proposition: str, embedding: Sequence[float]) -> Any:
    """A `decide` that merges every pair it is asked about, recording the calls in `.calls`."""
    calls: list[tuple[str, str]] = []

    def decide(a: hg.Semantic, b: hg.Semantic) -> Merge:
        calls.append((a.id, b.id))
        return Merge(proposition, list(embedding))

    decide.calls = calls  # type: ignore[attr-defined]
    return decide


def random_graph(
    seed: int, n: int = 40
) -> tuple[list[hg.Node], dict[str, hg.NodeMetadata], list[tuple[str, str, str]]]:
    """A seeded graph of semantic/procedural nodes in shared tags, random links and metadata."""
    rng = np.random.default_rng(seed)
    nodes: list[hg.Node] = []
    metadata: dict[str, hg.NodeMetadata] = {}
    for i in range(n):
        node_id = f"n{int(rng.integers(10_000)):04d}-{i}"
        emb = (rng.normal(size=DIM) + np.array([2.0, 0, 0, 0])).tolist()
        nodes.append(semantic(node_id, emb) if rng.random() < 0.8 else procedural(node_id))
        if rng.random() < 0.7:
            metadata[node_id] = meta(
                created=float(rng.uniform(0, 400)),
                accessed=float(rng.uniform(0, 300)) if rng.random() < 0.6 else None,
                count=int(rng.integers(0, 30)),
                rewards=(rewards := int(rng.integers(0, 3))),
                reward=float(rng.uniform(-2, 2)) * rewards,
            )
    ids = [n.id for n in nodes]
    nodes += [tag(f"tag{t}", *rng.choice(ids, size=8, replace=False).tolist()) for t in range(4)]
    nodes.append(intent("intent0", *rng.choice(ids, size=2, replace=False).tolist()))
    edges = [e.value for e in hg.EdgeType]
    links = [
        (ids[int(rng.integers(n))], ids[int(rng.integers(n))], edges[int(rng.integers(len(edges)))]) for _ in range(n)
    ]
    return nodes, metadata, links
