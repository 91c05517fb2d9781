"""Bad input at every public entry point of the scoped store: a `ValidationError` naming the field, nothing written.

Every refusal must raise `hippograph.errors.ValidationError` (never a bare
TypeError, KeyError, OverflowError or a Rust panic) whose message names the
field at fault, and leave the store exactly as it was: the same entries, read
with the backend's own `scan`, and the same change counter (so not even an
identical rewrite happened). The store runs on `InMemory`, `LMDB` and `Postgres`
(a repo of its own on the server `pg_server` finds, as for `test_bad_input.py`), seeded
with active, pending, retracted and expiring entries with 4-dimensional
vectors. Edge cases that are valid (a key of exactly 512 UTF-8 bytes, a segment
of exactly 255, 32 segments, NUL in a key, text or value) must be accepted and
round-trip. The property tests mirror `test_bad_input.py` (hypothesis,
``deadline=None``, 25 examples each).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.errors import ValidationError
from pg_server import require_dsn, require_psycopg

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)
DIM = 4
GOOD = [1.0, 0.5, 0.25, 0.0]
SEEDED = (("users", "u42"), "diet")
"""An entry of the seeded store that every call aimed at a key can reach."""
NEW: dict[str, Any] = {"scope": ("new",), "key": "b"}
"""A ref the store does not hold: what a batch's refused item writes to."""

# -- fixtures ----------------------------------------------------------------------


