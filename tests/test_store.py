"""The scoped store beyond the conformance suite: input checks and scoring rules as properties, BM25
against its formula, the derived index's freshness, and a graph repo sharing one LMDB directory."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph import _core
from hippograph.backends import LMDB, InMemory
from hippograph.engine.checks import check_choice, check_flag
from hippograph.errors import ValidationError
from hippograph.store import filters, model
from hippograph.store.fusion import RRF_K, fuse, text_similarity
from hippograph.testing.store import fake_embed

segments = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=20)


@given(st.lists(segments, max_size=6))
def test_valid_scopes_are_accepted_as_tuples(scope: list[str]) -> None:
    assert model.check_scope(scope) == tuple(scope)
    assert model.check_scope(tuple(scope)) == tuple(scope)  # a second time, from the checked scopes


@given(
    st.one_of(
        st.text(max_size=5),
        st.lists(segments, max_size=3).map(lambda s: (*s, "")),
        st.lists(segments, min_size=1, max_size=3).map(lambda s: (*s, "a\0b")),
        st.lists(st.integers(), min_size=1, max_size=3).map(tuple),
        st.lists(segments, min_size=33, max_size=40).map(tuple),
        st.just(("x" * 256,)),
        st.just((["users"],)),
    )
)
def test_bad_scopes_are_refused(scope: Any) -> None:
    for _ in range(2):  # refused again: a refused scope is never remembered as checked
        with pytest.raises(ValidationError):
            model.check_scope(scope)


@given(st.lists(segments, max_size=4), st.lists(segments, max_size=4))
def test_scope_matching_is_by_whole_segments(a: list[str], b: list[str]) -> None:
    inside = model.in_scope(tuple(a), tuple(b))
    assert inside == (len(b) <= len(a) and a[: len(b)] == b)
    if b and a and a[-1] != b[-1]:
        assert not model.in_scope((*a[:-1], a[-1] + b[-1]), (*a[:-1], a[-1])) or False


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)  # fmt: skip


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
def test_json_values_are_accepted_and_round_trip_through_the_codec(value: dict[str, Any]) -> None:
    checked = model.check_value(value)
    e = hg.Store(InMemory()).put(("s",), "k", "x", checked)
    from hippograph.store.codec import decode_entry, encode_entry

    assert decode_entry(encode_entry(e)) == e


@given(
    st.datetimes(timezones=st.just(UTC) | st.timezones(), allow_imaginary=False),
    st.datetimes(timezones=st.just(UTC), allow_imaginary=False),
)
def test_times_round_trip_exactly_through_the_codec(when: datetime, other: datetime) -> None:
    from hippograph.store.codec import _micros, decode_entry, encode_entry

    assert _micros(when) == (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    e = hg.Store(InMemory()).put(("s",), "k", "x")
    for created, updated, accessed in ((when, when, when), (when, other, when), (other, when, other)):
        e2 = dataclasses.replace(e, created_at=created, updated_at=updated, accessed_at=accessed, expires_at=other)
        back = decode_entry(encode_entry(e2))
        # The same instants, compared in UTC: Python never calls a time in a repeated local hour
        # (a fold) equal to a time in another zone, even the same instant.
        assert (back.created_at, back.updated_at, back.accessed_at, back.expires_at) == tuple(
            t.astimezone(UTC) for t in (created, updated, accessed, other)
        )


@given(st.sampled_from([math.nan, math.inf, object(), b"bytes", {1: "int key"}, 2**64, {"s": {1, 2}}]))
def test_non_json_values_are_refused(bad: Any) -> None:
    with pytest.raises(ValidationError):
        model.check_value({"v": bad})


@given(st.text(min_size=2, max_size=8).map(lambda s: "$" + s.lstrip("$")).filter(lambda s: s not in filters._OPERATORS))
def test_unknown_filter_operators_are_refused(op: str) -> None:
    with pytest.raises(ValidationError, match="unknown operator"):
        filters.compile_filter({"a": {op: 1}})
    if op not in ("$and", "$or"):
        with pytest.raises(ValidationError):
            filters.compile_filter({op: 1})


@given(st.integers(-5, 5), st.integers(-5, 5))
def test_filter_comparisons_follow_json_semantics(a: int, b: int) -> None:
    for op, want in (("$gt", a > b), ("$gte", a >= b), ("$lt", a < b), ("$lte", a <= b), ("$eq", a == b)):
        pred = filters.compile_filter({"x": {op: b}})
        assert pred is not None and pred({"x": a}) == want and not pred({"x": str(a)}) and not pred({})
    eq = filters.compile_filter({"x": 1})
    assert eq is not None and not eq({"x": True}) and eq({"x": 1.0})


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_text_similarity_is_monotone_into_the_unit_interval(a: float, b: float) -> None:
    assert 0 <= text_similarity(a) < 1
    if a < b:
        assert text_similarity(a) <= text_similarity(b)


def test_bm25_follows_its_formula() -> None:
    ix = _core.LexicalIndex()
    texts = ["the cat sat", "the cat and the dog", "a bird"]
    for i, t in enumerate(texts):
        ix.set(i, t)
    docs, scores = ix.search("CAT", 10)
    avg = sum(len(t.split()) for t in texts) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))

    def bm25(tf: int, n: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * n / avg))

    assert docs.tolist() == [0, 1]
    assert scores.tolist() == pytest.approx([bm25(1, 3), bm25(1, 5)], rel=1e-5)
    assert _core.word_tokens("Straße, CAFÉ!") == ["straße", "café"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["red", "green", "blue", "fox", "hen"]), min_size=1, max_size=6), st.data())
def test_scoped_text_search_equals_the_unscoped_one_restricted(words: list[str], data: st.DataObject) -> None:
    ix = _core.LexicalIndex()
    rng = np.random.default_rng(len(words))
    for i in range(60):
        ix.set(i, " ".join(rng.choice(["red", "green", "blue", "fox", "hen", "owl"], size=4)))
    allowed = np.array(sorted(data.draw(st.sets(st.integers(0, 59), max_size=20))), np.uint32)
    query = " ".join(words)
    docs, scores = ix.search(query, 1000, allowed)
    all_docs, all_scores = ix.search(query, 1000)
    want = {d: s for d, s in zip(all_docs.tolist(), all_scores.tolist(), strict=True) if d in set(allowed.tolist())}
    assert dict(zip(docs.tolist(), scores.tolist(), strict=True)) == pytest.approx(want)


def test_fusion_gives_first_in_both_routes_one_and_decreases_with_rank() -> None:
    scores, _, _ = fuse(([0, 1, 2], [3.0, 2.0, 1.0]), ([2, 1, 0], [0.9, 0.8, 0.7]), (0.5, 0.5), True)
    assert scores[1] == pytest.approx((1 / (RRF_K + 2)) / (1 / (RRF_K + 1)))
    first, _, _ = fuse(([0, 1, 2], [3.0, 2.0, 1.0]), ([0, 1, 2], [0.9, 0.8, 0.7]), (0.3, 0.7), True)
    assert first[0] == pytest.approx(1.0) and first[0] > first[1] > first[2]
    single, text, vector = fuse(([4], [3.0]), ([], []), (1.0, 0.0), False)
    assert single == text == {4: text_similarity(3.0)} and vector == {}


def test_a_scoped_search_ranks_only_its_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    store = hg.Store(InMemory(), embed=fake_embed)
    store.put_many([{"scope": ("u", str(i % 100)), "key": f"k{i}", "text": "meal plan"} for i in range(1000)])
    seen: list[int] = []
    ix = store._index
    real = ix.ranked_vector

    def spy(vector: Any, allowed: Any, k: int, now: Any = None, route: Any = None) -> Any:
        seen.append(len(allowed))
        return real(vector, allowed, k, now, route)

    monkeypatch.setattr(ix, "ranked_vector", spy)
    hits = store.search(("u", "7"), text="meal", limit=20)
    assert seen == [10] and len(hits) == 10 and all(h.entry.scope == ("u", "7") for h in hits)


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
def test_a_writer_indexes_its_own_puts_and_still_sees_writes_made_in_between(kind: str, tmp_path: Path) -> None:
    """A store takes its own committed entries into its index without reading them back, only when
    nothing else was written since its index last caught up; another handle's write in between is
    found by the next read all the same."""
    backend: Any = InMemory() if kind == "memory" else LMDB(tmp_path / "s", durability="fast")
    mine, other = hg.Store(backend, embed=fake_embed), hg.Store(backend, embed=fake_embed)
    mine.put(("u",), "first", "apple")
    assert [h.entry.key for h in mine.search_text("apple")] == ["first"]
    other.put(("u",), "between", "apple pie")
    mine.put(("u",), "last", "apple tart")
    mine.update(("u",), "first", text="apple crumble")
    assert {h.entry.key for h in mine.search_text("apple")} == {"first", "between", "last"}
    assert [h.entry.key for h in mine.search_text("crumble")] == ["first"]
    other.delete(("u",), "last")
    mine.put(("u",), "after", "apple juice")
    assert {h.entry.key for h in mine.search_text("apple")} == {"first", "between", "after"}
    assert {h.entry.key for h in mine.search(("u",), vector=fake_embed(["apple"])[0], limit=10)} == {
        "first",
        "between",
        "after",
    }
    backend.close()


def test_a_scopes_entries_lie_in_a_few_runs_of_rows_however_writes_interleave() -> None:
    """Slots are reserved per scope in growing runs, so a scoped search reads a few contiguous runs
    of the vector matrix, not rows scattered over it; slots freed by deletes are reused."""
    store = hg.Store(InMemory(), embed=fake_embed)
    store.put(("seed",), "k", "x")
    for i in range(3000):  # one entry per scope in turn: the worst interleaving
        store.put(("u", str(i % 10)), f"k{i}", "meal plan")
    store.refresh()
    ix = store._index
    for scope in ix.scopes_under(("u",)):
        rows = np.sort(ix._members(scope))
        runs = 1 + int((np.diff(rows.astype(np.int64)) != 1).sum())
        assert runs <= 300 / 32 + 6, (scope, runs)
    assert len(ix.entries) <= 3001 + 10 * 32  # at most one run held in reserve per scope
    for i in range(0, 3000, 10):
        store.delete(("u", "0"), f"k{i}")
    before = len(ix.entries)
    for i in range(300):
        store.put(("u", "0"), f"again{i}", "meal plan")
    store.refresh()
    assert len(ix.entries) == before and len(store.search_text("meal", ("u", "0"), limit=1000)) == 300


def test_a_graph_repo_and_a_store_share_one_lmdb_directory(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "both")
    repo = hg.Repo(backend)
    store = hg.Store(backend)
    store.put(("u",), "k", "meal")
    node = hg.Semantic(id="n1", proposition="p", confidence=0.5, embedding=np.ones(4, np.float32))
    backend.apply_changeset(hg.Changeset(additions=[node]))
    assert backend.get_node("n1") is not None and store.get(("u",), "k") is not None
    repo.close()
    again = LMDB(tmp_path / "both")
    try:
        assert again.get_node("n1") is not None and hg.Store(again).get(("u",), "k") is not None
    finally:
        again.close()


def _write_in_child(path: str, n: int) -> None:
    with hg.open_store("child", path=path) as store:
        for i in range(n):
            store.put(("shared",), f"c{i}", "written by the child")
        store.forget(("doomed",))


def test_another_process_s_writes_are_seen_by_the_next_read(tmp_path: Path) -> None:
    with hg.open_store("main", path=tmp_path / "s") as store:
        store.put(("doomed",), "x", "written by the child")
        assert len(store.search_text("child")) == 1  # the index is built before the child writes
        ctx = multiprocessing.get_context("spawn")
        child = ctx.Process(target=_write_in_child, args=(str(tmp_path / "s"), 5))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        keys = [h.entry.key for h in store.search_text("child", limit=10)]
        assert keys == [f"c{i}" for i in range(5)]
        assert store.stats()["entries"] == 5


def test_the_receipt_is_read_in_the_transaction_of_the_change(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "s")
    a, b = hg.Store(backend), hg.Store(backend)
    a.put(("u", "1"), "x", "meal")
    a.search_text("meal")  # a's index knows only x
    b.put(("u", "1", "s"), "y", "meal")
    receipt = a.forget(("u", "1"))
    assert receipt.keys == ((("u", "1"), "x"), (("u", "1", "s"), "y"))
    assert a.search_text("meal") == [] and b.list() == []
    backend.close()


def test_the_command_line_looks_inside_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hippograph.cli import main

    with hg.open_store("s", path=tmp_path / "s") as store:
        store.put(("users", "u1"), "diet", "vegetarian, allergic to peanuts")
        store.put(("users", "u2"), "trip", "flight to Lisbon", pending=True)
    assert main(["store", "stats", "--path", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s*entries\s+2$", out, re.M) and re.search(r"^\s*pending\s+1$", out, re.M)
    assert main(["store", "verify", "--path", str(tmp_path / "s")]) == 0
    assert re.search(r"checked entries\s+2$", capsys.readouterr().out, re.M)
    assert main(["store", "search", "peanuts", "--path", str(tmp_path / "s"), "--scope", "users"]) == 0
    assert "users/u1 :: diet" in capsys.readouterr().out
    assert main(["store", "stats", "--path", str(tmp_path / "missing")]) == 1


def test_a_prefix_over_every_entry_is_searched_as_the_whole_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace prefix that holds every entry (LangGraph's ``("users",)``) is the whole store:
    the vector index answers it; a prefix over part of the store is scanned exactly."""
    config = hg.AnnConfig(min_nodes=100, ef_search=64, background=False, min_speedup=0)
    store = hg.Store(InMemory(), ann=config)
    rng = np.random.default_rng(6)
    vectors = rng.standard_normal((600, 16)).astype(np.float32)
    store.put_many([{"scope": ("u", str(i % 3)), "key": f"k{i:04d}", "embedding": v} for i, v in enumerate(vectors)])
    assert store.build_vector_index()
    ix = store._index
    real, asked = ix._scanned, []

    def spy(*args: Any) -> Any:
        asked.append(args)
        return real(*args)

    monkeypatch.setattr(ix, "_scanned", spy)
    q = rng.standard_normal(16).astype(np.float32)
    whole = store.search_vector(q, ("u",))
    assert len(asked) == 1 and whole == store.search_vector(q) and len(asked) == 2
    part = store.search_vector(q, ("u", "1"))
    assert len(asked) == 2 and all(h.entry.scope == ("u", "1") for h in part)
    store.put(("v",), "elsewhere", embedding=q)  # ("u",) no longer holds everything
    assert all(h.entry.scope[0] == "u" for h in store.search_vector(q, ("u",))) and len(asked) == 2
    assert store.search_vector(q)[0].entry.key == "elsewhere" and len(asked) == 3


