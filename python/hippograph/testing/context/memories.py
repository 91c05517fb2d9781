"""The context conformance suite's memory assertions (mixed into `ContextConformance`)."""

from __future__ import annotations

import pytest

from ...context import (
    ContextBackend,
    ContextStore,
    EmbeddingsUnavailableError,
    NoCandidateError,
)
from ...errors import HippographError, ValidationError
from .support import (
    _ALL_MEMORY_STATUSES,
    DOCUMENT_JOBS,
    EMBED,
    SUMMARIZE,
    SuiteBase,
    _uris,
    dump,
    embed_pending,
    v,
)

__all__ = ["ContextMemories"]


class ContextMemories(SuiteBase):
    """Tests of memory assertions; the fixtures come from `ContextConformance`."""

    # -- memories -------------------------------------------------------------------------------

    def test_put_memory_writes_document_assertion_and_jobs(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9, "chat", importance=0.25, jobs=[(EMBED, {"n": 1})])
        got = other.get_node("user/diet")
        assert got is not None and got.kind == "doc" and got.content == "vegetarian"
        (row,) = other.recall_memories("user")
        assert (row.uri, row.value, row.confidence, row.importance, row.source, row.status, row.supersedes) == (
            "user/diet",
            "vegetarian",
            0.9,
            0.25,
            "chat",
            "active",
            None,
        )
        assert row.last_surfaced_at is None and row.updated_at > 0 and row.truncated is False
        assert other.memory_recorded("user/diet") is True and other.memory_recorded("user/other") is False
        job = other.dequeue_job([EMBED, SUMMARIZE])
        assert job is not None and job.payload == {"uri": "user/diet", "n": 1}
        assert other.dequeue_job([EMBED, SUMMARIZE]) is None
        store.put_memory("user/home", "Lisbon", 0.5)
        assert other.count_jobs("user/home", ["pending"]) == len(DOCUMENT_JOBS)
        assert other.recall_memories("user/home")[0].source is None

    def test_an_active_rerecord_of_the_same_value_is_a_no_op(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        before = dump(backend)
        other.put_memory("user/diet", "vegetarian", 0.9)
        other.put_memory("user/diet", "vegetarian", 0.4, "other")
        assert dump(backend) == before
        assert len(store.recall_memories("user", statuses=_ALL_MEMORY_STATUSES)) == 1

    def test_a_new_active_value_supersedes_the_old(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        other.put_memory("user/diet", "vegan", 0.7)
        rows = store.recall_memories("user/diet", statuses=_ALL_MEMORY_STATUSES)
        by_status = {r.status: r for r in rows}
        assert set(by_status) == {"active", "superseded"} and len(rows) == 2
        assert by_status["active"].value == "vegan" and by_status["superseded"].value == "vegetarian"
        assert by_status["active"].supersedes == by_status["superseded"].id
        got = store.get_node("user/diet")
        assert got is not None and got.content == "vegan"
        other.put_memory("user/diet", "vegetarian", 0.9)  # the old value again is a new assertion
        rows = store.recall_memories("user/diet", statuses=_ALL_MEMORY_STATUSES)
        assert [r.status for r in rows].count("active") == 1 and len(rows) == 3

    def test_a_candidate_does_not_overwrite_a_document(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        store.put_document("user/notes", "my notes")
        other.put_memory("user/diet", "vegan", 0.6, status="candidate")
        other.put_memory("user/notes", "a guess", 0.3, status="candidate")
        for uri, content in (("user/diet", "vegetarian"), ("user/notes", "my notes")):
            got = store.get_node(uri)
            assert got is not None and got.content == content
        assert [r.value for r in store.recall_memories("user")] == ["vegetarian"]
        assert [r.value for r in store.recall_memories("user", statuses=["candidate"])] == ["vegan", "a guess"]

    def test_a_candidate_at_an_empty_uri_gets_a_document(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/fresh", "maybe", 0.4, status="candidate")
        got = other.get_node("user/fresh")
        assert got is not None and got.kind == "doc" and got.content == "maybe"
        assert other.memory_recorded("user/fresh") is True
        assert other.recall_memories("user") == []
        assert [r["uri"] for r in other.list_all_documents("user")[0]] == ["user/fresh"]

    def test_a_candidate_at_an_empty_directory_gets_a_document(self, store: ContextStore, other: ContextStore) -> None:
        """A directory left with no children holds no document: the candidate's URI becomes one,
        as `put_document` would make it."""
        store.put_document("user/box/item", "x")
        store.remove_subtree("user/box/item")
        store.put_memory("user/box", "maybe", 0.4, status="candidate")
        got = other.get_node("user/box")
        assert got is not None and got.kind == "doc" and got.content == "maybe"

    def test_a_candidate_at_a_directory_with_children_is_refused_or_promotable(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        """A directory with children can never become a document, so a candidate recorded there
        could never be promoted: it is refused with nothing written, or its promotion works."""
        store.put_document("user/box/item", "x")
        before = dump(backend)
        try:
            store.put_memory("user/box", "maybe", 0.4, status="candidate")
        except HippographError:
            assert dump(backend) == before
            return
        other.promote_memory("user/box")
        got = other.get_node("user/box")
        assert got is not None and got.content == "maybe"

    def test_promote_memory(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        store.put_memory("user/diet", "vegan", 0.6, status="candidate")
        embed_pending(store, {"user/diet": v(1)})
        assert _uris(store.search_vector(v(1), 10)) == ["user/diet"]
        other.promote_memory("user/diet")
        rows = store.recall_memories("user/diet", statuses=_ALL_MEMORY_STATUSES)
        by_status = {r.status: r for r in rows}
        assert set(by_status) == {"active", "superseded"} and len(rows) == 2
        assert by_status["active"].value == "vegan" and by_status["active"].supersedes == by_status["superseded"].id
        got = store.get_node("user/diet")
        assert got is not None and got.content == "vegan"
        assert store.search_vector(v(1), 10) == []  # the document changed: its old vector is retired
        assert store.memory_stats()["waiting_review"] == 0
        with pytest.raises(NoCandidateError):
            other.promote_memory("user/diet")
        store.put_memory("user/fresh", "x", 0.3, status="candidate")
        other.promote_memory("user/fresh")
        assert [r.value for r in store.recall_memories("user/fresh")] == ["x"]

    def test_promote_and_reject_need_a_candidate(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        before = dump(backend)
        for uri in ("user/diet", "user/none"):
            with pytest.raises(NoCandidateError):
                other.promote_memory(uri)
            with pytest.raises(NoCandidateError):
                other.reject_memory_candidate(uri)
        assert dump(backend) == before

    def test_reject_keeps_the_active_and_superseded_history(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("user/diet", "vegetarian", 0.9)
        store.put_memory("user/diet", "vegan", 0.8)
        store.put_memory("user/diet", "pescatarian", 0.5, status="candidate")
        store.put_memory("user/diet", "carnivore", 0.4, status="candidate")
        other.reject_memory_candidate("user/diet")
        rows = store.recall_memories("user/diet", statuses=_ALL_MEMORY_STATUSES)
        assert sorted((r.status, r.value) for r in rows) == [("active", "vegan"), ("superseded", "vegetarian")]
        got = store.get_node("user/diet")
        assert got is not None and got.content == "vegan"
        assert store.memory_stats()["waiting_review"] == 0
        with pytest.raises(NoCandidateError):
            other.reject_memory_candidate("user/diet")

    def test_recall_memories_order_statuses_and_source(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("u/a", "a", 0.5)
        store.put_memory("u/b", "b", 0.9, "chat")
        store.put_memory("u/c/d", "d", 0.7, "doc")
        store.put_memory("u-old/x", "x", 1.0, "chat")
        store.put_memory("u/b", "b2", 0.6, "chat", status="candidate")
        store.put_memory("u/a", "a2", 0.2)
        assert [r.value for r in other.recall_memories("u")] == ["b", "d", "a2"]
        assert [r.value for r in other.recall_memories("u", "chat")] == ["b"]
        assert [r.value for r in other.recall_memories("", "chat")] == ["x", "b"]
        assert [r.value for r in other.recall_memories("u", statuses=["superseded"])] == ["a"]
        assert [r.value for r in other.recall_memories("u", statuses=_ALL_MEMORY_STATUSES)] == [
            "b",
            "d",
            "b2",
            "a",
            "a2",
        ]
        assert [r.value for r in other.recall_memories("u", "chat", ["candidate"])] == ["b2"]
        assert [r.value for r in other.recall_memories("u/c")] == ["d"]
        assert other.recall_memories("u/b/nothing") == [] and other.recall_memories("u", "nobody") == []
        rows = other.recall_memories("", statuses=_ALL_MEMORY_STATUSES)
        assert [r.confidence for r in rows] == sorted((r.confidence for r in rows), reverse=True)

    def test_recall_memories_is_bounded_and_says_when(self, store: ContextStore, other: ContextStore) -> None:
        for i in range(5):
            store.put_memory(f"b/{i}", f"value {i}", i / 10)
        rows = other.recall_memories("b", top_k=2)
        assert [r.value for r in rows] == ["value 4", "value 3"] and all(r.truncated is True for r in rows)
        rows = other.recall_memories("b", top_k=5)
        assert len(rows) == 5 and all(r.truncated is False for r in rows)
        assert all(r.truncated is False for r in other.recall_memories("b", top_k=500))
        for bad in (0, 501, -1, True):
            with pytest.raises(ValidationError):
                other.recall_memories("b", top_k=bad)

    def test_surfacing_and_memory_stats(self, store: ContextStore, other: ContextStore) -> None:
        empty = other.memory_stats()
        assert empty["by_status"] == {"active": 0, "superseded": 0, "candidate": 0}
        assert empty["waiting_review"] == 0 and empty["never_surfaced"] == 0
        store.put_memory("user/a", "a", 0.9)
        store.put_memory("user/b", "b", 0.8)
        store.put_memory("user/b", "b2", 0.8)
        store.put_memory("peers/c", "c", 0.7)
        store.put_memory("peers/d", "d", 0.6, status="candidate")
        stats = other.memory_stats()
        assert stats["by_status"] == {"active": 3, "superseded": 1, "candidate": 1}
        assert stats["waiting_review"] == 1 and stats["never_surfaced"] == 3
        assert sum(stats["by_type"].values()) == 5
        ids = [r.id for r in other.recall_memories("user")]
        other.mark_memories_surfaced(ids)
        rows = store.recall_memories("", statuses=["active"])
        assert {r.uri: r.last_surfaced_at is not None for r in rows} == {
            "user/a": True,
            "user/b": True,
            "peers/c": False,
        }
        stats = store.memory_stats()
        assert stats["never_surfaced"] == 1 and stats["by_status"]["active"] == 3
        store.mark_memories_surfaced([])
        assert other.memory_stats() == stats

    def test_memory_conflict_pairs(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("c/a", "likes tea", 0.9)
        store.put_memory("c/b", "hates tea", 0.9)
        store.put_memory("c/c", "lives in Lisbon", 0.9)
        store.put_memory("c-old/d", "likes tea", 0.9)
        store.put_memory("c/a", "likes green tea", 0.9)  # supersedes: one active assertion per URI
        embed_pending(store, {"c/a": v(1, 0.05), "c/b": v(1), "c/c": v(0, 1), "c-old/d": v(1)})
        pairs = other.memory_conflict_pairs("c")
        assert [{p.uri_a, p.uri_b} for p in pairs] == [{"c/a", "c/b"}]
        assert 0.9 <= pairs[0].similarity <= 1.0
        assert sorted(tuple(sorted((p.uri_a, p.uri_b))) for p in other.memory_conflict_pairs("")) == [
            ("c-old/d", "c/a"),
            ("c-old/d", "c/b"),
            ("c/a", "c/b"),
        ]
        assert all(p.uri_a != p.uri_b for p in other.memory_conflict_pairs(""))

    def test_memory_conflicts_need_stored_vectors(self, store: ContextStore, other: ContextStore) -> None:
        store.put_memory("n/a", "likes tea", 0.9)
        store.put_memory("n/b", "hates tea", 0.9)
        with pytest.raises(EmbeddingsUnavailableError):
            other.memory_conflict_pairs("n")
