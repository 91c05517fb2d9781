"""Properties of the context store's input checks and tree order, over random input.

`check_uri` is held to an oracle written from the rule (no empty segment, no control character,
at most 64 segments of 255 UTF-8 bytes and `MAX_URI_BYTES` in all, valid Unicode); a call given a
URI it refuses must write nothing at all. Every listing must be in tree order: URIs sorted segment
by segment (which differs from plain string order where a segment holds a character sorting before
"/").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hippograph.backends import LMDB, InMemory
from hippograph.context import ContextBackend, ContextStore, SkillFile
from hippograph.context.model import MAX_SEGMENT_BYTES, MAX_SEGMENTS, MAX_URI_BYTES, check_uri
from hippograph.errors import HippographError, ValidationError
from hippograph.testing.context import dump

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def valid_uri(value: object) -> bool:
    """The rule, written independently of `check_uri` (with the limits the model states)."""
    if not isinstance(value, str) or value == "":
        return False
    segments = value.split("/")
    if len(segments) > MAX_SEGMENTS:
        return False
    for s in segments:
        if s == "" or any(ord(c) < 0x20 or ord(c) == 0x7F for c in s):
            return False
        try:
            size = len(s.encode("utf-8"))
        except UnicodeEncodeError:
            return False
        if size > MAX_SEGMENT_BYTES:
            return False
    return len(value.encode("utf-8")) <= MAX_URI_BYTES


_TRICKY = ["/", "\x00", "\x01", "\x1f", "\x7f", "\x80", "\ud800", "\udfff", "é", "\u2028", "\U0001f600", "%", "\\"]
chars = st.one_of(st.characters(), st.sampled_from(_TRICKY))
segment = st.one_of(
    st.text(chars, max_size=6),
    st.sampled_from(["a" * 255, "a" * 256, "é" * 127, "é" * 128, "\U0001f600" * 63, "\U0001f600" * 64]),
)
uris = st.one_of(
    st.text(chars, max_size=20),
    st.lists(segment, min_size=1, max_size=4).map("/".join),
    st.integers(60, 70).map(lambda n: "/".join(["s"] * n)),
    st.integers(MAX_URI_BYTES - 3, MAX_URI_BYTES + 3).map(
        lambda n: "a" * 200 + "/" + "é" * ((n - 201) // 2) + "b" * ((n - 201) % 2)
    ),
)
not_str = st.one_of(st.integers(), st.floats(), st.binary(max_size=4), st.lists(st.text(max_size=2), max_size=2))


@SETTINGS
@given(st.one_of(uris, not_str, st.none()))
def test_check_uri_accepts_exactly_the_valid_uris(value: object) -> None:
    for _ in range(2):  # the second call may be answered by the cache of checked URIs
        try:
            got = check_uri(value)
        except ValidationError:
            assert not valid_uri(value)
        else:
            assert valid_uri(value) and isinstance(value, str) and got == tuple(value.split("/"))
    assert check_uri("", root=True) == ()


def _seeded() -> tuple[ContextBackend, ContextStore]:
    backend = InMemory()
    store = ContextStore(backend, document_jobs=("embed",))
    store.put_document("seed/doc", "x")
    store.put_document("seed/dir/leaf", "y")
    store.put_memory("seed/memory", "v", 0.5)
    store.restore_session("s1", [("user", "hi")])
    store.enqueue_job("work", uri="seed/doc")
    return backend, store


CALLS: dict[str, Callable[[ContextStore, Any], object]] = {
    "put_document": lambda s, u: s.put_document(u, "content"),
    "put_memory": lambda s, u: s.put_memory(u, "value", 0.5),
    "put_commit": lambda s, u: s.put_commit("s1", u, "content", "hash"),
    "enqueue_job": lambda s, u: s.enqueue_job("work", uri=u),
    "set_node_enabled": lambda s, u: s.set_node_enabled(u, False),
    "set_node_group": lambda s, u: s.set_node_group(u, "g"),
    "remove_subtree": lambda s, u: s.remove_subtree(u),
    "cancel_jobs": lambda s, u: s.cancel_jobs(u),
    "promote_memory": lambda s, u: s.promote_memory(u),
}


@SETTINGS
@given(st.sampled_from(sorted(CALLS)), st.one_of(uris, not_str))
def test_a_refused_call_writes_nothing(call: str, uri: object) -> None:
    backend, store = _seeded()
    refused = _refusal(backend, lambda: CALLS[call](store, uri))
    # Anything but a ValidationError (none, or refused for what is or is not stored) needs a valid URI.
    assert isinstance(refused, ValidationError) or valid_uri(uri)


def _refusal(backend: ContextBackend, call: Callable[[], object]) -> HippographError | None:
    """Runs `call`; a typed refusal must leave the store as it was (any other error fails). The
    refusal, or None when the call went through."""
    before = dump(backend)
    try:
        call()
    except HippographError as exc:
        assert dump(backend) == before
        return exc
    return None


def tree_order(uri: str) -> tuple[str, ...]:
    return tuple(uri.split("/"))


# Characters on both sides of "/" (0x2f) and of the 0x01 separating stored segments.
name = st.text(
    st.sampled_from(["!", "-", ".", "0", "A", "a", "b", "é", "\u4e00", "\U0001f600", " "]), min_size=1, max_size=3
)
trees = st.lists(st.lists(name, min_size=1, max_size=4).map("/".join), min_size=1, max_size=25)


@pytest.fixture(scope="module")
def lmdb_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LMDB]:
    """One LMDB environment for every example (each under a top segment of its own)."""
    backend = LMDB(Path(tmp_path_factory.mktemp("ctx")) / "store", durability="fast")
    yield backend
    backend.close()


_examples = itertools.count()


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=trees)
def test_listings_are_in_tree_order(kind: str, lmdb_backend: LMDB, paths: list[str]) -> None:
    backend: ContextBackend = InMemory() if kind == "memory" else lmdb_backend
    top = f"t{next(_examples)}"
    store = ContextStore(backend)
    docs: set[str] = set()
    for path in paths:
        uri = f"{top}/{path}"
        try:
            store.put_document(uri, "needle")
        except ValidationError:  # a document below a document, or a directory with children
            continue
        docs.add(uri)
    assume(docs)
    expected = sorted(docs, key=tree_order)
    assert [r["uri"] for r in store.list_all_documents(top, limit=1000)[0]] == expected
    assert [n.uri for n in store.search_keyword("needle", top, limit=1000)] == expected
    assert [m.uri for m in store.grep_content("needle", top, limit=1000)] == expected
    nodes = {"/".join(u.split("/")[:i]) for u in docs for i in range(2, u.count("/") + 2)}
    assert [m.uri for m in store.find_paths(top, top, limit=1000)] == [top, *sorted(nodes, key=tree_order)]
    for parent in {top} | {u.rsplit("/", 1)[0] for u in nodes}:
        children = {u.rsplit("/", 1)[1] for u in nodes if u.rsplit("/", 1)[0] == parent}
        assert store.list_children(parent) == sorted(children)


# Arguments of every shape a caller could pass by mistake: numbers past 64 bits, numpy arrays (whose
# comparison with a str is elementwise, and whose truth is an error), nested and unhashable
# collections, pairs of the wrong length.
malformed = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=4),
        st.sampled_from(["seed/doc", "seed", "running", "active", "user", "uri", ""]),
        st.integers(0, 3).map(lambda n: np.zeros(n, np.float32)),
        st.just(np.zeros((2, 2))),
        st.just(np.array(["seed/doc"])),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner, inner), st.dictionaries(st.text(max_size=2), inner)
    ),
    max_leaves=6,
)

ARGUMENT_CALLS: dict[str, Callable[[ContextStore, Any], object]] = {
    "get_nodes": lambda s, v: s.get_nodes(v),
    "get_node fields": lambda s, v: s.get_node("seed/doc", fields=v),
    "load_memory_vectors": lambda s, v: s.load_memory_vectors(v),
    "remove_subtree": lambda s, v: s.remove_subtree(v),
    "replace_skill": lambda s, v: s.replace_skill(v, [SkillFile(("a",), "x")]),
    "complete_job": lambda s, v: s.complete_job(v),
    "fail_job": lambda s, v: s.fail_job(v),
    "defer_job": lambda s, v: s.defer_job(v),
    "count_jobs": lambda s, v: s.count_jobs("seed", v),
    "recall_memories": lambda s, v: s.recall_memories(statuses=v),
    "restore_session": lambda s, v: s.restore_session("s2", v),
    "mark_memories_surfaced": lambda s, v: s.mark_memories_surfaced(v),
    "put_layer_result layer": lambda s, v: s.put_layer_result(1, "seed/doc", v, "text"),
    "put_memory status": lambda s, v: s.put_memory("seed/m2", "v", 0.5, status=v),
}


@SETTINGS
@given(st.sampled_from(sorted(ARGUMENT_CALLS)), malformed)
def test_a_malformed_argument_gets_a_typed_error_and_writes_nothing(call: str, value: object) -> None:
    backend, store = _seeded()
    _refusal(backend, lambda: ARGUMENT_CALLS[call](store, value))