def test_unrestricted_vector_searches_use_the_calibrated_index_and_hide_what_reads_must_not_see() -> None:
    config = hg.AnnConfig(min_nodes=100, ef_search=64, background=False, min_speedup=0)
    store = hg.Store(InMemory(), ann=config)
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((1500, 16)).astype(np.float32)
    store.put_many([{"scope": ("s", str(i % 7)), "key": f"k{i:04d}", "embedding": v} for i, v in enumerate(vectors)])
    assert store.build_vector_index()
    stats = store.vector_index_stats()
    assert stats["available"] and stats["calibrated_rows"] == 1500 and not stats["exact_fallback"]
    q = rng.standard_normal(16).astype(np.float32)
    cos = vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    want = [f"k{i:04d}" for i in np.argsort(-cos)[:10]]
    assert [h.entry.key for h in store.search_vector(q)] == want
    # Entries a read must not return, placed right on the query: never surfaced by the index.
    store.put(("s",), "pending", embedding=q, pending=True)
    store.put(("s",), "retracted", embedding=q)
    store.retract(("s",), "retracted")
    store.put(("s",), "brief", embedding=q, ttl=0.01)
    import time

    time.sleep(0.05)
    assert [h.entry.key for h in store.search_vector(q)] == want
    store.put(("s",), "fresh", embedding=q)
    assert store.search_vector(q)[0].entry.key == "fresh"


