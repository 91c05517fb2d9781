"""Fixtures and numeric helpers for testing hippograph backends.

Nothing here needs pytest, so benchmarks and other suites can reuse it:

- `make_node`, `sample_nodes`, `nodes_with_optionals_unset`: nodes of every type
  with every field set to a value that exposes lossy storage;
- `make_record`, `digest`: ingestion records;
- `Snapshot`, `snapshot`: everything a backend holds for given ids, comparable
  with ``==`` (how "a rejected call writes nothing" is checked);
- `random_graph`: a seeded random graph with embeddings, links and metadata;
- `reference_scores`, `reference_gated`, `ReferenceValueFunction`: the scoring
  rules written independently of hippograph's own scorer (plain Python);
- `assert_selection`: compares a ranked result to reference scores while
  tolerating float noise at the cut-off.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..graph.changeset import Changeset
from ..graph.model import (
    EdgeType,
    Episodic,
    IngestionReceipt,
    IngestionRecord,
    Intent,
    Node,
    NodeMetadata,
    NodeType,
    Procedural,
    Semantic,
    Source,
    Subgoal,
    Tag,
)
from ..graph.protocol import GraphBackend
from ..graph.value import DEFAULT_PARAMS

__all__ = [
    "NOW",
    "RandomGraph",
    "ReferenceValueFunction",
    "Snapshot",
    "assert_selection",
    "digest",
    "make_node",
    "make_record",
    "nodes_with_optionals_unset",
    "random_graph",
    "reference_gated",
    "reference_scores",
    "resolved_params",
    "sample_nodes",
    "snapshot",
    "vec",
]

#: A fixed "current time" for tests that pass ``now=`` explicitly.
NOW = datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)

FloatArray = npt.NDArray[np.float64]


def vec(*values: float) -> npt.NDArray[np.float32]:
    """A float32 vector from literal values."""
    return np.array(values, dtype=np.float32)


def make_node(
    node_type: NodeType | str,
    node_id: str,
    embedding: object = None,
    *,
    links: Mapping[EdgeType, Iterable[str]] | None = None,
    created_at: datetime = NOW,
    **fields: Any,
) -> Node:
    """A node of any type with plain default field values; `fields` override them."""
    kind = NodeType(node_type)
    defaults: dict[NodeType, dict[str, Any]] = {
        NodeType.EPISODIC: {
            "observation": f"saw {node_id}",
            "action": "act",
            "state": "state",
            "subgoal": "subgoal",
            "reward": 0.0,
            "trajectory_id": "traj",
        },
        NodeType.SEMANTIC: {"proposition": f"fact {node_id}", "confidence": 0.5},
        NodeType.PROCEDURAL: {"instruction": "do", "condition": "when", "expected_outcome": "done"},
        NodeType.TAG: {"label": f"tag {node_id}"},
        NodeType.INTENT: {"description": f"intent {node_id}"},
        NodeType.SUBGOAL: {"description": f"subgoal {node_id}"},
        NodeType.SOURCE: {"episode_id": "ep", "step_index": 0},
    }
    classes: dict[NodeType, type[Node]] = {
        NodeType.EPISODIC: Episodic,
        NodeType.SEMANTIC: Semantic,
        NodeType.PROCEDURAL: Procedural,
        NodeType.TAG: Tag,
        NodeType.INTENT: Intent,
        NodeType.SUBGOAL: Subgoal,
        NodeType.SOURCE: Source,
    }
    kwargs: dict[str, Any] = {**defaults[kind], **fields}
    return classes[kind](
        id=node_id,
        embedding=cast(Any, embedding),
        links={e: frozenset(ids) for e, ids in (links or {}).items()},
        created_at=created_at,
        **kwargs,
    )


def sample_nodes(dim: int = 4) -> list[Node]:
    """One node of each of the seven types, every optional field set.

    Values are chosen to expose lossy storage: float64 values that float32
    would round, microsecond timestamps (one before 1970, one given in a
    non-UTC zone), an int above 2**53, non-ASCII text, empty strings and
    newlines, and embeddings that are not exactly representable in decimal.
    """
    rng = np.random.default_rng(1234)

    def emb() -> npt.NDArray[np.float32]:
        out = rng.normal(size=dim).astype(np.float32)
        out[0] = np.float32(1.0 / 3.0)
        return out

    ist = timezone(timedelta(hours=5, minutes=30))
    return [
        Episodic(
            id="episodic-1",
            embedding=emb(),
            created_at=datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
            observation="the door is locked\nand the key is gone",
            action="search drawer",
            state="",
            subgoal="find key",
            reward=-0.1,
            trajectory_id="traj-ü",
        ),
        Semantic(
            id="semantic-ñ",
            embedding=emb(),
            created_at=datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            proposition="keys are kept in drawers 🔑",
            confidence=1.0 / 3.0,
        ),
        Procedural(
            id="procedural-1",
            embedding=emb(),
            created_at=datetime(2024, 2, 29, 23, 0, 0, 1, tzinfo=ist),
            instruction="open the drawer",
            condition="door locked",
            expected_outcome="key found",
            return_score=0.1,
        ),
        Tag(id="tag-1", embedding=emb(), created_at=NOW, label="household"),
        Intent(id="intent-1", embedding=emb(), created_at=NOW, description="leave the house"),
        Subgoal(
            id="subgoal-1",
            embedding=emb(),
            created_at=NOW,
            description="unlock the door",
            parent_goal="leave the house",
        ),
        Source(
            id="source-1",
            embedding=None,
            created_at=NOW,
            episode_id="episode-42",
            step_index=2**53 + 1,
            plain_text="step text",
        ),
    ]


def nodes_with_optionals_unset() -> list[Node]:
    """The types with optional fields, each left at None."""
    return [
        Procedural(id="p-none", instruction="i", condition="c", expected_outcome="o", created_at=NOW),
        Subgoal(id="s-none", description="d", created_at=NOW),
        Source(id="src-none", episode_id="e", step_index=0, created_at=NOW),
    ]


def digest(text: str) -> bytes:
    """A 32-byte payload digest derived from `text`."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def make_record(
    source_id: str,
    *,
    payload: str = "payload",
    version: int = 1,
    node_ids: Sequence[str] = (),
    stored_at: datetime = NOW,
) -> IngestionRecord:
    """An ingestion record whose digest is the SHA-256 of `payload`."""
    receipt = IngestionReceipt(source_id=source_id, node_ids=tuple(node_ids), stored_at=stored_at)
    return IngestionRecord(
        source_id=source_id, payload_digest=digest(payload), fingerprint_version=version, receipt=receipt
    )


