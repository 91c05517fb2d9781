"""The data model (docs/architecture.md, data model): validation, immutability, equality and metadata helpers."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hippograph as hg
from hippograph import (
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    NodeMetadata,
    NodeType,
    Semantic,
    Source,
    ValidationError,
)
from hippograph.engine.checks import as_embedding
from hippograph.testing.graphs import NOW, make_node, sample_nodes

# -- enums ------------------------------------------------------------------


def test_node_types_are_the_seven_str_values() -> None:
    assert [t.value for t in NodeType] == [
        "episodic",
        "semantic",
        "procedural",
        "tag",
        "intent",
        "subgoal",
        "source",
    ]
    assert NodeType.SEMANTIC == "semantic"  # type: ignore[comparison-overlap]
    assert NodeType("semantic") is NodeType.SEMANTIC


def test_edge_types_are_the_four_str_values() -> None:
    assert {e.value for e in EdgeType} == {"membership", "hierarchical", "provenance", "sibling"}
    assert EdgeType.SIBLING == "sibling"  # type: ignore[comparison-overlap]
    assert EdgeType("sibling") is EdgeType.SIBLING


def test_every_node_class_carries_its_type() -> None:
    classes: list[type[hg.Node]] = [hg.Episodic, hg.Semantic, hg.Procedural, hg.Tag, hg.Intent, hg.Subgoal, hg.Source]
    assert [c.node_type for c in classes] == list(NodeType)


def test_node_base_class_is_abstract() -> None:
    with pytest.raises(TypeError):
        hg.Node(id="a")


# -- ids --------------------------------------------------------------------


@pytest.mark.parametrize("node_id", ["a", "x" * 512, "é" * 256, "🔑" * 128, "with space/and:colon"])
def test_valid_ids_are_kept_as_given(node_id: str) -> None:
    assert make_node(NodeType.SEMANTIC, node_id).id == node_id


@pytest.mark.parametrize(
    "node_id",
    ["", "x" * 513, "é" * 257, "🔑" * 128 + "x", "\ud800", 7, None, b"bytes"],
    ids=["empty", "513_ascii", "514_utf8", "513_emoji", "lone_surrogate", "int", "none", "bytes"],
)
def test_invalid_ids_are_rejected(node_id: Any) -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, node_id)


# -- embeddings -------------------------------------------------------------


def test_list_embedding_becomes_float32_1d() -> None:
    node = make_node(NodeType.SEMANTIC, "a", [1, 2.5, -3])
    assert node.embedding is not None
    assert node.embedding.dtype == np.float32
    assert node.embedding.shape == (3,)
    assert node.embedding.tolist() == [1.0, 2.5, -3.0]


def test_float64_embedding_is_rounded_to_float32() -> None:
    node = make_node(NodeType.SEMANTIC, "a", np.array([1 / 3], dtype=np.float64))
    assert node.embedding is not None
    assert node.embedding[0] == np.float32(1 / 3)


def test_embedding_is_copied_and_read_only() -> None:
    source = np.array([1.0, 2.0], dtype=np.float32)
    node = make_node(NodeType.SEMANTIC, "a", source)
    source[0] = 99.0
    assert node.embedding is not None
    assert node.embedding[0] == 1.0
    with pytest.raises(ValueError):
        node.embedding[0] = 5.0


@pytest.mark.parametrize(
    "embedding",
    [
        [1.0, math.nan],
        [math.inf, 0.0],
        [-math.inf],
        pytest.param([1e39], marks=pytest.mark.filterwarnings("ignore:overflow")),
        [],
        [[1.0, 2.0], [3.0, 4.0]],
        np.float32(1.0),
        "12",
        ["a", "b"],
    ],
    ids=["nan", "inf", "neg_inf", "float32_overflow", "empty", "2d", "scalar", "str", "non_numeric"],
)
def test_bad_embeddings_are_rejected(embedding: object) -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", embedding)


@pytest.mark.parametrize(
    "embedding",
    [[True, 1.0], [1.0, False], (1.0, "2"), [1.0, 1j], [1.0, np.bool_(True)], [1.0, None], [[1.0], [2.0]]],
    ids=["bool_first", "bool_later", "numeric_str", "complex", "numpy_bool", "none", "nested"],
)
def test_lists_holding_what_is_no_real_number_are_rejected(embedding: object) -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", embedding)


_REALS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(min_value=-(2**62), max_value=2**62),
    st.integers(),
    st.floats(width=32).map(np.float32),
    st.floats(width=64).map(np.float64),
)


@given(
    values=st.one_of(
        st.lists(_REALS, min_size=1, max_size=40),
        st.lists(st.integers(min_value=2**53 - 5, max_value=2**63 - 1), min_size=1, max_size=5),
    ),
    as_tuple=st.booleans(),
)
def test_a_list_of_numbers_converts_as_numpy_converts_it(values: list[Any], as_tuple: bool) -> None:
    """Lists of Python floats and ints are read in Rust; the result (or the refusal) is numpy's."""
    given_value = tuple(values) if as_tuple else values
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            want: Any = np.array(np.asarray(values), dtype=np.float32)
        except OverflowError:
            want = None
    finite = want is not None and bool(np.isfinite(want).all())
    if not finite:
        with pytest.raises(ValidationError):
            as_embedding(given_value)
        return
    got = as_embedding(given_value)
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()


