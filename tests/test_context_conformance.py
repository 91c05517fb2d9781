"""The context store's conformance suite on the bundled backends, and what the suite cannot drive
through a backend alone: a vector search racing another thread's reload of the store's vector cache."""

from __future__ import annotations

import threading
from pathlib import Path

from hippograph.backends import LMDB, InMemory
from hippograph.context import ContextStore
from hippograph.context.vector_snapshot import VectorSnapshot
from hippograph.testing import ContextConformance, PersistentContextConformance
from hippograph.testing.context import EMBED, embed_pending, v


class TestInMemoryContext(ContextConformance):
    def make_backend(self, path: Path) -> InMemory:
        return InMemory()


class TestLMDBContext(PersistentContextConformance):
    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store")


def test_a_search_ranks_one_snapshot_of_the_vector_cache(tmp_path: Path) -> None:
    """A search that read the cache's rows keeps ranking those rows when another thread reloads the
    cache meanwhile: a scoped search never answers with a URI outside its scope. LMDB, whose readers
    do not hold writers back; the searching thread pauses between the cache's slice and its ranking
    (for at most a few seconds: a store that serialises the two waits that long, and one whose
    search no longer goes through `slice_of` is simply searched)."""
    backend = LMDB(tmp_path / "store")
    try:
        store = ContextStore(backend, document_jobs=[EMBED])
        for uri in ("x/1", "x/2", "y/1"):
            store.put_document(uri, uri)
        embed_pending(store, {"x/1": v(1, 1), "x/2": v(1, 0.5), "y/1": v(0, 1)})
        slice_of = VectorSnapshot.slice_of
        paused, resume = threading.Event(), threading.Event()
        found: list[list[str]] = []

        def pausing_slice_of(self: VectorSnapshot, segments: tuple[str, ...]) -> tuple[int, int]:
            got = slice_of(self, segments)
            if threading.current_thread() is searcher:
                paused.set()
                resume.wait(3)
            return got

        def search() -> None:
            found.append([h.uri for h in store.search_vector(v(0, 1), 10, "y")])

        VectorSnapshot.slice_of = pausing_slice_of  # type: ignore[method-assign]
        searcher = threading.Thread(target=search)
        searcher.start()
        try:
            if paused.wait(3):
                for uri in ("a/1", "a/2"):  # rows sorting before the scope's: every later row moves
                    store.put_document(uri, uri)
                embed_pending(store, {"a/1": v(1), "a/2": v(1)})
                assert [h.uri for h in store.search_vector(v(1), 10)] == ["a/1", "a/2", "x/2", "x/1", "y/1"]
        finally:
            resume.set()
            searcher.join(10)
            VectorSnapshot.slice_of = slice_of  # type: ignore[method-assign]
        assert found == [["y/1"]]
    finally:
        backend.close()
