"""The public conformance suite of the scoped store: what every `EntryBackend` must do.

Subclass `StoreConformance` in a test module pytest collects and implement ``make_backend(path)``
(an empty directory per test, or the one a previous backend of the same test used);
`PersistentStoreConformance` adds the durability tests (close, open again on the same path). The tests drive the backend
through `hippograph.Store`, which holds no state a backend could hide behind: each test also opens a
second `Store` on the same backend, so what one handle wrote must be what the other reads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from ..errors import HippographError, NotFoundError, StorageError, ValidationError
from ..store import Entry, EntryBackend, EntryTxn, Store
from ._helpers import closing

__all__ = ["PersistentStoreConformance", "StoreConformance", "fake_embed"]

_DIM = 8


def fake_embed(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A deterministic embedder for tests: one axis per topic word (and its synonyms), so a text
    sharing no word with another can still be near it in meaning."""
    topics = {
        **dict.fromkeys(("peanut", "peanuts", "nut"), 0), **dict.fromkeys(("allergy", "allergic"), 1),
        **dict.fromkeys(("vegetarian", "meat"), 2), **dict.fromkeys(("cook", "dinner", "meal"), 3),
        **dict.fromkeys(("travel", "trip"), 4), **dict.fromkeys(("flight", "plane"), 5),
        **dict.fromkeys(("hotel", "stay"), 6),
    }  # fmt: skip
    out = np.full((len(texts), _DIM), 0.01, np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace(",", " ").replace("?", " ").split():
            if w in topics:
                out[i, topics[w]] += 1.0
    return out


class StoreConformance:
    """The scoped store's behaviour on one backend. Subclass it as ``Test<Name>``."""

    reopen: ClassVar[bool] = False
    #: Keyword arguments of every `Store` the tests open (``{"vector_dtype": "float16"}``, say).
    store_options: ClassVar[dict[str, Any]] = {}

    def make_backend(self, path: Path) -> EntryBackend:
        raise NotImplementedError(f"{type(self).__name__} must implement make_backend(path)")

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[EntryBackend]:
        yield from closing(self.make_backend(tmp_path))

    @pytest.fixture
    def store(self, backend: EntryBackend) -> Store:
        return Store(backend, embed=fake_embed, **self.store_options)

    @pytest.fixture
    def other(self, backend: EntryBackend) -> Store:
        """A second handle on the same backend: it sees only what the backend kept."""
        return Store(backend, embed=fake_embed, **self.store_options)

    # -- entries --------------------------------------------------------------------------------

    def test_an_entry_reads_back_as_written(self, store: Store, other: Store) -> None:
        value = {"s": "x", "n": 3, "f": 1.5, "b": True, "z": None, "l": [1, "a", {"k": [2.5]}], "d": {"e": {}}}
        put = store.put(
            ("users", "u42"), "diet", "vegetarian, allergic to peanuts", value, importance=0.75, kind="fact"
        )
        got = other.get(("users", "u42"), "diet")
        assert got == put and got is not None
        assert got.value == value and got.kind == "fact" and got.importance == 0.75 and got.status == "active"
        assert got.embedding is not None and got.embedding.dtype == np.float32 and len(got.embedding) == _DIM
        assert got.created_at == got.updated_at == got.accessed_at and got.expires_at is None
        assert got.created_at.utcoffset() == timedelta(0)

    def test_a_replaced_entry_keeps_created_at(self, store: Store, other: Store) -> None:
        first = store.put(("a",), "k", "one")
        time.sleep(0.002)
        second = store.put(("a",), "k", "two", {"v": 1})
        got = other.get(("a",), "k")
        assert got is not None and got.text == "two" and got.value == {"v": 1}
        assert got.created_at == first.created_at and got.updated_at == second.updated_at > first.updated_at

    def test_missing_entries_and_delete(self, store: Store, other: Store) -> None:
        assert other.get(("a",), "nope") is None
        store.put(("a",), "k", "x")
        assert other.delete(("a",), "k") is True
        assert store.get(("a",), "k") is None and store.delete(("a",), "k") is False

    def test_update_changes_named_fields_only(self, store: Store, other: Store) -> None:
        store.put(("a",), "k", "cook a meal", {"v": 1}, importance=0.2)
        new = other.update(("a",), "k", value={"v": 2}, importance=0.9)
        got = store.get(("a",), "k")
        assert got == new and got is not None and got.text == "cook a meal" and got.value == {"v": 2}
        with pytest.raises(NotFoundError):
            store.update(("a",), "missing", importance=0.1)
        with pytest.raises(ValidationError, match="unknown field"):
            store.update(("a",), "k", status="active")

    def test_put_many_is_all_or_nothing(self, store: Store, other: Store) -> None:
        items: list[dict[str, Any]] = [{"scope": ("s",), "key": f"k{i}", "text": "meal"} for i in range(3)]
        store.put_many(items)
        assert len(other.list(("s",))) == 3
        bad: list[dict[str, Any]] = [
            {"scope": ("s",), "key": "k9", "text": "x"},
            {"scope": ("s",), "key": "k10", "value": {"x": math.nan}},
        ]
        with pytest.raises(ValidationError):
            store.put_many(bad)
        assert other.get(("s",), "k9") is None

    def test_a_failing_transaction_writes_nothing(self, backend: EntryBackend, store: Store) -> None:
        written = store.put(("a",), "k", "x")

        def half(t: EntryTxn) -> None:
            t.put(Entry(**{**written.__dict__, "key": "other"}))
            t.delete(("a",), "k")
            raise RuntimeError("abort")

        with pytest.raises(RuntimeError):
            backend.entry_write(half)
        assert store.get(("a",), "k") == written and store.get(("a",), "other") is None

    def test_a_read_transaction_refuses_writes(self, backend: EntryBackend, store: Store) -> None:
        written = store.put(("a",), "k", "x")
        with pytest.raises(StorageError):
            backend.entry_read(lambda t: t.put(Entry(**{**written.__dict__, "key": "other"})))
        with pytest.raises(StorageError):
            backend.entry_read(lambda t: t.delete(("a",), "k"))
        assert store.get(("a",), "k") == written and store.get(("a",), "other") is None

    def test_scan_matches_whole_segments(self, backend: EntryBackend, store: Store) -> None:
        for scope in (("users", "u4"), ("users", "u42"), ("users", "u4", "s1"), ("users",), ("other", "u4")):
            store.put(scope, "k", "x")
        got = backend.entry_read(lambda t: sorted(e.scope for e in t.scan(("users", "u4"))))
        assert got == [("users", "u4"), ("users", "u4", "s1")]
        assert len(backend.entry_read(lambda t: list(t.scan(())))) == 5

    # -- scopes ---------------------------------------------------------------------------------

    def test_reads_match_scopes_by_whole_segments(self, store: Store, other: Store) -> None:
        store.put(("users", "u4"), "a", "peanut allergy")
        store.put(("users", "u42"), "b", "peanut allergy")
        store.put(("users", "u4", "chat"), "c", "peanut allergy")
        assert {e.key for e in other.list(("users", "u4"))} == {"a", "c"}
        assert {h.entry.key for h in other.search_text("peanut", ("users", "u4"))} == {"a", "c"}
        receipt = other.forget(("users", "u4"))
        assert receipt.keys == ((("users", "u4"), "a"), (("users", "u4", "chat"), "c"))
        assert [e.key for e in store.list(())] == ["b"]

    def test_list_scopes(self, store: Store, other: Store) -> None:
        for scope in (("users", "u1", "prefs"), ("users", "u2", "prefs"), ("users", "u2", "chat"), ("agents", "a")):
            store.put(scope, "k", "x")
        store.put(("users", "u3", "prefs"), "p", "x", pending=True)
        assert other.list_scopes(prefix=("users",), suffix=("prefs",)) == [
            ("users", "u1", "prefs"),
            ("users", "u2", "prefs"),
        ]
        assert other.list_scopes(prefix=("users", "*", "chat")) == [("users", "u2", "chat")]
        assert other.list_scopes(max_depth=1) == [("agents",), ("users",)]
        assert other.list_scopes(limit=1, offset=1) == [("users", "u1", "prefs")]

    # -- lifecycle ------------------------------------------------------------------------------

    def test_pending_entries_are_invisible_until_flushed(self, store: Store, other: Store) -> None:
        store.put(("t",), "old", "meal plan")
        store.put(("t", "turn2"), "new", "meal plan", pending=True)
        assert other.get(("t", "turn2"), "new") is None
        assert [e.key for e in other.list(("t",))] == ["old"]
        assert [h.entry.key for h in other.search_text("meal", ("t",))] == ["old"]
        assert other.get(("t", "turn2"), "new", include_pending=True) is not None
        assert {e.key for e in other.list(("t",), include_pending=True)} == {"old", "new"}
        receipt = other.flush(("t",))
        assert receipt.keys == ((("t", "turn2"), "new"),)
        assert {h.entry.key for h in store.search_text("meal", ("t",))} == {"old", "new"}

    def test_discard_takes_back_only_pending_entries(self, store: Store, other: Store) -> None:
        store.put(("s",), "earlier", "x")
        store.put(("s",), "mine", "x", pending=True)
        store.put(("elsewhere",), "theirs", "x", pending=True)
        receipt = other.discard(("s",))
        assert receipt.keys == ((("s",), "mine"),)
        assert store.get(("s",), "earlier") is not None
        assert store.get(("s",), "mine", include_pending=True) is None
        assert store.get(("elsewhere",), "theirs", include_pending=True) is not None

    def test_retract_hides_until_prune_deletes(self, store: Store, other: Store) -> None:
        store.put(("s",), "k", "meal")
        assert other.retract(("s",), "k").keys == ((("s",), "k"),)
        assert store.get(("s",), "k") is None and store.search_text("meal") == [] and store.list() == []
        assert store.retract(("s",), "k").keys == ()
        assert other.prune().keys == ((("s",), "k"),)
        assert store.backend.entry_read(lambda t: t.get(("s",), "k")) is None
        with pytest.raises(NotFoundError):
            store.retract(("s",), "k")

    def test_forget_erases_every_status_and_names_it(self, store: Store, other: Store) -> None:
        store.put(("u", "1"), "a", "meal")
        store.put(("u", "1", "x"), "b", "meal", pending=True)
        store.put(("u", "1"), "c", "meal")
        store.retract(("u", "1"), "c")
        store.put(("u", "2"), "d", "meal")
        receipt = other.forget(("u", "1"))
        assert receipt.scope == ("u", "1")
        assert receipt.keys == ((("u", "1"), "a"), (("u", "1"), "c"), (("u", "1", "x"), "b"))
        assert store.backend.entry_read(lambda t: [e.key for e in t.scan(("u",))]) == ["d"]
        assert [h.entry.key for h in store.search_text("meal")] == ["d"]
        with pytest.raises(ValidationError):
            store.forget(())
        assert len(store.forget((), everything=True)) == 1

    def test_ttl_expiry_and_sweep(self, store: Store, other: Store) -> None:
        store.put(("s",), "brief", "meal", ttl=0.05)
        store.put(("s",), "kept", "meal")
        got = other.get(("s",), "brief")
        assert got is not None and got.expires_at is not None
        time.sleep(0.1)
        assert other.get(("s",), "brief") is None
        assert [h.entry.key for h in other.search_text("meal")] == ["kept"]
        assert other.sweep().keys == ((("s",), "brief"),)
        assert store.backend.entry_read(lambda t: t.get(("s",), "brief")) is None

    def test_refresh_ttl_extends_the_expiry(self, store: Store, other: Store) -> None:
        first = store.put(("s",), "k", "meal", ttl=3600)
        assert first.expires_at is not None
        time.sleep(0.002)
        got = other.get(("s",), "k", refresh_ttl=True)
        assert got is not None and got.expires_at is not None and got.expires_at > first.expires_at
        assert got.access_count == 1

    # -- search ---------------------------------------------------------------------------------

    def test_text_search_ranks_by_bm25_case_insensitively(self, store: Store) -> None:
        store.put(("s",), "both", "Peanut ALLERGY noted")
        store.put(("s",), "one", "peanut butter sandwich with jam and bread")
        store.put(("s",), "none", "travel plans")
        hits = store.search_text("peanut allergy")
        assert [h.entry.key for h in hits] == ["both", "one"]
        assert all(0 < h.score < 1 and h.score == h.text_score and h.vector_score is None for h in hits)

    def test_a_query_sharing_no_word_is_answered_by_meaning(self, store: Store) -> None:
        store.put(("u",), "diet", "vegetarian, allergic to peanuts")
        store.put(("u",), "trip", "flight to Lisbon, hotel near the sea")
        hits = store.search(("u",), text="what can I cook for dinner without meat or nut", limit=1)
        assert [h.entry.key for h in hits] == ["diet"] and hits[0].vector_score is not None

    def test_first_in_both_routes_scores_one(self, store: Store) -> None:
        store.put(("u",), "diet", "peanut allergy")
        store.put(("u",), "trip", "flight hotel")
        hits = store.search(("u",), text="peanut allergy")
        assert hits[0].entry.key == "diet" and hits[0].score == pytest.approx(1.0)
        assert all(0 <= h.score <= 1 for h in hits)

    def test_vector_search_is_cosine_clipped_at_zero(self, store: Store) -> None:
        v = np.zeros(_DIM, np.float32)
        v[0] = 1
        store.put(("u",), "same", "", embedding=v)
        store.put(("u",), "opposite", "", embedding=-v)
        hits = store.search_vector(v)
        assert [h.entry.key for h in hits] == ["same"] and hits[0].score == pytest.approx(1.0)

    def test_limit_offset_min_score_and_ties(self, store: Store) -> None:
        for i in range(5):
            store.put(("s",), f"k{i}", "meal")  # equal scores: (scope, key) decides
        keys = [h.entry.key for h in store.search_text("meal", limit=2, offset=1)]
        assert keys == ["k1", "k2"]
        assert store.search_text("meal", min_score=0.99) == []

    def test_filters(self, store: Store) -> None:
        for i in range(6):
            store.put(("s",), f"k{i}", "meal", {"n": i, "tag": "even" if i % 2 == 0 else "odd", "deep": {"x": i}})

        def keys(f: dict[str, Any]) -> set[str]:
            return {h.entry.key for h in store.search_text("meal", filter=f, limit=10)}

        assert keys({"tag": "even"}) == {"k0", "k2", "k4"}
        assert keys({"n": {"$gte": 4}}) == {"k4", "k5"}
        assert keys({"deep.x": {"$in": [1, 2]}}) == {"k1", "k2"}
        assert keys({"$or": [{"n": 0}, {"n": {"$gt": 4}}]}) == {"k0", "k5"}
        assert keys({"$and": [{"tag": "odd"}, {"n": {"$ne": 1}}]}) == {"k3", "k5"}
        assert keys({"n": {"$nin": [0, 1, 2, 3]}}) == {"k4", "k5"}
        assert {e.key for e in store.list(filter={"n": {"$lt": 2}})} == {"k0", "k1"}
        with pytest.raises(ValidationError, match="unknown operator"):
            store.search_text("meal", filter={"n": {"$regex": "x"}})

    # -- refusals -------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "call",
        [
            lambda s: s.put("users", "k", "x"),
            lambda s: s.put(("users", ""), "k", "x"),
            lambda s: s.put(("a\0b",), "k", "x"),
            lambda s: s.put(("a",), "k" * 513, "x"),
            lambda s: s.put(("a",), "", "x"),
            lambda s: s.put(("a",), "k", "x", embedding=[math.nan] * _DIM),
            lambda s: s.put(("a",), "k", "x", embedding=[1.0] * (_DIM + 1)),
            lambda s: s.put(("a",), "k", "x", {"v": object()}),
            lambda s: s.put(("a",), "k", "x", importance=1.5),
            lambda s: s.put(("a",), "k", "x", ttl=-1),
            lambda s: s.search_text("x", limit=-1),
            lambda s: s.search_text("x", filter={"$nor": []}),
            lambda s: s.list(order="random"),
        ],
    )
    def test_bad_input_is_refused_and_writes_nothing(self, store: Store, call: Any) -> None:
        store.put(("seed",), "k", "meal")
        before = store.backend.entry_read(lambda t: sorted(e.ref for e in t.scan(())))
        with pytest.raises(ValidationError):
            call(store)
        assert store.backend.entry_read(lambda t: sorted(e.ref for e in t.scan(()))) == before

    def test_an_embedder_of_another_dimension_is_a_config_error(self, backend: EntryBackend) -> None:
        Store(backend, embed=fake_embed).put(("a",), "k", "meal")
        wide = Store(backend, embed=lambda texts: np.ones((len(texts), _DIM + 2), np.float32))
        with pytest.raises(HippographError, match="dimension"):
            wide.put(("a",), "k2", "x")
        assert Store(backend).get(("a",), "k2") is None


class PersistentStoreConformance(StoreConformance):
    """Durability: what a backend stored survives close and reopen on the same path."""

    reopen: ClassVar[bool] = True

    def test_entries_survive_reopening(self, tmp_path: Path) -> None:
        first = self.make_backend(tmp_path)
        s = Store(first, embed=fake_embed, **self.store_options)
        s.put(("u",), "a", "peanut allergy", pending=True)
        s.put(("u",), "b", "flight hotel")
        s.forget(("gone",))
        getattr(first, "close", lambda: None)()
        again = Store(self.make_backend(tmp_path), embed=fake_embed, **self.store_options)
        try:
            assert again.get(("u",), "a", include_pending=True) is not None
            assert next(h.entry.key for h in again.search(("u",), text="hotel")) == "b"
        finally:
            getattr(again.backend, "close", lambda: None)()
