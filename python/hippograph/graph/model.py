"""The data model (docs/architecture.md, data model): node and edge types, nodes, metadata, receipts.

Nodes are frozen so that a node handed to a caller can never be changed behind
a backend's back; a node with other links or another embedding is a new node.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Self

import numpy as np

from ..engine.checks import Embedding, as_datetime, as_embedding, check_id, check_text, finite_float, utcnow
from ..errors import ValidationError

__all__ = [
    "NODE_CLASSES",
    "ORPHAN_TYPES",
    "EdgeType",
    "Episodic",
    "IngestionReceipt",
    "IngestionRecord",
    "Intent",
    "Node",
    "NodeMetadata",
    "NodeType",
    "Outcome",
    "Procedural",
    "Semantic",
    "Source",
    "Subgoal",
    "Tag",
    "as_edge_type",
    "as_node_type",
    "as_node_types",
]


class NodeType(enum.StrEnum):
    """The seven kinds of memory node."""

    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    TAG = "tag"
    INTENT = "intent"
    SUBGOAL = "subgoal"
    SOURCE = "source"

    def __str__(self) -> str:
        return self.value


class EdgeType(enum.StrEnum):
    """The four kinds of undirected link."""

    MEMBERSHIP = "membership"
    HIERARCHICAL = "hierarchical"
    PROVENANCE = "provenance"
    SIBLING = "sibling"

    def __str__(self) -> str:
        return self.value


class Outcome(enum.StrEnum):
    """Result of `commit_ingestion`: the record was new, or already stored."""

    INSERTED = "inserted"
    EXISTING = "existing"


def as_node_types(value: object) -> list[NodeType]:
    """One node type or a collection of them."""
    if isinstance(value, (str, NodeType)):
        return [as_node_type(value)]
    if isinstance(value, (list, tuple)) and all(type(t) is NodeType for t in value):  # nothing to convert
        return list(value)
    if not isinstance(value, Iterable):
        raise ValidationError(f"types must be a node type or a collection of them, got {type(value).__name__}")
    return [as_node_type(t) for t in value]


def as_node_type(value: object) -> NodeType:
    if type(value) is NodeType:  # the common call: a member already (an Enum call costs far more)
        return value
    try:
        return NodeType(value)  # type: ignore[arg-type]  # refused below when not a member
    except ValueError:
        raise ValidationError(f"unknown node type {value!r}; expected one of {[t.value for t in NodeType]}") from None


def as_edge_type(value: object) -> EdgeType:
    if type(value) is EdgeType:  # the common call: a member already (an Enum call costs far more)
        return value
    try:
        return EdgeType(value)  # type: ignore[arg-type]  # refused below when not a member
    except ValueError:
        raise ValidationError(f"unknown edge type {value!r}; expected one of {[t.value for t in EdgeType]}") from None


def _normalise_links(value: object, node_id: str) -> dict[EdgeType, frozenset[str]]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"links of node {node_id!r} must be a mapping of edge type to ids")
    out: dict[EdgeType, frozenset[str]] = {}
    for key, ids in value.items():
        edge = as_edge_type(key)
        if isinstance(ids, str) or not isinstance(ids, Iterable):
            raise ValidationError(f"links[{edge.value}] of node {node_id!r} must be a collection of ids")
        members = frozenset(check_id(i, f"linked id of node {node_id!r}") for i in ids)
        members = members - {node_id}
        if members:
            out[edge] = out.get(edge, frozenset()) | members
    return out


_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_set(cls: type) -> frozenset[str]:
    """Field names per dataclass, cached: `dataclasses.fields` is slow for the hydration hot path."""
    names = _FIELD_SETS.get(cls)
    if names is None:
        names = _FIELD_SETS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


_TYPE_FIELDS: dict[type, tuple[str, ...]] = {}


def _type_fields(cls: type) -> tuple[str, ...]:
    """A node class's own fields (not `Node.base_fields`), in declaration order, cached as `_field_set`."""
    names = _TYPE_FIELDS.get(cls)
    if names is None:
        base: tuple[str, ...] = getattr(cls, "base_fields", ())
        names = _TYPE_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name not in base)
    return names


_KINDS: dict[str, tuple[type, bool]] = {
    "str": (str, False),
    "float": (float, False),
    "int": (int, False),
    "str | None": (str, True),
    "float | None": (float, True),
}