@dataclass
class Snapshot:
    """Everything a backend returns for some ids and sources; compare with ``==``."""

    nodes: dict[str, Node]
    metadata: dict[str, NodeMetadata]
    records: dict[str, IngestionRecord | None]


def snapshot(backend: GraphBackend, ids: Iterable[str] = (), sources: Iterable[str] = ()) -> Snapshot:
    """All nodes (with links), metadata of every node and of `ids`, and the records of `sources`."""
    nodes = {n.id: n for n in backend.get_nodes_by_type(list(NodeType))}
    wanted = sorted(set(nodes) | set(ids))
    return Snapshot(
        nodes=nodes,
        metadata=dict(backend.get_metadata(wanted)),
        records={s: backend.get_ingestion(s) for s in sources},
    )


@dataclass
class RandomGraph:
    """A seeded random graph: its changeset, the nodes by id and queries to run."""

    dim: int
    changeset: Changeset
    nodes: dict[str, Node]
    metadata: dict[str, NodeMetadata]
    queries: list[tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float32]]]] = field(default_factory=list)


def random_graph(seed: int, *, n: int = 80, dim: int = 8, queries: int = 4, now: datetime = NOW) -> RandomGraph:
    """A random graph over all seven types.

    About 10% of nodes have no embedding and 5% a zero vector; 70% have
    metadata (some last accessed slightly after `now`, some never, some with
    rewards); links are random pairs of random edge types. Ids are inserted in
    an order unrelated to their sort order.
    """
    rng = np.random.default_rng(seed)
    types = list(NodeType)
    edges = list(EdgeType)
    cs = Changeset()
    nodes: dict[str, Node] = {}
    metadata: dict[str, NodeMetadata] = {}
    for i in range(n):
        node_type = types[int(rng.integers(len(types)))]
        node_id = f"{int(rng.integers(10**6)):06d}-{i}"
        r = rng.random()
        embedding: object = None
        if r >= 0.15:
            embedding = rng.normal(size=dim).astype(np.float32)
        elif r >= 0.10:
            embedding = np.zeros(dim, np.float32)
        created = now - timedelta(hours=float(rng.uniform(0, 500)))
        node = make_node(node_type, node_id, embedding, created_at=created)
        nodes[node_id] = node
        cs.add_node(node)
        if rng.random() < 0.7:
            accessed = None
            if rng.random() < 0.6:
                accessed = now - timedelta(hours=float(rng.uniform(-2, 300)))
            rewards = int(rng.integers(0, 4))
            meta = NodeMetadata(
                created_at=created,
                access_count=int(rng.integers(0, 30)),
                last_accessed_at=accessed,
                reward_count=rewards,
                cumulative_reward=float(rng.uniform(-rewards, rewards)),
            )
            metadata[node_id] = meta
            cs.put_metadata(node_id, meta)
    ids = list(nodes)
    for _ in range(n):
        a, b = rng.choice(len(ids), size=2)
        cs.add_link(ids[int(a)], ids[int(b)], edges[int(rng.integers(len(edges)))])
    out = RandomGraph(dim=dim, changeset=cs, nodes=nodes, metadata=metadata)
    for _ in range(queries):
        query = rng.normal(size=dim).astype(np.float32)
        tags = [rng.normal(size=dim).astype(np.float32) for _ in range(int(rng.integers(0, 3)))]
        out.queries.append((query, tags))
    return out


