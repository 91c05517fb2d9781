"""The Rust core's plan of an LMDB graph write (`_core.GraphWrite`): records every reader decodes,
links on both ends, nothing written when the plan fails."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph._core import GraphWrite, node_vector
from hippograph.backends import LMDB
from hippograph.backends.lmdb import layout
from hippograph.backends.lmdb.txn import MODEL
from hippograph.errors import StorageError
from hippograph.graph import codec
from hippograph.graph.model import NODE_CLASSES, EdgeType, Node, NodeType

TEXT = st.text(max_size=40)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
INT64 = st.integers(-(2**63), 2**63 - 1)
KINDS = {"str": TEXT, "float": FINITE, "int": INT64}


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    node_type = draw(st.sampled_from(list(NodeType)))
    cls = NODE_CLASSES[node_type]
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in cls.base_fields:
            continue
        kind, _, optional = str(f.type).partition(" | ")
        values[f.name] = draw(st.none() if optional and draw(st.booleans()) else KINDS[kind])
    created = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=draw(st.integers(-(10**16), 10**16)))
    embedding = draw(st.none() | st.lists(FLOAT32, min_size=1, max_size=5))
    emb = None if embedding is None else np.array(embedding, dtype=np.float32)
    return cls(id=draw(st.text(min_size=1, max_size=20)), created_at=created, embedding=emb, **values)


def planned(read: Any = None) -> GraphWrite:
    return GraphWrite(read or (lambda db, key: None))


def puts_of(plan: GraphWrite, dim: int | None = None) -> dict[tuple[str, bytes], bytes]:
    puts, _ = plan.finish(None, dim, 0, 10)
    return {(layout._DBS[code], key): value for code, items in puts for key, value in items}


@settings(max_examples=300, deadline=None)
@given(nodes())
def test_a_node_record_decodes_to_the_node(node: Node) -> None:
    plan = planned()
    plan.put_changeset([node], [], {}, MODEL)
    written = puts_of(plan)
    key = layout._key(node.id)
    number = node_vector(written[("nodes", key)])
    assert (number > 0) == (node.embedding is not None), "a node names its embedding's number, or none"
    emb = written.get(("vectors", layout._vector_key(number)))
    embedding = None if emb is None else codec.decode_embedding(emb, len(emb) // 4)
    decoded = codec.decode_node(written[("nodes", key)], node.id, embedding, {})
    assert decoded == node
    assert codec.node_type_of(written[("nodes", key)]) is node.node_type


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from(list(EdgeType))), max_size=20))
def test_links_are_the_records_the_python_codec_writes(links: list[tuple[int, int, EdgeType]]) -> None:
    ids = [f"n{i}" for i in range(6)]
    plan = planned()
    plan.put_changeset([hg.Tag(id=i, label=i) for i in ids], [(ids[a], ids[b], e) for a, b, e in links], {}, MODEL)
    written = puts_of(plan)
    expected: dict[str, dict[EdgeType, set[str]]] = {i: {} for i in ids}
    for a, b, e in links:
        if a != b:
            expected[ids[a]].setdefault(e, set()).add(ids[b])
            expected[ids[b]].setdefault(e, set()).add(ids[a])
    for i in ids:
        ordered = {e: expected[i][e] for e in EdgeType if e in expected[i]}  # the core writes edges in code order
        assert written[("links", i.encode())] == codec.encode_links(ordered)
        assert codec.decode_links(written[("links", i.encode())]) == expected[i]


def test_the_log_entry_lists_what_changed_and_the_counter_moves(tmp_path: Path) -> None:
    plan = planned()
    plan.put_changeset([hg.Tag(id="b", label="b"), hg.Tag(id="a", label="a")], [], {}, MODEL)
    puts, deletes = plan.finish(None, None, 41, 10)
    written = {(layout._DBS[code], key): value for code, items in puts for key, value in items}
    assert layout._logged_ids(written[("log", layout._seq_key(42))]) == ["a", "b"]
    assert written[("info", b"seq")] == layout._seq_key(42)
    assert deletes == [(layout._DBS.index("log"), layout._seq_key(32))]  # new nodes delete nothing; the old entry
    with pytest.raises(RuntimeError, match="finished"):
        plan.finish(None, None, 42, 10)


def test_a_failing_read_propagates() -> None:
    def read(db: int, key: bytes) -> bytes | None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        planned(read).delete_node("x")


def test_corrupt_stored_links_fail_the_write_and_write_nothing(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "s", durability="fast")
    try:
        backend.apply_changeset(hg.Changeset().add_nodes([hg.Tag(id="a", label="a"), hg.Tag(id="b", label="b")]))
        seq = backend._read(lambda t: t.seq())
        with backend._env.begin(write=True) as txn:
            txn.put(b"a", bytes([1, 0x81, 0xA1]) + b"z" + bytes([0x90]), db=backend._dbs["links"])
        with pytest.raises(StorageError, match="unknown edge"):
            backend.apply_changeset(hg.Changeset().add_node(hg.Tag(id="c", label="c")).add_link("a", "c", "sibling"))
        assert backend._read(lambda t: t.seq()) == seq
        assert backend.get_node("c") is None
    finally:
        backend.close()


def test_database_codes_are_the_backends_database_list() -> None:
    plan = planned()
    meta = hg.NodeMetadata()
    tag = hg.Tag(id="x" * 500, label="l", embedding=np.ones(2, np.float32))
    plan.put_changeset([tag], [], {"x" * 500: meta}, MODEL)
    written = puts_of(plan, dim=2)
    assert {db for db, _ in written} == {"nodes", "vectors", "links", "meta", "longids", "info", "log"}
    assert written[("vectors", layout._vector_key(1))] == np.ones(2, "<f4").tobytes()
    assert written[("info", b"vectors_next")] == (2).to_bytes(8, "big")
    assert written[("longids", layout._key("x" * 500))] == ("x" * 500).encode()
    assert written[("info", b"dim")] == (2).to_bytes(4, "big")
    assert written[("meta", layout._key("x" * 500))] == codec.encode_meta(meta)


PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | FINITE | TEXT | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
WHEN = st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5))]))


class _Label(str):
    """A str subclass: custom metadata allows it, the native encoder leaves it to Python."""


@settings(max_examples=300, deadline=None)
@given(
    created=WHEN,
    last=st.none() | WHEN,
    counts=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    reward=FINITE,
    custom=st.dictionaries(TEXT, PLAIN, max_size=4),
    subclass=st.booleans(),
)
def test_a_metadata_record_is_the_one_the_python_codec_writes(
    created: datetime,
    last: datetime | None,
    counts: tuple[int, int],
    reward: float,
    custom: dict[str, Any],
    subclass: bool,
) -> None:
    if subclass:
        custom = {**custom, "label": _Label("x")}
    meta = hg.NodeMetadata(
        created_at=created, access_count=counts[0], last_accessed_at=last, cumulative_reward=reward,
        reward_count=counts[1], custom=custom,
    )  # fmt: skip
    plan = planned()
    plan.put_metadata({"m": meta}, MODEL)
    record = puts_of(plan)[("meta", b"m")]
    assert record == codec.encode_meta(meta)
    assert codec.decode_meta(record) == meta


def test_a_changeset_with_edge_names_and_datetimes_off_utc_is_planned_as_the_python_model_says() -> None:
    node = hg.Tag(id="a", label="a")
    other = hg.Tag(id="b", label="b", links={EdgeType.SIBLING: frozenset({"a"})})
    off_utc = datetime(2020, 5, 1, 12, tzinfo=timezone(timedelta(hours=3)))
    object.__setattr__(node, "created_at", off_utc)  # past the model's conversion to UTC
    plan = planned()
    plan.put_changeset([node, other], [("a", "b", "membership")], {}, MODEL)
    written = puts_of(plan)
    assert written[("nodes", b"a")] == codec.encode_node(node)
    assert codec.decode_links(written[("links", b"a")]) == {EdgeType.SIBLING: {"b"}, EdgeType.MEMBERSHIP: {"b"}}


def test_embeddings_keep_their_pages_full_whatever_the_ids_and_every_record_reads_back(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    backend = LMDB(tmp_path / "s", durability="fast")
    try:
        written: dict[str, Node] = {}
        for batch in range(40):  # five growing ids a write, then one write of ids below and above them all
            ids = [f"n{batch:03d}:{j}" for j in range(5)] if batch < 39 else ["a-below", "m-between", "z-above"]
            tags = [hg.Tag(id=i, label=i, embedding=rng.standard_normal(384).astype(np.float32)) for i in ids]
            backend.apply_changeset(hg.Changeset().add_nodes(tags))
            written.update((t.id, t) for t in tags)
        with backend._env.begin() as txn:
            leaves = txn.stat(backend._dbs["vectors"])["leaf_pages"]
            assert txn.stat(backend._dbs["emb"])["entries"] == 0
        assert leaves <= len(written) // 2 + 3  # two 1,536-byte embeddings a 4 KB page (one when split in half)
        for node_id, node in written.items():
            assert backend.get_node(node_id) == node
    finally:
        backend.close()