@dataclass(frozen=True, kw_only=True, eq=False)
class Node:
    """Fields every node has. Construct one of the seven subclasses."""

    node_type: ClassVar[NodeType]
    base_fields: ClassVar[tuple[str, ...]] = ("id", "embedding", "links", "created_at")

    id: str
    embedding: Embedding | None = field(default=None, repr=False)
    links: Mapping[EdgeType, frozenset[str]] = field(default_factory=dict)
    created_at: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        if type(self) is Node:
            raise TypeError("Node is abstract; use Episodic, Semantic, Procedural, Tag, Intent, Subgoal or Source")
        set_ = object.__setattr__
        check_id(self.id, f"{self.node_type.value} node id")
        if self.embedding is not None:
            set_(self, "embedding", as_embedding(self.embedding, f"embedding of node {self.id!r}"))
        set_(self, "links", _normalise_links(self.links, self.id))
        set_(self, "created_at", as_datetime(self.created_at, f"created_at of node {self.id!r}"))
        for f in dataclasses.fields(self):
            if f.name in self.base_fields:
                continue
            kind, optional = _KINDS[str(f.type)]
            value = getattr(self, f.name)
            if value is None and optional:
                continue
            what = f"{f.name} of node {self.id!r}"
            if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
                set_(self, f.name, finite_float(value, what))
            elif kind is int and isinstance(value, int) and not isinstance(value, bool):
                if not -(2**63) <= value < 2**63:
                    raise ValidationError(f"{what} does not fit in 64 bits")
            elif kind is str and isinstance(value, str):
                check_text(value, what)
            else:
                raise ValidationError(
                    f"{f.name} of {self.node_type.value} node {self.id!r} must be "
                    f"{kind.__name__}{' or None' if optional else ''}, got {type(value).__name__}"
                )

    @classmethod
    def from_storage(cls, values: Mapping[str, Any]) -> Self:
        """A node from values a backend validated when it stored them, without re-validating.

        Hydrating candidates is on the recall hot path; the store only ever
        holds values that passed `__post_init__`. Callers pass every field
        (`links` as a dict of frozensets, `embedding` read-only float32 or None).
        """
        expected = _field_set(cls)
        if values.keys() != expected:
            raise ValidationError(
                f"stored {cls.node_type.value} record has fields {sorted(values)}, expected {sorted(expected)}"
            )
        node = object.__new__(cls)
        for name, value in values.items():
            object.__setattr__(node, name, value)
        return node

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The type-specific fields, in declaration order (found once per class: every write asks)."""
        return _type_fields(cls)

    def fields_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.field_names()}

    def with_links(self, links: Mapping[EdgeType, Iterable[str]]) -> Node:
        """This node with another link set (backends assemble stored nodes with it)."""
        out = object.__new__(type(self))  # a shallow copy without copy.copy's reduce protocol: hydration's hot path
        out.__dict__.update(self.__dict__)
        out.__dict__["links"] = {e: frozenset(ids) for e, ids in links.items() if ids}
        return out

    def linked_ids(self) -> set[str]:
        return set().union(*self.links.values()) if self.links else set()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Node)
        if self.embedding is None or other.embedding is None:
            if self.embedding is not other.embedding:
                return False
        elif not np.array_equal(self.embedding, other.embedding):
            return False
        return (
            self.id == other.id
            and self.created_at == other.created_at
            and dict(self.links) == dict(other.links)
            and self.fields_dict() == other.fields_dict()
        )

    def __hash__(self) -> int:
        return hash((self.node_type, self.id))


@dataclass(frozen=True, kw_only=True, eq=False)
class Episodic(Node):
    """One step an agent took: what it saw, did, and how it went."""

    node_type: ClassVar[NodeType] = NodeType.EPISODIC
    observation: str
    action: str
    state: str
    subgoal: str
    reward: float
    trajectory_id: str


@dataclass(frozen=True, kw_only=True, eq=False)
class Semantic(Node):
    """A fact or belief distilled from experience."""

    node_type: ClassVar[NodeType] = NodeType.SEMANTIC
    proposition: str
    confidence: float


@dataclass(frozen=True, kw_only=True, eq=False)
class Procedural(Node):
    """A how-to: when `condition` holds, do `instruction`, expect `expected_outcome`."""

    node_type: ClassVar[NodeType] = NodeType.PROCEDURAL
    instruction: str
    condition: str
    expected_outcome: str
    return_score: float | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Tag(Node):
    """A label that groups other nodes through membership links."""

    node_type: ClassVar[NodeType] = NodeType.TAG
    label: str


@dataclass(frozen=True, kw_only=True, eq=False)
class Intent(Node):
    """What the agent was trying to do."""

    node_type: ClassVar[NodeType] = NodeType.INTENT
    description: str


@dataclass(frozen=True, kw_only=True, eq=False)
class Subgoal(Node):
    """A goal, optionally part of a larger one."""

    node_type: ClassVar[NodeType] = NodeType.SUBGOAL
    description: str
    parent_goal: str | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Source(Node):
    """Where a memory came from: an episode and a step within it."""

    node_type: ClassVar[NodeType] = NodeType.SOURCE
    episode_id: str
    step_index: int
    plain_text: str | None = None


ORPHAN_TYPES = frozenset({NodeType.TAG, NodeType.INTENT})
"""Types that exist only to connect others: deleted by maintenance once they have no links."""

NODE_CLASSES: dict[NodeType, type[Node]] = {
    cls.node_type: cls for cls in (Episodic, Semantic, Procedural, Tag, Intent, Subgoal, Source)
}


def _kind(value: object) -> str:
    """What an out-of-range count was, without its value (counts are user data)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "a negative int" if value < 0 else "an int of 2**63 or more"
    return type(value).__name__


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise ValidationError(f"{what} must be a non-negative int below 2**63, got {_kind(value)}")
    return value


