"""What the context conformance suite's sections share: vectors, dumps of the backend, failing
writes, prepared states and the tables of calls the suite runs over."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from ...context import (
    SPACES,
    ContextBackend,
    ContextStore,
    IsRootError,
    KvTxn,
    NoCandidateError,
    SessionConflictError,
    SkillFile,
)
from ...context import tree as _tree
from ...context.keys import add, encode, node_key
from ...errors import HippographError, NotFoundError, StorageError, ValidationError

__all__ = [
    "DOCUMENT_JOBS",
    "EMBED",
    "SUMMARIZE",
    "FailingWrites",
    "Snapshot",
    "SuiteBase",
    "Vector",
    "dump",
    "embed_pending",
    "plant_vector",
    "v",
]

EMBED = "embed"
SUMMARIZE = "summarize"
DOCUMENT_JOBS = (EMBED, SUMMARIZE)
"""The background work every document written in these tests gets (one job of each kind)."""
_DIM = 4
_ALL_JOB_STATUSES = ("pending", "running", "done", "failed")
_ALL_MEMORY_STATUSES = ("active", "superseded", "candidate")

T = TypeVar("T")
Vector = Sequence[float]
Snapshot = dict[str, list[tuple[bytes, bytes]]]


def v(*xs: float) -> list[float]:
    """A vector of the tests' dimension, padded with zeros."""
    return [float(x) for x in xs] + [0.0] * (_DIM - len(xs))


def dump(backend: ContextBackend) -> Snapshot:
    """Every record of every space, in key order: what "writes nothing" compares."""
    return backend.context_read(lambda t: {space: list(t.range(space)) for space in SPACES})


def embed_pending(store: ContextStore, vectors: Mapping[str, Vector]) -> dict[int, str]:
    """Runs every runnable embedding job as a worker would: the vector given for its URI, or the job
    just completed when none is given. What each result was reported as, by job id."""
    out: dict[int, str] = {}
    while (job := store.dequeue_job([EMBED])) is not None:
        uri = job.payload.get("uri")
        if isinstance(uri, str) and uri in vectors:
            out[job.id] = store.put_embedding_result(job.id, uri, vectors[uri])
        else:
            store.complete_job(job.id)
    return out


def plant_vector(backend: ContextBackend, uri: str, vector: Vector) -> None:
    """An index row for `uri`, written the way a lagging index leaves one: whether the node store
    holds the URI is not checked. The store's vector dimension must already be `len(vector)`."""
    key = node_key(tuple(uri.split("/")))
    row = np.asarray(vector, "<f4")

    def run(t: KvTxn) -> None:
        if t.get(_tree.VECTORS, key) is None:
            add(t, _tree.VECTOR_COUNT, 1)
        t.put(_tree.VECTORS, key, encode({"d": len(row), "v": row.tobytes(), "r": None}))
        add(t, _tree.VECTOR_SEQ, 1)

    backend.context_write(run)


