"""The public conformance suite of the context store: what every `ContextBackend` must do.

Subclass `ContextConformance` in a test module pytest collects and implement ``make_backend(path)``
(an empty directory per test, or the one a previous backend of the same test used);
`PersistentContextConformance` adds the durability tests (close, open again on the same path).
``make_store(backend, **options)`` builds the `ContextStore` each test drives (override it to hold
a subclass of the store to the same contract). Each test that reads what another call wrote reads
it through a second `ContextStore` on the same backend, so state lives in the backend, not in the
store object.

A few tests write into the backend's spaces directly (`plant_vector`): an index row naming a URI
the node store does not hold is what a lagging index leaves behind, and no public call makes one,
yet the read path has to keep it inert. Others wrap the backend in `FailingWrites`, which fails
the transaction at its first write into one space: every call must then leave every group as it
was, whichever of its writes failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ...context import (
    SPACES,
    ContextBackend,
    ContextStore,
    SkillFile,
)
from ...errors import HippographError, StorageError
from .._helpers import closing
from .documents import ContextDocuments
from .memories import ContextMemories
from .queue import ContextQueue
from .support import (
    _ALL_MEMORY_STATUSES,
    _PART_WAY,
    _REFUSALS,
    DOCUMENT_JOBS,
    EMBED,
    SUMMARIZE,
    FailingWrites,
    _seeded,
    _uris,
    dump,
    embed_pending,
    plant_vector,
    v,
)
from .vectors import ContextVectors

__all__ = [
    "DOCUMENT_JOBS",
    "EMBED",
    "SUMMARIZE",
    "ContextConformance",
    "FailingWrites",
    "PersistentContextConformance",
    "dump",
    "embed_pending",
    "plant_vector",
    "v",
]


class ContextConformance(ContextDocuments, ContextVectors, ContextMemories, ContextQueue):
    """The context store's behaviour on one backend. Subclass it as ``Test<Name>``."""

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[ContextBackend]:
        yield from closing(self.make_backend(tmp_path))

    @pytest.fixture
    def store(self, backend: ContextBackend) -> ContextStore:
        return self.make_store(backend, document_jobs=DOCUMENT_JOBS)

    @pytest.fixture
    def other(self, backend: ContextBackend) -> ContextStore:
        """A second handle on the same backend: it sees only what the backend kept."""
        return self.make_store(backend, document_jobs=DOCUMENT_JOBS)

    # -- health and stats -----------------------------------------------------------------------

    def test_healthy(self, backend: ContextBackend, store: ContextStore) -> None:
        assert store.healthy() is True
        close = getattr(backend, "close", None)
        if callable(close):
            close()
            assert store.healthy() is False

    def test_stats_count_documents_and_directories(self, store: ContextStore, other: ContextStore) -> None:
        assert {k: other.stats()[k] for k in ("documents", "directories", "by_top_subtree")} == {
            "documents": 0,
            "directories": 0,
            "by_top_subtree": {},
        }
        for uri in ("user/a/x", "user/b", "resources/c", "top"):
            store.put_document(uri, "x")
        store.put_memory("peers/p", "v", 0.5)
        store.put_document("user/b", "again")
        stats = other.stats()
        assert (stats["documents"], stats["directories"]) == (5, 4)
        assert stats["by_top_subtree"] == {"user": 2, "resources": 1, "top": 1, "peers": 1}
        assert stats["db_bytes"] is None or (isinstance(stats["db_bytes"], int) and stats["db_bytes"] >= 0)
        store.remove_subtree("user/a")
        stats = other.stats()
        assert (stats["documents"], stats["directories"]) == (4, 3)
        assert stats["by_top_subtree"] == {"user": 1, "resources": 1, "top": 1, "peers": 1}
        store.remove_subtree("top")
        assert "top" not in other.stats()["by_top_subtree"]

    # -- one outcome per call ---------------------------------------------------------------------

    @pytest.mark.parametrize("call", sorted(_PART_WAY))
    def test_a_call_that_fails_part_way_writes_nothing(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore, call: str
    ) -> None:
        """Whichever of its writes fails, a call leaves every group as it was (the failure injected
        at the first write into each space in turn); a call that touched no failing space
        completed."""
        prepare, act = _PART_WAY[call]
        failed = []
        for i, space in enumerate(SPACES):
            target = prepare(store, i)
            before = dump(backend)
            failing = self.make_store(FailingWrites(backend, space), document_jobs=DOCUMENT_JOBS)
            try:
                act(failing, target)
            except StorageError:
                assert dump(backend) == before, f"{call} wrote part of its outcome when {space} failed"
                failed.append(space)
        assert len(failed) >= 2, f"{call} wrote to {failed} only: nothing part way to check"

    # -- refusals -------------------------------------------------------------------------------

    @pytest.mark.parametrize(("call", "error"), [r[1:] for r in _REFUSALS], ids=[r[0] for r in _REFUSALS])
    def test_bad_input_is_refused_and_writes_nothing(
        self,
        backend: ContextBackend,
        store: ContextStore,
        call: Callable[[Any, dict[str, Any]], object],
        error: type[HippographError],
    ) -> None:
        seeded = _seeded(store)
        before = dump(backend)
        with pytest.raises(error):
            call(store, seeded)
        assert dump(backend) == before


class PersistentContextConformance(ContextConformance):
    """Durability: what a backend stored survives close and reopen on the same path."""

    reopen: ClassVar[bool] = True

    def test_state_survives_reopening(self, tmp_path: Path) -> None:
        first = self.make_backend(tmp_path)
        s = self.make_store(first, document_jobs=DOCUMENT_JOBS)
        s.put_document("keep/doc", "peanut", abstract="nuts")
        embed_pending(s, {"keep/doc": v(1)})
        s.put_document("gone/doc", "x")
        s.remove_subtree("gone")
        s.put_memory("user/diet", "vegetarian", 0.8, "chat")
        s.put_memory("user/diet", "vegan", 0.4, status="candidate")
        sid = s.create_session()
        s.append_message(sid, "user", "hi")
        s.put_commit(sid, "keep/committed", "c", "h1")
        s.replace_skill("skills/x", [SkillFile(("f",), "x")], owner="o")
        running = s.enqueue_job("work", {"n": 1})
        claimed = s.dequeue_job(["work"])
        assert claimed is not None and claimed.id == running
        queue = s.queue_stats()
        before = dump(first)
        getattr(first, "close", lambda: None)()
        backend = self.make_backend(tmp_path)
        try:
            again = self.make_store(backend, document_jobs=DOCUMENT_JOBS)
            assert dump(backend) == before
            got = again.get_node("keep/doc")
            assert got is not None and (got.content, got.abstract) == ("peanut", "nuts")
            assert again.get_node("gone") is None
            assert _uris(again.search_vector(v(1), 10)) == ["keep/doc"]
            assert [r.value for r in again.recall_memories("user", statuses=_ALL_MEMORY_STATUSES)] == [
                "vegetarian",
                "vegan",
            ]
            assert [m.content for m in again.get_session(sid)] == ["hi"]
            assert again.commit_hash(sid, "keep/committed") == "h1"
            assert again.list_skill_roots()[1] == 1
            assert again.queue_stats() == queue
            assert again.reset_running_jobs() == 1
            job = again.dequeue_job(["work"])
            assert job is not None and job.id == running and job.attempts == 2 and job.payload == {"n": 1}
        finally:
            getattr(backend, "close", lambda: None)()
