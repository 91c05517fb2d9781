"""The public conformance suite: one test battery every `GraphBackend` must pass.

Subclass `BackendConformance` in a test module under a name pytest collects
and implement `make_backend`::

    from hippograph.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        def make_backend(self, path):
            return MyBackend(path)

`path` is a fresh, empty temporary directory per test. Every test gets its
backend from the `backend` fixture, which closes it afterwards.

Capabilities add tests; a backend without them has no such tests at all
(nothing is skipped):

- ``reopen = True`` (or inherit `PersistentConformance`): the backend is
  durable; tests close it and call `make_backend` again on the same path.
- ``shared = True`` (or inherit `SharedConformance`): several processes may
  open the same path at once. Those tests start child processes with the
  ``spawn`` start method; each child calls the classmethod `open_in_child`,
  which by default instantiates the test class and calls `make_backend`. The
  test class must therefore be importable in a fresh interpreter (a test
  module under pytest's default ``prepend`` import mode is); otherwise
  override `open_in_child`.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import queue
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from ..backends.memory import InMemory
from ..errors import ConfigError, IngestionError, StorageError, ValidationError
from ..graph.changeset import Changeset
from ..graph.model import (
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    Semantic,
)
from ..graph.protocol import GraphBackend
from .graphs import (
    NOW,
    ReferenceValueFunction,
    assert_selection,
    make_node,
    make_record,
    nodes_with_optionals_unset,
    random_graph,
    reference_gated,
    reference_scores,
    resolved_params,
    sample_nodes,
    snapshot,
    vec,
)
from .links import LinkConformance

__all__ = [
    "BAD_INPUTS",
    "CALLS_AFTER_CLOSE",
    "KEEP_ALL",
    "BackendConformance",
    "PersistentConformance",
    "SharedConformance",
]

Call = Callable[[GraphBackend], object]

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


def _populate(backend: GraphBackend) -> tuple[list[str], list[str]]:
    """A small graph with links, metadata and one ingestion record; returns (ids, sources)."""
    cs = Changeset()
    cs.add_node(_sem("a", E1)).add_node(_sem("b", E2)).add_node(make_node(NodeType.TAG, "t", vec(1, 1, 0, 0)))
    cs.add_link("a", "b", EdgeType.SIBLING).add_link("a", "t", EdgeType.MEMBERSHIP)
    cs.put_metadata("a", _meta(1.0, 3, (1.0,)))
    backend.apply_changeset(cs)
    record = make_record("src-0", node_ids=("s0",))
    backend.commit_ingestion(record, Changeset().add_node(_sem("s0", vec(0, 0, 1, 0))))
    return ["a", "b", "t", "s0", "x", "ghost"], ["src-0", "src-1"]


def _smuggle_nan(node: Node) -> Node:
    """A node whose embedding was corrupted after construction checks ran."""
    object.__setattr__(node, "embedding", np.array([np.nan, 0, 0, 0], dtype=np.float32))
    return node


def _bad_dimension(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_sem("y", vec(1, 0, 0))).add_node(_sem("z", E2))
    b.apply_changeset(cs.add_link("x", "a", EdgeType.SIBLING).put_metadata("a", _meta()))


def _bad_nan(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_smuggle_nan(_sem("y", E1)))
    b.apply_changeset(cs.add_link("x", "a", EdgeType.SIBLING))


def _bad_edge_type(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).put_metadata("a", _meta())
    cs.links.append(("x", "a", "friend"))  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_empty_link_id(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.links.append(("x", "", EdgeType.SIBLING))
    b.apply_changeset(cs)


def _bad_link_arity(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.links.append(("x", "a"))  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_empty_metadata_id(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.metadata[""] = _meta()
    b.apply_changeset(cs)


def _bad_metadata_value(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.metadata["a"] = {"access_count": 1}  # type: ignore[assignment]
    b.apply_changeset(cs)


def _bad_addition(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.additions.append("y")  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_not_a_changeset(b: GraphBackend) -> None:
    b.apply_changeset({"additions": [_sem("x", E1)]})  # type: ignore[arg-type]


def _bad_ingestion_changeset(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_sem("y", vec(1, 0)))
    b.commit_ingestion(make_record("src-1", node_ids=("x", "y")), cs)


def _bad_ingestion_record(b: GraphBackend) -> None:
    b.commit_ingestion({"source_id": "src-1"}, Changeset().add_node(_sem("x", E1)))  # type: ignore[arg-type]


def _bad_metadata_update(b: GraphBackend) -> None:
    b.update_metadata({"b": _meta(), "a": "not metadata"})  # type: ignore[dict-item]


BAD_INPUTS: dict[str, Call] = {
    "wrong_dimension_in_one_of_several_additions": _bad_dimension,
    "nan_embedding": _bad_nan,
    "unknown_edge_type_in_raw_link": _bad_edge_type,
    "empty_id_in_raw_link": _bad_empty_link_id,
    "link_that_is_not_a_triple": _bad_link_arity,
    "empty_metadata_id": _bad_empty_metadata_id,
    "metadata_that_is_not_node_metadata": _bad_metadata_value,
    "addition_that_is_not_a_node": _bad_addition,
    "not_a_changeset": _bad_not_a_changeset,
    "invalid_changeset_in_commit_ingestion": _bad_ingestion_changeset,
    "not_an_ingestion_record": _bad_ingestion_record,
    "one_bad_entry_in_update_metadata": _bad_metadata_update,
}

CALLS_AFTER_CLOSE: dict[str, Call] = {
    "apply_changeset": lambda b: b.apply_changeset(Changeset().add_node(_sem("z", E1))),
    "delete_nodes": lambda b: b.delete_nodes(["a"]),
    "find_candidates": lambda b: b.find_candidates([NodeType.SEMANTIC], E1, [], None),
    "get_node": lambda b: b.get_node("a"),
    "get_linked_nodes": lambda b: b.get_linked_nodes(["a"]),
    "get_nodes_by_type": lambda b: b.get_nodes_by_type([NodeType.SEMANTIC]),
    "get_metadata": lambda b: b.get_metadata(["a"]),
    "update_metadata": lambda b: b.update_metadata({"a": _meta()}),
    "delete_metadata": lambda b: b.delete_metadata(["a"]),
    "get_ingestion": lambda b: b.get_ingestion("src-0"),
    "commit_ingestion": lambda b: b.commit_ingestion(make_record("src-9"), Changeset()),
    "delete_ingestion": lambda b: b.delete_ingestion("src-0"),
}


#: Capability flag → the mixin holding its tests (filled in below the mixins).
_CAPABILITIES: dict[str, type[BackendConformance]] = {}


class BackendConformance(LinkConformance):
    """The behaviour every backend shares. Subclass it as ``Test<Name>``."""

    #: The backend is durable: enables the `PersistentConformance` tests.
    reopen: ClassVar[bool] = False
    #: Several processes may open one path: enables the `SharedConformance` tests.
    shared: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for flag, mixin in _CAPABILITIES.items():
            if issubclass(cls, mixin):
                if not getattr(cls, flag):
                    raise TypeError(f"{cls.__name__} inherits {mixin.__name__} but sets {flag} = False")
            elif getattr(cls, flag):
                for name, value in vars(mixin).items():
                    if name.startswith("test_") and not hasattr(cls, name):
                        setattr(cls, name, value)

    def make_backend(self, path: Path) -> GraphBackend:
        """A backend storing under `path` (an empty directory, or one a previous backend used)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_backend(path)")

    @classmethod
    def open_in_child(cls, path: Path) -> GraphBackend:
        """Opens the backend inside a spawned child process (shared-backend tests)."""
        return cls().make_backend(path)

    @pytest.fixture
    def store_path(self, tmp_path: Path) -> Path:
        return tmp_path

    @pytest.fixture
    def backend(self, store_path: Path) -> Iterator[GraphBackend]:
        b = self.make_backend(store_path)
        try:
            yield b
        finally:
            with contextlib.suppress(StorageError):
                b.close()

    # -- nodes ---------------------------------------------------------------

    def test_get_node_of_unknown_id_is_none(self, backend: GraphBackend) -> None:
        """An id never stored reads as None, not an error."""
        assert backend.get_node("nobody") is None

    @pytest.mark.parametrize("node", sample_nodes(), ids=lambda n: n.node_type.value)
    def test_every_node_type_round_trips_exactly(self, backend: GraphBackend, node: Node) -> None:
        """Each of the seven types comes back equal in every field, embedding and timestamp."""
        backend.apply_changeset(Changeset().add_node(node))
        got = backend.get_node(node.id)
        assert got is not None
        assert got == node
        assert type(got) is type(node)
        assert got.fields_dict() == node.fields_dict()
        assert [type(v) for v in got.fields_dict().values()] == [type(v) for v in node.fields_dict().values()]
        assert got.created_at == node.created_at
        assert got.created_at.utcoffset() == timedelta(0)
        assert got.created_at.microsecond == node.created_at.microsecond

    def test_embedding_round_trips_bit_exactly_as_float32(self, backend: GraphBackend) -> None:
        """Stored embeddings come back as 1-D float32 with identical bits."""
        embedding = vec(1 / 3, -2.5, 1e-30, 12345.678)
        backend.apply_changeset(Changeset().add_node(_sem("e", embedding)))
        got = backend.get_node("e")
        assert got is not None and got.embedding is not None
        assert got.embedding.dtype == np.float32
        assert got.embedding.shape == (4,)
        assert got.embedding.tobytes() == embedding.tobytes()

    def test_node_without_embedding_round_trips(self, backend: GraphBackend) -> None:
        """A node stored without an embedding reads back with embedding None."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).add_node(_sem("plain")))
        got = backend.get_node("plain")
        assert got is not None and got.embedding is None

    @pytest.mark.parametrize("node", nodes_with_optionals_unset(), ids=lambda n: n.node_type.value)
    def test_unset_optional_fields_round_trip_as_none(self, backend: GraphBackend, node: Node) -> None:
        """Optional fields left at None stay None (not "" or 0)."""
        backend.apply_changeset(Changeset().add_node(node))
        got = backend.get_node(node.id)
        assert got == node
        assert got is not None
        assert [v for v in got.fields_dict().values() if v is None]

    def test_unusual_ids_round_trip(self, backend: GraphBackend) -> None:
        """Non-ASCII ids, ids with separators, and a 512-byte id are stored as given."""
        ids = ["ключ", "a/b\\c:d", "🔑" * 128, "x" * 512, " spaced id "]
        backend.apply_changeset(Changeset().add_nodes(_sem(i, E1) for i in ids))
        assert sorted(_ids(backend.get_nodes_by_type([NodeType.SEMANTIC]))) == sorted(ids)
        for i in ids:
            got = backend.get_node(i)
            assert got is not None and got.id == i

    def test_returned_node_is_detached_from_the_store(self, backend: GraphBackend) -> None:
        """Mutating a returned node's links mapping does not change what is stored."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).add_node(_sem("b", E2)))
        got = backend.get_node("a")
        assert got is not None
        with contextlib.suppress(TypeError, AttributeError):
            got.links[EdgeType.SIBLING] = frozenset({"b"})  # type: ignore[index]
        assert _links(backend.get_node("a")) == {}

    # -- replacing -----------------------------------------------------------

    def test_same_id_replaces_fields_and_embedding(self, backend: GraphBackend) -> None:
        """Adding a node whose id exists replaces it whole."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1, proposition="old", confidence=0.1)))
        new = _sem("a", E2, proposition="new", confidence=0.9)
        backend.apply_changeset(Changeset().add_node(new))
        assert backend.get_node("a") == new
        assert len(backend.get_nodes_by_type([NodeType.SEMANTIC])) == 1

    def test_replacing_without_embedding_drops_the_embedding(self, backend: GraphBackend) -> None:
        """A replacement without an embedding leaves none behind, so relevance drops to 0."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        backend.apply_changeset(Changeset().add_node(_sem("a")))
        got = backend.get_node("a")
        assert got is not None and got.embedding is None
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)) == [("a", 0.0)]

    def test_replacing_drops_links_on_both_ends(self, backend: GraphBackend) -> None:
        """A replaced node loses its old links, and its neighbours lose theirs to it."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1), _sem("c", E1)])
        backend.apply_changeset(cs.add_link("a", "b", EdgeType.SIBLING).add_link("a", "c", EdgeType.PROVENANCE))
        backend.apply_changeset(Changeset().add_node(_sem("a", E2)))
        assert _links(backend.get_node("a")) == {}
        assert _links(backend.get_node("b")) == {}
        assert _links(backend.get_node("c")) == {}

    def test_replacement_brings_its_own_links(self, backend: GraphBackend) -> None:
        """Links carried by the replacement are applied after the old ones are dropped."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1), _sem("c", E1)])
        backend.apply_changeset(cs.add_link("a", "b", EdgeType.SIBLING))
        backend.apply_changeset(Changeset().add_node(_sem("a", E1, links={EdgeType.MEMBERSHIP: ["c"]})))
        assert _links(backend.get_node("a")) == {EdgeType.MEMBERSHIP: {"c"}}
        assert _links(backend.get_node("b")) == {}
        assert _links(backend.get_node("c")) == {EdgeType.MEMBERSHIP: {"a"}}

    def test_replacement_may_change_the_type(self, backend: GraphBackend) -> None:
        """A same-id node of another type moves the id to that type everywhere."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        tag = make_node(NodeType.TAG, "a", E1)
        backend.apply_changeset(Changeset().add_node(tag))
        assert backend.get_node("a") == tag
        assert backend.get_nodes_by_type([NodeType.SEMANTIC]) == []
        assert _ids(backend.get_nodes_by_type([NodeType.TAG])) == ["a"]
        assert backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL) == []
        assert _pairs(backend.find_candidates([NodeType.TAG], E1, [], KEEP_ALL)) == [("a", 1.0)]

    def test_later_addition_of_an_id_in_one_changeset_wins(self, backend: GraphBackend) -> None:
        """Additions are applied in order, so the last one of an id is what stays."""
        last = _sem("a", E2, proposition="second")
        backend.apply_changeset(Changeset().add_node(_sem("a", E1, proposition="first")).add_node(last))
        assert backend.get_node("a") == last

    def test_replacing_a_node_keeps_its_metadata(self, backend: GraphBackend) -> None:
        """Metadata is keyed by id and outlives a replacement of the node."""
        meta = _meta(2.0, 4)
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).put_metadata("a", meta))
        backend.apply_changeset(Changeset().add_node(_sem("a", E2)))
        assert backend.get_metadata(["a"]) == {"a": meta}

    # -- links ---------------------------------------------------------------

    def test_link_is_recorded_on_both_ends(self, backend: GraphBackend) -> None:
        """Linking a–b puts b in a's set and a in b's set of that edge type."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]).add_link("a", "b", EdgeType.HIERARCHICAL)
        backend.apply_changeset(cs)
        assert _links(backend.get_node("a")) == {EdgeType.HIERARCHICAL: {"b"}}
        assert _links(backend.get_node("b")) == {EdgeType.HIERARCHICAL: {"a"}}

    def test_links_are_typed(self, backend: GraphBackend) -> None:
        """One pair may be linked by several edge types, each kept apart."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E2), _sem("c", E2)])
        cs.add_link("a", "b", EdgeType.SIBLING).add_link("a", "b", EdgeType.PROVENANCE)
        backend.apply_changeset(cs.add_link("a", "c", "membership"))
        assert _links(backend.get_node("a")) == {
            EdgeType.SIBLING: {"b"},
            EdgeType.PROVENANCE: {"b"},
            EdgeType.MEMBERSHIP: {"c"},
        }
        assert _links(backend.get_node("c")) == {EdgeType.MEMBERSHIP: {"a"}}

    def test_linking_twice_is_idempotent(self, backend: GraphBackend) -> None:
        """Repeating a link (either direction) stores it once."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]))
        backend.apply_changeset(Changeset().add_link("a", "b", EdgeType.SIBLING).add_link("b", "a", "sibling"))
        backend.apply_changeset(Changeset().add_link("a", "b", EdgeType.SIBLING))
        assert _links(backend.get_node("a")) == {EdgeType.SIBLING: {"b"}}
        assert _ids(backend.get_linked_nodes(["a"])) == ["b"]

    def test_link_to_missing_id_is_a_no_op(self, backend: GraphBackend) -> None:
        """A link to an id that does not exist is dropped, not remembered for later."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).add_link("a", "m", EdgeType.SIBLING))
        assert _links(backend.get_node("a")) == {}
        backend.apply_changeset(Changeset().add_node(_sem("m", E2)))
        assert _links(backend.get_node("a")) == {}
        assert _links(backend.get_node("m")) == {}

    def test_self_link_is_a_no_op(self, backend: GraphBackend) -> None:
        """Linking a node to itself records nothing."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).add_link("a", "a", EdgeType.SIBLING))
        assert _links(backend.get_node("a")) == {}
        assert backend.get_linked_nodes(["a"]) == []

    def test_links_carried_on_an_added_node_apply_both_ways(self, backend: GraphBackend) -> None:
        """A node's own links reach existing nodes; those to missing ids are dropped."""
        backend.apply_changeset(Changeset().add_node(_sem("b", E2)))
        carried = {EdgeType.PROVENANCE: ["b", "missing"], EdgeType.SIBLING: ["c"]}
        backend.apply_changeset(Changeset().add_node(_sem("a", E1, links=carried)).add_node(_sem("c", E2)))
        assert _links(backend.get_node("a")) == {EdgeType.PROVENANCE: {"b"}, EdgeType.SIBLING: {"c"}}
        assert _links(backend.get_node("b")) == {EdgeType.PROVENANCE: {"a"}}
        assert _links(backend.get_node("c")) == {EdgeType.SIBLING: {"a"}}

    # -- deleting ------------------------------------------------------------

    def test_delete_removes_the_node_everywhere(self, backend: GraphBackend) -> None:
        """A deleted node is gone from reads by id, by type and from candidates."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]))
        backend.delete_nodes(["a"])
        assert backend.get_node("a") is None
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["b"]
        assert _ids([n for n, _ in backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)]) == ["b"]

    def test_delete_removes_dangling_links_of_every_edge_type(self, backend: GraphBackend) -> None:
        """Survivors lose every link to a deleted node, whatever its edge type."""
        cs = Changeset().add_nodes([_sem("x", E1), _sem("b", E1), _sem("c", E1)])
        for edge in EdgeType:
            cs.add_link("x", "b", edge)
        backend.apply_changeset(cs.add_link("x", "c", EdgeType.SIBLING).add_link("b", "c", EdgeType.MEMBERSHIP))
        backend.delete_nodes(["x"])
        assert _links(backend.get_node("b")) == {EdgeType.MEMBERSHIP: {"c"}}
        assert _links(backend.get_node("c")) == {EdgeType.MEMBERSHIP: {"b"}}
        assert backend.get_linked_nodes(["x"]) == []

    def test_delete_in_batches(self, backend: GraphBackend) -> None:
        """Deleting several linked nodes at once leaves survivors without links to any."""
        cs = Changeset().add_nodes([_sem(i, E1) for i in "abcde"])
        cs.add_link("a", "b", EdgeType.SIBLING).add_link("b", "c", EdgeType.SIBLING)
        cs.add_link("c", "d", EdgeType.HIERARCHICAL).add_link("d", "e", EdgeType.PROVENANCE)
        backend.apply_changeset(cs)
        backend.delete_nodes(["b", "d"])
        backend.delete_nodes(iter(["e"]))
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["a", "c"]
        assert _links(backend.get_node("a")) == {}
        assert _links(backend.get_node("c")) == {}

    def test_delete_ignores_missing_ids(self, backend: GraphBackend) -> None:
        """Unknown ids in a delete are skipped while the known ones go."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]))
        backend.delete_nodes(["zzz", "a", "a"])
        backend.delete_nodes([])
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["b"]

    def test_delete_keeps_metadata(self, backend: GraphBackend) -> None:
        """delete_nodes leaves the node's metadata for delete_metadata to remove."""
        meta = _meta(1.0, 2)
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).put_metadata("a", meta))
        backend.delete_nodes(["a"])
        assert backend.get_metadata(["a"]) == {"a": meta}

    def test_delete_keeps_ingestion_records(self, backend: GraphBackend) -> None:
        """Deleting an ingested source's nodes never removes its ingestion record."""
        record = make_record("src", node_ids=("a",))
        backend.commit_ingestion(record, Changeset().add_node(_sem("a", E1)))
        backend.delete_nodes(["a"])
        assert backend.get_ingestion("src") == record

    def test_deleted_then_re_added_node_has_no_old_links(self, backend: GraphBackend) -> None:
        """A node re-created after deletion starts without its former links."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).add_link("a", "b", "sibling"))
        backend.delete_nodes(["a"])
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        assert _links(backend.get_node("a")) == {}
        assert _links(backend.get_node("b")) == {}

    # -- traversal -----------------------------------------------------------

    def _star(self, backend: GraphBackend) -> None:
        cs = Changeset().add_nodes([_sem(i, E1) for i in ["hub", "d", "b", "c", "a", "lone"]])
        cs.add_link("hub", "d", EdgeType.SIBLING).add_link("hub", "b", EdgeType.MEMBERSHIP)
        cs.add_link("hub", "c", EdgeType.SIBLING).add_link("a", "c", EdgeType.SIBLING)
        backend.apply_changeset(cs.add_link("a", "b", EdgeType.PROVENANCE))

    def test_linked_nodes_of_any_edge_type_ordered_by_id(self, backend: GraphBackend) -> None:
        """Without an edge type every neighbour is returned, sorted by id."""
        self._star(backend)
        got = backend.get_linked_nodes(["hub"])
        assert _ids(got) == ["b", "c", "d"]
        assert got[0] == backend.get_node("b")

    def test_linked_nodes_filtered_by_edge_type(self, backend: GraphBackend) -> None:
        """An edge type restricts traversal to links of that type (enum or str)."""
        self._star(backend)
        assert _ids(backend.get_linked_nodes(["hub"], EdgeType.SIBLING)) == ["c", "d"]
        assert _ids(backend.get_linked_nodes(["hub"], "membership")) == ["b"]
        assert backend.get_linked_nodes(["hub"], EdgeType.HIERARCHICAL) == []

    def test_linked_nodes_are_unique(self, backend: GraphBackend) -> None:
        """A neighbour shared by several start ids is returned once."""
        self._star(backend)
        assert _ids(backend.get_linked_nodes(["hub", "a", "hub"], EdgeType.SIBLING)) == ["c", "d"]
        assert _ids(backend.get_linked_nodes(["hub", "a"])) == ["b", "c", "d"]

    def test_linked_nodes_skip_unknown_ids(self, backend: GraphBackend) -> None:
        """Unknown or unlinked start ids contribute nothing and raise nothing."""
        self._star(backend)
        assert _ids(backend.get_linked_nodes(["ghost", "hub", "lone"], EdgeType.MEMBERSHIP)) == ["b"]
        assert backend.get_linked_nodes(["ghost"]) == []
        assert backend.get_linked_nodes([]) == []

    def test_linked_nodes_reject_unknown_edge_type(self, backend: GraphBackend) -> None:
        """An edge type outside the four is a ValidationError."""
        self._star(backend)
        with pytest.raises(ValidationError):
            backend.get_linked_nodes(["hub"], "friend")

    # -- by type -------------------------------------------------------------

    def _mixed(self, backend: GraphBackend) -> None:
        cs = Changeset().add_nodes([_sem("s2", E1), make_node(NodeType.TAG, "t1", E1), _sem("s1", E2)])
        backend.apply_changeset(cs.add_node(make_node(NodeType.INTENT, "i1")).add_node(_sem("s3")))

    def test_nodes_by_one_type(self, backend: GraphBackend) -> None:
        """Every node of the type, sorted by id, with or without embedding."""
        self._mixed(backend)
        got = backend.get_nodes_by_type([NodeType.SEMANTIC])
        assert _ids(got) == ["s1", "s2", "s3"]
        assert got[0] == backend.get_node("s1")
        assert _ids(backend.get_nodes_by_type(["intent"])) == ["i1"]

    def test_nodes_by_several_types_in_the_order_given(self, backend: GraphBackend) -> None:
        """Types are listed one after another in the requested order, each once."""
        self._mixed(backend)
        got = backend.get_nodes_by_type([NodeType.TAG, NodeType.SEMANTIC, NodeType.TAG])
        assert _ids(got) == ["t1", "s1", "s2", "s3"]

    def test_nodes_by_type_without_matches_is_empty(self, backend: GraphBackend) -> None:
        """Types with no nodes, or no types at all, give an empty list."""
        self._mixed(backend)
        assert backend.get_nodes_by_type([NodeType.SOURCE, NodeType.EPISODIC]) == []
        assert backend.get_nodes_by_type([]) == []

    def test_nodes_by_unknown_type_is_a_validation_error(self, backend: GraphBackend) -> None:
        """A type outside the seven is refused."""
        with pytest.raises(ValidationError):
            backend.get_nodes_by_type(["memory"])

    # -- metadata ------------------------------------------------------------

    def test_metadata_round_trips_exactly(self, backend: GraphBackend) -> None:
        """Every NodeMetadata field, including custom values, reads back equal."""
        meta = NodeMetadata(
            created_at=datetime(2024, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
            access_count=7,
            last_accessed_at=datetime(2024, 3, 5, 0, 0, 0, 1, tzinfo=UTC),
            cumulative_reward=1 / 3,
            reward_count=2,
            custom={"origin": "тест", "n": 3, "w": 0.1, "ok": True, "none": None, "l": ["a", 1], "d": {"k": 1}},
        )
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)).put_metadata("a", meta))
        got = backend.get_metadata(["a"])
        assert got == {"a": meta}
        assert got["a"].last_accessed_at is not None
        assert got["a"].last_accessed_at.microsecond == 1
        assert got["a"].created_at.utcoffset() == timedelta(0)

    def test_get_metadata_skips_ids_without_metadata(self, backend: GraphBackend) -> None:
        """Only ids that have metadata appear in the result."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).put_metadata("a", _meta()))
        assert set(backend.get_metadata(["a", "b", "ghost"])) == {"a"}
        assert backend.get_metadata([]) == {}

    def test_update_metadata_replaces_the_whole_record(self, backend: GraphBackend) -> None:
        """update_metadata swaps each record whole; other ids are untouched."""
        first = NodeMetadata(created_at=NOW, access_count=9, custom={"keep": "no"})
        other = _meta(3.0, 1)
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]))
        backend.update_metadata({"a": first, "b": other})
        second = NodeMetadata(created_at=NOW, access_count=1)
        backend.update_metadata({"a": second})
        assert backend.get_metadata(["a", "b"]) == {"a": second, "b": other}
        assert backend.get_metadata(["a"])["a"].custom == {}

    def test_delete_metadata_removes_and_ignores_missing_ids(self, backend: GraphBackend) -> None:
        """delete_metadata drops the records named, skips unknown ids, keeps the nodes."""
        backend.apply_changeset(
            Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).put_metadata("a", _meta()).put_metadata("b", _meta())
        )
        backend.delete_metadata(["a", "ghost"])
        assert set(backend.get_metadata(["a", "b"])) == {"b"}
        assert backend.get_node("a") is not None

    def test_metadata_changes_reach_scoring(self, backend: GraphBackend) -> None:
        """Scores follow metadata updates and deletions immediately."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        backend.update_metadata({"a": _meta(0.0, 0)})
        assert self._scores(backend, E1) == pytest.approx({"a": 0.3})
        backend.delete_metadata(["a"])
        assert self._scores(backend, E1) == {"a": 1.0}

    # -- find_candidates -----------------------------------------------------

    @staticmethod
    def _scores(
        backend: GraphBackend, query: object, tags: list[object] | None = None, config: Any = KEEP_ALL
    ) -> dict[str, float]:
        return {n.id: s for n, s in backend.find_candidates([NodeType.SEMANTIC], query, tags or [], config, now=NOW)}

    def test_find_candidates_on_an_empty_graph_is_empty(self, backend: GraphBackend) -> None:
        """An empty store has no candidates, whatever the types asked."""
        assert backend.find_candidates(list(NodeType), E1, [vec(0, 1, 0, 0)], None) == []

    def test_find_candidates_returns_only_requested_types(self, backend: GraphBackend) -> None:
        """Nodes of types not asked for never appear."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert {n.node_type for n, _ in hits} == {NodeType.SEMANTIC}
        assert sorted(n.id for n, _ in hits) == ["s1", "s2", "s3"]
        assert backend.find_candidates([NodeType.PROCEDURAL], E1, [], KEEP_ALL) == []

    def test_types_are_concatenated_in_the_order_given(self, backend: GraphBackend) -> None:
        """Results hold each requested type's block in request order."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.TAG, NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert [n.id for n, _ in hits] == ["t1", "s2", "s1", "s3"]

    def test_relevance_is_cosine_clamped_at_zero(self, backend: GraphBackend) -> None:
        """Relevance is the cosine to the query; opposite vectors score 0."""
        cs = Changeset().add_nodes([_sem("same", vec(2, 0, 0, 0)), _sem("p6", vec(3, 4, 0, 0))])
        backend.apply_changeset(cs.add_node(_sem("p8", vec(4, -3, 0, 0))).add_node(_sem("opp", vec(-1, 0, 0, 0))))
        scores = self._scores(backend, vec(5, 0, 0, 0))
        assert scores == pytest.approx({"same": 1.0, "p8": 0.8, "p6": 0.6, "opp": 0.0}, abs=1e-6)

    def test_candidates_carry_full_nodes(self, backend: GraphBackend) -> None:
        """Returned nodes equal get_node: fields, embedding and current links."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]).add_link("a", "b", EdgeType.SIBLING)
        backend.apply_changeset(cs)
        (node, _), *_ = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert node == backend.get_node("a")
        assert _links(node) == {EdgeType.SIBLING: {"b"}}

    def test_threshold_is_inclusive(self, backend: GraphBackend) -> None:
        """A score exactly equal to the threshold is kept."""
        half = vec(0.5, 0.5, 0.5, 0.5)
        backend.apply_changeset(Changeset().add_nodes([_sem("exact", half), _sem("near", vec(0.5, 0.5, 0.5, 0.4))]))
        config = {"params": {NodeType.SEMANTIC: {"threshold": 1.0}}}
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], half, [], config)) == [("exact", 1.0)]

    def test_top_k_bounds_each_type(self, backend: GraphBackend) -> None:
        """At most top_k nodes per type are returned, the best ones."""
        rows = [vec(1, 0.1 * i, 0, 0) for i in range(6)]
        backend.apply_changeset(Changeset().add_nodes([_sem(f"n{i}", rows[i]) for i in range(6)]))
        config = {"params": {NodeType.SEMANTIC: {"top_k": 3}}}
        assert [n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E1, [], config)] == ["n0", "n1", "n2"]
        config = {"params": {NodeType.SEMANTIC: {"top_k": 0}}}
        assert backend.find_candidates([NodeType.SEMANTIC], E1, [], config) == []

    def test_ties_are_broken_by_id_ascending(self, backend: GraphBackend) -> None:
        """Equal scores are ordered by id, and top_k keeps the smallest ids."""
        backend.apply_changeset(Changeset().add_nodes([_sem(i, E1) for i in ["m", "c", "x", "a", "k"]]))
        got = backend.find_candidates([NodeType.SEMANTIC], E1, [], {"params": {"semantic": {"top_k": 3}}})
        assert _pairs(got) == [("a", 1.0), ("c", 1.0), ("k", 1.0)]

    def test_default_params_apply_per_type(self, backend: GraphBackend) -> None:
        """Without a config, DESIGN §4 thresholds and top_k apply per type."""
        cs = Changeset().add_nodes([_sem(f"s{i:02d}", E1) for i in range(25)])
        cs.add_node(make_node(NodeType.TAG, "t-hit", E1)).add_node(make_node(NodeType.TAG, "t-miss", vec(3, 4, 0, 0)))
        cs.add_node(make_node(NodeType.PROCEDURAL, "p-miss", vec(3, 4, 0, 0)))
        backend.apply_changeset(cs)
        sem = backend.find_candidates([NodeType.SEMANTIC], E1, [], None)
        assert [n.id for n, _ in sem] == [f"s{i:02d}" for i in range(20)]
        assert [n.id for n, _ in backend.find_candidates([NodeType.TAG, NodeType.PROCEDURAL], E1, [], None)] == [
            "t-hit"
        ]

    def test_params_override_threshold_and_top_k_per_type(self, backend: GraphBackend) -> None:
        """Per-type overrides replace only the params they name, only for that type."""
        cs = Changeset().add_nodes([_sem(f"s{i}", vec(1, 0.2 * i, 0, 0)) for i in range(4)])
        backend.apply_changeset(cs.add_node(make_node(NodeType.TAG, "t", vec(3, 4, 0, 0))))
        config = {"params": {"semantic": {"top_k": 2}, NodeType.TAG: {"threshold": 0.5}}}
        hits = backend.find_candidates([NodeType.SEMANTIC, NodeType.TAG], E1, [], config)
        assert [n.id for n, _ in hits] == ["s0", "s1", "t"]
        config = {"params": {NodeType.SEMANTIC: {"threshold": 0.95}}}
        assert [n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E1, [], config)] == ["s0", "s1"]

    def test_tag_vectors_raise_a_node_above_its_query_score(self, backend: GraphBackend) -> None:
        """Relevance is the best cosine over the query and every tag vector."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E2), _sem("b", vec(0, 0, 1, 0))]))
        assert self._scores(backend, E1) == {"a": 0.0, "b": 0.0}
        got = self._scores(backend, E1, [vec(0, 3, 0, 0), vec(0, 0, 3, 4)])
        assert got == pytest.approx({"a": 1.0, "b": 0.6}, abs=1e-6)

    def test_repeated_types_return_each_node_once(self, backend: GraphBackend) -> None:
        """A type asked for twice does not repeat its nodes."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.SEMANTIC, NodeType.TAG, NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert [n.id for n, _ in hits] == ["s2", "s1", "s3", "t1"]

    def test_nodes_without_embedding_have_zero_relevance(self, backend: GraphBackend) -> None:
        """Embedding-less nodes score 0.0: kept at threshold 0, dropped above it."""
        backend.apply_changeset(Changeset().add_nodes([_sem("e", E1), _sem("plain")]))
        assert self._scores(backend, E1) == {"e": 1.0, "plain": 0.0}
        config = {"params": {NodeType.SEMANTIC: {"threshold": 1e-9}}}
        assert self._scores(backend, E1, config=config) == {"e": 1.0}

    def test_zero_vectors_have_zero_similarity(self, backend: GraphBackend) -> None:
        """A zero embedding matches nothing; a zero query leaves only the tags to match."""
        zero = vec(0, 0, 0, 0)
        backend.apply_changeset(Changeset().add_nodes([_sem("zero", zero), _sem("e", E1)]))
        assert self._scores(backend, E1) == {"e": 1.0, "zero": 0.0}
        assert self._scores(backend, zero) == {"e": 0.0, "zero": 0.0}
        assert self._scores(backend, zero, [E1]) == {"e": 1.0, "zero": 0.0}

    @pytest.mark.parametrize(
        ("query", "tags"),
        [
            (vec(1, 0, 0), []),
            (vec(1, 0, 0, 0, 0), []),
            (E1, [vec(1, 0, 0)]),
            (E1, [E2, vec(1, 0, 0, 0, 0)]),
        ],
        ids=["short_query", "long_query", "short_tag", "long_second_tag"],
    )
    def test_wrong_dimension_is_rejected(self, backend: GraphBackend, query: object, tags: list[object]) -> None:
        """A query or tag whose dimension differs from the store's is a ValidationError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.SEMANTIC], query, tags, None)
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.TAG], query, tags, None)

    @pytest.mark.parametrize(
        ("query", "tags"),
        [
            ([1.0, math.nan, 0.0, 0.0], []),
            ([1.0, 0.0, math.inf, 0.0], []),
            pytest.param([1.0, 0.0, 0.0, 1e39], [], marks=pytest.mark.filterwarnings("ignore:overflow")),
            (E1, [[0.0, -math.inf, 0.0, 0.0]]),
            (E1, [E2, [math.nan, 0.0, 0.0, 0.0]]),
        ],
        ids=["nan_query", "inf_query", "float32_overflow_query", "inf_tag", "nan_second_tag"],
    )
    def test_non_finite_vectors_are_rejected(self, backend: GraphBackend, query: object, tags: list[object]) -> None:
        """NaN or infinite query and tag values are a ValidationError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.SEMANTIC], query, tags, None)

    def test_unknown_type_is_rejected(self, backend: GraphBackend) -> None:
        """Asking for a type outside the seven is a ValidationError."""
        with pytest.raises(ValidationError):
            backend.find_candidates(["memory"], E1, [], None)

    def test_bad_value_function_params_are_a_config_error(self, backend: GraphBackend) -> None:
        """Params naming an unknown type or holding a bad value raise ConfigError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        for config in (
            {"params": {"memory": {"top_k": 1}}},
            {"params": {"semantic": {"top_k": -1}}},
            {"params": {"semantic": {"threshold": "high"}}},
        ):
            with pytest.raises(ConfigError):
                backend.find_candidates([NodeType.SEMANTIC], E1, [], config)

    def test_custom_value_function_scores_are_used(self, backend: GraphBackend) -> None:
        """A Python value function decides the scores, the threshold and the order."""

        class ByConfidence:
            def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Any) -> float:
                assert isinstance(node, Semantic)
                return node.confidence

        cs = Changeset().add_nodes([_sem(i, E1, confidence=c) for i, c in [("a", 0.2), ("b", 0.9), ("c", 0.5)]])
        backend.apply_changeset(cs.add_node(_sem("d", E1, confidence=0.5)))
        config = {"function": ByConfidence(), "params": {"semantic": {"threshold": 0.5}}}
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, [], config)) == [
            ("b", 0.9),
            ("c", 0.5),
            ("d", 0.5),
        ]

    def test_custom_value_function_receives_metadata_and_params(self, backend: GraphBackend) -> None:
        """The function gets the relevance, node, metadata and the type's resolved params with now."""
        seen: list[tuple[float, str, NodeMetadata | None, dict[str, Any]]] = []

        class Recorder:
            def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Any) -> float:
                seen.append((relevance, node.id, metadata, dict(params)))
                return relevance

        meta = _meta(2.0, 3)
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]).put_metadata("a", meta))
        config = {"function": Recorder(), "params": {"semantic": {"k": 2.5}}}
        backend.find_candidates([NodeType.SEMANTIC], E1, [], config, now=NOW)
        by_id = {node_id: (rel, m, p) for rel, node_id, m, p in seen}
        assert by_id["a"][0] == 1.0 and by_id["a"][1] == meta
        assert by_id["b"][0] == 0.0 and by_id["b"][1] is None
        params = by_id["a"][2]
        assert params["now"] == NOW
        assert params["k"] == 2.5
        assert params["threshold"] == 0.0 and params["top_k"] == 20 and params["gate"] == "score"
        assert params["lambda"] == pytest.approx(math.log(2) / 2160, rel=1e-12)

    @pytest.mark.parametrize("seed", [11, 12])
    def test_python_value_function_matches_the_default(self, backend: GraphBackend, seed: int) -> None:
        """The formula written as a Python function ranks and scores like the built-in default."""
        graph = random_graph(seed)
        backend.apply_changeset(graph.changeset)
        custom = {"function": ReferenceValueFunction(), "params": {}}
        for query, tags in graph.queries:
            default = backend.find_candidates(list(NodeType), query, tags, None, now=NOW, exact=True)
            python = backend.find_candidates(list(NodeType), query, tags, custom, now=NOW, exact=True)
            assert [n.id for n, _ in python] == [n.id for n, _ in default]
            assert [s for _, s in python] == pytest.approx([s for _, s in default], abs=1e-9)

    # -- the default value function -----------------------------------------

    def test_default_score_without_metadata_is_relevance(self, backend: GraphBackend) -> None:
        """No metadata: the score is exactly the relevance."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", vec(3, 4, 0, 0))]))
        assert self._scores(backend, E1, config=None) == pytest.approx({"a": 1.0, "b": 0.6}, abs=1e-6)

    def test_recent_access_outscores_stale(self, backend: GraphBackend) -> None:
        """Of two equally relevant nodes, the one accessed more recently scores higher."""
        cs = Changeset().add_nodes([_sem("recent", E1), _sem("stale", E1)])
        backend.apply_changeset(cs.put_metadata("recent", _meta(1.0, 3)).put_metadata("stale", _meta(200.0, 3)))
        scores = self._scores(backend, E1)
        assert scores["recent"] > scores["stale"] > 0.0

    def test_frequent_access_outscores_rare(self, backend: GraphBackend) -> None:
        """Of two equally recent nodes, the one accessed more often scores higher."""
        cs = Changeset().add_nodes([_sem("frequent", E1), _sem("rare", E1)])
        backend.apply_changeset(cs.put_metadata("frequent", _meta(1.0, 20)).put_metadata("rare", _meta(1.0, 1)))
        scores = self._scores(backend, E1)
        assert scores["frequent"] > scores["rare"] > 0.0

    def test_reward_sign_orders_scores(self, backend: GraphBackend) -> None:
        """Positive average reward > neutral > negative."""
        cs = Changeset().add_nodes([_sem("pos", E1), _sem("neutral", E1), _sem("neg", E1)])
        cs.put_metadata("pos", _meta(1.0, 2, (1.0, 0.5))).put_metadata("neutral", _meta(1.0, 2, (1.0, -1.0)))
        backend.apply_changeset(cs.put_metadata("neg", _meta(1.0, 2, (-1.0, -0.5))))
        scores = self._scores(backend, E1)
        assert scores["pos"] > scores["neutral"] > scores["neg"] > 0.0

    def test_no_rewards_outscore_a_neutral_reward(self, backend: GraphBackend) -> None:
        """Never rewarded counts as factor 1.0; an average reward of 0 as 0.5."""
        cs = Changeset().add_nodes([_sem("unrewarded", E1), _sem("neutral", E1)])
        backend.apply_changeset(
            cs.put_metadata("unrewarded", _meta(1.0, 2)).put_metadata("neutral", _meta(1.0, 2, (0.0,)))
        )
        scores = self._scores(backend, E1)
        assert scores["neutral"] == pytest.approx(0.5 * scores["unrewarded"], rel=1e-9)

    def test_default_scores_match_hand_computed_values(self, backend: GraphBackend) -> None:
        """Scores on a fixed graph equal the DESIGN §4 formula worked by hand."""
        cs = Changeset().add_nodes(
            [
                _sem("a", vec(1, 0, 0, 0)),
                _sem("b", vec(3, 4, 0, 0)),
                _sem("c", vec(4, -3, 0, 0)),
                _sem("d", vec(0, 1, 0, 0)),
                _sem("e", vec(-1, 0, 0, 0)),
                _sem("f", vec(1, 0, 0, 0)),
            ]
        )
        cs.put_metadata(
            "a",
            NodeMetadata(
                created_at=NOW - timedelta(hours=10),
                access_count=10,
                last_accessed_at=NOW - timedelta(hours=2),
                cumulative_reward=1.0,
                reward_count=2,
            ),
        )
        cs.put_metadata("b", NodeMetadata(created_at=NOW - timedelta(hours=10)))
        cs.put_metadata("d", NodeMetadata(created_at=NOW - timedelta(hours=1), access_count=4))
        cs.put_metadata("f", NodeMetadata(created_at=NOW + timedelta(hours=3), access_count=2))
        backend.apply_changeset(cs)
        # λ = ln 2 / 2160 per hour (a 90-day half-life).
        # a: 1.0 × 2^(-2/2160) × 10/15 × σ(0.5);  b: 0.6 × 2^(-10/2160) × floor 0.3;
        # c: no metadata → 0.8;  f: created in the future → no decay, 2/7 < 0.3 → 0.3.
        want_a = 1.0 * 2 ** (-2 / 2160) * (10 / 15) / (1 + math.exp(-0.5))
        want_b = 0.6 * 2 ** (-10 / 2160) * 0.3
        assert (want_a, want_b) == pytest.approx((0.4147066, 0.1794233), abs=1e-7)
        got = backend.find_candidates([NodeType.SEMANTIC], vec(2, 0, 0, 0), [], None, now=NOW)
        assert [n.id for n, _ in got] == ["c", "a", "f", "b", "d", "e"]
        assert [s for _, s in got] == pytest.approx([0.8, want_a, 0.3, want_b, 0.0, 0.0], abs=1e-6)
        # custom params change the same formula: λ=0.5, k=1, floor 0, β=2.
        params = {"lambda": 0.5, "k": 1, "base_floor": 0.0, "beta": 2.0}
        got = backend.find_candidates([NodeType.SEMANTIC], E1, [], {"params": {"semantic": params}}, now=NOW)
        scores = dict(_pairs(got))
        # a: e^(-0.5·2) × 10/11 × σ(2·0.5) = 0.2444922;  f: no decay, 2/3, no rewards.
        assert scores["a"] == pytest.approx(0.2444922, abs=1e-6)
        assert scores["b"] == 0.0
        assert scores["f"] == pytest.approx(2 / 3, abs=1e-6)
        assert scores["c"] == pytest.approx(0.8, abs=1e-6)

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_random_graph_matches_the_reference(self, backend: GraphBackend, seed: int) -> None:
        """On random graphs, candidates match InMemory and an independent numpy scorer."""
        graph = random_graph(seed, n=120, dim=8)
        backend.apply_changeset(graph.changeset)
        reference = InMemory()
        reference.apply_changeset(graph.changeset)
        overrides: dict[NodeType | str, dict[str, Any]] = {t: {"top_k": 6, "threshold": 0.05} for t in NodeType}
        for params in (resolved_params(), resolved_params(overrides)):
            config = {"params": params}
            for query, tags in graph.queries:
                expected = reference_scores(graph.nodes.values(), graph.metadata, query, tags, params, NOW)
                gated = reference_gated(graph.nodes.values(), expected, query, tags, params)
                every = {"params": {t: {**p, "threshold": 0.0, "top_k": 10_000} for t, p in params.items()}}
                concatenated: list[str] = []
                for t in NodeType:
                    got = backend.find_candidates([t], query, tags, config, now=NOW, exact=True)
                    reference_all = _pairs(reference.find_candidates([t], query, tags, every, now=NOW))
                    pairs = _pairs(got)
                    threshold, top_k = params[t]["threshold"], params[t]["top_k"]
                    assert_selection(pairs, dict(reference_all), threshold, top_k, gated=gated[t])
                    assert_selection(pairs, expected[t], threshold, top_k, gated=gated[t])
                    for node, _ in got:
                        assert node == reference.get_node(node.id)
                    concatenated += [i for i, _ in pairs]
                everything = backend.find_candidates(list(NodeType), query, tags, config, now=NOW, exact=True)
                assert [n.id for n, _ in everything] == concatenated

    # -- ingestion -----------------------------------------------------------

    def test_get_ingestion_of_unknown_source_is_none(self, backend: GraphBackend) -> None:
        """A source never committed has no record."""
        assert backend.get_ingestion("never") is None

    def test_commit_ingestion_inserts_when_absent(self, backend: GraphBackend) -> None:
        """A new source commits its nodes, links, metadata and record, returning INSERTED."""
        backend.apply_changeset(Changeset().add_node(_sem("old", E2)))
        record = make_record("src", node_ids=("a", "b"), stored_at=datetime(2024, 7, 1, 1, 2, 3, 456789, tzinfo=UTC))
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).add_link("a", "old", EdgeType.PROVENANCE)
        outcome, receipt = backend.commit_ingestion(record, cs.put_metadata("a", _meta(1.0, 1)))
        assert outcome is Outcome.INSERTED
        assert receipt == record.receipt
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["a", "b", "old"]
        assert _links(backend.get_node("old")) == {EdgeType.PROVENANCE: {"a"}}
        assert backend.get_metadata(["a"]) == {"a": _meta(1.0, 1)}
        stored = backend.get_ingestion("src")
        assert stored == record
        assert stored is not None and stored.receipt.stored_at.microsecond == 456789

    def test_equal_commit_returns_the_stored_receipt_and_applies_nothing(self, backend: GraphBackend) -> None:
        """Same digest and version: EXISTING with the first receipt, the new changeset discarded."""
        first = make_record("src", node_ids=("a",), stored_at=datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
        backend.commit_ingestion(first, Changeset().add_node(_sem("a", E1)))
        before = snapshot(backend, ["a", "b"], ["src"])
        again = make_record("src", node_ids=("b",), stored_at=datetime(2025, 1, 1, tzinfo=UTC))
        cs = Changeset().add_node(_sem("b", E2)).add_link("a", "b", EdgeType.SIBLING).put_metadata("a", _meta())
        outcome, receipt = backend.commit_ingestion(again, cs)
        assert outcome is Outcome.EXISTING
        assert receipt == first.receipt
        assert (receipt.source_id, receipt.node_ids, receipt.stored_at) == ("src", ("a",), first.receipt.stored_at)
        assert receipt.stored_at.microsecond == 1
        assert snapshot(backend, ["a", "b"], ["src"]) == before

    @pytest.mark.parametrize(
        "changed", [{"payload": "other payload"}, {"version": 2}], ids=["different_digest", "different_version"]
    )
    def test_conflicting_commit_raises_and_changes_nothing(
        self, backend: GraphBackend, changed: dict[str, Any]
    ) -> None:
        """A different digest or fingerprint version is a source_conflict; nothing is written."""
        backend.commit_ingestion(make_record("src", node_ids=("a",)), Changeset().add_node(_sem("a", E1)))
        before = snapshot(backend, ["a", "b"], ["src"])
        cs = Changeset().add_node(_sem("b", E2)).add_link("a", "b", EdgeType.SIBLING).put_metadata("a", _meta())
        with pytest.raises(IngestionError) as info:
            backend.commit_ingestion(make_record("src", node_ids=("b",), **changed), cs)
        assert info.value.reason == "source_conflict"
        assert info.value.source_id == "src"
        assert snapshot(backend, ["a", "b"], ["src"]) == before

    def test_record_survives_delete_nodes_and_blocks_recreation(self, backend: GraphBackend) -> None:
        """After its nodes are deleted, re-committing a source returns the original receipt and recreates nothing."""
        first = make_record("src", node_ids=("a",))
        backend.commit_ingestion(first, Changeset().add_node(_sem("a", E1)))
        backend.delete_nodes(["a"])
        outcome, receipt = backend.commit_ingestion(
            make_record("src", node_ids=("a",), stored_at=NOW + timedelta(days=1)), Changeset().add_node(_sem("a", E1))
        )
        assert (outcome, receipt) == (Outcome.EXISTING, first.receipt)
        assert backend.get_node("a") is None

    def test_delete_ingestion_removes_only_the_record(self, backend: GraphBackend) -> None:
        """delete_ingestion reports whether a record existed and leaves the nodes."""
        backend.commit_ingestion(make_record("src", node_ids=("a",)), Changeset().add_node(_sem("a", E1)))
        assert backend.delete_ingestion("src") is True
        assert backend.delete_ingestion("src") is False
        assert backend.delete_ingestion("never") is False
        assert backend.get_ingestion("src") is None
        assert backend.get_node("a") is not None
        second = make_record("src", payload="new", node_ids=("b",))
        assert backend.commit_ingestion(second, Changeset().add_node(_sem("b", E1))) == (
            Outcome.INSERTED,
            second.receipt,
        )

    def test_concurrent_commits_of_one_source_insert_once(self, backend: GraphBackend) -> None:
        """16 threads committing one source: one INSERTED, every caller gets the same receipt."""
        threads = 16
        barrier = threading.Barrier(threads)

        def commit(i: int) -> tuple[Outcome, IngestionReceipt]:
            record = make_record("src", node_ids=(f"t{i:02d}",), stored_at=NOW + timedelta(microseconds=i))
            cs = Changeset().add_node(_sem(f"t{i:02d}", E1))
            barrier.wait(timeout=60)
            return backend.commit_ingestion(record, cs)

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(commit, range(threads)))
        inserted = [r for o, r in results if o is Outcome.INSERTED]
        assert len(inserted) == 1
        winner = inserted[0]
        assert all(r == winner for _, r in results)
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == list(winner.node_ids)
        stored = backend.get_ingestion("src")
        assert stored is not None and stored.receipt == winner

    # -- rejected input ------------------------------------------------------

    @pytest.mark.parametrize("bad", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
    def test_rejected_call_writes_nothing(self, backend: GraphBackend, bad: Call) -> None:
        """Malformed input raises ValidationError and leaves the store exactly as it was."""
        ids, sources = _populate(backend)
        before = snapshot(backend, ids, sources)
        with pytest.raises(ValidationError):
            bad(backend)
        assert snapshot(backend, ids, sources) == before

    def test_rejected_first_changeset_does_not_fix_the_dimension(self, backend: GraphBackend) -> None:
        """A refused changeset into an empty store leaves the dimension open."""
        with pytest.raises(ValidationError):
            backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0))).add_node(_sem("b", vec(1, 0, 0))))
        assert backend.get_nodes_by_type(list(NodeType)) == []
        backend.apply_changeset(Changeset().add_node(_sem("c", vec(1, 0, 0))))
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], vec(0, 0, 1), [vec(2, 0, 0)], None)) == [("c", 1.0)]

    def test_first_embedding_fixes_the_dimension(self, backend: GraphBackend) -> None:
        """Once a dimension is stored, another one is refused even in a later call."""
        backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0, 0))))
        with pytest.raises(ValidationError):
            backend.apply_changeset(Changeset().add_node(_sem("b", E1)))
        assert backend.get_node("b") is None

    # -- closing -------------------------------------------------------------

    @pytest.mark.parametrize("call", list(CALLS_AFTER_CLOSE.values()), ids=list(CALLS_AFTER_CLOSE))
    def test_calls_after_close_raise_storage_error(self, backend: GraphBackend, call: Call) -> None:
        """A closed backend refuses every operation with StorageError."""
        _populate(backend)
        backend.close()
        with pytest.raises(StorageError):
            call(backend)

    def test_close_twice_is_harmless(self, backend: GraphBackend) -> None:
        """close() may be called again on a closed backend."""
        backend.close()
        backend.close()

    def test_context_manager_closes(self, store_path: Path) -> None:
        """Leaving a with-block closes the backend."""
        outer = self.make_backend(store_path)
        with outer as inner:
            inner.apply_changeset(Changeset().add_node(_sem("a", E1)))
            assert inner.get_node("a") is not None
        with pytest.raises(StorageError):
            outer.get_node("a")


def _reopen(test: BackendConformance, backend: GraphBackend, path: Path) -> GraphBackend:
    backend.close()
    return test.make_backend(path)


class PersistentConformance(BackendConformance):
    """Durability: what a backend stored survives close and reopen on the same path."""

    reopen: ClassVar[bool] = True

    def test_everything_survives_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """Every node field, link, metadata record and the exact receipt survive a restart."""
        nodes = sample_nodes() + nodes_with_optionals_unset()
        cs = Changeset().add_nodes(nodes)
        for i, edge in enumerate(EdgeType):
            cs.add_link(nodes[i].id, nodes[i + 1].id, edge)
        meta = NodeMetadata(
            created_at=datetime(2024, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
            access_count=7,
            last_accessed_at=datetime(2024, 3, 5, 0, 0, 0, 1, tzinfo=UTC),
            cumulative_reward=1 / 3,
            reward_count=2,
            custom={"origin": "тест", "n": 3, "w": 0.1, "l": ["a", 1]},
        )
        backend.apply_changeset(cs.put_metadata(nodes[0].id, meta).put_metadata("no-node", _meta(5.0, 2)))
        record = make_record("src", node_ids=("i1",), stored_at=datetime(2024, 7, 1, 1, 2, 3, 456789, tzinfo=UTC))
        backend.commit_ingestion(record, Changeset().add_node(_sem("i1", vec(1, 2, 3, 4))))
        ids = [n.id for n in nodes] + ["i1", "no-node"]
        before = snapshot(backend, ids, ["src"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert snapshot(reopened, ids, ["src"]) == before
            stored = reopened.get_ingestion("src")
            assert stored is not None
            assert stored.receipt == record.receipt
            assert stored.payload_digest == record.payload_digest
            assert stored.receipt.stored_at.microsecond == 456789
        finally:
            reopened.close()

    def test_ingestion_record_survives_delete_nodes_and_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """A source whose nodes were deleted still answers EXISTING after a restart."""
        record = make_record("src", node_ids=("a",))
        backend.commit_ingestion(record, Changeset().add_node(_sem("a", E1)))
        backend.delete_nodes(["a"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert reopened.get_ingestion("src") == record
            again = make_record("src", node_ids=("a",), stored_at=NOW + timedelta(days=1))
            assert reopened.commit_ingestion(again, Changeset().add_node(_sem("a", E1))) == (
                Outcome.EXISTING,
                record.receipt,
            )
            assert reopened.get_node("a") is None
        finally:
            reopened.close()

    def test_deletes_survive_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """Deleted nodes, their links and deleted metadata stay gone after a restart."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).add_link("a", "b", EdgeType.SIBLING)
        backend.apply_changeset(cs.put_metadata("a", _meta()).put_metadata("b", _meta()))
        backend.delete_nodes(["a"])
        backend.delete_metadata(["b"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert reopened.get_node("a") is None
            assert _links(reopened.get_node("b")) == {}
            assert set(reopened.get_metadata(["a", "b"])) == {"a"}
            assert [n.id for n, _ in reopened.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)] == ["b"]
        finally:
            reopened.close()

    def test_dimension_survives_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """The store's embedding dimension is enforced after a restart."""
        backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0, 0))))
        reopened = _reopen(self, backend, store_path)
        try:
            with pytest.raises(ValidationError):
                reopened.apply_changeset(Changeset().add_node(_sem("b", E1)))
            with pytest.raises(ValidationError):
                reopened.find_candidates([NodeType.SEMANTIC], E1, [], None)
        finally:
            reopened.close()

    def test_candidates_survive_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """find_candidates answers the same after a restart."""
        graph = random_graph(7, n=60)
        backend.apply_changeset(graph.changeset)
        query, tags = graph.queries[0]
        before = backend.find_candidates(list(NodeType), query, tags, KEEP_ALL, now=NOW, exact=True)
        reopened = _reopen(self, backend, store_path)
        try:
            after = reopened.find_candidates(list(NodeType), query, tags, KEEP_ALL, now=NOW, exact=True)
            assert [n for n, _ in after] == [n for n, _ in before]
            assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=1e-6)
        finally:
            reopened.close()