class FailingWrites:
    """The backend under test, but a write into `space` raises `StorageError`: how a call that
    fails part way is made to happen, whatever the backend. The backend's own transaction has to
    undo what the call wrote before it."""

    def __init__(self, backend: ContextBackend, space: str) -> None:
        self.backend = backend
        self.space = space

    def context_read(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_read(fn)

    def context_write(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_write(lambda t: fn(_FailOn(t, self.space)))


class _FailOn:
    def __init__(self, t: KvTxn, space: str) -> None:
        self.t = t
        self.space = space

    def get(self, space: str, key: bytes) -> bytes | None:
        return self.t.get(space, key)

    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self.t.range(space, start, stop, reverse=reverse)

    def put(self, space: str, key: bytes, value: bytes) -> None:
        self._fail(space)
        self.t.put(space, key, value)

    def delete(self, space: str, key: bytes) -> bool:
        self._fail(space)
        return self.t.delete(space, key)

    def _fail(self, space: str) -> None:
        if space == self.space:
            raise StorageError(f"injected failure writing {space}", operation="context_write")


def _uris(hits: Sequence[Any]) -> list[str]:
    return [h.uri for h in hits]


def _job_statuses(store: ContextStore, uri: str = "") -> dict[str, int]:
    return {s: store.count_jobs(uri, [s]) for s in _ALL_JOB_STATUSES}


def _seeded(store: ContextStore) -> dict[str, Any]:
    """A store holding one of everything, for the refusal tests."""
    store.put_document("seed/doc", "peanut allergy\nsecond line", abstract="a", overview="o")
    store.put_document("seed/dir/leaf", "leaf")
    embed_pending(store, {"seed/doc": v(1, 0, 0, 0)})
    store.put_memory("seed/memory", "vegetarian", 0.8, "chat")
    store.put_memory("seed/memory", "vegan", 0.6, status="candidate")
    store.restore_session("seedsession", [("user", "hi"), ("assistant", "hello")])
    store.put_commit("seedsession", "seed/committed", "done", "h1")
    job = store.enqueue_job("work", {"n": 1}, uri="seed/doc")
    return {"job": job}


def _prepared_subtree(store: ContextStore, i: int) -> str:
    """A subtree holding a document with its jobs and vector, a memory and a commit."""
    base = f"part/{i}"
    store.put_document(f"{base}/doc", "peanut")
    embed_pending(store, {f"{base}/doc": v(1)})
    store.put_memory(f"{base}/memory", "vegetarian", 0.9)
    store.put_commit("partsession", f"{base}/committed", "c", "h")
    return base


def _prepared_candidate(store: ContextStore, i: int) -> str:
    uri = f"cand/{i}"
    store.put_memory(uri, "vegetarian", 0.9)
    store.put_memory(uri, "vegan", 0.5, status="candidate")
    return uri


def _prepared_skill(store: ContextStore, i: int) -> str:
    uri = f"skills/s{i}"
    store.replace_skill(uri, [SkillFile(("old.md",), "old"), SkillFile(("d", "x.md"), "x")], owner="o")
    store.put_memory(f"{uri}/notes", "note", 0.5)
    return uri


def _prepared_job(store: ContextStore, i: int) -> int:
    job = store.enqueue_job(f"part{i}", {"i": i}, uri=f"jobs/{i}")
    claimed = store.dequeue_job([f"part{i}"])
    assert claimed is not None and claimed.id == job
    return job


def _prepared_embedding(store: ContextStore, i: int) -> tuple[int, str]:
    uri = f"emb/{i}"
    store.put_document(uri, "x", jobs=[(EMBED, {})])
    job = store.dequeue_job([EMBED])
    assert job is not None and job.payload["uri"] == uri
    return job.id, uri


def _prepared_document(store: ContextStore, i: int) -> str:
    uri = f"again/{i}"
    store.put_document(uri, "old", abstract="A")
    return uri


def _prepared_queue(store: ContextStore, i: int) -> str:
    store.enqueue_job(f"deq{i}", uri=f"deq/{i}")
    return f"deq{i}"


def _prepared_jobs_subtree(store: ContextStore, i: int) -> str:
    _prepared_job(store, i)
    store.enqueue_job(f"part{i}", uri=f"jobs/{i}/below")
    return f"jobs/{i}"


# Every call that writes several records: (how its target is prepared, the call).
_PART_WAY: dict[str, tuple[Callable[[ContextStore, int], Any], Callable[[ContextStore, Any], object]]] = {
    "put_document": (lambda s, i: f"docs/{i}", lambda s, u: s.put_document(u, "new", abstract="a")),
    "put_document again": (_prepared_document, lambda s, u: s.put_document(u, "new")),
    "put_memory": (lambda s, i: f"mem/{i}", lambda s, u: s.put_memory(u, "v", 0.5, "src")),
    "put_memory superseding": (_prepared_candidate, lambda s, u: s.put_memory(u, "carnivore", 0.4)),
    "put_memory candidate": (lambda s, i: f"newcand/{i}", lambda s, u: s.put_memory(u, "c", 0.5, status="candidate")),
    "promote_memory": (_prepared_candidate, lambda s, u: s.promote_memory(u)),
    "reject_memory_candidate": (_prepared_candidate, lambda s, u: s.reject_memory_candidate(u)),
    "put_commit": (lambda s, i: f"commits/{i}", lambda s, u: s.put_commit("partsession", u, "c", "h")),
    "remove_subtree": (_prepared_subtree, lambda s, u: s.remove_subtree(u)),
    "replace_skill": (_prepared_skill, lambda s, u: s.replace_skill(u, [SkillFile(("new.md",), "new")], owner="p")),
    "set_node_enabled": (_prepared_subtree, lambda s, u: s.set_node_enabled(u, False)),
    "put_embedding_result": (_prepared_embedding, lambda s, x: s.put_embedding_result(x[0], x[1], v(1))),
    "restore_session": (
        lambda s, i: f"restored{i}",
        lambda s, sid: s.restore_session(sid, [("user", "a"), ("assistant", "b")]),
    ),
    "append_message": (lambda s, i: s.create_session(), lambda s, sid: s.append_message(sid, "user", "x")),
    "enqueue_job": (lambda s, i: f"enq/{i}", lambda s, u: s.enqueue_job("k", {"n": 1}, uri=u)),
    "dequeue_job": (_prepared_queue, lambda s, k: s.dequeue_job([k])),
    "fail_job": (_prepared_job, lambda s, j: s.fail_job(j, "boom")),
    "complete_job": (_prepared_job, lambda s, j: s.complete_job(j)),
    "cancel_jobs": (_prepared_jobs_subtree, lambda s, u: s.cancel_jobs(u)),
}


# Every refused call: (id, call, the error it raises). Each must leave the backend exactly as it was.
_REFUSALS: list[tuple[str, Callable[[Any, dict[str, Any]], object], type[HippographError]]] = [
    ("empty uri", lambda s, x: s.put_document("", "x"), ValidationError),
    ("empty segment", lambda s, x: s.put_document("a//b", "x"), ValidationError),
    ("leading slash", lambda s, x: s.put_document("/a", "x"), ValidationError),
    ("trailing slash", lambda s, x: s.put_document("a/", "x"), ValidationError),
    ("nul in uri", lambda s, x: s.put_document("a\x00b", "x"), ValidationError),
    ("newline in uri", lambda s, x: s.put_document("a\nb", "x"), ValidationError),
    ("del in uri", lambda s, x: s.put_document("a\x7fb", "x"), ValidationError),
    ("lone surrogate", lambda s, x: s.put_document("a/\ud800", "x"), ValidationError),
    ("uri not str", lambda s, x: s.put_document(7, "x"), ValidationError),
    ("uri bytes", lambda s, x: s.put_document(b"a", "x"), ValidationError),
    ("segment too long", lambda s, x: s.put_document("a/" + "é" * 128, "x"), ValidationError),
    ("too many segments", lambda s, x: s.put_document("/".join("s" * 65), "x"), ValidationError),
    ("uri longer than a key", lambda s, x: s.put_document("/".join(["a" * 255] * 3), "x"), HippographError),
    ("content not str", lambda s, x: s.put_document("a", 5), ValidationError),
    ("content not str at a new path", lambda s, x: s.put_document("new/deep/doc", 5), ValidationError),
    ("content lone surrogate", lambda s, x: s.put_document("new/doc", "a\udc00"), ValidationError),
    ("abstract not str", lambda s, x: s.put_document("a", "x", abstract=3), ValidationError),
    ("empty job kind", lambda s, x: s.put_document("a", "x", jobs=[("", {})]), ValidationError),
    ("job payload not a map", lambda s, x: s.put_document("a", "x", jobs=[("k", 5)]), ValidationError),
    ("jobs as str", lambda s, x: s.put_document("a", "x", jobs="k"), ValidationError),
    ("below a document", lambda s, x: s.put_document("seed/doc/child", "x"), ValidationError),
    ("directory with children", lambda s, x: s.put_document("seed/dir", "x"), ValidationError),
    ("get_node bad uri", lambda s, x: s.get_node("a//b"), ValidationError),
    ("get_nodes str", lambda s, x: s.get_nodes("seed/doc"), ValidationError),
    ("list_children bad uri", lambda s, x: s.list_children("a/"), ValidationError),
    ("list limit 0", lambda s, x: s.list_all_documents(limit=0), ValidationError),
    ("list limit bool", lambda s, x: s.list_all_documents(limit=True), ValidationError),
    ("list offset -1", lambda s, x: s.list_all_documents(offset=-1), ValidationError),
    ("list unknown filter", lambda s, x: s.list_all_documents(filter={"bogus": 1}), ValidationError),
    ("list disabled not bool", lambda s, x: s.list_all_documents(filter={"include_disabled": "y"}), ValidationError),
    ("list empty substring", lambda s, x: s.list_all_documents(filter={"substring": ""}), ValidationError),
    ("document_count bad prefix", lambda s, x: s.document_count("seed/"), ValidationError),
    ("find empty query", lambda s, x: s.find_paths(""), ValidationError),
    ("find long query", lambda s, x: s.find_paths("x" * 257), ValidationError),
    ("find limit 0", lambda s, x: s.find_paths("x", limit=0), ValidationError),
    ("find bad scope", lambda s, x: s.find_paths("x", "seed//doc"), ValidationError),
    ("keyword limit 0", lambda s, x: s.search_keyword("x", limit=0), ValidationError),
    ("keyword unknown field", lambda s, x: s.search_keyword("x", fields=["bogus"]), ValidationError),
    ("grep limit -1", lambda s, x: s.grep_content("x", limit=-1), ValidationError),
    ("grep query not str", lambda s, x: s.grep_content(3), ValidationError),
    ("vector top_k 0", lambda s, x: s.search_vector(v(1), top_k=0), ValidationError),
    ("vector top_k 1001", lambda s, x: s.search_vector(v(1), top_k=1001), ValidationError),
    ("vector wrong dimension", lambda s, x: s.search_vector([1.0, 0.0, 0.0]), ValidationError),
    ("vector nan", lambda s, x: s.search_vector([math.nan] * _DIM), ValidationError),
    ("vector strings", lambda s, x: s.search_vector(["a"] * _DIM), ValidationError),
    ("vector min_score nan", lambda s, x: s.search_vector(v(1), min_score=math.nan), ValidationError),
    ("vector min_score str", lambda s, x: s.search_vector(v(1), min_score="0"), ValidationError),
    ("enabled not bool", lambda s, x: s.set_node_enabled("seed/doc", "no"), ValidationError),
    ("enable missing", lambda s, x: s.set_node_enabled("seed/missing", False), NotFoundError),
    ("group with nul", lambda s, x: s.set_node_group("seed/doc", "a\x00"), ValidationError),
    ("group missing", lambda s, x: s.set_node_group("seed/missing", "g"), NotFoundError),
    ("remove root", lambda s, x: s.remove_subtree(""), IsRootError),
    ("remove missing", lambda s, x: s.remove_subtree("seed/missing"), NotFoundError),
    ("remove sibling prefix", lambda s, x: s.remove_subtree("see"), NotFoundError),
    ("replace root", lambda s, x: s.replace_skill("", [SkillFile(("a",), "x")]), IsRootError),
    ("replace no files", lambda s, x: s.replace_skill("skills/s", []), ValidationError),
    ("replace bad path", lambda s, x: s.replace_skill("skills/s", [SkillFile(("a", ""), "x")]), ValidationError),
    ("replace not a file", lambda s, x: s.replace_skill("skills/s", [("a", "x")]), ValidationError),
    (
        "replace clashing files",
        lambda s, x: s.replace_skill("seed/dir", [SkillFile(("x",), "1"), SkillFile(("x", "y"), "2")]),
        ValidationError,
    ),
    ("confidence above 1", lambda s, x: s.put_memory("m/x", "v", 1.5), ValidationError),
    ("confidence nan", lambda s, x: s.put_memory("m/x", "v", math.nan), ValidationError),
    ("importance below 0", lambda s, x: s.put_memory("m/x", "v", 0.5, importance=-0.1), ValidationError),
    ("memory status superseded", lambda s, x: s.put_memory("m/x", "v", 0.5, status="superseded"), ValidationError),
    ("memory at a directory with children", lambda s, x: s.put_memory("seed/dir", "v", 0.5), ValidationError),
    ("memory below a document", lambda s, x: s.put_memory("seed/doc/m", "v", 0.5), ValidationError),
    ("memory source empty", lambda s, x: s.put_memory("m/x", "v", 0.5, ""), ValidationError),
    ("recall top_k 0", lambda s, x: s.recall_memories(top_k=0), ValidationError),
    ("recall top_k 501", lambda s, x: s.recall_memories(top_k=501), ValidationError),
    ("recall bad status", lambda s, x: s.recall_memories(statuses=["bogus"]), ValidationError),
    ("recall no status", lambda s, x: s.recall_memories(statuses=[]), ValidationError),
    ("recall statuses str", lambda s, x: s.recall_memories(statuses="active"), ValidationError),
    ("promote without candidate", lambda s, x: s.promote_memory("seed/doc"), NoCandidateError),
    ("reject without candidate", lambda s, x: s.reject_memory_candidate("seed/doc"), NoCandidateError),
    ("surfaced ids str", lambda s, x: s.mark_memories_surfaced("12"), ValidationError),
    ("surfaced id 0", lambda s, x: s.mark_memories_surfaced([0]), ValidationError),
    ("append unknown session", lambda s, x: s.append_message("nosuchsession", "user", "x"), NotFoundError),
    ("append bad role", lambda s, x: s.append_message("seedsession", "", "x"), ValidationError),
    ("restore conflict", lambda s, x: s.restore_session("seedsession", [("user", "other")]), SessionConflictError),
    ("restore prefix", lambda s, x: s.restore_session("seedsession", [("user", "hi")]), SessionConflictError),
    ("commit bad uri", lambda s, x: s.put_commit("seedsession", "a//b", "x", "h"), ValidationError),
    ("commit below a document", lambda s, x: s.put_commit("seedsession", "seed/doc/x", "x", "h"), ValidationError),
    ("enqueue empty kind", lambda s, x: s.enqueue_job("", {}), ValidationError),
    ("enqueue bad payload", lambda s, x: s.enqueue_job("k", {"x": object()}), ValidationError),
    ("enqueue negative delay", lambda s, x: s.enqueue_job("k", delay_s=-1), ValidationError),
    ("enqueue bad uri", lambda s, x: s.enqueue_job("k", uri="a//b"), ValidationError),
    ("dequeue no kinds", lambda s, x: s.dequeue_job([]), ValidationError),
    ("dequeue kinds str", lambda s, x: s.dequeue_job("work"), ValidationError),
    ("complete id 0", lambda s, x: s.complete_job(0), ValidationError),
    ("complete unknown", lambda s, x: s.complete_job(x["job"] + 1000), NotFoundError),
    ("fail bad reason", lambda s, x: s.fail_job(x["job"], "a\x00b"), ValidationError),
    ("fail unknown", lambda s, x: s.fail_job(x["job"] + 1000), NotFoundError),
    ("defer negative", lambda s, x: s.defer_job(x["job"], -1.0), ValidationError),
    ("cancel root", lambda s, x: s.cancel_jobs(""), ValidationError),
    ("count bad status", lambda s, x: s.count_jobs("", ["bogus"]), ValidationError),
    ("count statuses str", lambda s, x: s.count_jobs("", "pending"), ValidationError),
    ("kind count empty", lambda s, x: s.count_jobs_of_kind(""), ValidationError),
    ("queue_detail limit 0", lambda s, x: s.queue_detail(0), ValidationError),
    (
        "embedding wrong dimension",
        lambda s, x: s.put_embedding_result(x["job"], "seed/doc", [1.0] * (_DIM + 1)),
        ValidationError,
    ),
    ("embedding unknown job", lambda s, x: s.put_embedding_result(x["job"] + 1000, "seed/doc", v(1)), NotFoundError),
    ("layer unknown", lambda s, x: s.put_layer_result(x["job"], "seed/doc", "summary", "x"), ValidationError),
    ("layer text not str", lambda s, x: s.put_layer_result(x["job"], "seed/doc", "abstract", 3), ValidationError),
    ("vectors str", lambda s, x: s.load_memory_vectors("seed/doc"), ValidationError),
]


class SuiteBase:
    """What each section of the suite calls on the suite itself (`ContextConformance` provides it)."""

    reopen: ClassVar[bool] = False

    def make_backend(self, path: Path) -> ContextBackend:
        raise NotImplementedError(f"{type(self).__name__} must implement make_backend(path)")

    def make_store(self, backend: ContextBackend, **options: Any) -> ContextStore:
        """The store the tests drive (every store of a test shares its backend)."""
        return ContextStore(backend, **options)