@pytest.fixture(scope="module", params=["memory", "lmdb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[hg.Store]:
    """A store holding active, pending, retracted and expiring entries, all with vectors of dimension 4.

    One per module and backend: a refused call writes nothing, and every test compares the store's
    contents before and after its own calls (the edge-case test deletes what it puts)."""
    dsn = repo = None
    if request.param == "memory":
        backend: Any = InMemory()
    elif request.param == "lmdb":
        backend = LMDB(tmp_path_factory.mktemp("store-bad-input") / "store", durability="fast")
    else:
        require_psycopg()
        from hippograph.backends.postgres import Postgres

        dsn, repo = require_dsn(), f"store-bad-input-{uuid.uuid4().hex}"
        backend = Postgres(dsn, repo=repo)
    s = hg.Store(backend)
    s.put(*SEEDED, "vegetarian, allergic to peanuts", {"source": "chat", "n": 1}, embedding=GOOD)
    s.put(("users", "u42", "chat"), "draft", "a pending note", embedding=[0.0, 1.0, 0.0, 0.0], pending=True)
    s.put(("users", "u4"), "trip", "flight to Oslo", {"when": "2025-05-01"}, embedding=[0.0, 0.0, 1.0, 0.0])
    s.put(("users", "u4"), "old", "an old fact", embedding=[0.5, 0.5, 0.5, 0.5])
    s.retract(("users", "u4"), "old")
    s.put(("agents", "a"), "tmp", "expires in an hour", ttl=3600, embedding=[0.0, 0.0, 0.0, 1.0])
    yield s
    backend.close()
    if dsn is not None and repo is not None:
        from hippograph.backends.postgres import drop_repo

        drop_repo(dsn, repo=repo)


def contents(s: hg.Store) -> tuple[int, list[hg.Entry]]:
    """The change counter and every entry, whatever its status, in one backend read."""

    def read(t: Any) -> tuple[int, list[hg.Entry]]:
        return t.changes(0)[0], sorted(t.scan(()), key=lambda e: e.ref)

    result: tuple[int, list[hg.Entry]] = s.backend.entry_read(read)
    return result


def assert_refused(s: hg.Store, call: Callable[[], object], field: str) -> ValidationError:
    """`call` raises a ValidationError whose message names `field`, and the store holds exactly what it held."""
    before = contents(s)
    with pytest.raises(ValidationError) as caught:
        call()
    assert field in str(caught.value), f"the message {str(caught.value)!r} does not name {field!r}"
    assert contents(s) == before, "a refused call wrote something"
    return caught.value


# -- strategies -------------------------------------------------------------------

_plain = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")
_segment = st.text(_plain, min_size=1, max_size=8)
_surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def _pad_to(text: str, size: int) -> str:
    """`text` cut or padded with "a" to exactly `size` UTF-8 bytes."""
    while len(text.encode("utf-8")) > size:
        text = text[:-1]
    return text + "a" * (size - len(text.encode("utf-8")))


bad_scopes = st.one_of(
    st.text(max_size=6),  # a str: would iterate into characters
    st.binary(max_size=6),
    st.none(),
    st.integers(),
    st.lists(_segment, max_size=3).map(lambda s: (*s, "")),  # an empty segment
    st.builds(lambda a, b, c: (*a, b + "\0" + c, "x"), st.lists(_segment, max_size=2), _segment, _segment),  # NUL
    st.builds(lambda t, extra: (_pad_to(t, 256 + extra),), st.text(_plain, max_size=40), st.integers(0, 300)),
    st.lists(_segment, min_size=33, max_size=40).map(tuple),  # more than 32 segments
    st.lists(st.one_of(st.integers(), st.none(), st.binary(max_size=3)), min_size=1, max_size=3).map(tuple),
    st.builds(lambda a, s: (*a, s), st.lists(_segment, max_size=2), _surrogate),
)
bad_keys = st.one_of(
    st.just(""),
    st.builds(lambda t, extra: _pad_to(t, 513 + extra), st.text(_plain, max_size=60), st.integers(0, 600)),
    st.builds(lambda a, s: a + s, st.text(_plain, max_size=6), _surrogate),
    st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=8), st.tuples(st.text(max_size=3))),
)
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
bad_vectors = st.one_of(
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [*v, math.nan]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [math.inf, *v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [-math.inf, *v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [1e39, *v]),  # overflows float32
    st.lists(finite, min_size=1, max_size=3 * DIM).filter(lambda v: len(v) != DIM),  # another dimension
    st.just([]),
    st.just([GOOD, GOOD]),
    st.just("not a vector"),
    st.lists(finite, min_size=DIM, max_size=DIM).map(lambda v: [str(x) for x in v]),
    st.lists(finite, min_size=DIM - 1, max_size=DIM - 1).map(lambda v: [True, *v]),
    st.lists(finite, min_size=DIM, max_size=DIM).map(lambda v: np.array(v, np.complex64)),
    st.just([object()] * DIM),
)


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


bad_values = st.one_of(
    st.builds(lambda v: {"k": v}, st.sets(st.integers(), min_size=1, max_size=3)),
    st.builds(lambda v: {"k": {"deeper": [1, v]}}, st.sampled_from([math.nan, math.inf, -math.inf])),
    st.builds(lambda v: {"k": v}, st.one_of(st.integers(min_value=2**63), st.integers(max_value=-(2**63) - 1))),
    st.builds(lambda k: {"ok": 1, k: 1}, st.one_of(st.integers(), st.none(), st.tuples(st.text(max_size=2)))),
    st.builds(lambda d: {"k": _nest(d)}, st.integers(33, 200)),
    st.builds(lambda s: {"k": s}, st.builds(lambda a, s: a + s, st.text(_plain, max_size=4), _surrogate)),
    st.sampled_from([{"k": object()}, {"k": 1j}, {"k": b"bytes"}, {"k": datetime(2025, 1, 1)}, {"k": {1, 2}}]),
    st.sampled_from(["a str", 5, [1, 2], ("a", 1), {"k", "v"}]),  # not a dict at all
)

# -- calls ------------------------------------------------------------------------

Call = Callable[[hg.Store, Any], object]

SCOPE_CALLS: dict[str, tuple[Call, str]] = {
    "put": (lambda s, x: s.put(x, "k", "text"), "scope"),
    "put_many": (lambda s, x: s.put_many([{"scope": ("ok",), "key": "k"}, {"scope": x, "key": "k"}]), "scope"),
    "update": (lambda s, x: s.update(x, "diet", text="new"), "scope"),
    "delete": (lambda s, x: s.delete(x, "diet"), "scope"),
    "get": (lambda s, x: s.get(x, "diet"), "scope"),
    "list": (lambda s, x: s.list(x), "scope"),
    "search": (lambda s, x: s.search(x, text="peanuts"), "scope"),
    "search_text": (lambda s, x: s.search_text("peanuts", x), "scope"),
    "search_vector": (lambda s, x: s.search_vector(GOOD, x), "scope"),
    "forget": (lambda s, x: s.forget(x), "scope"),
    "forget-everything": (lambda s, x: s.forget(x, everything=True), "scope"),
    "flush": (lambda s, x: s.flush(x), "scope"),
    "discard": (lambda s, x: s.discard(x), "scope"),
    "retract": (lambda s, x: s.retract(x, "diet"), "scope"),
    "prune": (lambda s, x: s.prune(x), "scope"),
    "sweep": (lambda s, x: s.sweep(x, now=datetime.now().astimezone() + timedelta(days=1)), "scope"),
    "list_scopes-prefix": (lambda s, x: s.list_scopes(prefix=x), "prefix"),
    "list_scopes-suffix": (lambda s, x: s.list_scopes(suffix=x), "suffix"),
}  # fmt: skip
KEY_CALLS: dict[str, Call] = {
    "put": lambda s, x: s.put(SEEDED[0], x, "text"),
    "put_many": lambda s, x: s.put_many(
        [{"scope": SEEDED[0], "key": "fine", "text": "t"}, {"scope": ("a",), "key": x}]
    ),
    "update": lambda s, x: s.update(SEEDED[0], x, text="new"),
    "delete": lambda s, x: s.delete(SEEDED[0], x),
    "get": lambda s, x: s.get(SEEDED[0], x),
    "retract": lambda s, x: s.retract(SEEDED[0], x),
}
VECTOR_CALLS: dict[str, tuple[Call, str]] = {
    "put": (lambda s, x: s.put(("new",), "k", "text", embedding=x), "embedding"),
    "put_many": (
        lambda s, x: s.put_many([{"scope": ("new",), "key": "a", "embedding": GOOD}, {**NEW, "embedding": x}]),
        "embedding",
    ),
    "update": (lambda s, x: s.update(*SEEDED, embedding=x), "embedding"),
    "search": (lambda s, x: s.search(text="peanuts", vector=x), "vector"),
    "search_vector": (lambda s, x: s.search_vector(x), "vector"),
}  # fmt: skip
VALUE_CALLS: dict[str, Call] = {
    "put": lambda s, x: s.put(("new",), "k", "text", x),
    "put_many": lambda s, x: s.put_many([{"scope": ("new",), "key": "a", "value": {"ok": 1}}, {**NEW, "value": x}]),
    "update": lambda s, x: s.update(*SEEDED, value=x),
}  # fmt: skip
READ_CALLS: dict[str, Callable[..., object]] = {
    "list": lambda s, **kw: s.list(("users",), **kw),
    "search": lambda s, **kw: s.search(("users",), text="peanuts", vector=GOOD, **kw),
    "search_text": lambda s, **kw: s.search_text("peanuts", ("users",), **kw),
    "search_vector": lambda s, **kw: s.search_vector(GOOD, ("users",), **kw),
}

# -- scopes, keys, vectors, values: properties over every entry point that takes them ---------


@SETTINGS
@given(scope=bad_scopes, call=st.sampled_from(sorted(SCOPE_CALLS)))
def test_every_call_refuses_a_malformed_scope_and_changes_nothing(store: hg.Store, scope: object, call: str) -> None:
    assume(scope is not None or not call.startswith("list_scopes"))  # None is list_scopes' "any"
    run, field = SCOPE_CALLS[call]
    assert_refused(store, lambda: run(store, scope), field)


@pytest.mark.parametrize(
    ("scope", "says"),
    [
        ("users", "single str"),
        (("users", ""), "segment 1 is empty"),
        (("users", "a\0b"), "segment 1 contains NUL"),
        (("x" * 256,), "segment 0 is 256 UTF-8 bytes"),
        (("é" * 128,), "segment 0 is 256 UTF-8 bytes"),
        (("s",) * 33, "33 segments"),
        (("users", 42), "segment 1 must be a str"),
    ],
    ids=["str", "empty-segment", "NUL", "segment-256-bytes", "segment-multibyte-256-bytes", "33-segments", "int"],
)
@pytest.mark.parametrize("call", sorted(SCOPE_CALLS))
def test_a_malformed_scope_is_refused_saying_what_is_wrong(
    store: hg.Store, call: str, scope: object, says: str
) -> None:
    run, field = SCOPE_CALLS[call]
    error = assert_refused(store, lambda: run(store, scope), field)
    assert says in str(error)


@SETTINGS
@given(key=bad_keys, call=st.sampled_from(sorted(KEY_CALLS)))
def test_every_call_refuses_a_malformed_key_and_changes_nothing(store: hg.Store, key: object, call: str) -> None:
    assert_refused(store, lambda: KEY_CALLS[call](store, key), "key")


@pytest.mark.parametrize("key", ["a" * 513, "é" * 256 + "a", "𝄞" * 128 + "a"], ids=["ascii", "2-byte", "4-byte"])
@pytest.mark.parametrize("call", sorted(KEY_CALLS))
def test_a_key_over_512_bytes_is_refused(store: hg.Store, call: str, key: str) -> None:
    error = assert_refused(store, lambda: KEY_CALLS[call](store, key), "key")
    assert "513 UTF-8 bytes" in str(error) and "512" in str(error)


@SETTINGS
@given(vector=bad_vectors, call=st.sampled_from(sorted(VECTOR_CALLS)))
def test_every_call_refuses_a_malformed_vector_and_changes_nothing(store: hg.Store, vector: object, call: str) -> None:
    run, field = VECTOR_CALLS[call]
    assert_refused(store, lambda: run(store, vector), field)


@pytest.mark.parametrize(
    ("vector", "says"),
    [([math.nan, 0.0, 0.0, 1.0], "NaN"), ([1.0, 0.0, 0.0], "dimension 3"), ([1.0] * 5, "dimension 5")],
    ids=["NaN", "dimension-3", "dimension-5"],
)
@pytest.mark.parametrize("call", sorted(VECTOR_CALLS))
def test_a_nan_or_wrong_dimension_vector_is_refused(store: hg.Store, call: str, vector: object, says: str) -> None:
    run, field = VECTOR_CALLS[call]
    error = assert_refused(store, lambda: run(store, vector), field)
    assert says in str(error)


@SETTINGS
@given(value=bad_values, call=st.sampled_from(sorted(VALUE_CALLS)))
def test_every_call_refuses_a_value_that_is_not_json_and_changes_nothing(
    store: hg.Store, value: object, call: str
) -> None:
    assert_refused(store, lambda: VALUE_CALLS[call](store, value), "value")


# -- filters, limits and the other arguments of reads ----------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        {"n": {"$regex": "x"}},
        {"n": {"$eq": 1, "$exists": True}},
        {"$not": {"n": 1}},
        {"$nor": [{"n": 1}]},
        {"$and": [{"n": {"$like": "a"}}]},
        {"$or": [{"n": 1}, {"$where": "1"}]},
        {"$and": {"n": 1}},
        {"n": {"$in": 5}},
        {"n": {"$nin": "abc"}},
        {"a..b": 1},
        {5: 1},
        "source == chat",
        [{"n": 1}],
    ],
    ids=[
        "regex", "exists", "not", "nor", "nested-like", "nested-where", "and-not-a-list", "in-not-a-list",
        "nin-str", "empty-path-part", "int-path", "str", "list",
    ],
)  # fmt: skip
@pytest.mark.parametrize("call", sorted(READ_CALLS))
def test_a_malformed_filter_is_refused_naming_the_filter(store: hg.Store, call: str, spec: object) -> None:
    """Never an empty answer: an unknown operator or a malformed filter is a ValidationError naming the filter."""
    assert_refused(store, lambda: READ_CALLS[call](store, filter=spec), "filter")