def test_scoped_vector_searches_follow_every_change_to_their_scope() -> None:
    store = hg.Store(InMemory(), ann=None)
    rng = np.random.default_rng(9)
    vectors = rng.standard_normal((400, 8)).astype(np.float32)
    store.put_many([{"scope": ("u", str(i % 40)), "key": f"k{i:03d}", "embedding": v} for i, v in enumerate(vectors)])
    q = rng.standard_normal(8).astype(np.float32)

    def exact(scope: tuple[str, ...]) -> list[str]:
        live = [e for e in store.list(scope, limit=1000) if e.embedding is not None]
        cos = [float(e.embedding @ q / (np.linalg.norm(e.embedding) * np.linalg.norm(q))) for e in live]
        ranked = sorted((c, e.key) for c, e in zip(cos, live, strict=True) if c > 0)
        return [k for _, k in sorted(ranked, key=lambda t: (-t[0], t[1]))[:10]]

    scope = ("u", "3")
    assert [h.entry.key for h in store.search_vector(q, scope)] == exact(scope)
    store.put(scope, "new", embedding=q)  # the scope's cached vectors must follow
    assert store.search_vector(q, scope)[0].entry.key == "new"
    store.retract(scope, "new")
    store.put(scope, "k003", embedding=-q)
    assert [h.entry.key for h in store.search_vector(q, scope)] == exact(scope)
    assert "k003" not in exact(scope)


