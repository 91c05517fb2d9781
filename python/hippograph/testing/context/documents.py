"""The context conformance suite's transactions, documents, removal and skills (mixed into `ContextConformance`)."""

from __future__ import annotations

from typing import Any

import pytest

from ...context import (
    ContextBackend,
    ContextStore,
    IsRootError,
    KvTxn,
    SkillFile,
)
from ...context.keys import encode, node_key
from ...errors import NotFoundError, StorageError, ValidationError
from .support import (
    _ALL_JOB_STATUSES,
    _ALL_MEMORY_STATUSES,
    DOCUMENT_JOBS,
    SuiteBase,
    _job_statuses,
    _uris,
    dump,
    embed_pending,
    v,
)

__all__ = ["ContextDocuments"]


class ContextDocuments(SuiteBase):
    """Tests of transactions, documents, removal and skills; the fixtures come from `ContextConformance`."""

    # -- transactions ---------------------------------------------------------------------------

    def test_a_failing_write_writes_nothing(self, backend: ContextBackend, store: ContextStore) -> None:
        store.put_document("t/a", "x")
        before = dump(backend)

        def half(t: KvTxn) -> None:
            t.put("ctx_nodes", node_key(("t", "b")), encode({"k": "doc", "c": "y"}))
            t.delete("ctx_nodes", node_key(("t", "a")))
            raise RuntimeError("abort")

        with pytest.raises(RuntimeError):
            backend.context_write(half)
        assert dump(backend) == before
        other = self.make_store(backend)
        assert other.get_node("t/b") is None and other.get_node("t/a") is not None

    def test_a_read_transaction_refuses_writes(self, backend: ContextBackend, store: ContextStore) -> None:
        store.put_document("t/a", "x")
        before = dump(backend)
        with pytest.raises(StorageError):
            backend.context_read(lambda t: t.put("ctx_sessions", b"s", b"v"))
        with pytest.raises(StorageError):
            backend.context_read(lambda t: t.delete("ctx_nodes", node_key(("t", "a"))))
        assert dump(backend) == before

    def test_ranges_are_bytewise_ordered_and_bounded(self, backend: ContextBackend) -> None:
        keys = [b"\x00", b"\x01z", b"a", b"a\x00", b"a\x01", b"a\x02", b"ab", b"b", b"\xc3\xa9", b"\xff"]

        def fill(t: KvTxn) -> None:
            for i, k in enumerate(reversed(keys)):
                t.put("ctx_sessions", k, bytes([i]))

        backend.context_write(fill)

        def read(t: KvTxn) -> dict[str, Any]:
            lazy = t.range("ctx_sessions")
            first = next(lazy)
            return {
                "all": [k for k, _ in t.range("ctx_sessions")],
                "sub": [k for k, _ in t.range("ctx_sessions", b"a\x00", b"a\x02")],
                "down": [k for k, _ in t.range("ctx_sessions", b"a", b"b", reverse=True)],
                "open": [k for k, _ in t.range("ctx_sessions", b"b")],
                "first": first,
                "get": (t.get("ctx_sessions", b"ab"), t.get("ctx_sessions", b"zz")),
            }

        got = backend.context_read(read)
        assert got["all"] == keys
        assert got["sub"] == [b"a\x00", b"a\x01"]
        assert got["down"] == [b"ab", b"a\x02", b"a\x01", b"a\x00", b"a"]
        assert got["open"] == [b"b", b"\xc3\xa9", b"\xff"]
        assert got["first"] == (b"\x00", bytes([len(keys) - 1]))
        assert got["get"] == (bytes([keys[::-1].index(b"ab")]), None)
        deleted = backend.context_write(lambda t: (t.delete("ctx_sessions", b"ab"), t.delete("ctx_sessions", b"ab")))
        assert deleted == (True, False)

    # -- documents ------------------------------------------------------------------------------

    def test_a_document_reads_back_with_its_parents_created(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("user/notes/today", "milk\neggs", abstract="shopping", overview="a list")
        got = other.get_node("user/notes/today")
        assert got is not None
        assert (got.uri, got.parent_uri, got.name, got.kind) == ("user/notes/today", "user/notes", "today", "doc")
        assert (got.content, got.abstract, got.overview) == ("milk\neggs", "shopping", "a list")
        assert got.enabled is True and got.group_tag == ""
        for uri, parent in (("user", None), ("user/notes", "user")):
            d = other.get_node(uri)
            assert d is not None and d.kind == "dir" and d.parent_uri == parent and d.content is None
        assert other.get_node("user/notes/tomorrow") is None
        projected = other.get_node("user/notes/today", fields=["abstract"])
        assert projected is not None and projected.uri == "user/notes/today"
        assert projected.content is None and projected.abstract == "shopping"

    def test_layers_passed_as_none_keep_the_stored_ones(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("d/a", "one", abstract="A1", overview="O1")
        other.put_document("d/a", "two")
        got = store.get_node("d/a")
        assert got is not None and (got.content, got.abstract, got.overview) == ("two", "A1", "O1")
        other.put_document("d/a", "three", overview="O3")
        got = store.get_node("d/a")
        assert got is not None and (got.content, got.abstract, got.overview) == ("three", "A1", "O3")
        other.put_document("d/a", "four", abstract="")
        got = store.get_node("d/a")
        assert got is not None and (got.abstract, got.overview) == ("", "O3")

    def test_a_document_and_its_jobs_are_one_write(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("d/a", "x")
        assert other.count_jobs("d/a", ["pending"]) == len(DOCUMENT_JOBS)
        kinds = []
        while (job := other.dequeue_job(["custom", *DOCUMENT_JOBS])) is not None:
            kinds.append(job.kind)
            assert job.payload["uri"] == "d/a" and job.attempts == 1
        assert sorted(kinds) == sorted(DOCUMENT_JOBS)
        store.put_document("d/b", "x", jobs=[("custom", {"n": 1})])
        job = other.dequeue_job(["custom", *DOCUMENT_JOBS])
        assert job is not None and job.kind == "custom" and job.payload == {"uri": "d/b", "n": 1}
        assert other.dequeue_job(["custom", *DOCUMENT_JOBS]) is None
        store.put_document("d/c", "x", jobs=[])
        assert other.count_jobs("d/c", list(_ALL_JOB_STATUSES)) == 0

    def test_get_nodes_keeps_the_input_order(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("g/a", "A")
        store.put_document("g/b", "B")
        got = other.get_nodes(["g/b", "g/missing", "g", "g/a", "g/b"])
        assert [None if n is None else n.uri for n in got] == ["g/b", None, "g", "g/a", "g/b"]
        assert [None if n is None else n.content for n in got] == ["B", None, None, "A", "B"]
        assert other.get_nodes([]) == []

    def test_list_children_is_sorted_and_needs_a_directory(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("c/b", "c/a-old", "c/a/x", "c/a/y/z", "c/B", "c/é", "top"):
            store.put_document(uri, "x")
        assert other.list_children("c") == sorted(["b", "a-old", "a", "B", "é"])
        assert other.list_children("c/a") == ["x", "y"]
        assert other.list_children("") == ["c", "top"]
        for missing in ("c/b", "c/nothing", "nothing"):
            with pytest.raises(NotFoundError):
                other.list_children(missing)

    def test_list_all_documents_pages_in_tree_order(self, store: ContextStore, other: ContextStore) -> None:
        uris = ["l/a-old", "l/a/x", "l/a/y", "l/b", "l/a/x2/z", "m/outside"]
        for uri in uris:
            store.put_document(uri, "x")
        order = ["l/a/x", "l/a/x2/z", "l/a/y", "l/a-old", "l/b"]
        rows, total = other.list_all_documents("l", limit=10)
        assert [r["uri"] for r in rows] == order and total == 5
        assert all(r == {"uri": r["uri"], "enabled": True, "group_tag": ""} for r in rows)
        assert other.list_all_documents("l", limit=2, offset=1) == (
            [{"uri": u, "enabled": True, "group_tag": ""} for u in order[1:3]],
            5,
        )
        assert other.list_all_documents("l", limit=2, offset=5) == ([], 5)
        assert [r["uri"] for r in other.list_all_documents("l/a")[0]] == order[:3]
        assert other.list_all_documents("")[1] == 6
        assert other.list_all_documents("nothing") == ([], 0)

    def test_list_all_documents_filters(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("f/Alpha", "f/beta", "f/gamma/alpha2", "f/delta"):
            store.put_document(uri, "x")
        store.set_node_enabled("f/beta", False)
        store.set_node_group("f/gamma", "team")
        rows, total = other.list_all_documents("f", filter={"substring": "ALPHA"})
        assert [r["uri"] for r in rows] == ["f/Alpha", "f/gamma/alpha2"] and total == 2
        rows, total = other.list_all_documents("f")
        assert "f/beta" not in [r["uri"] for r in rows] and total == 3
        rows, total = other.list_all_documents("f", filter={"include_disabled": True})
        assert total == 4 and {"uri": "f/beta", "enabled": False, "group_tag": ""} in rows
        rows, total = other.list_all_documents("f", filter={"group": "team"})
        assert rows == [{"uri": "f/gamma/alpha2", "enabled": True, "group_tag": "team"}] and total == 1
        rows, total = other.list_all_documents("f", limit=1, filter={"substring": "a", "include_disabled": True})
        assert total == 4 and len(rows) == 1

    def test_document_count_is_exact_or_descendant(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("a", "x/a/1", "x/a/2/3", "x/a-old/1", "x/ab", "x/b"):
            store.put_document(uri, "x")
        store.set_node_enabled("x/a/1", False)
        assert other.document_count("x/a") == 2
        assert other.document_count("x/a/2/3") == 1
        assert other.document_count("x/a-old") == 1
        assert other.document_count("x") == 5
        assert other.document_count("") == 6
        assert other.document_count("x/nothing") == 0

    def test_find_paths(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("p/Notes/today", "p/notes-old/x", "p/other/NOTES", "q/notes"):
            store.put_document(uri, "nothing about it")
        got = other.find_paths("notes", "p")
        assert [(m.uri, m.name, m.kind) for m in got] == [
            ("p/Notes", "Notes", "dir"),
            ("p/Notes/today", "today", "doc"),
            ("p/notes-old", "notes-old", "dir"),
            ("p/notes-old/x", "x", "doc"),
            ("p/other/NOTES", "NOTES", "doc"),
        ]
        assert [m.uri for m in other.find_paths("notes", "p", limit=2)] == ["p/Notes", "p/Notes/today"]
        assert [m.uri for m in other.find_paths("NOTES")][-1] == "q/notes"
        assert [m.uri for m in other.find_paths("today", "p/notes")] == []
        assert [m.uri for m in other.find_paths("p/notes-", None)] == ["p/notes-old", "p/notes-old/x"]
        assert [m.uri for m in other.find_paths("about")] == []

    def test_search_keyword(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("k/b", "the Peanut butter", abstract="spread")
        store.put_document("k/a", "nothing here", overview="all about PEANUTS")
        store.put_document("k/c/d", "no", abstract="peanut abstract")
        store.put_document("k-old/x", "peanut")
        store.put_document("k/off", "peanut")
        store.set_node_enabled("k/off", False)
        got = other.search_keyword("peanut", "k")
        assert _uris(got) == ["k/a", "k/b", "k/c/d"]
        assert (got[1].content, got[1].abstract, got[1].overview) == ("the Peanut butter", "spread", None)
        assert _uris(other.search_keyword("PEANUT", "k", limit=2)) == ["k/a", "k/b"]
        assert _uris(other.search_keyword("peanut")) == ["k/a", "k/b", "k/c/d", "k-old/x"]
        slim = other.search_keyword("peanut", "k", fields=["abstract"])
        assert _uris(slim) == ["k/a", "k/b", "k/c/d"] and all(n.content is None for n in slim)
        assert slim[1].abstract == "spread"
        assert other.search_keyword("absent", "k") == []

    @pytest.mark.parametrize("literal", ["%", "_", "\\", ".", "*", "(", "[a]", "^", "$", "+", "?", "|", "{2}", "%_\\"])
    def test_matching_takes_wildcards_and_metacharacters_literally(
        self, store: ContextStore, other: ContextStore, literal: str
    ) -> None:
        store.put_document(f"lit/with{literal}it", f"first\nline with{literal}it\nlast")
        store.put_document("lit/without", "first\nline withXit withit with\\\\it\nlast")
        store.put_document("lit/withit", "withit")
        needle = f"with{literal}it"
        assert [m.uri for m in other.find_paths(needle, "lit")] == [f"lit/with{literal}it"]
        assert _uris(other.search_keyword(needle.upper(), "lit")) == [f"lit/with{literal}it"]
        got = other.grep_content(needle, "lit")
        assert [(m.uri, m.line_number, m.excerpt) for m in got] == [(f"lit/with{literal}it", 2, f"line {needle}")]

    def test_grep_content(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("gr/b", "first line\nSecond NEEDLE line\nthird\nneedle again and Needle")
        store.put_document("gr/a", "needle at the top")
        store.put_document("gr/c", "nothing", abstract="needle in the abstract", overview="needle too")
        store.put_document("gr-old/x", "needle")
        store.put_document("gr/off", "needle")
        store.set_node_enabled("gr/off", False)
        got = other.grep_content("needle", "gr")
        assert [(m.uri, m.line_number, m.excerpt) for m in got] == [
            ("gr/a", 1, "needle at the top"),
            ("gr/b", 2, "Second NEEDLE line"),
            ("gr/b", 4, "needle again and Needle"),
        ]
        assert [(m.uri, m.line_number) for m in other.grep_content("NEEDLE", "gr", limit=2)] == [
            ("gr/a", 1),
            ("gr/b", 2),
        ]
        assert [m.uri for m in other.grep_content("needle", "gr/b")] == ["gr/b", "gr/b"]
        assert [m.uri for m in other.grep_content("needle")][-1] == "gr-old/x"
        assert other.grep_content("abstract") == [] and other.grep_content("too") == []

    @pytest.mark.parametrize("at", [0, 130, 1500, 2994])
    def test_grep_excerpts_are_bounded_and_hold_the_match(
        self, store: ContextStore, other: ContextStore, at: int
    ) -> None:
        line = "".join(chr(ord("a") + i % 23) for i in range(3000))
        line = line[:at] + "NEEDLE" + line[at + 6 :]
        store.put_document("ex/doc", f"short\n{line}\nend")
        (got,) = other.grep_content("needle", "ex")
        assert got.line_number == 2 and len(got.excerpt) <= 280 and "NEEDLE" in got.excerpt
        assert got.excerpt in line

    def test_grep_excerpts_hold_the_match_after_text_that_case_folds_longer(
        self, store: ContextStore, other: ContextStore
    ) -> None:
        """Case-insensitive matching may compare folded text ("ß" folds to "ss"), but the excerpt is
        cut from the line as stored: it must still hold the match."""
        line = "ß" * 250 + "NEEDLE" + "y" * 1000
        store.put_document("ex/folded", line)
        (got,) = other.grep_content("needle", "ex")
        assert len(got.excerpt) <= 280 and "NEEDLE" in got.excerpt and got.excerpt in line

    def test_grep_numbers_lines_by_newlines(self, store: ContextStore, other: ContextStore) -> None:
        """A line number names the line a reader of the content sees: lines end at "\\n" (a "\\r"
        before it included), not at a form feed or a Unicode separator inside a line."""
        store.put_document("ln/doc", "page one\x0cstill line one\r\nneedle on line two\u2028same line\nthree needle")
        got = other.grep_content("needle", "ln")
        assert [m.line_number for m in got] == [2, 3]

    def test_set_node_enabled_applies_to_the_subtree(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("e/a/1", "e/a/2/3", "e/a-old/1"):
            store.put_document(uri, "peanut")
        embed_pending(store, {"e/a/1": v(1), "e/a/2/3": v(1, 0.1), "e/a-old/1": v(1, 0.2)})
        store.set_node_enabled("e/a", False)
        assert [
            n.enabled if n else None for n in other.get_nodes(["e/a", "e/a/1", "e/a/2", "e/a/2/3", "e/a-old/1"])
        ] == [False, False, False, False, True]
        assert _uris(other.search_keyword("peanut", "e")) == ["e/a-old/1"]
        assert [m.uri for m in other.grep_content("peanut", "e")] == ["e/a-old/1"]
        assert _uris(other.search_vector(v(1), 10, "e")) == ["e/a-old/1"]
        assert [r["uri"] for r in other.list_all_documents("e")[0]] == ["e/a-old/1"]
        assert other.document_count("e/a") == 2
        got = other.get_node("e/a/1")
        assert got is not None and got.content == "peanut"
        store.put_document("e/a/1", "peanut again")
        got = other.get_node("e/a/1")
        assert got is not None and got.enabled is False and got.content == "peanut again"
        store.set_node_enabled("e/a", True)
        assert _uris(other.search_keyword("peanut", "e")) == ["e/a/1", "e/a/2/3", "e/a-old/1"]
        assert set(_uris(other.search_vector(v(1), 10, "e"))) == {"e/a/2/3", "e/a-old/1"}

    def test_set_node_group_applies_to_the_subtree(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("t/a/1", "t/a/2/3", "t/a-old/1"):
            store.put_document(uri, "x")
        store.set_node_group("t/a", "team")
        assert [n.group_tag if n else None for n in other.get_nodes(["t", "t/a", "t/a/2", "t/a/2/3", "t/a-old/1"])] == [
            "",
            "team",
            "team",
            "team",
            "",
        ]
        assert [r["uri"] for r in other.list_all_documents(filter={"group": "team"})[0]] == ["t/a/1", "t/a/2/3"]
        store.set_node_group("t/a/2", "")
        assert [r["uri"] for r in other.list_all_documents(filter={"group": "team"})[0]] == ["t/a/1"]

    # -- removal --------------------------------------------------------------------------------

    def _populate(self, store: ContextStore, base: str) -> str:
        """A subtree holding one of everything keyed by URI; the session id of its commit."""
        store.put_document(f"{base}/doc", "peanut")
        store.put_document(f"{base}/deep/doc", "peanut")
        embed_pending(store, {f"{base}/doc": v(1), f"{base}/deep/doc": v(1, 0.1)})
        store.put_memory(f"{base}/memory", "vegetarian", 0.9)
        store.put_memory(f"{base}/memory", "vegan", 0.5, status="candidate")
        sid = store.create_session()
        store.put_commit(sid, f"{base}/committed", "c", "hash")
        running = store.enqueue_job("work", {}, uri=f"{base}/doc")
        claimed = store.dequeue_job(["work"])
        assert claimed is not None and claimed.id == running
        finished = store.enqueue_job("quick", {}, uri=f"{base}/deep")
        claimed = store.dequeue_job(["quick"])
        assert claimed is not None and claimed.id == finished
        store.complete_job(finished)
        return sid

    def test_remove_subtree_removes_every_store(self, store: ContextStore, other: ContextStore) -> None:
        sid = self._populate(store, "r/a")
        kept_sid = self._populate(store, "r/a-old")
        memories_before = store.memory_stats()
        jobs_before, removed_jobs = store.queue_stats(), _job_statuses(store, "r/a")
        kept_jobs = _job_statuses(store, "r/a-old")
        assert removed_jobs["running"] == 1 and removed_jobs["done"] >= 1
        store.remove_subtree("r/a")
        for s in (store, other):
            assert s.get_node("r/a") is None and s.get_node("r/a/doc") is None
            assert s.find_paths("r/a/", None) == [] and s.document_count("r/a") == 0
            assert s.list_children("r") == ["a-old"]
            assert _uris(s.search_vector(v(1), 10, "r")) == ["r/a-old/doc", "r/a-old/deep/doc"]
            assert s.memory_recorded("r/a/memory") is False
            assert s.recall_memories("r/a", statuses=_ALL_MEMORY_STATUSES) == []
            assert s.commit_hash(sid, "r/a/committed") is None
            assert s.count_jobs("r/a", list(_ALL_JOB_STATUSES)) == 0
            # the sibling whose name starts the same way keeps everything
            assert s.document_count("r/a-old") == 4
            assert len(s.recall_memories("r/a-old", statuses=_ALL_MEMORY_STATUSES)) == 2
            assert s.commit_hash(kept_sid, "r/a-old/committed") == "hash"
            assert _job_statuses(s, "r/a-old") == kept_jobs
        stats = other.memory_stats()
        assert stats["by_status"] == {k: n // 2 for k, n in memories_before["by_status"].items()}
        assert stats["waiting_review"] == 1 and stats["never_surfaced"] == 1
        assert other.queue_stats() == {k: n - removed_jobs[k] for k, n in jobs_before.items()}

    def test_a_refused_removal_changes_nothing(self, backend: ContextBackend, store: ContextStore) -> None:
        self._populate(store, "r/a")
        before = dump(backend)
        with pytest.raises(IsRootError):
            store.remove_subtree("")
        for missing in ("r/b", "r/a/missing", "r/a-o"):
            with pytest.raises(NotFoundError):
                store.remove_subtree(missing)
        assert dump(backend) == before

    def test_removing_a_document_keeps_its_parent(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("rm/dir/doc", "x")
        store.remove_subtree("rm/dir/doc")
        got = other.get_node("rm/dir")
        assert got is not None and got.kind == "dir" and other.list_children("rm/dir") == []
        stats = other.stats()
        assert (stats["documents"], stats["directories"]) == (0, 2)
        store.put_document("rm/dir", "now a document")  # an empty directory can become one
        got = other.get_node("rm/dir")
        assert got is not None and got.kind == "doc" and got.content == "now a document"
        stats = other.stats()
        assert (stats["documents"], stats["directories"], stats["by_top_subtree"]) == (1, 1, {"rm": 1})

    # -- skills ---------------------------------------------------------------------------------

    def test_replace_skill_replaces_the_whole_subtree(self, store: ContextStore, other: ContextStore) -> None:
        first = [SkillFile(("SKILL.md",), "use git"), SkillFile(("refs", "a.md"), "ref a")]
        assert store.replace_skill("skills/git", first, owner="alice") == {"replaced": False, "files": 2}
        assert other.list_children("skills/git") == ["SKILL.md", "refs"]
        assert other.count_jobs("skills/git", ["pending"]) == 2 * len(DOCUMENT_JOBS)
        embed_pending(store, {"skills/git/refs/a.md": v(1)})
        store.put_memory("skills/git/notes", "remember", 0.5, jobs=[])
        sid = store.create_session()
        store.put_commit(sid, "skills/git/SKILL.md", "committed", "h")
        store.put_document("skills/git-old/x", "sibling")
        second = [SkillFile(("SKILL.md",), "use git well"), SkillFile(("new.md",), "new")]
        assert other.replace_skill("skills/git", second, owner="bob") == {"replaced": True, "files": 2}
        for s in (store, other):
            assert s.list_children("skills/git") == ["SKILL.md", "new.md"]
            assert s.get_node("skills/git/refs/a.md") is None and s.get_node("skills/git/refs") is None
            got = s.get_node("skills/git/SKILL.md")
            assert got is not None and got.content == "use git well"
            assert s.memory_recorded("skills/git/notes") is False
            assert s.commit_hash(sid, "skills/git/SKILL.md") is None
            assert s.search_vector(v(1), 10, "skills") == []
            assert s.count_jobs("skills/git", list(_ALL_JOB_STATUSES)) == 2 * len(DOCUMENT_JOBS)
            assert s.count_jobs("skills/git", ["pending"]) == 2 * len(DOCUMENT_JOBS)
            assert s.document_count("skills/git-old") == 1
        rows, total = other.list_skill_roots()
        assert total == 1 and rows == [
            {"name": "git", "owner": "bob", "uri": "skills/git", "files": 2, "enabled": True, "group_tag": ""}
        ]

    def test_a_failing_replacement_leaves_the_previous_contents(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        store.replace_skill("skills/s", [SkillFile(("a.md",), "A"), SkillFile(("d", "b.md"), "B")], owner="o")
        store.put_memory("skills/s/m", "v", 0.5)
        embed_pending(store, {"skills/s/a.md": v(1)})
        before = dump(backend)
        clash = [SkillFile(("new.md",), "N"), SkillFile(("x",), "1"), SkillFile(("x", "y"), "2")]
        with pytest.raises(ValidationError):
            other.replace_skill("skills/s", clash)
        with pytest.raises(ValidationError):
            other.replace_skill("skills/s", [SkillFile(("a.md",), "A")], owner="o\x00")
        assert dump(backend) == before
        assert other.list_children("skills/s") == ["a.md", "d", "m"]

    def test_list_skill_roots(self, store: ContextStore, other: ContextStore) -> None:
        store.replace_skill("skills/b", [SkillFile(("f",), "x")], owner="alice")
        store.replace_skill("skills/a", [SkillFile(("f",), "x"), SkillFile(("g",), "y")], owner="bob")
        store.replace_skill("team/skills/c", [SkillFile(("f",), "x")], owner="alice")
        store.replace_skill("skills/off", [SkillFile(("f",), "x")], owner="alice")
        store.put_document("skills/plain/f", "not a skill")
        store.set_node_enabled("skills/off", False)
        store.set_node_group("skills/b", "ops")
        rows, total = other.list_skill_roots()
        assert [r["uri"] for r in rows] == ["skills/a", "skills/b", "team/skills/c"] and total == 3
        assert rows[0] == {"name": "a", "owner": "bob", "uri": "skills/a", "files": 2, "enabled": True, "group_tag": ""}
        assert other.list_skill_roots(limit=1, offset=1) == ([rows[1]], 3)
        assert [r["uri"] for r in other.list_skill_roots(filter={"owner": "alice"})[0]] == ["skills/b", "team/skills/c"]
        assert [r["uri"] for r in other.list_skill_roots(filter={"substring": "TEAM"})[0]] == ["team/skills/c"]
        assert [r["uri"] for r in other.list_skill_roots(filter={"group": "ops"})[0]] == ["skills/b"]
        rows, total = other.list_skill_roots(filter={"include_disabled": True})
        assert total == 4 and [(r["uri"], r["enabled"]) for r in rows][2] == ("skills/off", False)