@pytest.mark.parametrize(
    "spec",
    [{"n": {"$gt": {1, 2}}}, {"n": {"$in": [1, object()]}}, {"n": math.nan}, {"n": {"$ne": 2**64}}],
    ids=["gt-set", "in-member-object", "eq-nan", "ne-int-beyond-64-bits"],
)
@pytest.mark.parametrize("call", sorted(READ_CALLS))
def test_a_filter_operand_that_is_not_json_is_refused_naming_the_filter(
    store: hg.Store, call: str, spec: object
) -> None:
    """The operand is refused, but the message must say it is the filter's (docs/store.md: "naming the field")."""
    assert_refused(store, lambda: READ_CALLS[call](store, filter=spec), "filter")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": -(2**70)}, "limit"),
        ({"offset": -1}, "offset"),
        ({"limit": 1.5}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2**21}, "limit"),
        ({"offset": None}, "offset"),
        ({"kinds": "semantic"}, "kinds"),
        ({"kinds": [""]}, "kind"),
        ({"kinds": 5}, "kinds"),
    ],
    ids=["limit-1", "limit-huge-negative", "offset-1", "limit-float", "limit-str", "limit-bool", "limit-2^21",
         "offset-None", "kinds-str", "kinds-empty", "kinds-int"],
)  # fmt: skip
@pytest.mark.parametrize("call", sorted(READ_CALLS))
def test_a_negative_or_malformed_limit_is_refused(
    store: hg.Store, call: str, kwargs: dict[str, Any], field: str
) -> None:
    assert_refused(store, lambda: READ_CALLS[call](store, **kwargs), field)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.list_scopes(limit=-1), "limit"),
        (lambda s: s.list_scopes(offset=-5), "offset"),
        (lambda s: s.list_scopes(max_depth=-1), "max_depth"),
        (lambda s: s.list_scopes(max_depth=33), "max_depth"),
        (lambda s: s.list(order="random"), "order"),
        (lambda s: s.search(text="x", min_score=math.nan), "min_score"),
        (lambda s: s.search(text="x", weights=(1.0,)), "weights"),
        (lambda s: s.search(text="x", weights=(-1.0, 2.0)), "weights"),
        (lambda s: s.search(text="x", weights=(0.0, 0.0)), "weights"),
        (lambda s: s.search(text="x", weights=(math.inf, 1.0)), "weights"),
        (lambda s: s.search(text=5), "text"),
        (lambda s: s.search(), "text"),
        (lambda s: s.search_text(None), "query"),
        (lambda s: s.search_vector(None), "vector"),
    ],
    ids=["list_scopes-limit", "list_scopes-offset", "max_depth-negative", "max_depth-33", "order", "min_score-nan",
         "weights-one", "weights-negative", "weights-zero", "weights-inf", "text-int", "nothing-to-search",
         "query-None", "vector-None"],
)  # fmt: skip
def test_other_malformed_read_arguments_are_refused(
    store: hg.Store, call: Callable[[hg.Store], object], field: str
) -> None:
    assert_refused(store, lambda: call(store), field)