def test_exact_vector_searches_are_not_misled_by_vectors_no_entry_holds_any_more(tmp_path: Path) -> None:
    """The exact scan reads each slot's half-precision shadow first: a deleted entry's, or one whose
    vector was dropped, must not keep it (its stale bound would hide the true best)."""
    backend = LMDB(tmp_path / "s", durability="fast")
    store = hg.Store(backend, ann=None)
    rng = np.random.default_rng(4)
    q = rng.standard_normal(16).astype(np.float32)
    near = q + 0.05 * rng.standard_normal((12, 16)).astype(np.float32)
    far = rng.standard_normal((300, 16)).astype(np.float32)
    store.put_many([{"scope": ("a",), "key": f"n{i:02d}", "embedding": v} for i, v in enumerate(near)])
    store.put_many([{"scope": ("b",), "key": f"f{i:03d}", "embedding": v} for i, v in enumerate(far)])

    def exact() -> list[str]:
        live = [e for e in store.list((), limit=1000) if e.embedding is not None]
        cos = [float(e.embedding @ q / (np.linalg.norm(e.embedding) * np.linalg.norm(q))) for e in live]
        return [k for c, k in sorted(((-c, e.key) for c, e in zip(cos, live, strict=True)))][:3]

    for i in range(10):
        store.delete(("a",), f"n{i:02d}")
    store.put(("a",), "n10", "no vector any more")
    want = exact()
    assert want[0] == "n11"
    assert [h.entry.key for h in store.search_vector(q, limit=3)] == want
    assert [h.entry.key for h in store.search_vector(q, ("a",), limit=3)] == ["n11"]
    reopened = hg.Store(backend, ann=None)  # a rebuild computes every shadow at once
    assert [h.entry.key for h in reopened.search_vector(q, limit=3)] == want
    backend.close()