def resolved_params(
    overrides: Mapping[NodeType | str, Mapping[str, Any]] | None = None,
) -> dict[NodeType, dict[str, Any]]:
    """The default params per type (docs/architecture.md, scoring) with `overrides` applied (a plain-dict copy)."""
    out = {t: dict(p) for t, p in DEFAULT_PARAMS.items()}
    for key, value in (overrides or {}).items():
        out[NodeType(key)].update(value)
    return out


def _default_value(relevance: float, meta: NodeMetadata | None, params: Mapping[str, Any], now: datetime) -> float:
    if meta is None:
        return relevance
    since = meta.last_accessed_at if meta.last_accessed_at is not None else meta.created_at
    hours = max(0.0, (now - since).total_seconds() / 3600.0)
    n = meta.access_count
    frequency = max(float(params["base_floor"]), n / (n + float(params["k"])))
    if meta.reward_count == 0:
        reward = 1.0
    else:
        avg = meta.cumulative_reward / meta.reward_count
        reward = 1.0 / (1.0 + math.exp(-float(params["beta"]) * avg))
    return relevance * math.exp(-float(params["lambda"]) * hours) * frequency * reward


class ReferenceValueFunction:
    """The default value function (docs/architecture.md, scoring) as a plain Python `ValueFunction`.

    Written from the formula, not from hippograph's scorer; reads ``lambda``,
    ``k``, ``base_floor``, ``beta`` and ``now`` from `params`.
    """

    def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Mapping[str, Any]) -> float:
        return _default_value(relevance, metadata, params, params["now"])