# -- the other fields of a write, and the verbs' own arguments ------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"importance": 1.5}, "importance"),
        ({"importance": -0.1}, "importance"),
        ({"importance": math.nan}, "importance"),
        ({"importance": "high"}, "importance"),
        ({"importance": 10**400}, "importance"),
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1}, "ttl"),
        ({"ttl": math.nan}, "ttl"),
        ({"ttl": math.inf}, "ttl"),
        ({"ttl": "1h"}, "ttl"),
        ({"kind": ""}, "kind"),
        ({"kind": 5}, "kind"),
        ({"kind": "k" * 256}, "kind"),
        ({"text": 5}, "text"),
        ({"text": None}, "text"),
        ({"text": b"bytes"}, "text"),
        ({"text": "a\ud800b"}, "text"),
        ({"pending": "yes"}, "pending"),
        ({"pending": 1}, "pending"),
    ],
    ids=["importance-1.5", "importance-negative", "importance-nan", "importance-str", "importance-huge", "ttl-0",
         "ttl-negative", "ttl-nan", "ttl-inf", "ttl-str", "kind-empty", "kind-int", "kind-256-bytes", "text-int",
         "text-None", "text-bytes", "text-surrogate", "pending-str", "pending-int"],
)  # fmt: skip
@pytest.mark.parametrize("how", ["put", "put_many", "update"])
def test_a_malformed_field_of_a_write_is_refused_naming_it(
    store: hg.Store, how: str, fields: dict[str, Any], field: str
) -> None:
    if how == "put":
        assert_refused(store, lambda: store.put(("new",), "k", **{"text": "t", **fields}), field)
    elif how == "put_many":
        good = {"scope": ("new",), "key": "a", "text": "fine"}
        assert_refused(store, lambda: store.put_many([good, {"scope": ("new",), "key": "b", **fields}]), field)
    else:
        if field == "pending":
            fields = {"pending": True}  # update cannot change the status either
        assert_refused(store, lambda: store.update(*SEEDED, **fields), field)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.put_many({"scope": ("a",), "key": "k"}), "put_many"),
        (lambda s: s.put_many(5), "put_many"),
        (lambda s: s.put_many([{"scope": ("a",), "key": "k"}, "not a mapping"]), "item 1"),
        (lambda s: s.put_many([{"scope": ("a",), "key": "k"}, {"scope": ("a",)}]), "key"),
        (lambda s: s.put_many([{"scope": ("a",), "key": "k", "status": "active"}]), "status"),
        (lambda s: s.put_many([{"scope": ("a",), "key": "k", "created_at": "2025-01-01"}]), "created_at"),
        (lambda s: s.update(*SEEDED, status="active"), "status"),
        (lambda s: s.forget(()), "everything"),
        (lambda s: s.forget([]), "everything"),
        (lambda s: s.sweep(now=datetime(2030, 1, 1)), "now"),
        (lambda s: s.sweep(now="2030-01-01T00:00:00+00:00"), "now"),
        (lambda s: s.sweep(now=1_900_000_000), "now"),
    ],
    ids=["put_many-mapping", "put_many-int", "put_many-item-str", "put_many-item-no-key", "put_many-status",
         "put_many-created_at", "update-status", "forget-root",
         "forget-root-list", "sweep-naive-now", "sweep-str-now", "sweep-int-now"],
)  # fmt: skip
def test_malformed_batches_and_verb_arguments_are_refused(
    store: hg.Store, call: Callable[[hg.Store], object], field: str
) -> None:
    assert_refused(store, lambda: call(store), field)


