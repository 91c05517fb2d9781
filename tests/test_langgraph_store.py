"""`hippograph.integrations.langgraph.HippographStore` against LangGraph's own `InMemoryStore`.

The differential test runs random batches of gets, puts, deletes, searches (with and without a query
and a filter) and namespace listings on both stores, with the same fake embedder, and compares every
result: the same items with the same values and scores (within 1e-5), ranked by score where LangGraph
ranks by score, and in `HippographStore`'s documented order (newest first) where LangGraph's order
(insertion) is no part of its contract. ``HIPPOGRAPH_DIFF_EXAMPLES=5000 pytest -k differential``
runs a long one by hand.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)
from langgraph.store.memory import InMemoryStore, _compare_values

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.errors import ConfigError, StorageError, ValidationError
from hippograph.integrations._langgraph_rank import VECTOR_KIND, hidden
from hippograph.integrations.langgraph import HippographStore, NamespaceLimitError
from loop_witness import LoopWitness

ROOT = Path(__file__).resolve().parent.parent
DIFF_EXAMPLES = int(os.environ.get("HIPPOGRAPH_DIFF_EXAMPLES", "200"))
TOL = 1e-5
DIM = 8
WORDS = ("apple", "banana", "cherry", "dog", "eel", "fig", "grape", "hat")


def fake_embed(texts: Sequence[str]) -> list[list[float]]:
    """Each word adds ±1 to a hashed dimension; a small constant keeps every vector non-zero while
    cosines still go negative. Few dimensions, so ties and collisions are common."""
    out = []
    for text in texts:
        v = [0.1] + [0.0] * (DIM - 1)
        for word in re.findall(r"\w+", text.lower()):
            h = zlib.crc32(word.encode())
            v[1 + h % (DIM - 1)] += 1.0 if (h >> 16) & 1 else -1.0
        out.append(v)
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    x, y = np.asarray(a, float), np.asarray(b, float)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def ref(item: Item) -> tuple[tuple[str, ...], str]:
    return tuple(item.namespace), item.key


# -- the reference --------------------------------------------------------------------------------


class Reference(InMemoryStore):
    """`InMemoryStore` with the defects `HippographStore` deliberately does not copy (docs/langgraph.md,
    differences) fixed, so that everything else can be compared exactly:

    - a re-put keeps none of the previous version's vectors (InMemoryStore keeps the vectors of paths
      the new version lacks, and all of them on a re-put with ``index=False``);
    - equal texts in one batch are embedded once and given to each of their paths (InMemoryStore
      raises "Number of embeddings does not match");
    - a per-put ``index=["$"]`` is the whole value, as in the store's `fields`;
    - a filter comparison that raises (``float(None)``) does not match, instead of failing the search;
    - `list_namespaces` lists the namespaces holding items, not those a get or a delete once touched.
    """

    def _extract_texts(self, put_ops: dict[tuple[tuple[str, ...], str], PutOp]) -> Any:
        for namespace, key in put_ops:
            if namespace in self._vectors:
                self._vectors[namespace].pop(key, None)
        if not (put_ops and self.index_config and self.embeddings):
            return {}
        to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        for op in put_ops.values():
            if op.value is None or op.index is False:
                continue
            if op.index is None:
                paths = self.index_config["__tokenized_fields"]  # type: ignore[typeddict-item]
            else:
                paths = [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
            for path, tokens in paths:
                texts = get_text_at_path(op.value, tokens)
                for i, text in enumerate(texts):
                    to_embed[text].append((op.namespace, op.key, f"{path}.{i}" if len(texts) > 1 else path))
        return to_embed

    def _insertinmem_store(self, to_embed: Any, embeddings: list[list[float]]) -> None:
        for refs, vector in zip(to_embed.values(), embeddings, strict=True):
            for namespace, key, path in refs:
                self._vectors[namespace][key][path] = vector

    def _filter_items(self, op: SearchOp) -> list[tuple[Item, list[list[float]]]]:
        if not op.filter:
            return super()._filter_items(op)

        def safe(value: Any, expected: Any) -> bool:
            try:
                return _compare_values(value, expected)
            except (TypeError, ValueError):
                return False

        n, out = len(op.namespace_prefix), []
        for namespace in list(self._data):
            if namespace[:n] != op.namespace_prefix:
                continue
            for key, item in self._data[namespace].items():
                if all(safe(item.value.get(k), x) for k, x in op.filter.items()):
                    vectors = self._vectors[namespace].get(key) if op.query else None
                    out.append((item, list(vectors.values()) if vectors else []))
        return out

    def _handle_list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        kept = self._data
        try:
            self._data = {ns: items for ns, items in kept.items() if items}  # type: ignore[assignment]
            return super()._handle_list_namespaces(op)
        finally:
            self._data = kept


# -- strategies -----------------------------------------------------------------------------------

labels = st.sampled_from(("a", "b", "c"))
namespaces = st.one_of(
    *[st.lists(labels, min_size=1, max_size=2).map(tuple)] * 3,
    st.sampled_from(((), ("langgraph",), ("langgraph", "a"))),  # a raw op may write where put may not
)
prefixes = st.one_of(st.just(()), st.lists(labels, min_size=1, max_size=2).map(tuple))
keys = st.sampled_from(("k1", "k2", "k3", "k4"))
words = st.sampled_from(WORDS)
sentences = st.lists(words, min_size=1, max_size=3).map(" ".join)
numbers = st.one_of(st.integers(0, 2), st.integers(0, 2), st.sampled_from((0.5, 1.0, -1.5)), st.booleans())
fields_of_values = {
    "text": sentences,
    "n": st.one_of(numbers, st.sampled_from(("2", "x", "0.5")), st.none()),
    "tags": st.lists(words, max_size=3),
    "meta": st.fixed_dictionaries(
        {}, optional={"kind": words, "score": st.integers(0, 2), "deep": st.fixed_dictionaries({"x": words})}
    ),
    "arr": st.lists(st.fixed_dictionaries({}, optional={"c": sentences, "d": st.integers(0, 2)}), max_size=3),
    "flag": st.booleans(),
}
values = st.one_of(
    st.fixed_dictionaries({"text": sentences}, optional={k: v for k, v in fields_of_values.items() if k != "text"}),
    st.fixed_dictionaries({}, optional=fields_of_values),
)
paths = st.sampled_from(("$", "text", "tags[*]", "tags[0]", "tags[-1]", "meta", "meta.kind", "arr[*].c", "arr[-1].c"))
put_indexes = st.one_of(st.none(), st.none(), st.just(False), st.lists(paths, min_size=1, max_size=3))
store_fields = st.sampled_from(
    (None, ["$"], ["text"], ["text", "tags[*]"], ["arr[*].c", "meta.kind"], ["tags[-1]", "meta", "text"])
)
orderings = st.dictionaries(st.sampled_from(("$gt", "$gte", "$lt", "$lte")), st.integers(0, 2), min_size=1)
conditions = st.one_of(
    st.tuples(st.just("text"), st.one_of(sentences, st.fixed_dictionaries({"$eq": sentences}))),
    st.tuples(st.just("text"), st.fixed_dictionaries({"$ne": sentences})),
    st.tuples(st.just("n"), st.one_of(numbers, st.none())),
    st.tuples(st.just("n"), orderings),
    st.tuples(st.just("n"), st.fixed_dictionaries({}, optional={"$ne": numbers, "$eq": numbers, "$gte": numbers})),
    st.tuples(st.just("meta"), st.fixed_dictionaries({}, optional={"kind": words, "score": orderings})),
    st.tuples(st.just("tags"), st.lists(words, max_size=2)),
    st.tuples(st.sampled_from(("flag", "missing")), st.one_of(st.booleans(), st.none())),
)
filters = st.one_of(st.none(), st.lists(conditions, min_size=1, max_size=2).map(dict))
patterns = st.one_of(st.none(), st.lists(st.sampled_from(("a", "b", "c", "*")), min_size=1, max_size=2).map(tuple))


def _list_op(
    prefix: tuple[str, ...] | None, suffix: tuple[str, ...] | None, depth: int | None, limit: int, offset: int
) -> ListNamespacesOp:
    conditions = []
    if prefix:
        conditions.append(MatchCondition("prefix", prefix))
    if suffix:
        conditions.append(MatchCondition("suffix", suffix))
    return ListNamespacesOp(tuple(conditions), depth, limit, offset)


puts = st.builds(PutOp, namespaces, keys, values, put_indexes, ttl=st.none())
searches = st.builds(
    SearchOp,
    prefixes,
    filters,
    st.integers(0, 6),
    st.integers(0, 4),
    st.one_of(st.none(), sentences, sentences, sentences, st.just("")),
)
ops = st.one_of(
    puts,
    puts,
    puts,
    st.builds(PutOp, namespaces, keys, st.none(), ttl=st.none()),
    st.builds(GetOp, namespaces, keys),
    searches,
    searches,
    searches,
    st.builds(_list_op, patterns, patterns, st.none() | st.integers(0, 3), st.integers(0, 6), st.integers(0, 3)),
)
batches = st.lists(ops, min_size=1, max_size=4)
seeds = st.lists(puts, min_size=8, max_size=20)
"""Puts before the random steps, so that searches have something to rank."""


# -- comparing ------------------------------------------------------------------------------------


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOL


def _newest_first(items: Sequence[SearchItem]) -> bool:
    keys = [(-(i.updated_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1), ref(i)) for i in items]
    return keys == sorted(keys)


def check_search(op: SearchOp, ranked: bool, ref_full: list[SearchItem], ours_full: list[SearchItem],
                 ref_page: list[SearchItem], ours_page: list[SearchItem]) -> None:  # fmt: skip
    """`ours_page` against LangGraph's answer and against `HippographStore`'s documented order."""
    theirs = {ref(i): i for i in ref_full}
    mine = {ref(i): i for i in ours_full}
    assert len(mine) == len(ours_full), "an item twice"
    assert mine.keys() == theirs.keys()
    for r, item in mine.items():
        assert item.value == theirs[r].value, r
        assert _close(item.score, theirs[r].score), (r, item.score, theirs[r].score)
    scores = [i.score for i in ours_full]
    scored = [s for s in scores if s is not None]
    if ranked:  # by score, best first, then the items without a vector, newest first
        assert scores[: len(scored)] == scored, "an item without a vector before a scored one"
        assert all(a >= b - TOL for a, b in itertools.pairwise(scored))
        assert _newest_first(ours_full[len(scored) :])
        # the scored part of a page is LangGraph's (its items without vectors ignore the offset)
        theirs_scored = [i.score for i in ref_page if i.score is not None]
        ours_scored = [i.score for i in ours_page if i.score is not None]
        assert all(_close(a, b) for a, b in zip(theirs_scored, ours_scored, strict=True))
    else:
        assert not scored and _newest_first(ours_full)
        assert len(ours_page) == len(ref_page)
    expected = ours_full[op.offset : op.offset + op.limit]
    assert len(ours_page) == len(expected)
    assert len({ref(i) for i in ours_page}) == len(ours_page)
    for got, want in zip(ours_page, expected, strict=True):
        if want.score is None:
            assert ref(got) == ref(want) and got.score is None
        else:  # the same item, or one tied with it
            assert got.score is not None and _close(got.score, want.score) and _close(mine[ref(got)].score, want.score)
        assert got.value == mine[ref(got)].value


def check_extras(store: HippographStore) -> None:
    """Every extra vector belongs to the current version of a live item: nothing is left over."""
    entries = store.store.list((), limit=1 << 20)
    live = {e.ref: e for e in entries if not hidden(e)}
    for e in entries:
        if hidden(e):
            assert e.kind == VECTOR_KIND
            item = live.get((e.scope[:-1], e.key))
            assert item is not None and item.updated_at == e.updated_at, e.ref


def full(op: SearchOp) -> SearchOp:
    return SearchOp(op.namespace_prefix, op.filter, 100_000, 0, op.query, refresh_ttl=False)


def run_differential(fields: list[str] | None, steps: list[list[Op]], ours: HippographStore) -> None:
    index: Any = None if fields is None else {"dims": DIM, "embed": fake_embed, "fields": fields}
    theirs = Reference(index=index)
    for ops_ in steps:
        fulls = {i: (theirs.batch([full(op)])[0], ours.batch([full(op)])[0]) for i, op in enumerate(ops_)
                 if isinstance(op, SearchOp)}  # fmt: skip
        expected = theirs.batch(ops_)
        got = ours.batch(ops_)
        assert len(got) == len(ops_)
        for i, op in enumerate(ops_):
            if isinstance(op, GetOp):
                a, b = expected[i], got[i]
                assert (a is None) == (b is None)
                if a is not None and b is not None:
                    assert isinstance(a, Item) and isinstance(b, Item)
                    assert (ref(a), a.value) == (ref(b), b.value)
            elif isinstance(op, SearchOp):
                ranked = bool(op.query) and fields is not None
                check_search(op, ranked, *fulls[i], expected[i], got[i])  # type: ignore[arg-type]
            else:
                assert got[i] == expected[i], (op, got[i], expected[i])
        check_extras(ours)
    everything = SearchOp((), None, 100_000)
    [a], [b] = theirs.batch([everything]), ours.batch([everything])
    assert sorted((ref(i), json.dumps(i.value, sort_keys=True)) for i in a) == sorted(
        (ref(i), json.dumps(i.value, sort_keys=True)) for i in b
    )


@settings(max_examples=DIFF_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=store_fields, seed=seeds, steps=st.lists(batches, min_size=2, max_size=15))
def test_differential_against_inmemorystore(fields: list[str] | None, seed: list[Op], steps: list[list[Op]]) -> None:
    index: Any = None if fields is None else {"dims": DIM, "embed": fake_embed, "fields": fields}
    with HippographStore(index=index) as ours:
        run_differential(fields, [*([op] for op in seed), *steps], ours)


@settings(max_examples=max(10, DIFF_EXAMPLES // 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=store_fields, seed=seeds, steps=st.lists(batches, min_size=1, max_size=8))
def test_differential_on_lmdb(fields: list[str] | None, seed: list[Op], steps: list[list[Op]]) -> None:
    index: Any = None if fields is None else {"dims": DIM, "embed": fake_embed, "fields": fields}
    with tempfile.TemporaryDirectory() as d, HippographStore(path=d, index=index, durability="fast") as ours:
        run_differential(fields, [seed, *steps], ours)


# -- layout, scores and search modes ---------------------------------------------------------------


def indexed(**kw: Any) -> HippographStore:
    return HippographStore(index={"dims": DIM, "embed": fake_embed, "fields": kw.pop("fields", ["text"])}, **kw)


def test_an_item_scores_by_its_best_vector_and_extras_follow_its_versions() -> None:
    with indexed(fields=["tags[*]"]) as store:
        store.put(("docs",), "d", {"tags": ["apple", "dog dog", "grape"]})
        [hit] = store.search(("docs",), query="dog")
        [dog, apple, grape] = fake_embed(["dog dog", "apple", "grape"])
        assert hit.score == pytest.approx(max(cosine(fake_embed(["dog"])[0], v) for v in (dog, apple, grape)), abs=TOL)
        entries = store.store.list((), limit=100)
        assert sorted(e.scope for e in entries) == [("docs",), ("docs", ".lg-vector.1"), ("docs", ".lg-vector.2")]
        assert next(e for e in entries if not hidden(e)).text == "apple\ndog dog\ngrape"

        store.put(("docs",), "d", {"tags": ["apple"]})  # fewer texts: the extra vectors go
        assert [e.scope for e in store.store.list((), limit=100)] == [("docs",)]
        [hit] = store.search(("docs",), query="dog")
        assert hit.score == pytest.approx(cosine(fake_embed(["dog"])[0], apple), abs=TOL)
        store.put(("docs",), "d", {"tags": ["dog dog", "x"]}, index=False)  # no vector at all
        assert store.search(("docs",), query="dog")[0].score is None
        assert store.store.list((), limit=100)[0].embedding is None
        store.put(("docs",), "d", {"tags": ["dog dog", "x"]})
        store.delete(("docs",), "d")
        assert store.store.stats()["entries"] == 0 and store.list_namespaces() == []


def test_extras_of_an_older_version_never_score() -> None:
    """As after a crash between a put and the clean-up of the vectors it left over."""
    with indexed(fields=["tags[*]"]) as store:
        store.put(("docs",), "d", {"tags": ["apple", "grape"]})
        old = store.store.list(("docs",), limit=10)
        store.put(("docs",), "d", {"tags": ["apple"]})
        stale = next(e for e in old if hidden(e))
        store.store.backend.entry_write(lambda t: t.put(stale))
        [hit] = store.search(("docs",), query="grape")
        assert hit.score == pytest.approx(cosine(fake_embed(["grape"])[0], fake_embed(["apple"])[0]), abs=TOL)
        assert store.list_namespaces() == [("docs",)]
        store.put(("docs",), "d", {"tags": ["apple"]})  # the next put clears it
        assert store.store.stats()["entries"] == 1


def test_search_pages_do_not_overlap() -> None:
    with indexed(fields=["text"]) as store:
        for i, text in enumerate(["apple dog", "apple", "banana", "dog", "eel fig", "grape", "hat", "cherry"]):
            store.put(("n", str(i % 3)), f"k{i}", {"text": text})
        store.put(("n", "0"), "plain", {"text": "apple"}, index=False)
        everything = store.search(("n",), query="apple", limit=100)
        pages = [store.search(("n",), query="apple", limit=3, offset=o) for o in range(0, 12, 3)]
        assert [ref(i) for p in pages for i in p] == [ref(i) for i in everything]
        assert everything[-1].key == "plain" and everything[-1].score is None
        assert any(i.score is not None and i.score < 0 for i in everything)  # LangGraph keeps negative cosines


def test_items_are_copies() -> None:
    with HippographStore() as store:
        store.put(("a",), "k", {"x": [1, {"y": 2}]})
        got = store.get(("a",), "k")
        assert got is not None
        got.value["x"][1]["y"] = 3
        store.search(("a",))[0].value["x"].append(4)
        assert store.get(("a",), "k").value == {"x": [1, {"y": 2}]}  # type: ignore[union-attr]
        assert store.search(("a",), filter={"x": [1, {"y": 2}]})


def test_timestamps_come_from_the_entry() -> None:
    with HippographStore() as store:
        store.put(("a",), "k", {"v": 1})
        first = store.get(("a",), "k")
        time.sleep(0.01)
        store.put(("a",), "k", {"v": 2})
        second = store.get(("a",), "k")
        assert first is not None and second is not None
        assert second.created_at == first.created_at < second.updated_at
        entry = store.store.get(("a",), "k")
        assert entry is not None and (second.created_at, second.updated_at) == (entry.created_at, entry.updated_at)


def test_filter_extensions() -> None:
    with HippographStore() as store:
        for i in range(6):
            store.put(("f",), f"k{i}", {"n": i, "tag": "even" if i % 2 == 0 else "odd", "m": {"x": i % 3}})

        def keys(f: dict[str, Any]) -> list[str]:
            return sorted(i.key for i in store.search(("f",), filter=f, limit=100))

        assert keys({"n": {"$in": [1, 2, 9]}}) == ["k1", "k2"]
        assert keys({"n": {"$nin": [1, 2]}}) == ["k0", "k3", "k4", "k5"]
        assert keys({"$or": [{"n": {"$lt": 1}}, {"n": {"$gte": 5}}]}) == ["k0", "k5"]
        assert keys({"$and": [{"tag": "even"}, {"n": {"$gt": 0}}], "m": {"x": 1}}) == ["k4"]
        assert keys({"$or": [{"$and": [{"tag": "odd"}, {"m": {"x": 0}}]}, {"n": 0}]}) == ["k0", "k3"]
        assert keys({"m": {"x": {"$in": [2]}}}) == ["k2", "k5"]
        assert keys({"missing": {"$gt": 1}}) == []  # InMemoryStore raises TypeError here
        assert keys({"n": True}) == ["k1"]  # Python's equality, as LangGraph's: True == 1
        for bad in ({"n": {"$regex": "x"}}, {"n": {"$gt": "x"}}, {"$nor": []}, {"n": {"$in": 3}},
                    {"n": {"$gt": 1, "b": 2}}, {"$or": {"n": 1}}, [("n", 1)]):  # fmt: skip
            with pytest.raises(ValidationError):
                store.search(("f",), filter=bad)  # type: ignore[arg-type]


def test_hybrid_ranks_by_words_and_meaning() -> None:
    with indexed(fields=["text"], hybrid=True) as store:
        store.put(("h",), "exact", {"text": "grape harvest schedule", "lang": "en"})
        store.put(("h",), "near", {"text": "grape", "lang": "en"})
        store.put(("h",), "other", {"text": "banana", "lang": "fr"})
        store.put(("h",), "silent", {"text": "grape harvest schedule"}, index=False)
        hits = store.search(("h",), query="harvest schedule")
        assert hits[0].key == "exact" and hits[0].score == pytest.approx(1.0)
        assert all(0 < h.score <= 1 for h in hits if h.score is not None)
        assert "silent" not in {h.key for h in hits}  # not indexed: no words, no vector
        assert {h.key for h in store.search(("h",), query="harvest", filter={"lang": "en"})} <= {"exact", "near"}
        assert store.search(("h",), query="harvest", limit=1, offset=1) == store.search(("h",), query="harvest")[1:2]
    with HippographStore(hybrid=True) as words:  # no embedder: BM25 over the whole value
        words.put(("w",), "a", {"note": "the quarterly report is late"})
        words.put(("w",), "b", {"note": "lunch order"})
        assert [h.key for h in words.search(("w",), query="report")] == ["a"]
        [hit] = words.search(("w",), query="report")
        assert hit.score == pytest.approx(words.store.search_text("report")[0].score)  # BM25's similarity
    with indexed(fields=["text"], hybrid=(0.0, 1.0)) as vectors:  # the vector route alone
        vectors.put(("v",), "a", {"text": "dog"})
        vectors.put(("v",), "b", {"text": "grape"})
        hits = vectors.search(("v",), query="dog")
        assert hits[0].key == "a" and hits[0].score == pytest.approx(1.0, abs=TOL)
        assert all(h.score is not None and h.score > 0 for h in hits)


def test_configuration_is_checked() -> None:
    with pytest.raises(ConfigError):
        HippographStore(index={"dims": 3})
    with pytest.raises(ConfigError):
        HippographStore(hg.Store(InMemory()), path="x")
    with pytest.raises(ConfigError):
        HippographStore(hybrid=(1.0, -1.0))
    with pytest.raises(ConfigError):
        HippographStore(ttl={"default_ttl": -1})
    with pytest.raises(ConfigError):
        HippographStore(ttl={"refresh": True})  # type: ignore[arg-type]
    shared = hg.Store(InMemory())
    with HippographStore(shared) as store:
        store.put(("a",), "k", {"v": 1})
    assert shared.get(("a",), "k") is not None  # a store passed in stays open
    shared.close()
    closed = HippographStore()
    closed.close()
    with pytest.raises(StorageError):
        closed.get(("a",), "k")


def test_lmdb_keeps_items_across_opens(tmp_path: Path) -> None:
    config: Any = {"dims": DIM, "embed": fake_embed, "fields": ["text", "tags[*]"]}
    with HippographStore.from_path(tmp_path / "lg", index=config) as store:
        store.put(("users", "u1"), "m1", {"text": "likes grape", "tags": ["fruit", "dog"]})
        store.put(("users", "u2"), "m2", {"text": "likes hat"})
    with HippographStore.from_path(tmp_path / "lg", index=config) as store:
        assert store.get(("users", "u1"), "m1").value["text"] == "likes grape"  # type: ignore[union-attr]
        assert store.search(("users",), query="dog")[0].key == "m1"
        assert store.list_namespaces(prefix=("users",)) == [("users", "u1"), ("users", "u2")]
        assert store.list_namespaces(suffix=("*",), max_depth=1) == [("users",)]


# -- namespaces and bad input --------------------------------------------------------------------


@pytest.mark.parametrize("namespace", [(), ("langgraph",), ("langgraph", "x")])
def test_put_refuses_the_reserved_root_and_the_empty_namespace(namespace: tuple[str, ...]) -> None:
    with HippographStore() as store:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(namespace, "k", {"v": 1}))
        assert store.list_namespaces() == [] and store.get(namespace, "k") is None


@pytest.mark.parametrize("namespace", [(), ("langgraph",), ("langgraph", "x")])
def test_a_raw_batch_writes_where_put_refuses(namespace: tuple[str, ...]) -> None:
    """LangGraph refuses these namespaces in `put`/`aput` only; it writes its own items under the
    ``"langgraph"`` root through `batch`/`abatch`, so they must land, be found and be deletable."""
    with indexed() as store:
        store.batch([PutOp(namespace, "k", {"text": "apple"})])
        asyncio.run(store.abatch([PutOp(namespace, "a", {"text": "dog"})]))
        assert store.get(namespace, "k").value == {"text": "apple"}  # type: ignore[union-attr]
        assert asyncio.run(store.aget(namespace, "a")).value == {"text": "dog"}  # type: ignore[union-attr]
        assert [h.key for h in store.search(namespace, query="apple")] == ["k", "a"]
        assert namespace in store.list_namespaces()
        store.delete(namespace, "k")
        asyncio.run(store.adelete(namespace, "a"))
        assert store.get(namespace, "k") is None and store.get(namespace, "a") is None
        assert store.search(namespace) == [] and store.list_namespaces() == []


@pytest.mark.parametrize("namespace", [("a.b",), ("a", ""), ("a\x00",), ("a", 1)])
def test_put_and_batch_refuse_bad_labels(namespace: tuple[Any, ...]) -> None:
    with HippographStore() as store:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):  # also in a raw batch, with nothing else applied
            store.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(namespace, "k", {"v": 1})])
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.abatch([PutOp(("ok",), "k", {"v": 1}), PutOp(namespace, "k", {"v": 1})]))
        with pytest.raises(InvalidNamespaceError):
            asyncio.run(store.aput(namespace, "k", {"v": 1}))
        assert store.list_namespaces() == []


any_labels = st.sampled_from(("a", "b", "langgraph", "", "a.b", "x\x00", 1))


def _refused(call: Any) -> bool:
    try:
        call()
    except InvalidNamespaceError:
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(namespace=st.lists(any_labels, max_size=3).map(tuple))
def test_namespaces_are_refused_exactly_where_langgraph_refuses_them(namespace: tuple[Any, ...]) -> None:
    """`put`/`aput` refuse what `InMemoryStore`'s do; `batch`/`abatch` refuse what LangGraph's
    `validate_op_namespace` (the check its SQL stores run on every op) refuses; what is accepted
    reads back as `InMemoryStore` reads it."""
    doc = {"v": 1}
    theirs = InMemoryStore()
    put_refused = _refused(lambda: theirs.put(namespace, "p", doc))
    assert _refused(lambda: asyncio.run(theirs.aput(namespace, "q", doc))) == put_refused
    batch_refused = _refused(lambda: validate_op_namespace(PutOp(namespace, "b", doc)))
    if not batch_refused:
        theirs.batch([PutOp(namespace, "b", doc)])
        asyncio.run(theirs.abatch([PutOp(namespace, "c", doc)]))
    with HippographStore() as ours:
        assert _refused(lambda: ours.put(namespace, "p", doc)) == put_refused
        assert _refused(lambda: asyncio.run(ours.aput(namespace, "q", doc))) == put_refused
        assert _refused(lambda: ours.batch([PutOp(namespace, "b", doc)])) == batch_refused
        assert _refused(lambda: asyncio.run(ours.abatch([PutOp(namespace, "c", doc)]))) == batch_refused
        if batch_refused:
            assert ours.list_namespaces() == []
            return
        for key in "pqbc":
            a, b = theirs.get(namespace, key), ours.get(namespace, key)
            assert (a is None) == (b is None) and (b is None or b.value == doc), key
        assert ours.list_namespaces() == theirs.list_namespaces() == [namespace]


@pytest.mark.parametrize("namespace", [("a.b",), ("a", ""), ("a\x00",), ("a", 1)])
def test_every_op_checks_labels(namespace: tuple[Any, ...]) -> None:
    with HippographStore() as store:
        store.put(("ok",), "k", {"v": 1})
        for call in (
            lambda: store.get(namespace, "k"),
            lambda: store.delete(namespace, "k"),
            lambda: store.search(namespace),
            lambda: store.list_namespaces(prefix=namespace),
            lambda: store.list_namespaces(suffix=namespace),
            lambda: asyncio.run(store.adelete(namespace, "k")),
        ):
            with pytest.raises(InvalidNamespaceError):
                call()
        for op in (GetOp(namespace, "k"), PutOp(namespace, "k", None), SearchOp(namespace),
                   ListNamespacesOp((MatchCondition("prefix", namespace),))):  # fmt: skip
            with pytest.raises(InvalidNamespaceError):
                store.batch([PutOp(("ok",), "k", None), op])
            with pytest.raises(InvalidNamespaceError):
                asyncio.run(store.abatch([op]))
        assert store.get(("ok",), "k") is not None


def test_delete_matches_langgraph_where_nothing_is() -> None:
    """LangGraph's `delete` checks labels only: a delete under the reserved root, of the empty
    namespace or of one hippograph cannot hold, with nothing there, does nothing, in its stores and
    here."""
    with HippographStore() as store:
        store.put(("ok",), "k", {"v": 1})
        for namespace in [("langgraph", "x"), (), ("x" * 256,)]:
            store.delete(namespace, "k")
            InMemoryStore().delete(namespace, "k")
        store.batch([PutOp(("langgraph",), "k", None)])
        assert store.get(("ok",), "k") is not None and store.list_namespaces() == [("ok",)]


def test_hippograph_limits_are_namespace_errors() -> None:
    with HippographStore() as store:
        for namespace in [("x" * 256,), tuple("abcdefghijklmnopqrstuvwxyzABCDEFG"[:32]), ("\ud800",)]:
            with pytest.raises(NamespaceLimitError) as caught:
                store.put(namespace, "k", {"v": 1})
            assert isinstance(caught.value, InvalidNamespaceError) and isinstance(caught.value, ValidationError)
            assert store.get(namespace, "k") is None and store.search(namespace) == []
        store.put(tuple("abcdefghijklmnopqrstuvwxyzABCDE"), "k", {"v": 1})  # 31 labels


def test_bad_values_are_refused_before_anything_runs() -> None:
    with indexed() as store:
        for bad in [{"x": float("nan")}, {"x": object()}, {1: "x"}, ["x"]]:
            with pytest.raises(ValidationError):
                store.batch([PutOp(("ok",), "k", {"v": 1}), PutOp(("a",), "k", bad)])  # type: ignore[arg-type]
        for call in (
            lambda: store.put(("a",), "", {"v": 1}),
            lambda: store.put(("a",), "k", {"v": 1}, ttl=0),
            lambda: store.put(("a",), "k", {"v": 1}, index="text"),  # type: ignore[arg-type]
            lambda: store.search(("a",), limit=-1),
            lambda: store.list_namespaces(max_depth=-1),
            lambda: store.batch([object()]),  # type: ignore[list-item]
        ):
            with pytest.raises(ValidationError):
                call()
        assert store.store.stats()["entries"] == 0
        assert store.get(("a",), "") is None  # LangGraph allows an empty key; nothing can be there


# -- TTL ------------------------------------------------------------------------------------------


def test_ttl_expires_and_refresh_on_read_restarts_it() -> None:
    with HippographStore(ttl={"default_ttl": 1.5 / 60, "refresh_on_read": True}) as store:
        store.put(("t",), "read", {"v": 1})
        store.put(("t",), "unread", {"v": 2})
        store.put(("t",), "peeked", {"v": 3})
        store.put(("t",), "forever", {"v": 4}, ttl=None)
        time.sleep(0.9)
        assert store.get(("t",), "read") is not None  # refreshes
        assert store.get(("t",), "peeked", refresh_ttl=False) is not None
        time.sleep(0.9)
        assert store.get(("t",), "read") is not None
        assert store.get(("t",), "unread") is None and store.get(("t",), "peeked") is None
        assert [i.key for i in store.search(("t",))] == ["forever", "read"]  # refreshes "read" again
        entry = store.store.get(("t",), "read")
        assert entry is not None and entry.expires_at is not None
        # restarted at each read with its own length (hippograph's `Store.get(refresh_ttl=True)`
        # measures it from updated_at: it would have been 4.2 s by now, and growing)
        assert entry.expires_at - entry.accessed_at == timedelta(seconds=1.5)
        assert store.store.get(("t",), "forever").expires_at is None  # type: ignore[union-attr]


def test_refresh_on_read_false_and_per_put_ttl() -> None:
    with HippographStore(ttl={"default_ttl": 10, "refresh_on_read": False}) as store:
        store.put(("t",), "short", {"v": 1}, ttl=1 / 60)
        store.put(("t",), "default", {"v": 2})
        before = store.store.get(("t",), "default")
        assert before is not None and before.expires_at is not None
        assert before.expires_at - before.updated_at == timedelta(minutes=10)
        time.sleep(0.5)
        assert store.get(("t",), "short") is not None  # not refreshed: the config says so
        time.sleep(0.6)
        assert store.get(("t",), "short") is None
        assert store.get(("t",), "default", refresh_ttl=True) is not None
        after = store.store.get(("t",), "default")
        assert after is not None and after.expires_at is not None and after.expires_at > before.expires_at


def test_the_sweeper_deletes_expired_items_with_their_vectors() -> None:
    index: Any = {"dims": DIM, "embed": fake_embed, "fields": ["tags[*]"]}
    with HippographStore(index=index, ttl={"default_ttl": 0.2 / 60, "sweep_interval_minutes": 0.1 / 60}) as store:
        store.put(("s",), "gone", {"tags": ["apple", "dog", "eel"]})
        store.put(("s",), "kept", {"tags": ["fig"]}, ttl=None)
        assert store.store.stats()["entries"] == 4
        future = store.start_ttl_sweeper()
        assert store.start_ttl_sweeper() is not future  # already running: a new handle, one thread
        deadline = time.monotonic() + 5
        while store.store.stats()["entries"] > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.store.stats()["entries"] == 1 and store.get(("s",), "kept") is not None
        assert store.stop_ttl_sweeper(timeout=5)
        assert future.result(timeout=5) is None
    with HippographStore(ttl={"default_ttl": 1}) as store:  # a cancelled future stops the sweeper too
        future = store.start_ttl_sweeper(sweep_interval_minutes=0.05 / 60)
        future.cancel()
        assert store.stop_ttl_sweeper(timeout=5)
    with HippographStore() as store:  # nothing to sweep by: nothing starts
        assert store.start_ttl_sweeper().done()


def test_sweep_ttl_counts_items() -> None:
    index: Any = {"dims": DIM, "embed": fake_embed, "fields": ["tags[*]"]}
    with HippographStore(index=index) as store:
        store.put(("s",), "a", {"tags": ["apple", "dog"]}, ttl=0.1 / 60)
        store.put(("s",), "b", {"tags": ["fig"]}, ttl=0.1 / 60)
        time.sleep(0.2)
        assert store.sweep_ttl() == 2 and store.store.stats()["entries"] == 0


# -- async ----------------------------------------------------------------------------------------


def test_async_methods() -> None:
    async def run() -> None:
        with indexed(fields=["text"]) as store:
            await store.aput(("a", "b"), "k1", {"text": "apple dog"})
            await store.aput(("a",), "k2", {"text": "grape"})
            got = await store.aget(("a", "b"), "k1")
            assert got is not None and got.value == {"text": "apple dog"}
            hits = await store.asearch(("a",), query="dog")
            assert [h.key for h in hits] == ["k1", "k2"] and hits[0].score is not None
            assert await store.alist_namespaces() == [("a",), ("a", "b")]
            results = await store.abatch([GetOp(("a",), "k2"), PutOp(("a",), "k2", None), GetOp(("a",), "k2")])
            assert results[0] is not None and results[1] is None and results[2] is not None  # reads first
            assert await store.aget(("a",), "k2") is None
            await store.adelete(("a", "b"), "k1")
            assert await store.asearch(("a",)) == []

    asyncio.run(run())


@pytest.mark.parametrize("bad", [[float("nan")] * DIM, [1.0] * (DIM + 1), ["x"] * DIM])
def test_an_embedder_vector_the_store_cannot_hold_fails_the_batch_with_nothing_written(bad: list[Any]) -> None:
    """The adapter hands the store its puts checked; the embedder's vectors are checked there, and
    one it cannot hold (not finite, another dimension, not numbers) refuses every put of the batch."""

    def embed(texts: Sequence[str]) -> list[Any]:
        return [bad if t == "poison" else v for t, v in zip(texts, fake_embed(texts), strict=True)]

    with HippographStore(index={"dims": DIM, "embed": embed, "fields": ["text"]}) as store:
        store.put(("a",), "old", {"text": "apple"})
        with pytest.raises(ValidationError):
            store.batch([PutOp(("a",), "k1", {"text": "pear"}), PutOp(("a",), "old", {"text": "poison"})])
        assert store.get(("a",), "k1") is None
        old = store.get(("a",), "old")
        assert old is not None and old.value == {"text": "apple"}
        assert [item.key for item in store.search(("a",), query="apple")] == ["old"]


def test_async_embedder() -> None:
    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(0)
        return fake_embed(texts)

    async def run() -> None:
        with HippographStore(index={"dims": DIM, "embed": aembed, "fields": ["text"]}) as store:
            await store.aput(("a",), "k", {"text": "apple"})
            assert (await store.asearch(("a",), query="apple"))[0].score == pytest.approx(1.0, abs=TOL)
            with pytest.raises(ValueError):  # as in LangGraph: an async embedder has no sync path
                store.put(("a",), "k2", {"text": "x"})

    asyncio.run(run())


def test_a_slow_search_does_not_block_the_event_loop() -> None:
    """The embedder and the store read each wait until the event loop has ticked (see `LoopWitness`)."""
    witness = LoopWitness()

    def slow_embed(texts: Sequence[str]) -> list[list[float]]:
        witness.wait()
        return fake_embed(texts)

    class SlowStore(hg.Store):
        def search_vector(self, vector: object, scope: Sequence[str] = (), **kw: Any) -> list[hg.StoreHit]:
            witness.wait()
            return super().search_vector(vector, scope, **kw)

    async def run() -> None:
        index: Any = {"dims": DIM, "embed": slow_embed, "fields": ["text"]}
        with HippographStore(SlowStore(InMemory()), index=index) as store:
            await witness.during(store.aput(("a",), "k", {"text": "apple"}))
            hits = await witness.during(store.asearch(("a",), query="apple"))
            assert hits[0].key == "k"
        assert witness.proven

    asyncio.run(run())


# -- LangGraph end to end -------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _graph(store: BaseStore, replies: Iterator[AIMessage], seen: list[list[str]]) -> Any:
    model = GenericFakeChatModel(messages=replies)

    def agent(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user = config["configurable"]["user_id"]
        said = str(state["messages"][-1].content)
        memories = store.search(("memories", user), query=said, limit=2)
        seen.append([m.value["text"] for m in memories])
        reply = model.invoke([SystemMessage("\n".join(m.value["text"] for m in memories)), *state["messages"]])
        store.put(("memories", user), f"m{len(seen)}", {"text": said})
        return {"messages": [reply]}

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile(store=store)


def test_a_langgraph_agent_remembers_through_the_injected_store(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    replies = iter([AIMessage("ok"), AIMessage("noted"), AIMessage("grape pie")])
    index: Any = {"dims": DIM, "embed": fake_embed, "fields": ["text"]}
    with HippographStore.from_path(tmp_path / "agent", index=index) as store:
        app = _graph(store, replies, seen)
        u1: RunnableConfig = {"configurable": {"user_id": "u1"}}
        app.invoke({"messages": [HumanMessage("I love grape")]}, u1)
        app.invoke({"messages": [HumanMessage("my dog is called eel")]}, {"configurable": {"user_id": "u2"}})
        out = app.invoke({"messages": [HumanMessage("what dessert with grape?")]}, u1)
        assert out["messages"][-1].content == "grape pie"
        assert seen == [[], [], ["I love grape"]]  # u2's memory stays in u2's namespace
        assert store.list_namespaces(prefix=("memories",)) == [("memories", "u1"), ("memories", "u2")]
        assert len(store.search(("memories", "u1"), limit=10)) == 2


def test_a_langgraph_agent_runs_async() -> None:
    seen: list[list[str]] = []
    replies = iter([AIMessage("one"), AIMessage("two")])

    async def run() -> Any:
        with indexed(fields=["text"]) as store:
            model = GenericFakeChatModel(messages=replies)

            async def agent(state: State, *, store: BaseStore) -> dict[str, Any]:
                said = str(state["messages"][-1].content)
                memories = await store.asearch(("m",), query=said)
                seen.append([m.value["text"] for m in memories])
                await store.aput(("m",), f"k{len(seen)}", {"text": said})
                return {"messages": [await model.ainvoke(state["messages"])]}

            graph = StateGraph(State)
            graph.add_node("agent", agent)
            graph.add_edge(START, "agent")
            graph.add_edge("agent", END)
            app = graph.compile(store=store)
            await app.ainvoke({"messages": [HumanMessage("apple")]})
            return await app.ainvoke({"messages": [HumanMessage("apple pie")]})

    out = asyncio.run(run())
    assert out["messages"][-1].content == "two" and seen == [[], ["apple"]]


def test_the_example_runs() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import langgraph_agent
    finally:
        sys.path.pop(0)
    answers = langgraph_agent.main()
    assert answers[-1] == "Try a chickpea curry, no peanuts."


# -- the optional dependency ----------------------------------------------------------------------

_BLOCK = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
"""


def test_langgraph_is_optional() -> None:
    code = _BLOCK + (
        "import hippograph, hippograph.integrations\n"
        "assert not any(m.split('.')[0] in ('langgraph', 'langchain_core') for m in sys.modules)\n"
        "try:\n    import hippograph.integrations.langgraph\n"
        "except ImportError as e:\n    print(e)\nelse:\n    raise SystemExit('imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install 'hippograph[langgraph]'" in out.stdout
    plain = "import sys, hippograph\nprint(any(m.split('.')[0] == 'langgraph' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True).stdout == "False\n"


def test_threads_share_a_store() -> None:
    with indexed(fields=["text"]) as store:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(20):
                    store.put(("t", str(n)), f"k{i}", {"text": f"apple {i}"})
                    store.search(("t",), query="apple", limit=5)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(store.search(("t",), limit=1000)) == 80