def test_a_refreshed_ttl_keeps_its_length(tmp_path: Path) -> None:
    import time

    store = hg.Store(InMemory())
    first = store.put(("s",), "k", "x", ttl=10)
    assert first.expires_at is not None
    length = first.expires_at - first.updated_at
    for _ in range(3):
        time.sleep(0.02)
        got = store.get(("s",), "k", refresh_ttl=True)
        assert got is not None and got.expires_at is not None
        assert got.expires_at - got.accessed_at == length
    updated = store.update(("s",), "k", value={"v": 1})
    assert updated.expires_at is not None and updated.expires_at - updated.updated_at == length


@pytest.mark.parametrize("make", [lambda p: InMemory(), lambda p: LMDB(p / "s")])
def test_returned_entries_do_not_share_their_value_with_the_store(tmp_path: Path, make: Any) -> None:
    backend = make(tmp_path)
    store = hg.Store(backend)
    put = store.put(("a",), "k", "x", {"x": 1, "l": [1]})
    put.value["x"] = 2
    for got in (store.get(("a",), "k"), store.list(("a",))[0], store.search_text("x")[0].entry):
        assert got is not None and got.value == {"x": 1, "l": [1]}
        got.value["x"] = 3
        got.value["l"].append(9)
    assert store.list(("a",), filter={"x": 3}) == [] and store.get(("a",), "k").value == {"x": 1, "l": [1]}  # type: ignore[union-attr]
    backend.close()