# -- timestamps -------------------------------------------------------------


def test_naive_created_at_is_rejected() -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", created_at=datetime(2024, 1, 1))


def test_created_at_must_be_a_datetime() -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", created_at="2024-01-01T00:00:00Z")  # type: ignore[arg-type]


def test_aware_created_at_is_converted_to_utc_keeping_the_instant() -> None:
    local = datetime(2024, 1, 1, 5, 30, 0, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    node = make_node(NodeType.SEMANTIC, "a", created_at=local)
    assert node.created_at == local
    assert node.created_at.utcoffset() == timedelta(0)
    assert node.created_at == datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)


def test_created_at_defaults_to_now_in_utc() -> None:
    before = datetime.now(UTC)
    node = Semantic(id="a", proposition="p", confidence=1.0)
    assert before <= node.created_at <= datetime.now(UTC)
    assert node.created_at.utcoffset() == timedelta(0)


# -- typed fields -----------------------------------------------------------


@pytest.mark.parametrize(
    ("node_type", "field", "value"),
    [
        (NodeType.SEMANTIC, "confidence", "high"),
        (NodeType.SEMANTIC, "confidence", True),
        (NodeType.SEMANTIC, "confidence", math.nan),
        (NodeType.SEMANTIC, "proposition", 3),
        (NodeType.SEMANTIC, "proposition", None),
        (NodeType.EPISODIC, "reward", math.inf),
        (NodeType.EPISODIC, "observation", b"bytes"),
        (NodeType.SOURCE, "step_index", 1.0),
        (NodeType.SOURCE, "step_index", True),
        (NodeType.SOURCE, "plain_text", 5),
        (NodeType.PROCEDURAL, "return_score", "0.5"),
        (NodeType.SUBGOAL, "parent_goal", 1),
        (NodeType.TAG, "label", None),
    ],
)
def test_field_types_are_checked(node_type: NodeType, field: str, value: Any) -> None:
    with pytest.raises(ValidationError):
        make_node(node_type, "a", **{field: value})


def test_missing_required_field_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Semantic(id="a", proposition="p")  # type: ignore[call-arg]


def test_int_is_accepted_for_float_fields_and_stored_as_float() -> None:
    node = make_node(NodeType.SEMANTIC, "a", confidence=1)
    assert isinstance(node, Semantic)
    assert node.confidence == 1.0 and type(node.confidence) is float


