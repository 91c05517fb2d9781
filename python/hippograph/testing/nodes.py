"""Nodes, links and metadata as stored: what reads give back after each kind of write.

`NodeConformance` holds the tests of round trips (every type, embeddings,
unset fields, unusual ids), replacing a node by id, links, deleting,
traversal with `get_linked_nodes`, reading by type, and metadata.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from ..errors import ValidationError
from ..graph.changeset import Changeset
from ..graph.model import EdgeType, Node, NodeMetadata, NodeType
from ..graph.protocol import GraphBackend
from ._helpers import E1, E2, KEEP_ALL, SuiteMixin, _ids, _links, _meta, _pairs, _sem
from .graphs import NOW, make_node, make_record, nodes_with_optionals_unset, sample_nodes, vec

__all__ = ["NodeConformance"]


class NodeConformance(SuiteMixin):
    """Round trips, replacing, links, deleting, traversal, reads by type and metadata."""

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