_PROCESSES = 4
_SOURCES = 50


def _race_worker(
    opener: Callable[[Path], GraphBackend],
    path: Path,
    proc: int,
    barrier: Any,
    results: Any,
) -> None:
    """Child process: commit every source with this process's own changeset."""
    try:
        backend = opener(path)
        try:
            barrier.wait(timeout=120)
            out = []
            for s in range(_SOURCES):
                source, node_id = f"src-{s:02d}", f"src-{s:02d}/p{proc}"
                record = make_record(source, node_ids=(node_id,), stored_at=NOW + timedelta(microseconds=proc))
                outcome, receipt = backend.commit_ingestion(record, Changeset().add_node(_sem(node_id, E1)))
                out.append((source, outcome.value, receipt))
        finally:
            backend.close()
        results.put((proc, out, None))
    except BaseException:
        results.put((proc, None, traceback.format_exc()))


def _visibility_worker(opener: Callable[[Path], GraphBackend], path: Path, results: Any) -> None:
    """Child process: read the parent's node, then add one of its own."""
    try:
        backend = opener(path)
        try:
            parent = backend.get_node("from-parent")
            backend.apply_changeset(
                Changeset().add_node(_sem("from-child", E2)).add_link("from-child", "from-parent", "sibling")
            )
        finally:
            backend.close()
        results.put((0, parent, None))
    except BaseException:
        results.put((0, None, traceback.format_exc()))