def test_optional_fields_default_to_none() -> None:
    node = Source(id="s", episode_id="e", step_index=0)
    assert node.plain_text is None
    assert hg.Procedural(id="p", instruction="i", condition="c", expected_outcome="o").return_score is None
    assert hg.Subgoal(id="g", description="d").parent_goal is None


def test_field_names_lists_the_type_specific_fields() -> None:
    assert Source.field_names() == ("episode_id", "step_index", "plain_text")
    assert hg.Episodic.field_names() == ("observation", "action", "state", "subgoal", "reward", "trajectory_id")


# -- links ------------------------------------------------------------------


def test_links_are_normalised_to_edge_types_and_frozensets() -> None:
    node = make_node(NodeType.SEMANTIC, "a", links={"sibling": ["b", "c", "b"]})  # type: ignore[dict-item]
    assert dict(node.links) == {EdgeType.SIBLING: frozenset({"b", "c"})}


def test_self_links_and_empty_link_sets_are_dropped() -> None:
    node = make_node(NodeType.SEMANTIC, "a", links={EdgeType.SIBLING: ["a"], EdgeType.MEMBERSHIP: []})
    assert dict(node.links) == {}


def test_unknown_edge_type_in_links_is_rejected() -> None:
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", links={"friend": ["b"]})  # type: ignore[dict-item]


def test_links_must_be_collections_of_valid_ids() -> None:
    with pytest.raises(ValidationError):
        Semantic(id="a", proposition="p", confidence=1.0, links={EdgeType.SIBLING: "bc"})  # type: ignore[dict-item]
    with pytest.raises(ValidationError):
        make_node(NodeType.SEMANTIC, "a", links={EdgeType.SIBLING: [""]})


# -- immutability and equality ---------------------------------------------


