"""The context conformance suite's vector search, vectors and results of jobs (mixed into `ContextConformance`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ...context import (
    ContextBackend,
    ContextStore,
)
from ...errors import ValidationError
from .support import (
    _ALL_JOB_STATUSES,
    _DIM,
    EMBED,
    SUMMARIZE,
    SuiteBase,
    _uris,
    embed_pending,
    plant_vector,
    v,
)

__all__ = ["ContextVectors"]


class ContextVectors(SuiteBase):
    """Tests of vector search, vectors and results of jobs; the fixtures come from `ContextConformance`."""

    # -- vectors --------------------------------------------------------------------------------

    def test_search_vector_ranks_by_cosine_within_scope(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("v/a/one", "v/a/two", "v/a-old/three", "w/four"):
            store.put_document(uri, f"content of {uri}", abstract="abs")
        embed_pending(
            store, {"v/a/one": v(1), "v/a/two": v(1, 1), "v/a-old/three": v(1, 0, 0.01), "w/four": v(0.9, 0.2)}
        )
        got = other.search_vector(v(1), 10, "v/a")
        assert _uris(got) == ["v/a/one", "v/a/two"]
        assert got[0].score == pytest.approx(1.0) and got[1].score == pytest.approx(math.sqrt(0.5))
        assert (got[0].content, got[0].abstract, got[0].overview) == ("content of v/a/one", "abs", None)
        assert _uris(other.search_vector(v(1), 2)) == ["v/a/one", "v/a-old/three"]
        assert _uris(other.search_vector(v(1), 1000)) == ["v/a/one", "v/a-old/three", "w/four", "v/a/two"]
        assert _uris(other.search_vector(v(1), 10, "v/a/two")) == ["v/a/two"]
        assert other.search_vector(v(1), 10, "nothing") == []
        slim = other.search_vector(np.asarray(v(1), np.float32), 1, "v/a", fields=["score"])
        assert _uris(slim) == ["v/a/one"] and slim[0].content is None and slim[0].abstract is None
        assert slim[0].score == pytest.approx(1.0)

    def test_search_vector_returns_the_k_nearest_however_far(self, store: ContextStore, other: ContextStore) -> None:
        """Nearest neighbours have no similarity floor: orthogonal and opposite documents still fill
        `top_k`, ranked by cosine (ties by URI); `min_score` asks for a floor."""
        for uri in ("n/a", "n/b", "n/c"):
            store.put_document(uri, uri)
        embed_pending(store, {"n/a": v(1), "n/b": v(0, 1), "n/c": v(-1, 0.1)})
        got = other.search_vector(v(1), 3)
        assert _uris(got) == ["n/a", "n/b", "n/c"]
        assert [h.score for h in got] == pytest.approx([1.0, 0.0, -1 / math.sqrt(1.01)], abs=1e-6)
        assert _uris(other.search_vector(v(-1), 3)) == ["n/c", "n/b", "n/a"]
        assert _uris(other.search_vector(v(1), 2)) == ["n/a", "n/b"]
        for far in (v(0, 0, 1), v()):  # orthogonal to every document, and the zero vector: cosine 0
            hits = other.search_vector(far, 3)
            assert _uris(hits) == ["n/a", "n/b", "n/c"] and [h.score for h in hits] == pytest.approx([0.0] * 3)
        assert _uris(other.search_vector(v(1), 3, min_score=None)) == ["n/a", "n/b", "n/c"]
        assert _uris(other.search_vector(v(1), 3, min_score=0.0)) == ["n/a"]
        assert _uris(other.search_vector(v(1), 3, min_score=-0.5)) == ["n/a", "n/b"]
        assert _uris(other.search_vector(v(1), 3, min_score=-1)) == ["n/a", "n/b", "n/c"]
        assert other.search_vector(v(1), 3, min_score=1) == [] and other.search_vector(v(0, 0, 1), 3, min_score=0) == []
        bad_floors: tuple[Any, ...] = (math.nan, math.inf, -math.inf, True, "0.5", [0.0], 10**400)
        for bad in bad_floors:
            with pytest.raises(ValidationError):
                store.search_vector(v(1), 3, min_score=bad)

    def test_search_vector_refuses_bad_bounds_and_dimensions(self, store: ContextStore) -> None:
        store.put_document("v/a", "x")
        embed_pending(store, {"v/a": v(1)})
        bad_top_k: tuple[Any, ...] = (0, 1001, -1, True, 1.5)
        for top_k in bad_top_k:
            with pytest.raises(ValidationError):
                store.search_vector(v(1), top_k)
        assert _uris(store.search_vector(v(1), 1000)) == ["v/a"]
        for bad in ([1.0] * (_DIM - 1), [1.0] * (_DIM + 1), [[1.0] * _DIM], []):
            with pytest.raises(ValidationError):
                store.search_vector(bad)

    def test_disabled_documents_are_not_hits_and_do_not_use_up_top_k(
        self, store: ContextStore, other: ContextStore
    ) -> None:
        for uri in ("s/a", "s/b", "s/c"):
            store.put_document(uri, uri)
        embed_pending(store, {"s/a": v(1), "s/b": v(1, 0.5), "s/c": v(1, 2)})
        assert _uris(other.search_vector(v(1), 1)) == ["s/a"]
        store.set_node_enabled("s/a", False)
        assert _uris(other.search_vector(v(1), 1)) == ["s/b"]
        assert _uris(other.search_vector(v(1), 2)) == ["s/b", "s/c"]
        store.set_node_enabled("s/a", True)
        assert _uris(other.search_vector(v(1), 1)) == ["s/a"]

    def test_a_removed_uri_is_never_surfaced(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        for uri in ("r/x", "r/y", "keep/z"):
            store.put_document(uri, uri)
        embed_pending(store, {"r/x": v(1), "r/y": v(1, 0.3), "keep/z": v(1, 1)})
        assert _uris(other.search_vector(v(1), 1)) == ["r/x"]  # `other` has read the index
        store.remove_subtree("r/x")
        assert _uris(other.search_vector(v(1), 1)) == ["r/y"]
        # rows a lagging index still holds: for the removed URI, and for URIs never stored
        for uri in ("r/x", "gone/1", "gone/2", "r/y-old"):
            plant_vector(backend, uri, v(1))
        for s in (store, other):
            assert _uris(s.search_vector(v(1), 2)) == ["r/y", "keep/z"]
            assert s.search_vector(v(1), 10, "gone") == [] and s.search_vector(v(1), 10, "r/x") == []
            assert _uris(s.search_vector(v(1), 10, "r")) == ["r/y"]

    def test_reclaiming_the_vector_index(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        for uri in ("r/x", "r/y", "keep/z"):
            store.put_document(uri, uri)
        embed_pending(store, {"r/x": v(1), "r/y": v(1, 0.3), "keep/z": v(1, 1)})
        stats = other.vector_index_stats()
        assert stats["available"] is True and stats["vectors"] == 3 and stats["documents"] == 3
        assert other.vector_index_reclaimable() == 0
        assert store.reclaim_vector_index() == 0 and other.vector_index_stats() == stats
        store.remove_subtree("r/x")
        for uri in ("gone/1", "gone/2", "r/y/child"):
            plant_vector(backend, uri, v(1))
        reclaimable = other.vector_index_reclaimable()
        stats = other.vector_index_stats()
        assert reclaimable >= 3 and stats["reclaimable"] == reclaimable
        assert stats["documents"] == 2 and stats["vectors"] == 2 + reclaimable
        assert other.vector_index_reclaimable() == reclaimable  # reporting touches nothing
        store.reclaim_vector_index()
        for s in (store, other):
            assert s.vector_index_reclaimable() == 0
            stats = s.vector_index_stats()
            assert (stats["vectors"], stats["documents"], stats["reclaimable"]) == (2, 2, 0)
            assert _uris(s.search_vector(v(1), 10)) == ["r/y", "keep/z"]
            assert set(s.load_memory_vectors(["r/y", "keep/z"])) == {"r/y", "keep/z"}

    def test_a_rewritten_document_is_not_ranked_on_its_old_vector(
        self, store: ContextStore, other: ContextStore
    ) -> None:
        store.put_document("p/a", "peanuts")
        store.put_document("p/b", "travel")
        embed_pending(store, {"p/a": v(1), "p/b": v(0.5, 1)})
        assert _uris(other.search_vector(v(1), 10)) == ["p/a", "p/b"]
        store.put_document("p/a", "hotels")
        for s in (store, other):
            assert _uris(s.search_vector(v(1), 10)) == ["p/b"]
            assert s.load_memory_vectors(["p/a"]) == {}
        assert other.vector_index_stats()["documents"] == 1
        embed_pending(store, {"p/a": v(0, 0, 1)})
        assert _uris(other.search_vector(v(0, 0, 1), 1)) == ["p/a"]

    def test_an_embedding_for_a_rewritten_document_is_discarded(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("d/a", "one")
        first = store.dequeue_job([EMBED])
        assert first is not None
        store.put_document("d/a", "two")
        assert other.put_embedding_result(first.id, "d/a", v(1)) == "discarded"
        assert other.count_jobs("d/a", ["done"]) == 1 and other.count_jobs("d/a", ["running"]) == 0
        assert store.search_vector(v(1), 10) == [] and store.load_memory_vectors(["d/a"]) == {}
        second = store.dequeue_job([EMBED])
        assert second is not None and second.payload["uri"] == "d/a"
        assert other.put_embedding_result(second.id, "d/a", v(1)) == "stored"
        assert _uris(store.search_vector(v(1), 10)) == ["d/a"]
        assert other.count_jobs("d/a", ["done"]) == 2

    def test_an_embedding_for_a_removed_node_is_discarded(self, store: ContextStore, other: ContextStore) -> None:
        """A standing job (no URI of its own, so removal keeps it) whose node went away."""
        store.put_document("d/b", "x", jobs=[])
        store.put_document("d/c", "x", jobs=[])
        job = store.enqueue_job(EMBED, {"uri": "d/b"})
        layer_job = store.enqueue_job(SUMMARIZE, {"uri": "d/b"})
        never = store.enqueue_job(EMBED, {"uri": "d/never"})
        store.remove_subtree("d/b")
        assert other.put_embedding_result(job, "d/b", v(1)) == "discarded"
        assert other.put_layer_result(layer_job, "d/b", "abstract", "summary") == "discarded"
        assert other.put_embedding_result(never, "d/never", v(1)) == "discarded"
        assert other.put_embedding_result(store.enqueue_job(EMBED), "d", v(1)) == "discarded"  # a directory
        for s in (store, other):
            assert s.get_node("d/b") is None and s.search_vector(v(1), 10) == []
            assert s.load_memory_vectors(["d/b", "d/never"]) == {}
            assert s.vector_index_reclaimable() == 0
            assert s.queue_stats() == {"pending": 0, "running": 0, "done": 4, "failed": 0}

    def test_a_result_of_work_claimed_before_a_removal_is_discarded(
        self, store: ContextStore, other: ContextStore
    ) -> None:
        """The seed's scenario: a worker claimed the job, the subtree was removed (its jobs with
        it), then the worker reports. The URI stays gone and the answer is "discarded"."""
        store.put_document("w/a", "x")
        embed = store.dequeue_job([EMBED])
        summarize = store.dequeue_job([SUMMARIZE])
        assert embed is not None and summarize is not None
        other.remove_subtree("w")
        assert store.put_embedding_result(embed.id, "w/a", v(1)) == "discarded"
        assert store.put_layer_result(summarize.id, "w/a", "abstract", "late") == "discarded"
        for s in (store, other):
            assert s.get_node("w/a") is None and s.search_vector(v(1), 10) == []
            assert s.vector_index_stats()["vectors"] == 0
            assert s.count_jobs("w", list(_ALL_JOB_STATUSES)) == 0

    def test_layer_results(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("y/a", "long text", overview="mine")
        job = store.dequeue_job([SUMMARIZE])
        assert job is not None
        assert other.put_layer_result(job.id, "y/a", "abstract", "short") == "stored"
        got = store.get_node("y/a")
        assert got is not None and (got.content, got.abstract, got.overview) == ("long text", "short", "mine")
        assert other.count_jobs("y/a", ["done"]) == 1
        store.put_document("y/a", "longer text")
        job = store.dequeue_job([SUMMARIZE])
        assert job is not None
        store.put_document("y/a", "longest text")
        assert other.put_layer_result(job.id, "y/a", "overview", "stale") == "discarded"
        got = store.get_node("y/a")
        assert got is not None and (got.content, got.abstract, got.overview) == ("longest text", "short", "mine")
        assert other.count_jobs("y/a", ["done"]) == 2

    def test_load_memory_vectors(self, store: ContextStore, other: ContextStore) -> None:
        store.put_document("lv/a", "x")
        store.put_document("lv/b", "x")
        embed_pending(store, {"lv/a": v(1, 2, 3, 4)})
        got = other.load_memory_vectors(["lv/a", "lv/b", "lv/missing", "lv"])
        assert list(got) == ["lv/a"]
        assert np.frombuffer(got["lv/a"], "<f4").tolist() == [1.0, 2.0, 3.0, 4.0]
        assert other.load_memory_vectors([]) == {}