def _run_children(target: Callable[..., None], args: list[tuple[Any, ...]], results: Any) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=a, daemon=True) for a in args]
    for p in procs:
        p.start()
    out: list[Any] = []
    try:
        for _ in procs:
            try:
                _, value, error = results.get(timeout=300)
            except queue.Empty:
                pytest.fail("a child process did not report back")
            assert error is None, f"child process failed:\n{error}"
            out.append(value)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return out


class SharedConformance(BackendConformance):
    """Several processes on one store: the ingestion compare-and-set holds across them."""

    shared: ClassVar[bool] = True

    def test_processes_racing_commit_ingestion_insert_once(self, backend: GraphBackend, store_path: Path) -> None:
        """4 processes commit the same 50 sources: one winner each, everyone sees its receipt."""
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(_PROCESSES), ctx.Queue()
        opener = type(self).open_in_child
        args = [(opener, store_path, proc, barrier, results) for proc in range(_PROCESSES)]
        outputs = _run_children(_race_worker, args, results)
        by_source: dict[str, list[tuple[str, IngestionReceipt]]] = {}
        for out in outputs:
            for source, outcome, receipt in out:
                by_source.setdefault(source, []).append((outcome, receipt))
        assert len(by_source) == _SOURCES
        winners: set[str] = set()
        for source, answers in by_source.items():
            inserted = [r for o, r in answers if o == Outcome.INSERTED.value]
            assert len(inserted) == 1, f"{source}: {len(inserted)} INSERTED"
            assert all(r == inserted[0] for _, r in answers), f"{source}: receipts differ"
            record = backend.get_ingestion(source)
            assert isinstance(record, IngestionRecord) and record.receipt == inserted[0]
            winners |= set(inserted[0].node_ids)
        assert set(_ids(backend.get_nodes_by_type(list(NodeType)))) == winners
        hits = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert sorted(n.id for n, _ in hits) == sorted(winners)

    def test_writes_are_visible_across_processes(self, backend: GraphBackend, store_path: Path) -> None:
        """A child sees the parent's node; the parent's open backend sees the child's node and link."""
        node = _sem("from-parent", E1)
        backend.apply_changeset(Changeset().add_node(node))
        results = multiprocessing.get_context("spawn").Queue()
        (seen,) = _run_children(_visibility_worker, [(type(self).open_in_child, store_path, results)], results)
        assert seen == node
        assert _links(backend.get_node("from-parent")) == {EdgeType.SIBLING: {"from-child"}}
        assert sorted(n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E2, [], KEEP_ALL)) == [
            "from-child",
            "from-parent",
        ]


_CAPABILITIES.update(reopen=PersistentConformance, shared=SharedConformance)