def test_nodes_are_frozen() -> None:
    node = make_node(NodeType.SEMANTIC, "a", [1.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.id = "b"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.proposition = "other"  # type: ignore[attr-defined]


def test_equal_nodes_compare_equal_including_embeddings() -> None:
    a = make_node(NodeType.SEMANTIC, "a", [1.0, 2.0])
    b = make_node(NodeType.SEMANTIC, "a", np.array([1.0, 2.0], dtype=np.float32))
    assert a == b
    assert hash(a) == hash(b)


@pytest.mark.parametrize(
    "other",
    [
        make_node(NodeType.SEMANTIC, "a", [1.0, 2.5]),
        make_node(NodeType.SEMANTIC, "a", None),
        make_node(NodeType.SEMANTIC, "a", [1.0, 2.0, 0.0]),
        make_node(NodeType.SEMANTIC, "b", [1.0, 2.0]),
        make_node(NodeType.SEMANTIC, "a", [1.0, 2.0], confidence=0.9),
        make_node(NodeType.SEMANTIC, "a", [1.0, 2.0], created_at=NOW + timedelta(microseconds=1)),
        make_node(NodeType.SEMANTIC, "a", [1.0, 2.0], links={EdgeType.SIBLING: ["b"]}),
        make_node(NodeType.TAG, "a", [1.0, 2.0]),
    ],
    ids=["embedding", "no_embedding", "dimension", "id", "field", "created_at", "links", "type"],
)
def test_nodes_differing_anywhere_are_unequal(other: hg.Node) -> None:
    assert make_node(NodeType.SEMANTIC, "a", [1.0, 2.0]) != other


def test_sample_nodes_cover_every_type() -> None:
    assert sorted(n.node_type for n in sample_nodes()) == sorted(NodeType)


def test_with_links_returns_a_new_node() -> None:
    node = make_node(NodeType.SEMANTIC, "a", [1.0])
    linked = node.with_links({EdgeType.SIBLING: {"b"}})
    assert dict(node.links) == {}
    assert linked.linked_ids() == {"b"}
    assert linked.fields_dict() == node.fields_dict()


# -- NodeMetadata -----------------------------------------------------------


def test_metadata_defaults() -> None:
    meta = NodeMetadata(created_at=NOW)
    assert (meta.access_count, meta.last_accessed_at, meta.cumulative_reward, meta.reward_count, meta.custom) == (
        0,
        None,
        0.0,
        0,
        {},
    )


def test_record_access_counts_and_stamps_without_mutating() -> None:
    meta = NodeMetadata(created_at=NOW)
    later = NOW + timedelta(hours=1)
    accessed = meta.record_access(later).record_access(later)
    assert accessed.access_count == 2
    assert accessed.last_accessed_at == later
    assert meta.access_count == 0 and meta.last_accessed_at is None


def test_record_access_defaults_to_now() -> None:
    before = datetime.now(UTC)
    stamp = NodeMetadata(created_at=NOW).record_access().last_accessed_at
    assert stamp is not None and before <= stamp <= datetime.now(UTC)


def test_record_access_rejects_naive_time() -> None:
    with pytest.raises(ValidationError):
        NodeMetadata(created_at=NOW).record_access(datetime(2024, 1, 1))


def test_update_reward_accumulates_and_avg_reward_averages() -> None:
    meta = NodeMetadata(created_at=NOW)
    assert meta.avg_reward == 0.0
    rewarded = meta.update_reward(1.0).update_reward(-0.5).update_reward(2)
    assert rewarded.reward_count == 3
    assert rewarded.cumulative_reward == 2.5
    assert rewarded.avg_reward == pytest.approx(2.5 / 3)
    assert meta.reward_count == 0


@pytest.mark.parametrize("reward", [math.nan, math.inf, "1", True, None])
def test_update_reward_rejects_non_finite_or_non_numbers(reward: Any) -> None:
    with pytest.raises(ValidationError):
        NodeMetadata(created_at=NOW).update_reward(reward)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"access_count": -1},
        {"access_count": 1.5},
        {"reward_count": True},
        {"cumulative_reward": math.nan},
        {"cumulative_reward": "1"},
        {"last_accessed_at": datetime(2024, 1, 1)},
        {"created_at": datetime(2024, 1, 1)},
        {"custom": {1: "x"}},
        {"custom": ["x"]},
    ],
    ids=lambda kw: next(iter(kw)),
)
def test_metadata_fields_are_checked(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        NodeMetadata(**{"created_at": NOW, **kwargs})


def test_metadata_is_frozen_and_custom_is_copied() -> None:
    custom = {"k": 1}
    meta = NodeMetadata(created_at=NOW, custom=custom)
    custom["k"] = 2
    assert meta.custom == {"k": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.access_count = 3  # type: ignore[misc]


# -- ingestion records ------------------------------------------------------


def _receipt(source_id: str = "src") -> IngestionReceipt:
    return IngestionReceipt(source_id=source_id, node_ids=("a", "b"), stored_at=NOW)


def test_receipt_node_ids_become_a_tuple() -> None:
    receipt = IngestionReceipt(source_id="s", node_ids=["a", "b"], stored_at=NOW)  # type: ignore[arg-type]
    assert receipt.node_ids == ("a", "b")


def test_receipt_rejects_naive_time_and_bad_ids() -> None:
    with pytest.raises(ValidationError):
        IngestionReceipt(source_id="s", node_ids=(), stored_at=datetime(2024, 1, 1))
    with pytest.raises(ValidationError):
        IngestionReceipt(source_id="s", node_ids=("",), stored_at=NOW)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"payload_digest": b"short"},
        {"payload_digest": "0" * 32},
        {"fingerprint_version": 0},
        {"fingerprint_version": True},
        {"receipt": "receipt"},
        {"receipt": _receipt("other")},
    ],
    ids=["short_digest", "str_digest", "version_0", "version_bool", "not_a_receipt", "receipt_of_other_source"],
)
def test_ingestion_record_fields_are_checked(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "source_id": "src",
        "payload_digest": b"\x00" * 32,
        "fingerprint_version": 1,
        "receipt": _receipt(),
        **kwargs,
    }
    with pytest.raises(ValidationError):
        IngestionRecord(**fields)