# Yes/no arguments: a value whose truth would be guessed (a number, a string, a numpy array, whose
# truth is an error past one element) is refused by name, before anything is read or written.
not_flags = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(max_size=3),
    st.lists(st.booleans(), max_size=2),
    st.integers(0, 3).map(lambda n: np.zeros(n, bool)),
)


@given(st.one_of(st.sampled_from(["a", "b", "c", "A", ""]), not_flags))
def test_a_choice_is_one_of_its_strings_or_refused_by_name(value: Any) -> None:
    if isinstance(value, str) and value in ("a", "b"):
        assert check_choice(value, ("a", "b"), "pick") == value
    else:
        with pytest.raises(ValidationError, match="pick must be 'a' or 'b'"):
            check_choice(value, ("a", "b"), "pick")


@given(st.one_of(st.booleans(), st.booleans().map(np.bool_), not_flags))
def test_a_flag_is_a_bool_or_refused_by_name(value: Any) -> None:
    if isinstance(value, (bool, np.bool_)):
        assert check_flag(value, "f") is bool(value)
    else:
        with pytest.raises(ValidationError, match="f must be a bool"):
            check_flag(value, "f")


FLAG_CALLS: dict[str, Callable[[hg.Store, hg.Repo, Any], object]] = {
    "Store.get include_pending": lambda s, r, v: s.get(("s",), "k", include_pending=v),
    "Store.get refresh_ttl": lambda s, r, v: s.get(("s",), "k", refresh_ttl=v),
    "Store.list include_pending": lambda s, r, v: s.list(("s",), include_pending=v),
    "Store.list order": lambda s, r, v: s.list(("s",), order=v),
    "Store.search refresh_ttl": lambda s, r, v: s.search(("s",), text="x", refresh_ttl=v),
    "Repo.recall exact": lambda s, r, v: r.recall(np.ones(4, np.float32), exact=v),
    "Repo.why_not exact": lambda s, r, v: r.why_not("n", np.ones(4, np.float32), exact=v),
}


@given(st.sampled_from(sorted(FLAG_CALLS)), not_flags)
def test_calls_refuse_a_flag_that_is_not_a_bool(call: str, value: Any) -> None:
    store, repo = hg.Store(InMemory()), hg.Repo(InMemory())
    store.put(("s",), "k", "x")
    with pytest.raises(ValidationError):
        FLAG_CALLS[call](store, repo, value)
    assert [e.key for e in store.list(("s",))] == ["k"]


@pytest.fixture(scope="module")
def lmdb_repo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with hg.Repo(LMDB(tmp_path_factory.mktemp("flags") / "s", durability="fast")) as repo:
        yield repo


@given(not_flags)
def test_lmdb_refuses_an_exact_that_is_not_a_bool(lmdb_repo: hg.Repo, value: Any) -> None:
    # LMDB reads `exact` before the shared query code does (a first non-exact query adopts a saved index).
    with pytest.raises(ValidationError, match="exact must be a bool"):
        lmdb_repo.recall(np.ones(4, np.float32), exact=value)