def _relevance(embedding: npt.NDArray[np.float32] | None, vectors: Sequence[npt.NDArray[np.float32]]) -> float:
    if embedding is None:
        return 0.0
    e = embedding.astype(np.float64)
    norm_e = float(np.linalg.norm(e))
    best = 0.0
    for v in vectors:
        q = np.asarray(v, dtype=np.float64)
        norm_q = float(np.linalg.norm(q))
        if norm_e > 0 and norm_q > 0:
            best = max(best, float(e @ q) / (norm_e * norm_q))
    return min(best, 1.0)


def reference_scores(
    nodes: Iterable[Node],
    metadata: Mapping[str, NodeMetadata],
    query: npt.NDArray[np.float32],
    tags: Sequence[npt.NDArray[np.float32]],
    params: Mapping[NodeType, Mapping[str, Any]],
    now: datetime,
) -> dict[NodeType, dict[str, float]]:
    """Every node's default-value-function score, per type, in float64."""
    out: dict[NodeType, dict[str, float]] = {t: {} for t in NodeType}
    vectors = [query, *tags]
    for node in nodes:
        rel = _relevance(node.embedding, vectors)
        out[node.node_type][node.id] = _default_value(rel, metadata.get(node.id), params[node.node_type], now)
    return out


def reference_gated(
    nodes: Iterable[Node],
    scores: Mapping[NodeType, Mapping[str, float]],
    query: npt.NDArray[np.float32],
    tags: Sequence[npt.NDArray[np.float32]],
    params: Mapping[NodeType, Mapping[str, Any]],
) -> dict[NodeType, dict[str, float]]:
    """What each node's threshold is compared with: its score, or its relevance where its type's
    ``gate`` is ``"relevance"``."""
    out: dict[NodeType, dict[str, float]] = {t: dict(s) for t, s in scores.items()}
    vectors = [query, *tags]
    for node in nodes:
        if params[node.node_type].get("gate", "score") == "relevance":
            out[node.node_type][node.id] = _relevance(node.embedding, vectors)
    return out


def assert_selection(
    actual: Sequence[tuple[str, float]],
    universe: Mapping[str, float],
    threshold: float,
    top_k: int,
    *,
    tol: float = 1e-5,
    gated: Mapping[str, float] | None = None,
) -> None:
    """Checks a ranked `(id, score)` result against reference scores of every candidate.

    Scores must match within `tol`; the result must be ordered by score
    descending then id ascending, hold only candidates whose gated value (the
    score, or `gated[id]`: the relevance under the relevance gate) is >=
    threshold and at most `top_k` entries, and leave out nothing clearly
    better than what it kept. Candidates within `tol` of the threshold or of
    the last kept score may go either way: float noise legitimately decides them.
    """
    gate = universe if gated is None else gated
    ids = [i for i, _ in actual]
    assert len(ids) == len(set(ids)), f"duplicate ids in {ids}"
    assert len(actual) <= top_k, f"{len(actual)} results exceed top_k={top_k}"
    for node_id, score in actual:
        assert node_id in universe, f"{node_id!r} is not a candidate"
        assert abs(score - universe[node_id]) <= tol, f"{node_id!r}: score {score} != reference {universe[node_id]}"
        assert gate[node_id] >= threshold - tol, f"{node_id!r}: {gate[node_id]} below threshold {threshold}"
    for (id_a, s_a), (id_b, s_b) in itertools.pairwise(actual):
        assert s_a > s_b or (s_a == s_b and id_a < id_b), f"misordered: {(id_a, s_a)} before {(id_b, s_b)}"
    kept = set(ids)
    # Scores are never negative, so at a threshold <= 0 every candidate qualifies exactly.
    eligible = {i for i, s in gate.items() if s >= threshold + tol or (threshold <= 0.0 and s >= 0.0)}
    if len(actual) < top_k:
        missing = sorted(eligible - kept)
        assert not missing, f"left out eligible candidates {missing}"
    if actual:
        floor = min(s for _, s in actual)
        better = sorted(i for i in eligible - kept if universe[i] > floor + tol)
        assert not better, f"left out {better}, better than the kept score {floor}"
    else:
        assert top_k == 0 or not eligible, f"nothing selected although {sorted(eligible)} qualify"
