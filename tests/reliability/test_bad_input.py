"""Bad input at every public entry point: refused with the documented error, nothing written.

Every refusal must raise a `hippograph.errors` type (never a bare TypeError,
KeyError, OverflowError, RuntimeError or a Rust panic), carry a message, and
leave the store exactly as it was (`hippograph.testing.graphs.snapshot` before
and after). Backend entry points run against `InMemory`, `LMDB` and `Postgres`. Edge cases
that are valid (NUL, combining characters, 4-byte characters, ids of exactly
512 UTF-8 bytes) must be accepted and round-trip.

Calling with a wrong number of arguments or an unknown keyword is Python's own
``TypeError`` and out of scope; so is ``Node(...)`` itself (abstract, documented
``TypeError``). Regression tests of the bugs this file found (B5–B12 in
README.md) close it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_workload import DIM, structure, trajectory

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.errors import ConfigError, IngestionError, NotFoundError, ValidationError
from hippograph.testing.graphs import make_record, snapshot
from pg_server import pg_dsn, pg_store

__all__ = ["pg_dsn", "pg_store"]

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)
Refusal = type[Exception] | tuple[type[Exception], ...]

# -- strategies -------------------------------------------------------------------

_plain = st.characters(blacklist_categories=("Cs",))
_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def _pad_to(text: str, size: int) -> str:
    """`text` cut or padded with "a" to exactly `size` UTF-8 bytes."""
    while len(text.encode("utf-8")) > size:
        text = text[:-1]
    return text + "a" * (size - len(text.encode("utf-8")))


oversized_ids = st.builds(lambda t, extra: _pad_to(t, 513 + extra), st.text(_plain, max_size=60), st.integers(0, 600))
surrogate_ids = st.builds(
    lambda a, s, b: a + s + b, st.text(_plain, max_size=6), _surrogate, st.text(_plain, max_size=6)
)
non_str_ids = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.binary(max_size=8),
    st.lists(st.text(max_size=3), max_size=2),
    st.booleans(),
)
bad_ids = st.one_of(st.just(""), oversized_ids, surrogate_ids, non_str_ids)
hashable_bad_ids = bad_ids.filter(lambda x: not isinstance(x, list))  # usable as a dict key

_pieces = st.sampled_from(["a", "é", "€", "𝄞", "\x00", "e\u0301", "\u200d", "\ufeff", " ", "/", ":"])
edge_case_ids = st.one_of(
    st.lists(_pieces, min_size=1, max_size=200).map(lambda parts: _pad_to("".join(parts), 512)),
    st.lists(_pieces, min_size=1, max_size=30).map("".join),
    st.sampled_from(["𝄞" * 128, "é" * 256, "€" * 170 + "aa", "a" * 512, "\x00", "e\u0301", "\u0301"]),
)

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
bad_embeddings = st.one_of(
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [*v, math.nan]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [math.inf, *v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [-math.inf, *v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [1e39, *v]),  # overflows float32
    st.lists(finite, min_size=1, max_size=DIM * 2).filter(lambda v: len(v) != DIM),  # another dimension
    st.just([]),
    st.just([[1.0] * DIM, [1.0] * DIM]),
    st.just("not a vector"),
    st.just([object()] * DIM),
    st.just(None),
    # numpy would turn these into float32 quietly: numeric strings, bools, complex numbers
    st.lists(finite, min_size=DIM, max_size=DIM).map(lambda v: [str(x) for x in v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [True, *v]),
    st.just(np.ones(DIM, np.bool_)),
    st.lists(finite, min_size=DIM, max_size=DIM).map(lambda v: np.array(v, np.complex64)),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [complex(1, 0), *v]),
)
unknown_names = st.one_of(
    st.text(max_size=12).filter(lambda s: s not in {t.value for t in hg.NodeType} | {e.value for e in hg.EdgeType}),
    st.integers(),
    st.none(),
)

_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), finite, st.text(_plain, max_size=5))
bad_custom = st.one_of(
    st.builds(lambda v: {"k": v}, st.sets(st.integers(), min_size=1, max_size=3)),
    st.builds(lambda v: {"k": v}, st.tuples(_leaf)),
    st.builds(lambda v: {"k": v}, st.sampled_from([math.nan, math.inf, -math.inf])),
    st.builds(lambda v: {"k": v}, st.one_of(st.integers(min_value=2**64), st.integers(max_value=-(2**63) - 1))),
    st.builds(lambda k: {k: 1}, st.one_of(st.integers(), st.none(), st.tuples(st.text(max_size=2)))),
    st.builds(lambda d: {"k": _nest(d)}, st.integers(33, 400)),
    st.just({"k": object()}),
    st.just({"k": 1j}),
)
bad_terms = st.one_of(
    st.builds(lambda v: {"k": v}, st.sets(st.integers(), min_size=1, max_size=3)),
    st.builds(lambda v: {"k": v}, st.frozensets(st.integers(), min_size=1, max_size=3)),
    st.builds(lambda v: {"k": v}, st.sampled_from([math.nan, math.inf, -math.inf])),
    st.just({"k": np.float64(1.0)}),
    st.just({"k": hg.NodeType.TAG}),  # a str subclass is ambiguous across languages
    st.just({"a": 1, b"a": 2}),  # two keys equal as Erlang terms
    st.builds(lambda d: {"k": _nest(d)}, st.integers(513, 2000)),
    st.just({"k": object()}),
    st.builds(lambda s: {"k": s}, surrogate_ids),
)


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


# -- fixtures ----------------------------------------------------------------------

SEEDED_SOURCE = "src-000000"


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, pg_store: Callable[..., Any]) -> Iterator[Any]:
    """A backend holding one ingestion (with the fact layer) and metadata on its nodes."""
    kinds = {"memory": InMemory, "lmdb": lambda: LMDB(tmp_path / "store"), "postgres": pg_store}
    b = kinds[request.param]()
    hg.Repo(b, flush_interval=0).ingest(trajectory(0), structure)
    yield b
    b.close()


@pytest.fixture
def repo(backend: Any) -> hg.Repo:
    return hg.Repo(backend, flush_interval=0)


def full_state(b: Any) -> Any:
    return snapshot(b, ids=structure(trajectory(0)).node_ids, sources=[SEEDED_SOURCE, "src-000001"])


def assert_refused(b: Any, call: Callable[[], object], errors: Refusal = ValidationError) -> Exception:
    """`call` raises one of `errors` with a message, and `b` holds exactly what it held before."""
    before = full_state(b)
    with pytest.raises(errors) as caught:
        call()
    assert str(caught.value).strip(), "the error has no message"
    assert full_state(b) == before, "a refused call wrote something"
    return caught.value


def a_node(node_id: str = "fresh", embedding: object = None) -> hg.Semantic:
    return hg.Semantic(id=node_id, proposition="p", confidence=0.5, embedding=embedding)


GOOD_VECTOR = np.ones(DIM, np.float32)

# -- ids at backend entry points -------------------------------------------------------


@SETTINGS
@given(bad=bad_ids)
def test_get_node_refuses_a_malformed_id(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.get_node(bad))


@SETTINGS
@given(bad=bad_ids)
def test_delete_nodes_refuses_a_malformed_id_and_deletes_none_of_the_others(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.delete_nodes([f"{SEEDED_SOURCE}:goal", bad]))


@SETTINGS
@given(bad=bad_ids)
def test_get_linked_nodes_refuses_a_malformed_id(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.get_linked_nodes([f"{SEEDED_SOURCE}:goal", bad]))


@SETTINGS
@given(bad=bad_ids)
def test_get_metadata_refuses_a_malformed_id(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.get_metadata([bad]))


@SETTINGS
@given(bad=hashable_bad_ids)
def test_update_metadata_refuses_a_malformed_id_and_writes_none_of_the_others(backend: Any, bad: object) -> None:
    good = f"{SEEDED_SOURCE}:goal"
    assert_refused(
        backend, lambda: backend.update_metadata({good: hg.NodeMetadata(access_count=9), bad: hg.NodeMetadata()})
    )


@SETTINGS
@given(bad=bad_ids)
def test_delete_metadata_refuses_a_malformed_id_and_deletes_none_of_the_others(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.delete_metadata([f"{SEEDED_SOURCE}:goal", bad]))


@SETTINGS
@given(bad=bad_ids)
def test_get_ingestion_refuses_a_malformed_source_id(backend: Any, bad: object) -> None:
    assert_refused(backend, lambda: backend.get_ingestion(bad))


@pytest.mark.parametrize("single", ["src-000000:goal", b"src-000000:goal"], ids=["str", "bytes"])
def test_id_collections_refuse_a_bare_string(backend: Any, single: object) -> None:
    assert_refused(backend, lambda: backend.delete_nodes(single))


def test_update_metadata_refuses_a_value_that_is_not_node_metadata(backend: Any) -> None:
    assert_refused(backend, lambda: backend.update_metadata({f"{SEEDED_SOURCE}:goal": {"access_count": 3}}))


def test_update_metadata_refuses_a_non_mapping(backend: Any) -> None:
    assert_refused(backend, lambda: backend.update_metadata([(f"{SEEDED_SOURCE}:goal", hg.NodeMetadata())]))


# -- edge-case ids that must be accepted ------------------------------------------------


@SETTINGS
@given(node_id=edge_case_ids)
def test_edge_case_ids_are_accepted_and_round_trip(backend: Any, node_id: str) -> None:
    assert len(node_id.encode("utf-8")) <= 512
    other = f"{SEEDED_SOURCE}:goal"
    cs = (
        hg.Changeset()
        .add_node(hg.Tag(id=node_id, label=node_id, embedding=GOOD_VECTOR))
        .add_link(node_id, other, "membership")
    )
    cs.put_metadata(node_id, hg.NodeMetadata(custom={node_id: node_id}))
    backend.apply_changeset(cs)
    try:
        stored = backend.get_node(node_id)
        assert stored is not None and stored.id == node_id and stored.label == node_id
        assert node_id in {n.id for n in backend.get_linked_nodes([other], "membership")}
        assert backend.get_metadata([node_id])[node_id].custom == {node_id: node_id}
    finally:
        backend.delete_nodes([node_id])
        backend.delete_metadata([node_id])


@SETTINGS
@given(source=edge_case_ids)
def test_edge_case_source_ids_are_accepted_as_ingestion_records(backend: Any, source: str) -> None:
    record = make_record(source, node_ids=[source])
    _, receipt = backend.commit_ingestion(record, hg.Changeset())
    try:
        assert receipt == record.receipt
        assert backend.get_ingestion(source) == record
    finally:
        backend.delete_ingestion(source)


def test_an_id_of_exactly_512_bytes_is_accepted_and_513_refused(backend: Any) -> None:
    backend.apply_changeset(hg.Changeset().add_node(a_node("𝄞" * 128)))
    assert backend.get_node("𝄞" * 128) is not None
    with pytest.raises(ValidationError, match="513 UTF-8 bytes"):
        a_node("𝄞" * 128 + "a")


def test_ids_are_not_unicode_normalised(backend: Any) -> None:
    backend.apply_changeset(hg.Changeset().add_node(a_node("e\u0301")))
    assert backend.get_node("\u00e9") is None
    assert backend.get_node("e\u0301") is not None


# -- types, edges, embeddings at backend entry points --------------------------------------


@SETTINGS
@given(name=unknown_names)
def test_get_nodes_by_type_refuses_an_unknown_node_type(backend: Any, name: object) -> None:
    assert_refused(backend, lambda: backend.get_nodes_by_type(["semantic", name]))


@SETTINGS
@given(name=unknown_names)
def test_get_linked_nodes_refuses_an_unknown_edge_type(backend: Any, name: object) -> None:
    if name is None:  # None means "any edge type"
        return
    assert_refused(backend, lambda: backend.get_linked_nodes([f"{SEEDED_SOURCE}:goal"], name))


@SETTINGS
@given(name=unknown_names)
def test_apply_changeset_refuses_an_unknown_edge_type_and_writes_nothing(backend: Any, name: object) -> None:
    cs = hg.Changeset().add_node(a_node())
    cs.links.append(("fresh", f"{SEEDED_SOURCE}:goal", name))  # bypassing add_link, which refuses it earlier
    assert_refused(backend, lambda: backend.apply_changeset(cs))


@SETTINGS
@given(embedding=bad_embeddings)
def test_find_candidates_refuses_a_malformed_query(backend: Any, embedding: object) -> None:
    assert_refused(backend, lambda: backend.find_candidates(["semantic"], embedding, [], None))


@SETTINGS
@given(embedding=bad_embeddings)
def test_find_candidates_refuses_a_malformed_tag_vector(backend: Any, embedding: object) -> None:
    assert_refused(backend, lambda: backend.find_candidates(["semantic"], GOOD_VECTOR, [GOOD_VECTOR, embedding], None))


@SETTINGS
@given(name=unknown_names)
def test_find_candidates_refuses_an_unknown_node_type(backend: Any, name: object) -> None:
    assert_refused(backend, lambda: backend.find_candidates(["semantic", name], GOOD_VECTOR, [], None))


@pytest.mark.parametrize(
    "config",
    [
        5,
        {"function": 5},
        {"params": 3},
        {"params": {"bogus": {}}},
        {"params": {"semantic": 3}},
        {"params": {"semantic": {"top_k": -1}}},
        {"params": {"semantic": {"top_k": 1.5}}},
        {"params": {"semantic": {"threshold": "x"}}},
        {"params": {"semantic": {"threshold": math.nan}}},
        {"params": {"semantic": {"lambda": -1.0}}},
    ],
)
def test_find_candidates_refuses_a_malformed_value_function_config_with_config_error(
    backend: Any, config: object
) -> None:
    assert_refused(backend, lambda: backend.find_candidates(["semantic"], GOOD_VECTOR, [], config), ConfigError)


@pytest.mark.parametrize("now", [datetime(2025, 1, 1), "2025-01-01", 1735689600], ids=["naive", "str", "int"])
def test_find_candidates_refuses_a_malformed_now(backend: Any, now: object) -> None:
    assert_refused(backend, lambda: backend.find_candidates(["semantic"], GOOD_VECTOR, [], None, now=now))


@SETTINGS
@given(dim=st.integers(1, 3 * DIM).filter(lambda d: d != DIM))
def test_apply_changeset_refuses_another_dimension_and_writes_no_node_of_it(backend: Any, dim: int) -> None:
    cs = hg.Changeset().add_node(a_node("first", GOOD_VECTOR)).add_node(a_node("second", np.ones(dim, np.float32)))
    assert_refused(backend, lambda: backend.apply_changeset(cs))


@SETTINGS
@given(dim=st.integers(1, 3 * DIM).filter(lambda d: d != DIM))
def test_commit_ingestion_refuses_another_dimension_and_writes_no_record(backend: Any, dim: int) -> None:
    cs = hg.Changeset().add_node(a_node("src-000001:x", np.ones(dim, np.float32)))
    assert_refused(backend, lambda: backend.commit_ingestion(make_record("src-000001", node_ids=["src-000001:x"]), cs))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda cs: cs.additions.append("not a node"),
        lambda cs: cs.links.append(("a",)),
        lambda cs: cs.links.append(["fresh", "src-000000:goal", "sibling"]),
        lambda cs: cs.links.append(("fresh", "", "sibling")),
        lambda cs: setattr(cs, "metadata", [("fresh", hg.NodeMetadata())]),
        lambda cs: cs.metadata.update({"fresh": {"access_count": 1}}),
        lambda cs: cs.metadata.update({"": hg.NodeMetadata()}),
    ],
    ids=["addition", "short-link", "list-link", "empty-link-end", "metadata-list", "metadata-value", "metadata-id"],
)
def test_apply_changeset_refuses_a_tampered_changeset_and_writes_nothing(
    backend: Any, mutate: Callable[[hg.Changeset], None]
) -> None:
    cs = hg.Changeset().add_node(a_node())
    mutate(cs)
    assert_refused(backend, lambda: backend.apply_changeset(cs))


def test_commit_ingestion_refuses_a_record_that_is_not_an_ingestion_record(backend: Any) -> None:
    assert_refused(backend, lambda: backend.commit_ingestion({"source_id": "src-000001"}, hg.Changeset()))


def test_commit_ingestion_refuses_a_conflicting_payload_and_writes_nothing(backend: Any) -> None:
    cs = hg.Changeset().add_node(a_node("src-000000:other"))
    record = make_record(SEEDED_SOURCE, payload="another payload", node_ids=["src-000000:other"])
    error = assert_refused(backend, lambda: backend.commit_ingestion(record, cs), IngestionError)
    assert isinstance(error, IngestionError) and error.reason == "source_conflict"


# -- node constructors, NodeMetadata, Changeset builders (no backend) --------------------------

NODE_FACTORIES: dict[str, Callable[..., hg.Node]] = {
    "episodic": lambda **kw: hg.Episodic(
        observation="o", action="a", state="s", subgoal="g", reward=0.0, trajectory_id="t", **kw
    ),
    "semantic": lambda **kw: hg.Semantic(proposition="p", confidence=0.5, **kw),
    "procedural": lambda **kw: hg.Procedural(instruction="i", condition="c", expected_outcome="o", **kw),
    "tag": lambda **kw: hg.Tag(label="l", **kw),
    "intent": lambda **kw: hg.Intent(description="d", **kw),
    "subgoal": lambda **kw: hg.Subgoal(description="d", **kw),
    "source": lambda **kw: hg.Source(episode_id="e", step_index=0, **kw),
}
node_kinds = st.sampled_from(sorted(NODE_FACTORIES))


@settings(max_examples=40, deadline=None)
@given(kind=node_kinds, bad=bad_ids)
def test_node_constructors_refuse_a_malformed_id(kind: str, bad: object) -> None:
    with pytest.raises(ValidationError, match="id"):
        NODE_FACTORIES[kind](id=bad)


@settings(max_examples=40, deadline=None)
@given(kind=node_kinds, embedding=bad_embeddings.filter(lambda e: e is not None))
def test_node_constructors_refuse_a_malformed_embedding(kind: str, embedding: object) -> None:
    plain = isinstance(embedding, list) and embedding and all(isinstance(x, float) for x in embedding)
    if plain and all(math.isfinite(x) and abs(x) < 3e38 for x in embedding):  # type: ignore[union-attr]
        return  # a finite vector of another dimension is a valid node; the store refuses it
    with pytest.raises(ValidationError, match="embedding"):
        NODE_FACTORIES[kind](id="n", embedding=embedding)


@settings(max_examples=40, deadline=None)
@given(kind=node_kinds, name=unknown_names, target=bad_ids)
def test_node_constructors_refuse_unknown_edge_types_and_malformed_link_ids(
    kind: str, name: object, target: object
) -> None:
    with pytest.raises(ValidationError):
        NODE_FACTORIES[kind](id="n", links={name: ["other"]})
    with pytest.raises(ValidationError):
        NODE_FACTORIES[kind](id="n", links={"sibling": [target]})


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: hg.Semantic(id="n", proposition=1, confidence=0.5), "proposition"),
        (lambda: hg.Semantic(id="n", proposition="p", confidence="0.5"), "confidence"),
        (lambda: hg.Semantic(id="n", proposition="p", confidence=math.nan), "confidence"),
        (lambda: hg.Semantic(id="n", proposition="p", confidence=True), "confidence"),
        (
            lambda: hg.Procedural(id="n", instruction="i", condition="c", expected_outcome="o", return_score=math.inf),
            "return_score",
        ),
        (lambda: hg.Source(id="n", episode_id="e", step_index="0"), "step_index"),
        (lambda: hg.Source(id="n", episode_id="e", step_index=1.0), "step_index"),
        (lambda: hg.Subgoal(id="n", description="d", parent_goal=3), "parent_goal"),
        (lambda: hg.Tag(id="n", label="l", links=["x"]), "links"),
        (lambda: hg.Tag(id="n", label="l", links={"sibling": "abc"}), "links"),
        (lambda: hg.Tag(id="n", label="l", created_at=datetime(2025, 1, 1)), "created_at"),
        (lambda: hg.Tag(id="n", label="l", created_at="2025-01-01"), "created_at"),
    ],
)
def test_node_constructors_refuse_a_field_of_the_wrong_type(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        make()


@settings(max_examples=60, deadline=None)
@given(custom=bad_custom)
def test_node_metadata_refuses_custom_values_outside_plain_data(custom: dict[Any, Any]) -> None:
    with pytest.raises(ValidationError, match="custom"):
        hg.NodeMetadata(custom=custom)


@pytest.mark.parametrize(
    "fields",
    [
        {"access_count": -1},
        {"access_count": 1.0},
        {"reward_count": True},
        {"cumulative_reward": math.nan},
        {"cumulative_reward": "1"},
        {"created_at": datetime(2025, 1, 1)},
        {"last_accessed_at": "yesterday"},
        {"custom": [("k", 1)]},
    ],
    ids=lambda f: next(iter(f)),
)
def test_node_metadata_refuses_a_malformed_field(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        hg.NodeMetadata(**fields)


@pytest.mark.parametrize("reward", [math.nan, math.inf, "1", True, None])
def test_update_reward_refuses_a_non_finite_or_non_numeric_reward(reward: object) -> None:
    with pytest.raises(ValidationError, match="reward"):
        hg.NodeMetadata().update_reward(reward)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(a=bad_ids, name=unknown_names)
def test_changeset_builders_refuse_malformed_ids_and_edge_types_and_stay_empty(a: object, name: object) -> None:
    cs = hg.Changeset()
    with pytest.raises(ValidationError):
        cs.add_link(a, "b", "sibling")
    with pytest.raises(ValidationError):
        cs.add_link("a", "b", name)
    with pytest.raises(ValidationError):
        cs.put_metadata(a, hg.NodeMetadata())
    with pytest.raises(ValidationError):
        cs.put_metadata("a", {"access_count": 1})
    with pytest.raises(ValidationError):
        cs.add_node({"id": "x"})
    with pytest.raises(ValidationError):
        cs.add_nodes([a_node(), "x"])
    assert cs.is_empty() or cs.additions == [cs.additions[0]]  # add_nodes keeps the nodes before the bad one


# -- fingerprint and etf_encode --------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(metadata=bad_terms)
def test_etf_encode_refuses_values_outside_the_term_mapping(metadata: dict[Any, Any]) -> None:
    with pytest.raises(IngestionError) as caught:
        hg.etf_encode(metadata)
    assert caught.value.reason == "invalid_metadata"


@settings(max_examples=60, deadline=None)
@given(metadata=bad_terms)
def test_fingerprint_refuses_invalid_metadata_terms(metadata: dict[Any, Any]) -> None:
    with pytest.raises(IngestionError) as caught:
        hg.fingerprint(hg.Trajectory("s", "g", [hg.Step("o", "a")], metadata))
    assert caught.value.reason == "invalid_metadata"
    assert caught.value.source_id == "s"


def test_etf_encode_refuses_a_cyclic_list() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(IngestionError, match="nested deeper"):
        hg.etf_encode(cyclic)


# -- Repo ---------------------------------------------------------------------------------------

BAD_TRAJECTORIES = {
    "invalid_source_id": [
        hg.Trajectory("", "g", [hg.Step("o", "a")]),
        hg.Trajectory("  ", "g", [hg.Step("o", "a")]),
        hg.Trajectory(5, "g", [hg.Step("o", "a")]),  # type: ignore[arg-type]
        hg.Trajectory("\ud800", "g", [hg.Step("o", "a")]),
    ],
    "invalid_goal": [hg.Trajectory("src-000001", "", [hg.Step("o", "a")]), hg.Trajectory("src-000001", None, [])],  # type: ignore[arg-type]
    "invalid_metadata": [
        hg.Trajectory("src-000001", "g", [hg.Step("o", "a")], {"k": {1}}),
        hg.Trajectory("src-000001", "g", [hg.Step("o", "a")], [("k", 1)]),  # type: ignore[arg-type]
        hg.Trajectory("src-000001", "g", [hg.Step("o", "a")], {"k": _nest(600)}),
    ],
    "invalid_steps": [hg.Trajectory("src-000001", "g", []), hg.Trajectory("src-000001", "g", (hg.Step("o", "a"),))],  # type: ignore[arg-type]
    "invalid_step": [
        hg.Trajectory("src-000001", "g", [("o", "a")]),  # type: ignore[list-item]
        hg.Trajectory("src-000001", "g", [hg.Step(None, "a")]),  # type: ignore[arg-type]
        hg.Trajectory("src-000001", "g", [hg.Step("o", "\udfff")]),
    ],
}


@pytest.mark.parametrize(
    ("reason", "t"),
    [(r, t) for r, ts in BAD_TRAJECTORIES.items() for t in ts],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_ingest_refuses_an_invalid_trajectory_with_its_reason_and_writes_nothing(
    backend: Any, repo: hg.Repo, reason: str, t: hg.Trajectory
) -> None:
    error = assert_refused(backend, lambda: repo.ingest(t, structure), IngestionError)
    assert isinstance(error, IngestionError) and error.reason == reason


def test_ingest_refuses_a_conflicting_payload_and_writes_nothing(backend: Any, repo: hg.Repo) -> None:
    error = assert_refused(backend, lambda: repo.ingest(trajectory(0, variant=1), structure), IngestionError)
    assert isinstance(error, IngestionError) and error.reason == "source_conflict"


def test_ingest_refuses_a_structure_of_another_dimension_and_writes_no_record(backend: Any, repo: hg.Repo) -> None:
    from hippograph.embedding import HashingEmbedder
    from hippograph.graph.structuring import episodic

    assert_refused(backend, lambda: repo.ingest(trajectory(1), episodic(HashingEmbedder(dim=DIM + 1))))


@pytest.mark.parametrize(
    "bad", [lambda texts: np.full((len(texts), DIM), np.nan), lambda texts: np.ones((1, DIM))], ids=["nan", "shape"]
)
def test_ingest_refuses_an_embedder_returning_garbage_and_writes_nothing(
    backend: Any, repo: hg.Repo, bad: Callable[[list[str]], object]
) -> None:
    from hippograph.graph.structuring import episodic

    assert_refused(backend, lambda: repo.ingest(trajectory(1), episodic(bad)))


def test_ingest_refuses_a_structure_function_that_returns_no_changeset(backend: Any, repo: hg.Repo) -> None:
    assert_refused(backend, lambda: repo.ingest(trajectory(1), lambda t: {"additions": []}))


@SETTINGS
@given(embedding=bad_embeddings)
def test_recall_refuses_a_malformed_query_and_notes_no_access(backend: Any, repo: hg.Repo, embedding: object) -> None:
    assert_refused(backend, lambda: repo.recall(embedding))
    assert repo.stats().pending_accesses == 0


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf, "1", None, True])
def test_reward_refuses_a_non_finite_or_non_numeric_reward(backend: Any, repo: hg.Repo, reward: object) -> None:
    assert_refused(backend, lambda: repo.reward([f"{SEEDED_SOURCE}:goal"], reward))  # type: ignore[arg-type]


@SETTINGS
@given(bad=bad_ids)
def test_reward_refuses_a_malformed_id_and_rewards_none_of_the_others(backend: Any, repo: hg.Repo, bad: object) -> None:
    assert_refused(backend, lambda: repo.reward([f"{SEEDED_SOURCE}:goal", bad], 1.0))


def test_reward_refuses_a_total_that_overflows_and_keeps_the_old_total(backend: Any, repo: hg.Repo) -> None:
    repo.reward([f"{SEEDED_SOURCE}:goal"], 1e308)
    assert_refused(backend, lambda: repo.reward([f"{SEEDED_SOURCE}:goal"], 1e308))


@SETTINGS
@given(bad=bad_ids)
def test_forget_refuses_a_malformed_source_id(backend: Any, repo: hg.Repo, bad: object) -> None:
    assert_refused(backend, lambda: repo.forget(bad))  # type: ignore[arg-type]


def test_forget_of_an_unknown_source_is_not_found_and_writes_nothing(backend: Any, repo: hg.Repo) -> None:
    assert_refused(backend, lambda: repo.forget("src-999999"), NotFoundError)


def test_a_closed_repo_refuses_every_call_with_storage_error(backend: Any) -> None:
    repo = hg.Repo(InMemory(), flush_interval=0)
    repo.close()
    for call in (
        lambda: repo.ingest(trajectory(1), structure),
        lambda: repo.recall(GOOD_VECTOR),
        lambda: repo.verify(),
    ):
        with pytest.raises(hg.StorageError, match="closed"):
            call()


# -- open_repo and the LMDB constructor -------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "   ", "..", ".", ".hidden", "a/b", "a\\b", "a\x00b", "x" * 256, 5, None], ids=repr
)
def test_open_repo_refuses_a_bad_name_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: object
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match="repo name"):
        hg.open_repo(name)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_open_repo_refuses_both_a_path_and_a_backend(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="either"):
        hg.open_repo("x", path=tmp_path / "x", backend=InMemory())
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("config", [5, {"params": {"bogus": {}}}], ids=["not-a-mapping", "unknown-type"])
def test_open_repo_refuses_a_malformed_value_function_with_config_error(config: object) -> None:
    with pytest.raises(ConfigError):
        hg.open_repo("x", backend=InMemory(), value_function=config)  # type: ignore[arg-type]


@pytest.mark.parametrize("durability", ["never", None, 1, "SYNC"])
def test_lmdb_refuses_an_unknown_durability_and_creates_nothing(tmp_path: Path, durability: object) -> None:
    with pytest.raises((ValidationError, ConfigError)):
        LMDB(tmp_path / "s", durability=durability)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()


# -- regression tests of bugs found here (see README.md) --------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: hg.Semantic(id="n", proposition="\udc80", confidence=0.5),
        lambda: hg.NodeMetadata(custom={"\ud800": 1}),
        lambda: hg.NodeMetadata(custom={"k": "\ud800"}),
    ],
    ids=["node-text", "custom-key", "custom-value"],
)
def test_lone_surrogates_in_text_fields_are_refused_at_construction(make: Callable[[], object]) -> None:
    with pytest.raises(ValidationError, match="surrogate"):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: hg.NodeMetadata(access_count=2**64),
        lambda: hg.NodeMetadata(reward_count=10**30),
        lambda: hg.Source(id="n", episode_id="e", step_index=2**63),
    ],
    ids=["access_count", "reward_count", "step_index"],
)
def test_integers_beyond_64_bits_are_refused_at_construction(make: Callable[[], object]) -> None:
    with pytest.raises(ValidationError):
        make()


@pytest.mark.parametrize(
    "make",
    [
        lambda: hg.Semantic(id="n", proposition="p", confidence=10**400),
        lambda: hg.NodeMetadata(cumulative_reward=10**400),
        lambda: hg.NodeMetadata().update_reward(10**400),
    ],
    ids=["confidence", "cumulative_reward", "update_reward"],
)
def test_ints_too_large_for_a_float_are_refused_with_validation_error(make: Callable[[], object]) -> None:
    with pytest.raises(ValidationError):
        make()


@pytest.mark.parametrize(
    "call",
    [
        lambda b, r: b.get_nodes_by_type(None),
        lambda b, r: b.get_nodes_by_type(5),
        lambda b, r: b.find_candidates(None, GOOD_VECTOR, [], None),
        lambda b, r: b.find_candidates(["semantic"], GOOD_VECTOR, None, None),
        lambda b, r: r.recall(GOOD_VECTOR, types=None),
        lambda b, r: r.recall(GOOD_VECTOR, tags=None),
        lambda b, r: r.reward(None, 1.0),
        lambda b, r: r.reward(5, 1.0),
        lambda b, r: r.ingest(None, structure),
        lambda b, r: r.ingest(trajectory(1), None),
        lambda b, r: r.decay(threshold="x"),
        lambda b, r: b.apply_changeset(hg.Changeset(additions=None)),
        lambda b, r: b.apply_changeset(hg.Changeset(links=None)),
        lambda b, r: hg.fingerprint("not a trajectory"),
        lambda b, r: hg.Changeset().add_nodes(None),
        lambda b, r: hg.Changeset().merge(None),
    ],
    ids=[
        "get_nodes_by_type-None",
        "get_nodes_by_type-int",
        "find_candidates-types-None",
        "find_candidates-tags-None",
        "recall-types-None",
        "recall-tags-None",
        "reward-ids-None",
        "reward-ids-int",
        "ingest-None",
        "ingest-structure-None",
        "decay-threshold-str",
        "changeset-additions-None",
        "changeset-links-None",
        "fingerprint-str",
        "add_nodes-None",
        "merge-None",
    ],
)
def test_a_wrong_container_type_is_refused_with_a_hippograph_error(
    backend: Any, repo: hg.Repo, call: Callable[[Any, hg.Repo], object]
) -> None:
    assert_refused(backend, lambda: call(backend, repo), (ValidationError, IngestionError, ConfigError))


def test_a_top_k_beyond_the_core_range_is_refused_with_config_error(backend: Any) -> None:
    config = {"params": {"semantic": {"top_k": 10**30}}}
    assert_refused(backend, lambda: backend.find_candidates(["semantic"], GOOD_VECTOR, [], config), ConfigError)


@pytest.mark.parametrize(
    ("path", "options"),
    [
        ("s", {"map_size": -1}),
        ("s", {"map_size": "1GiB"}),
        ("s", {"map_size": 2**70}),
        (None, {}),
        (5, {}),
        ("s\x00t", {}),
    ],
    ids=["map_size-negative", "map_size-str", "map_size-huge", "path-None", "path-int", "path-NUL"],
)
def test_lmdb_refuses_bad_arguments_before_touching_the_disk(
    tmp_path: Path, path: object, options: dict[str, Any]
) -> None:
    target = tmp_path / path if isinstance(path, str) and "\x00" not in path else path
    with pytest.raises((ValidationError, ConfigError)):
        LMDB(target, **options)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs", [{"backend": 5}, {"backend": InMemory(), "flush_interval": "often"}], ids=["backend", "flush"]
)
def test_open_repo_refuses_a_malformed_backend_or_flush_interval(kwargs: dict[str, Any]) -> None:
    with pytest.raises((ValidationError, ConfigError)):
        hg.open_repo("x", **kwargs)


@pytest.mark.parametrize("value", [math.inf, 1e300, -1.0, math.nan, 2**64])
@pytest.mark.parametrize("name", ["flush_interval", "flush_count"])
def test_repo_refuses_flush_settings_its_flusher_cannot_wait_on(name: str, value: float) -> None:
    """An infinite interval used to be accepted and then killed the background flusher (Event.wait overflow)."""
    with pytest.raises(ValidationError, match=name):
        hg.Repo(InMemory(), **{name: value})


def test_ingest_refuses_an_over_long_source_id_as_invalid_source_id(backend: Any, repo: hg.Repo) -> None:
    t = hg.Trajectory("s" * 513, "g", [hg.Step("o", "a")])
    error = assert_refused(backend, lambda: repo.ingest(t, structure), IngestionError)
    assert isinstance(error, IngestionError) and error.reason == "invalid_source_id"
