"""Changeset builders (docs/architecture.md, data model): validation as you go, order kept, merge semantics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph import Changeset, EdgeType, Node, NodeMetadata, NodeType, ValidationError
from hippograph._core import plain_changeset
from hippograph.graph.changeset import _SHAPES, check_changeset, checked_in_full
from hippograph.testing.graphs import NOW, make_node


def _node(node_id: str) -> Node:
    return make_node(NodeType.SEMANTIC, node_id, [1.0, 0.0])


def test_new_changeset_is_empty() -> None:
    cs = Changeset()
    assert cs.is_empty()
    assert (cs.additions, cs.links, cs.metadata) == ([], [], {})


def test_builders_chain_and_keep_append_order() -> None:
    a, b, c = _node("c"), _node("a"), _node("b")
    cs = Changeset().add_node(a).add_nodes([b, c]).add_link("c", "a", EdgeType.SIBLING).add_link("a", "b", "membership")
    assert cs.additions == [a, b, c]
    assert cs.node_ids == ("c", "a", "b")
    assert cs.links == [("c", "a", EdgeType.SIBLING), ("a", "b", EdgeType.MEMBERSHIP)]
    assert not cs.is_empty()


def test_add_link_converts_edge_type_strings_to_the_enum() -> None:
    ((_, _, edge),) = Changeset().add_link("a", "b", "provenance").links
    assert edge is EdgeType.PROVENANCE


@pytest.mark.parametrize("edge", ["friend", "", None, 3])
def test_add_link_rejects_unknown_edge_type(edge: object) -> None:
    cs = Changeset()
    with pytest.raises(ValidationError):
        cs.add_link("a", "b", edge)  # type: ignore[arg-type]
    assert cs.links == []


@pytest.mark.parametrize(("a", "b"), [("", "b"), ("a", ""), ("a", 1), (None, "b")])
def test_add_link_rejects_bad_ids(a: object, b: object) -> None:
    cs = Changeset()
    with pytest.raises(ValidationError):
        cs.add_link(a, b, EdgeType.SIBLING)  # type: ignore[arg-type]
    assert cs.links == []


def test_add_node_rejects_non_nodes() -> None:
    cs = Changeset()
    with pytest.raises(ValidationError):
        cs.add_node({"id": "a"})  # type: ignore[arg-type]
    assert cs.additions == []


def test_put_metadata_later_put_wins() -> None:
    first, second = NodeMetadata(created_at=NOW), NodeMetadata(created_at=NOW, access_count=4)
    cs = Changeset().put_metadata("a", first).put_metadata("b", first).put_metadata("a", second)
    assert cs.metadata == {"a": second, "b": first}


def test_put_metadata_validates_id_and_value() -> None:
    cs = Changeset()
    with pytest.raises(ValidationError):
        cs.put_metadata("", NodeMetadata(created_at=NOW))
    with pytest.raises(ValidationError):
        cs.put_metadata("a", {"access_count": 1})  # type: ignore[arg-type]
    assert cs.metadata == {}


def test_merge_concatenates_in_order_and_right_side_wins_on_metadata() -> None:
    left_meta = NodeMetadata(created_at=NOW)
    right_meta = NodeMetadata(created_at=NOW + timedelta(hours=1), access_count=2)
    left = Changeset().add_node(_node("a")).add_link("a", "b", EdgeType.SIBLING)
    left.put_metadata("a", left_meta).put_metadata("only-left", left_meta)
    right = Changeset().add_node(_node("b")).add_link("b", "c", EdgeType.MEMBERSHIP).put_metadata("a", right_meta)
    merged = left.merge(right)
    assert merged.node_ids == ("a", "b")
    assert merged.links == [("a", "b", EdgeType.SIBLING), ("b", "c", EdgeType.MEMBERSHIP)]
    assert merged.metadata == {"a": right_meta, "only-left": left_meta}


def test_merge_leaves_both_inputs_unchanged() -> None:
    left = Changeset().add_node(_node("a")).put_metadata("a", NodeMetadata(created_at=NOW))
    right = Changeset().add_node(_node("b"))
    merged = left.merge(right)
    merged.add_node(_node("c"))
    assert left.node_ids == ("a",)
    assert right.node_ids == ("b",)
    assert right.metadata == {}


# -- the native check of the common changeset agrees with the full one ----------------------------

_IDS = st.sampled_from(["a", "b", "x" * 512, "x" * 513, "", "é", "\ud800", 7, None])
_VALUES = st.sampled_from([1.0, -2.5, 0.0, np.nan, np.inf, -np.inf, 3e38])


@st.composite
def _embeddings(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["none", "f32", "f64", "2d", "strided", "big-endian", "empty", "list"]))
    values = draw(st.lists(_VALUES, min_size=1, max_size=3)) + draw(st.sampled_from([[], [1.0]]))
    v = np.asarray(values, np.float32)
    return {
        "none": None, "f32": v, "f64": v.astype(np.float64), "2d": v.reshape(1, -1), "strided": np.repeat(v, 2)[::2],
        "big-endian": v.astype(">f4"), "empty": v[:0], "list": values,
    }[kind]  # fmt: skip


@st.composite
def _changesets(draw: st.DrawFn) -> Changeset:
    cs = Changeset()
    for i in range(draw(st.integers(0, 3))):
        node: Any = _node(f"n{i}")
        object.__setattr__(node, "embedding", draw(_embeddings()))  # past the constructor's own checks
        cs.additions.append(node if draw(st.integers(0, 9)) else "not a node")  # type: ignore[arg-type]
    for _ in range(draw(st.integers(0, 3))):
        edge = draw(st.sampled_from([EdgeType.SIBLING, "sibling", "friend", 3]))
        link = (draw(_IDS), draw(_IDS), edge)
        cs.links.append(draw(st.sampled_from([link, list(link), link[:2]])))  # type: ignore[arg-type]
    for _ in range(draw(st.integers(0, 2))):
        cs.metadata[draw(_IDS)] = draw(st.sampled_from([NodeMetadata(created_at=NOW), {"access_count": 1}]))  # type: ignore[assignment,index]
    return cs


@settings(max_examples=300, deadline=None)
@given(cs=_changesets(), dim=st.sampled_from([None, 1, 2, 3, 4]))
def test_the_native_check_accepts_only_what_the_full_check_accepts_with_the_same_dimension(
    cs: Changeset, dim: int | None
) -> None:
    try:
        full: object = checked_in_full(cs, dim)
    except ValidationError as exc:
        full = exc
    try:
        got: object = check_changeset(cs, dim)
    except ValidationError as exc:
        got = exc
    if isinstance(full, ValidationError):
        assert isinstance(got, ValidationError) and str(got) == str(full)
    else:
        assert got == full
    plain, after = plain_changeset(cs.additions, cs.links, cs.metadata, dim, _SHAPES)
    assert not plain or after == full  # the native check never passes what the full one refuses


def test_the_common_changeset_passes_the_native_check() -> None:
    cs = Changeset().add_nodes([_node("a"), _node("b")]).add_link("a", "b", EdgeType.SIBLING)
    cs.put_metadata("a", NodeMetadata(created_at=NOW))
    assert plain_changeset(cs.additions, cs.links, cs.metadata, None, _SHAPES) == (True, 2)
    assert plain_changeset(cs.additions, cs.links, cs.metadata, 3, _SHAPES) == (False, None)
