"""Changesets: the unit a backend applies atomically (docs/architecture.md, data model)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .._core import plain_changeset
from ..engine.checks import MAX_ID_BYTES, check_id, vector_norm
from ..errors import ValidationError
from .model import EdgeType, Node, NodeMetadata, as_edge_type

__all__ = ["Changeset", "Link", "check_changeset", "normalised_links", "resulting_dim"]

Link = tuple[str, str, EdgeType]


@dataclass
class Changeset:
    """Additions, links and metadata to apply together.

    Builders validate as they go and return the changeset, so calls chain;
    append order is kept because backends apply additions, then links, in it.
    """

    additions: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    metadata: dict[str, NodeMetadata] = field(default_factory=dict)

    def add_node(self, node: Node) -> Changeset:
        if not isinstance(node, Node):
            raise ValidationError(f"add_node expects a Node, got {type(node).__name__}")
        self.additions.append(node)
        return self

    def add_nodes(self, nodes: Iterable[Node]) -> Changeset:
        if not isinstance(nodes, Iterable):
            raise ValidationError(f"add_nodes expects a collection of nodes, got {type(nodes).__name__}")
        for node in nodes:
            self.add_node(node)
        return self

    def add_link(self, a: str, b: str, edge_type: EdgeType | str) -> Changeset:
        """Links a and b both ways; an unknown edge type is refused here."""
        self.links.append((check_id(a, "link end"), check_id(b, "link end"), as_edge_type(edge_type)))
        return self

    def put_metadata(self, node_id: str, metadata: NodeMetadata) -> Changeset:
        """Sets the metadata of `node_id`; a later put for the same id wins."""
        check_id(node_id, "metadata id")
        if not isinstance(metadata, NodeMetadata):
            raise ValidationError(f"metadata of {node_id!r} must be NodeMetadata, got {type(metadata).__name__}")
        self.metadata[node_id] = metadata
        return self

    def merge(self, other: Changeset) -> Changeset:
        """A new changeset: self's entries then other's; other wins on metadata."""
        if not isinstance(other, Changeset):
            raise ValidationError(f"merge expects a Changeset, got {type(other).__name__}")
        return Changeset(
            additions=[*self.additions, *other.additions],
            links=[*self.links, *other.links],
            metadata={**self.metadata, **other.metadata},
        )

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(n.id for n in self.additions)

    def is_empty(self) -> bool:
        return not (self.additions or self.links or self.metadata)


def check_changeset(cs: object, dim: int | None) -> int | None:
    """Validates a whole changeset before anything is written.

    Returns the embedding dimension the store will have afterwards: `dim`, or
    the first embedding's when the store has none yet. Every embedding must
    share it, so a rejected changeset never leaves a partial write behind.
    """
    if not isinstance(cs, Changeset):
        raise ValidationError(f"expected a Changeset, got {type(cs).__name__}")
    plain, after = plain_changeset(cs.additions, cs.links, cs.metadata, dim, _SHAPES)
    if plain:  # the common changeset, checked in one native call
        return after
    return checked_in_full(cs, dim)


def checked_in_full(cs: Changeset, dim: int | None) -> int | None:
    """`check_changeset` part by part, naming what is wrong: whatever the native check of the
    common shape does not accept."""
    if not isinstance(cs.additions, list) or not isinstance(cs.links, list):
        raise ValidationError("changeset additions and links must be lists")
    for node in cs.additions:
        if not isinstance(node, Node):
            raise ValidationError(f"changeset addition is not a Node: {type(node).__name__}")
        if node.embedding is not None:
            emb = node.embedding
            if not (isinstance(emb, np.ndarray) and emb.dtype == np.float32 and emb.ndim == 1 and emb.size):
                raise ValidationError(f"embedding of node {node.id!r} must be a non-empty 1-D float32 array")
            if not math.isfinite(vector_norm(emb)):  # float32 squares summed in float64 cannot overflow
                raise ValidationError(f"embedding of node {node.id!r} holds NaN or infinite values")
            size = int(emb.shape[0])
            if dim is None:
                dim = size
            elif size != dim:
                raise ValidationError(f"embedding of node {node.id!r} has dimension {size}, the store holds {dim}")
    for link in cs.links:
        if not (isinstance(link, tuple) and len(link) == 3):
            raise ValidationError(f"link must be a (id_a, id_b, edge_type) tuple, got {link!r:.80}")
        check_id(link[0], "link end")
        check_id(link[1], "link end")
        as_edge_type(link[2])
    if not isinstance(cs.metadata, dict):
        raise ValidationError("changeset metadata must be a dict of id to NodeMetadata")
    for node_id, meta in cs.metadata.items():
        check_id(node_id, "metadata id")
        if not isinstance(meta, NodeMetadata):
            raise ValidationError(f"metadata of {node_id!r} must be NodeMetadata, got {type(meta).__name__}")
    return dim


_SHAPES = (Node, NodeMetadata, EdgeType, MAX_ID_BYTES)
"""What `plain_changeset` checks a changeset's parts against."""


def resulting_dim(cs: Changeset, dim: int | None) -> int | None:
    """The store's dimension after `cs` (already validated by `check_changeset`).

    Backends call it inside their write transaction, where the stored
    dimension is authoritative, to re-check only what may have changed since
    the full validation ran outside it: the dimension.
    """
    for node in cs.additions:
        if node.embedding is not None:
            size = int(node.embedding.shape[0])
            if dim is None:
                dim = size
            elif size != dim:
                raise ValidationError(f"embedding of node {node.id!r} has dimension {size}, the store holds {dim}")
    return dim


def normalised_links(cs: Changeset) -> list[Link]:
    """Links to apply, in order: each addition's own links, then the changeset's."""
    own = [(n.id, other, edge) for n in cs.additions for edge, ids in n.links.items() for other in sorted(ids)]
    return own + [(a, b, as_edge_type(e)) for a, b, e in cs.links]