# -- valid edge cases: accepted and round-trip -----------------------------------------------


@pytest.mark.parametrize(
    ("scope", "key"),
    [
        (("edge", "x" * 255), "a" * 512),
        (("é" * 127 + "a",), "𝄞" * 128),
        (tuple(f"s{i}" for i in range(32)), "k"),
        (("nul",), "a\0b"),
        (("sep", "u 42/x:y"), "key/with:separators"),
        (("e\u0301",), "\u00e9"),
    ],
    ids=["segment-255-key-512", "multibyte-limits", "32-segments", "NUL-in-key", "separators", "not-normalised"],
)
def test_edge_cases_at_the_limits_are_accepted_and_round_trip(
    store: hg.Store, scope: tuple[str, ...], key: str
) -> None:
    value = {"nul": "a\0b", "nested": {"list": [1, 2.5, None, True, "𝄞"]}}
    put = store.put(scope, key, "text with a \0 in it", value, embedding=GOOD)
    assert store.get(scope, key) == put
    assert [e.ref for e in store.list(scope)] == [(scope, key)]
    assert store.delete(scope, key) is True and store.get(scope, key) is None
    assert store.get(("nul",), "a\0c") is None and store.get(("nul",), "a") is None
    if scope == ("e\u0301",):  # no normalisation: the composed form is another scope
        assert store.list(("\u00e9",)) == []