_MAX_CUSTOM_DEPTH = 32


def _check_custom(value: object, path: str, depth: int = 0) -> None:
    """Custom metadata holds plain data every backend stores the same way."""
    if depth > _MAX_CUSTOM_DEPTH:
        raise ValidationError(f"metadata custom value at {path} is nested deeper than {_MAX_CUSTOM_DEPTH}")
    if isinstance(value, str):
        check_text(value, f"metadata custom value at {path}")
        return
    if value is None or isinstance(value, (bool, bytes)):
        return
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise ValidationError(f"metadata custom int at {path} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"metadata custom float at {path} must be finite")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_custom(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(f"metadata custom keys must be str, got {type(key).__name__} at {path}")
            check_text(key, f"metadata custom key at {path}")
            _check_custom(item, f"{path}.{key}", depth + 1)
    else:
        raise ValidationError(
            f"metadata custom value at {path} has type {type(value).__name__}; "
            "allowed: None, bool, int, float, str, bytes, list, dict"
        )


@dataclass(frozen=True, kw_only=True)
class NodeMetadata:
    """Usage statistics of one node, read by value functions.

    Frozen: the helpers return an updated copy, so a record a backend holds is
    never changed by a caller that kept a reference to it.
    """

    created_at: datetime = field(default_factory=utcnow)
    access_count: int = 0
    last_accessed_at: datetime | None = None
    cumulative_reward: float = 0.0
    reward_count: int = 0
    custom: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "created_at", as_datetime(self.created_at, "metadata created_at"))
        if self.last_accessed_at is not None:
            set_(self, "last_accessed_at", as_datetime(self.last_accessed_at, "metadata last_accessed_at"))
        _count(self.access_count, "access_count")
        _count(self.reward_count, "reward_count")
        set_(self, "cumulative_reward", finite_float(self.cumulative_reward, "cumulative_reward"))
        if not isinstance(self.custom, Mapping):
            raise ValidationError("metadata custom must be a mapping with str keys")
        custom = dict(self.custom)
        _check_custom(custom, "custom")
        set_(self, "custom", custom)

    @classmethod
    def from_storage(cls, values: Mapping[str, Any]) -> NodeMetadata:
        """Metadata a backend validated when it stored it, rebuilt without re-validating (hot path)."""
        meta = object.__new__(cls)
        for name in _field_set(cls):
            object.__setattr__(meta, name, values[name])
        return meta

    def record_access(self, now: datetime | None = None) -> NodeMetadata:
        """A copy with one more access at `now` (default: the current UTC time)."""
        when = utcnow() if now is None else as_datetime(now, "now")
        return dataclasses.replace(self, access_count=self.access_count + 1, last_accessed_at=when)

    def update_reward(self, reward: float) -> NodeMetadata:
        """A copy with `reward` added to the running reward."""
        value = finite_float(reward, "reward")
        return dataclasses.replace(
            self, cumulative_reward=self.cumulative_reward + value, reward_count=self.reward_count + 1
        )

    @property
    def avg_reward(self) -> float:
        return self.cumulative_reward / self.reward_count if self.reward_count else 0.0

    @property
    def reference_time(self) -> datetime:
        """The instant recency is measured from: last access, else creation."""
        return self.last_accessed_at or self.created_at


@dataclass(frozen=True)
class IngestionReceipt:
    """What an ingestion stored: the source, its node ids in order, and when."""

    source_id: str
    node_ids: tuple[str, ...]
    stored_at: datetime

    def __post_init__(self) -> None:
        check_id(self.source_id, "receipt source_id")
        ids = tuple(self.node_ids)
        for i in ids:
            check_id(i, "receipt node id")
        object.__setattr__(self, "node_ids", ids)
        object.__setattr__(self, "stored_at", as_datetime(self.stored_at, "receipt stored_at"))


@dataclass(frozen=True)
class IngestionRecord:
    """The permanent control record behind exactly-once ingestion."""

    source_id: str
    payload_digest: bytes
    fingerprint_version: int
    receipt: IngestionReceipt

    def __post_init__(self) -> None:
        check_id(self.source_id, "ingestion source_id")
        if not isinstance(self.payload_digest, bytes) or len(self.payload_digest) != 32:
            raise ValidationError(f"payload_digest of {self.source_id!r} must be 32 bytes")
        version = self.fingerprint_version
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValidationError(f"fingerprint_version of {self.source_id!r} must be an int >= 1")
        if not isinstance(self.receipt, IngestionReceipt):
            raise ValidationError(f"receipt of {self.source_id!r} must be an IngestionReceipt")
        if self.receipt.source_id != self.source_id:
            raise ValidationError(
                f"receipt source_id {self.receipt.source_id!r} differs from record {self.source_id!r}"
            )
