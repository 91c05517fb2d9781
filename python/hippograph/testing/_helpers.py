"""What several mixins of the conformance suite share.

Small node and metadata builders, the two unit embeddings most tests store,
`KEEP_ALL`, and `SuiteMixin`: the base of every mixin of tests, holding the
sample graph and scoring shortcut used across sections and declaring what
`BackendConformance` provides to them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..errors import StorageError
from ..graph.changeset import Changeset
from ..graph.model import EdgeType, Node, NodeMetadata, NodeType
from ..graph.protocol import GraphBackend
from .graphs import NOW, make_node, vec

B = TypeVar("B")


def closing(backend: B) -> Iterator[B]:
    """A suite's backend fixture: yields the backend, then closes it where it can be closed (a close
    that fails after the test is not the test's result)."""
    try:
        yield backend
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            with contextlib.suppress(StorageError):
                close()


#: A value-function config that keeps every candidate of every type.
KEEP_ALL: dict[str, Any] = {"params": {t: {"threshold": 0.0, "top_k": 10_000} for t in NodeType}}

E1 = vec(1, 0, 0, 0)
E2 = vec(0, 1, 0, 0)


def _sem(node_id: str, embedding: object = None, **kw: Any) -> Node:
    return make_node(NodeType.SEMANTIC, node_id, embedding, **kw)


def _ids(nodes: list[Node]) -> list[str]:
    return [n.id for n in nodes]


def _pairs(hits: list[tuple[Node, float]]) -> list[tuple[str, float]]:
    return [(n.id, s) for n, s in hits]


def _links(node: Node | None) -> dict[EdgeType, set[str]]:
    assert node is not None
    return {e: set(ids) for e, ids in node.links.items() if ids}


def _meta(hours_ago: float = 0.0, count: int = 0, rewards: tuple[float, ...] = ()) -> NodeMetadata:
    """Metadata last accessed `hours_ago` before NOW (never accessed when count is 0)."""
    when = NOW - timedelta(hours=hours_ago)
    return NodeMetadata(
        created_at=when,
        access_count=count,
        last_accessed_at=when if count else None,
        cumulative_reward=float(sum(rewards)),
        reward_count=len(rewards),
    )


class SuiteMixin:
    """The base of every mixin of tests that `BackendConformance` assembles."""

    #: How far the backend's scores may lie from the same math in float32: a backend whose scans
    #: read vectors in half precision (``vector_dtype="float16"``) sets 1e-3.
    score_tolerance: ClassVar[float] = 1e-6

    if TYPE_CHECKING:

        def make_backend(self, path: Path) -> GraphBackend: ...

        @classmethod
        def open_in_child(cls, path: Path) -> GraphBackend: ...

    def _mixed(self, backend: GraphBackend) -> None:
        cs = Changeset().add_nodes([_sem("s2", E1), make_node(NodeType.TAG, "t1", E1), _sem("s1", E2)])
        backend.apply_changeset(cs.add_node(make_node(NodeType.INTENT, "i1")).add_node(_sem("s3")))

    @staticmethod
    def _scores(
        backend: GraphBackend, query: object, tags: list[object] | None = None, config: Any = KEEP_ALL
    ) -> dict[str, float]:
        return {n.id: s for n, s in backend.find_candidates([NodeType.SEMANTIC], query, tags or [], config, now=NOW)}
