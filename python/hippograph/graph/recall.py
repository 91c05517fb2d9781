"""Candidate scoring for backends written outside hippograph.

A backend that keeps no derived index of its own loads the nodes of the
requested types and hands them to `score_nodes`, which runs the exact query of
the `GraphBackend` contract (relevance, value function, threshold, top_k, ties
by id, dedup across types) on the Rust core. The built-in backends run the same
code on their cached indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..engine.columns import TypeIndex, TypeSnapshot, find_candidates, meta_columns
from .model import Node, NodeMetadata, NodeType, as_node_types
from .value import ValueFunctionConfig

__all__ = ["TypeSnapshot", "meta_columns", "score_nodes"]


def score_nodes(
    load: Callable[[NodeType], Iterable[tuple[Node, NodeMetadata | None]]],
    types: Sequence[NodeType | str],
    query: object,
    tags: Iterable[object],
    value_function: ValueFunctionConfig | Mapping[str, Any] | None,
    *,
    now: datetime | None = None,
    dimension: int | None = None,
) -> list[tuple[Node, float]]:
    """`find_candidates` over nodes supplied by `load(node_type)`.

    `dimension` is the store's embedding dimension (None when it holds no
    embedding yet); queries of another dimension are a `ValidationError`.
    """
    wanted = as_node_types(types)
    indexes: dict[NodeType, TypeIndex] = {}
    loaded: dict[str, tuple[Node, NodeMetadata | None]] = {}
    for node_type in dict.fromkeys(wanted):
        index = TypeIndex()
        for node, meta in load(node_type):
            index.upsert(node.id, node.embedding, meta)
            loaded[node.id] = (node, meta)
        indexes[node_type] = index

    def hydrate(ids: list[str]) -> dict[str, tuple[Node, NodeMetadata | None]]:
        return {i: loaded[i] for i in ids if i in loaded}

    return find_candidates(indexes, wanted, query, tags, value_function, now, dimension, hydrate)
