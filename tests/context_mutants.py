"""Broken context stores: the reference `InMemory` backend and `ContextStore`, each with one promise
of the context store's contract broken. tests/test_context_mutations.py checks that
`ContextConformance` catches every one.

A mutant is a backend (its `KvTxn` or its transactions broken) or a `ContextStore` subclass (one
rule of the store broken), with the conformance tests that must catch it. Store mutants mostly
reuse the store's own steps with one of them swapped out for the duration of a call.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from hippograph.backends import InMemory
from hippograph.backends._context import MemoryContext, _MemoryTxn
from hippograph.context import (
    ContextBackend,
    ContextHit,
    ContextStore,
    EmbeddingsUnavailableError,
    KvTxn,
    LineMatch,
    Message,
    TreeNode,
    jobs,
    memories,
    sessions,
    tree,
)
from hippograph.context.base import DIM, now_us
from hippograph.context.keys import add, counter, decode, encode, node_key, read_u64, subtree, uri_of
from hippograph.context.model import check_uri
from hippograph.engine.checks import as_embedding

# -- backends ------------------------------------------------------------------------------------


class _NotAtomic(MemoryContext):
    def write(self, fn: Callable[[Any], Any]) -> Any:
        with self._lock.write():
            t = _MemoryTxn(self._spaces, True)
            try:
                return fn(t)  # nothing put back when fn raises
            finally:
                t.live = False


class _WritableReads(MemoryContext):
    def read(self, fn: Callable[[Any], Any]) -> Any:
        return self.write(fn)


class _ServesUncommitted(MemoryContext):
    """A cache in front of the spaces, filled by every write as it happens, aborted or not."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[str, bytes], bytes | None] = {}

    def write(self, fn: Callable[[Any], Any]) -> Any:
        seen = self.seen

        class Txn(_MemoryTxn):
            def put(self, space: str, key: bytes, value: bytes) -> None:
                super().put(space, key, value)
                seen[(space, key)] = value

            def delete(self, space: str, key: bytes) -> bool:
                seen[(space, key)] = None
                return super().delete(space, key)

        return super().write(lambda t: fn(_swap(t, Txn)))

    def read(self, fn: Callable[[Any], Any]) -> Any:
        seen = self.seen

        class Txn(_MemoryTxn):
            def get(self, space: str, key: bytes) -> bytes | None:
                return seen[(space, key)] if (space, key) in seen else super().get(space, key)

        return super().read(lambda t: fn(_swap(t, Txn)))


class _RangeIgnoresStop(_MemoryTxn):
    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return super().range(space, start, None, reverse=reverse)


class _RangeIgnoresReverse(_MemoryTxn):
    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return super().range(space, start, stop)


class _DeleteAlwaysTrue(_MemoryTxn):
    def delete(self, space: str, key: bytes) -> bool:
        super().delete(space, key)
        return True


def _swap(t: _MemoryTxn, txn: type[_MemoryTxn]) -> _MemoryTxn:
    t.__class__ = txn
    return t


def _with_txn(txn: type[_MemoryTxn]) -> type[MemoryContext]:
    class Context(MemoryContext):
        def write(self, fn: Callable[[Any], Any]) -> Any:
            return super().write(lambda t: fn(_swap(t, txn)))

        def read(self, fn: Callable[[Any], Any]) -> Any:
            return super().read(lambda t: fn(_swap(t, txn)))

    return Context


def _backend(context: type[MemoryContext]) -> Callable[[], ContextBackend]:
    def make() -> ContextBackend:
        b = InMemory()
        b._context = context()
        return b

    return make


# -- stores --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _swapped(target: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, old)


def _during(method: str, target: Any, name: str, value: Any) -> type[ContextStore]:
    """A store whose `method` runs with ``target.name`` swapped for `value`."""
    original = getattr(ContextStore, method)

    def run(self: ContextStore, *args: Any, **kwargs: Any) -> Any:
        with _swapped(target, name, value):
            return original(self, *args, **kwargs)

    return type(f"Swapped_{name}", (ContextStore,), {method: run})


def _overriding(**methods: Callable[..., Any]) -> type[ContextStore]:
    return type("Overridden", (ContextStore,), methods)


_keys_of = tree.keys_of


def _put_always(
    t: KvTxn,
    segments: tuple[str, ...],
    value: str,
    confidence: float,
    source: str | None,
    importance: float | None,
    status: Any,
    now: int,
) -> int:
    """`memories.put` without the no-op for an active re-record of the active value."""
    rows = memories._rows_at(t, segments)
    supersedes = memories._supersede_active(t, rows, now) if status == "active" else None
    memory_id = counter(t, memories.NEXT_ID) + 1
    add(t, memories.NEXT_ID, 1)
    rec = {
        "u": "/".join(segments),
        "v": value,
        "c": confidence,
        "i": importance,
        "s": source,
        "st": status,
        "p": supersedes,
        "ls": None,
        "t": now,
    }
    memories._save(t, memory_id, rec, None)
    return memory_id


def _search(
    store: ContextStore, vector: object, top_k: int, scope: str | None, *, join: bool, cut_first: bool
) -> list[ContextHit]:
    """A vector search over the store's cache: `join` checks the node is held and enabled;
    `cut_first` applies `top_k` to the ranked rows before that check."""
    segments = () if scope is None else check_uri(scope, root=True)

    def run(t: KvTxn) -> list[ContextHit]:
        query = store._query(t, vector)
        cache = store._vectors.current(t, store._active_dim(t))
        rows, sims, _ = cache.ranked(query, *cache.slice_of(segments))
        if cut_first:
            rows, sims = rows[:top_k], sims[:top_k]
        out = []
        for row, sim in zip(rows, sims, strict=True):
            raw = t.get(tree.NODES, cache.keys[row])
            rec = {} if raw is None else decode(raw, "node")
            if join and (raw is None or not rec.get("e", True)):
                continue
            out.append(ContextHit(uri_of(cache.keys[row]), rec.get("c"), rec.get("a"), rec.get("o"), sim))
        return out[:top_k]

    if not 1 <= top_k <= 1000:
        raise ValueError("top_k")
    return store._read(run)


def _search_without_join(
    self: ContextStore, vector: object, top_k: int = 10, scope_prefix: str | None = None, fields: Any = None
) -> list[ContextHit]:
    return _search(self, vector, top_k, scope_prefix, join=False, cut_first=False)


def _search_top_k_first(
    self: ContextStore, vector: object, top_k: int = 10, scope_prefix: str | None = None, fields: Any = None
) -> list[ContextHit]:
    return _search(self, vector, top_k, scope_prefix, join=True, cut_first=True)


def _search_string_scope(
    self: ContextStore, vector: object, top_k: int = 10, scope_prefix: str | None = None, fields: Any = None
) -> list[ContextHit]:
    hits = ContextStore.search_vector(self, vector, 1000, None, fields)
    return [h for h in hits if h.uri.startswith(scope_prefix or "")][:top_k]


def _search_any_dimension(
    self: ContextStore, vector: object, top_k: int = 10, scope_prefix: str | None = None, fields: Any = None
) -> list[ContextHit]:
    dim = self._read(self._active_dim) or 1
    q = np.resize(np.asarray(vector, np.float32).ravel(), dim) if np.size(vector) else np.ones(dim, np.float32)
    return ContextStore.search_vector(self, q, min(max(top_k, 1), 1000), scope_prefix, fields)


def _search_positive_only(self: ContextStore, *args: Any, min_score: float | None = None, **kw: Any) -> Any:
    """Keeps only documents of positive cosine, whatever the caller asked for."""
    return ContextStore.search_vector(self, *args, min_score=0.0 if min_score is None else max(min_score, 0.0), **kw)


def _search_floor_ignored(self: ContextStore, *args: Any, min_score: float | None = None, **kw: Any) -> Any:
    return ContextStore.search_vector(self, *args, **kw)


def _embed_unchecked(self: ContextStore, job_id: int, uri: str, vector: object) -> str:
    segments, emb = check_uri(uri), as_embedding(vector)

    def run(t: KvTxn) -> str:
        jobs.complete(t, job_id, now_us())
        if self._active_dim(t) is None:
            add(t, DIM, len(emb))
        key = node_key(segments)
        if t.get(tree.VECTORS, key) is None:
            add(t, tree.VECTOR_COUNT, 1)
        t.put(tree.VECTORS, key, encode({"d": len(emb), "v": emb.astype("<f4").tobytes(), "r": None}))
        add(t, tree.VECTOR_SEQ, 1)
        return "stored"

    return self._write(run)


def _discard_leaves_job(self: ContextStore, job_id: int, uri: str, vector: object) -> str:
    if self.get_node(uri) is None:
        return "discarded"
    return ContextStore.put_embedding_result(self, job_id, uri, vector)


def _layer_resurrects(self: ContextStore, job_id: int, uri: str, layer: str, text: str) -> str:
    segments = check_uri(uri)

    def run(t: KvTxn) -> str:
        jobs.complete(t, job_id, now_us())
        if tree.node(t, segments) is None:
            tree.put_document(
                t, segments, "", text if layer == "abstract" else None, text if layer == "overview" else None
            )
        return "stored"

    return self._write(run)


def _dequeue_any_kind(self: ContextStore, kinds: Any) -> Any:
    present = self._read(lambda t: sorted({k.split(b"\x00", 1)[0].decode() for k in jobs.index_entries(t)[0]}))
    return ContextStore.dequeue_job(self, [*present, *kinds])


def _dequeue_no_attempt(self: ContextStore, kinds: Any) -> Any:
    job = ContextStore.dequeue_job(self, kinds)
    if job is None:
        return None

    def run(t: KvTxn) -> None:
        rec = jobs.get(t, job.id)
        jobs._move(t, job.id, rec, now_us(), a=rec["a"] - 1)

    self._write(run)
    return job._replace(attempts=job.attempts - 1)


def _defer_spends(self: ContextStore, job_id: int, delay_s: float = 0.0) -> None:
    def run(t: KvTxn) -> None:
        now = now_us()
        jobs._move(t, job_id, jobs.get(t, job_id), now, st="pending", ra=now + int(delay_s * 1e6))

    self._write(run)


def _cancel_pending_only(self: ContextStore, uri: str) -> int:
    segments = check_uri(uri)

    def run(t: KvTxn) -> int:
        n = 0
        for key in _keys_of(t, jobs.QUEUE, jobs._by_uri(subtree(segments))):
            job_id = read_u64(key, len(key) - 8)
            if jobs.get(t, job_id)["st"] == "pending":
                t.delete(jobs.QUEUE, key)
                jobs._drop(t, job_id)
                n += 1
        return n

    return self._write(run)


def _count_jobs_by_string(self: ContextStore, uri: str, statuses: Any) -> int:
    wanted = set(statuses)

    def run(t: KvTxn) -> int:
        return sum(
            1
            for key in jobs.index_entries(t)[1]
            if uri_of(key).startswith(uri) and jobs.get(t, read_u64(key, len(key) - 8))["st"] in wanted
        )

    return self._read(run)


def _count_kind_pending(self: ContextStore, kind: str) -> int:
    head = kind.encode() + b"\x00"
    return self._read(lambda t: sum(1 for _ in t.range(jobs.QUEUE, head, kind.encode() + b"\x01")))


def _failed_oldest_first(self: ContextStore, limit: int = 20) -> dict[str, Any]:
    got = ContextStore.queue_detail(self, 10_000)
    return {**got, "failed": list(reversed(got["failed"]))[:limit]}


def _restore_overwrites(self: ContextStore, session_id: str, messages: Any) -> str:
    pairs = [(m.role, m.content) if isinstance(m, Message) else tuple(m) for m in messages]

    def run(t: KvTxn) -> str:
        head = session_id.encode() + b"\x00"
        for key in _keys_of(t, sessions.MESSAGES, (head, session_id.encode() + b"\x01")):
            t.delete(sessions.MESSAGES, key)
        sessions.create(t, session_id, now_us())
        for role, content in pairs:
            sessions.append(t, session_id, role, content)
        return "imported"

    return self._write(run)


def _append_creates(self: ContextStore, session_id: str, role: str, content: str) -> int:
    def run(t: KvTxn) -> int:
        if not sessions.exists(t, session_id):
            sessions.create(t, session_id, now_us())
        return sessions.append(t, session_id, role, content)

    return self._write(run)


def _layers_cleared(
    self: ContextStore, uri: str, content: str, *, abstract: Any = None, overview: Any = None, jobs: Any = None
) -> None:
    ContextStore.put_document(self, uri, content, abstract=abstract or "", overview=overview or "", jobs=jobs)


def _jobs_apart(
    self: ContextStore, uri: str, content: str, *, abstract: Any = None, overview: Any = None, jobs: Any = None
) -> None:
    ContextStore.put_document(self, uri, content, abstract=abstract, overview=overview, jobs=[])
    for kind, payload in self._jobs(jobs):
        self.enqueue_job(kind, {"uri": uri, **payload}, uri=uri)


def _parents_first(self: ContextStore, uri: str, content: str, **options: Any) -> None:
    segments = check_uri(uri)
    self._write(lambda t: tree._ensure_dirs(t, segments))
    ContextStore.put_document(self, uri, content, **options)


def _memory_apart(
    self: ContextStore,
    uri: str,
    value: str,
    confidence: float,
    source: str | None = None,
    *,
    importance: float | None = None,
    status: Any = "active",
    jobs: Any = None,
) -> None:
    segments = check_uri(uri)
    done = self._write(lambda t: memories.put(t, segments, value, confidence, source, importance, status, now_us()))
    if done is not None and (status == "active" or self.get_node(uri) is None):
        self.put_document(uri, value, jobs=jobs)


def _candidate_overwrites(
    self: ContextStore, uri: str, value: str, confidence: float, source: str | None = None, **options: Any
) -> None:
    ContextStore.put_memory(self, uri, value, confidence, source, **options)
    self.put_document(uri, value, jobs=[])


def _candidate_without_document(
    self: ContextStore, uri: str, value: str, confidence: float, source: str | None = None, **options: Any
) -> None:
    if options.get("status") != "candidate":
        ContextStore.put_memory(self, uri, value, confidence, source, **options)
        return
    segments = check_uri(uri)
    self._write(lambda t: memories.put(t, segments, value, confidence, source, None, "candidate", now_us()))


def _promote_without_document(self: ContextStore, uri: str) -> None:
    segments = check_uri(uri)
    self._write(lambda t: memories.promote(t, segments, now_us()))


def _reject_everything(self: ContextStore, uri: str) -> None:
    ContextStore.reject_memory_candidate(self, uri)
    head = node_key(check_uri(uri))
    self._write(lambda t: memories.remove_range(t, (head, head[:-1] + b"\x01")))


def _recall_clamped(
    self: ContextStore, prefix: str = "", source: str | None = None, statuses: Any = ("active",), *, top_k: int = 500
) -> Any:
    return ContextStore.recall_memories(self, prefix, source, statuses, top_k=min(max(top_k, 1), 500))


def _recall_never_truncated(
    self: ContextStore, prefix: str = "", source: str | None = None, statuses: Any = ("active",), *, top_k: int = 500
) -> Any:
    rows = ContextStore.recall_memories(self, prefix, source, statuses, top_k=top_k)
    return [r._replace(truncated=False) for r in rows]


def _conflicts_quietly(self: ContextStore, prefix: str = "", threshold: float = 0.9) -> Any:
    try:
        return ContextStore.memory_conflict_pairs(self, prefix, threshold)
    except EmbeddingsUnavailableError:
        return []


def _commit_apart(self: ContextStore, session_id: str, uri: str, content: str, content_hash: str) -> None:
    self.put_document(uri, content)
    segments = check_uri(uri)
    self._write(lambda t: sessions.put_commit_hash(t, session_id, segments, content_hash))


def _replace_in_two_steps(self: ContextStore, uri: str, files: Any, *, owner: str | None = None) -> Any:
    segments = check_uri(uri)
    self._write(lambda t: tree.remove(t, segments) if tree.node(t, segments) is not None else None)
    return ContextStore.replace_skill(self, uri, files, owner=owner)


def _remove_root_too(self: ContextStore, uri: str) -> None:
    if uri == "":
        self._write(lambda t: tree.remove(t, ()))
        return
    ContextStore.remove_subtree(self, uri)


def _document_count_by_string(self: ContextStore, prefix: str = "") -> int:
    return self._read(lambda t: sum(1 for u, _ in self._docs(t, ()) if u.startswith(prefix)))


def _grep_regex(self: ContextStore, query: str, scope_uri: str | None = None, limit: int = 100) -> list[LineMatch]:
    pattern = re.compile(query, re.IGNORECASE)

    def run(t: KvTxn) -> list[LineMatch]:
        out = []
        for uri, rec in self._docs(t, () if scope_uri is None else check_uri(scope_uri)):
            for number, line in enumerate(str(rec.get("c") or "").split("\n"), 1):
                if rec.get("e", True) and pattern.search(line):
                    out.append(LineMatch(uri, number, line[:280]))
        return out[:limit]

    return self._read(run)


def _grep_zero_based(self: ContextStore, query: str, scope_uri: str | None = None, limit: int = 100) -> Any:
    got = ContextStore.grep_content(self, query, scope_uri, limit)
    return [m._replace(line_number=m.line_number - 1) for m in got]


def _grep_whole_lines(self: ContextStore, query: str, scope_uri: str | None = None, limit: int = 100) -> Any:
    def line_of(m: LineMatch) -> LineMatch:
        node = self.get_node(m.uri)
        assert node is not None and node.content is not None
        return m._replace(excerpt=node.content.splitlines()[m.line_number - 1])

    return [line_of(m) for m in ContextStore.grep_content(self, query, scope_uri, limit)]


def _keyword_case_sensitive(
    self: ContextStore, query: str, scope_prefix: str | None = None, limit: int = 50, fields: Any = None
) -> list[TreeNode]:
    hits = ContextStore.search_keyword(self, query, scope_prefix, limit, None)
    return [n for n in hits if any(query in (x or "") for x in (n.content, n.abstract, n.overview))]


def _find_paths_unbounded(self: ContextStore, query: str, scope_uri: str | None = None, limit: int = 50) -> Any:
    return ContextStore.find_paths(self, query, scope_uri, 10_000)


def _children_reversed(self: ContextStore, uri: str = "") -> list[str]:
    return list(reversed(ContextStore.list_children(self, uri)))


def _children_never_missing(self: ContextStore, uri: str = "") -> list[str]:
    try:
        return ContextStore.list_children(self, uri)
    except LookupError:
        return []


def _get_nodes_sorted(self: ContextStore, uris: Any) -> Any:
    return ContextStore.get_nodes(self, sorted(set(uris)) if not isinstance(uris, str) else uris)


def _listing_includes_disabled(
    self: ContextStore, scope: str = "", limit: int = 100, offset: int = 0, filter: Any = None
) -> Any:
    return ContextStore.list_all_documents(self, scope, limit, offset, {"include_disabled": True, **(filter or {})})


def _total_is_the_page(
    self: ContextStore, scope: str = "", limit: int = 100, offset: int = 0, filter: Any = None
) -> Any:
    rows, _ = ContextStore.list_all_documents(self, scope, limit, offset, filter)
    return rows, len(rows)


def _only_the_node(name: str) -> Callable[..., None]:
    def set_one(self: ContextStore, uri: str, value: Any) -> None:
        segments = check_uri(uri)

        def run(t: KvTxn) -> None:
            rec = tree.node(t, segments)
            if rec is not None:
                t.put(tree.NODES, node_key(segments), encode({**rec, name: value}))
                add(t, tree.VECTOR_SEQ, 1)

        self._write(run)

    return set_one


def _vectors_never_stale(self: ContextStore) -> dict[str, Any]:
    got = ContextStore.vector_index_stats(self)
    return {**got, "documents": got["vectors"], "reclaimable": 0}


def _load_vectors_padded(self: ContextStore, uris: Any) -> dict[str, bytes]:
    got = ContextStore.load_memory_vectors(self, uris)
    return {u: got.get(u, np.zeros(4, "<f4").tobytes()) for u in uris}


def _stats_undercount(self: ContextStore) -> dict[str, Any]:
    got = ContextStore.stats(self)
    return {**got, "directories": got["directories"] + 1}


def _session_reversed(self: ContextStore, session_id: str) -> list[Message]:
    return list(reversed(ContextStore.get_session(self, session_id)))


@dataclass(frozen=True)
class Mutant:
    """A broken context store and the conformance tests (``name`` or ``name[param id]``) that must
    catch it."""

    catches: tuple[str, ...]
    backend: Callable[[], ContextBackend] = InMemory
    store: type[ContextStore] = ContextStore


def _refusal(case: str) -> str:
    return f"test_bad_input_is_refused_and_writes_nothing[{case}]"


def _part_way(call: str) -> str:
    return f"test_a_call_that_fails_part_way_writes_nothing[{call}]"


MUTANTS: dict[str, Mutant] = {
    # backends
    "NotAtomic": Mutant(
        ("test_a_failing_write_writes_nothing", "test_a_failing_replacement_leaves_the_previous_contents"),
        _backend(_NotAtomic),
    ),
    "WritableReads": Mutant(("test_a_read_transaction_refuses_writes",), _backend(_WritableReads)),
    "ServesUncommitted": Mutant(("test_a_failing_write_writes_nothing",), _backend(_ServesUncommitted)),
    "RangeIgnoresStop": Mutant(
        ("test_ranges_are_bytewise_ordered_and_bounded", "test_document_count_is_exact_or_descendant"),
        _backend(_with_txn(_RangeIgnoresStop)),
    ),
    "RangeIgnoresReverse": Mutant(
        ("test_ranges_are_bytewise_ordered_and_bounded", "test_a_job_out_of_attempts_fails_with_its_reason"),
        _backend(_with_txn(_RangeIgnoresReverse)),
    ),
    "DeleteAlwaysTrue": Mutant(
        ("test_ranges_are_bytewise_ordered_and_bounded", "test_layers_passed_as_none_keep_the_stored_ones"),
        _backend(_with_txn(_DeleteAlwaysTrue)),
    ),
    # documents and the tree
    "LayersNoneCleared": Mutant(
        ("test_layers_passed_as_none_keep_the_stored_ones",), store=_overriding(put_document=_layers_cleared)
    ),
    "JobsInASecondWrite": Mutant((_part_way("put_document"),), store=_overriding(put_document=_jobs_apart)),
    "ParentsBeforeChecks": Mutant(
        (_refusal("content not str at a new path"),), store=_overriding(put_document=_parents_first)
    ),
    "GetNodesSorted": Mutant(("test_get_nodes_keeps_the_input_order",), store=_overriding(get_nodes=_get_nodes_sorted)),
    "ChildrenReversed": Mutant(
        ("test_list_children_is_sorted_and_needs_a_directory",), store=_overriding(list_children=_children_reversed)
    ),
    "ChildrenNeverMissing": Mutant(
        ("test_list_children_is_sorted_and_needs_a_directory",),
        store=_overriding(list_children=_children_never_missing),
    ),
    "ListingIncludesDisabled": Mutant(
        ("test_list_all_documents_filters",), store=_overriding(list_all_documents=_listing_includes_disabled)
    ),
    "TotalIsThePage": Mutant(
        ("test_list_all_documents_pages_in_tree_order",), store=_overriding(list_all_documents=_total_is_the_page)
    ),
    "CountByStringPrefix": Mutant(
        ("test_document_count_is_exact_or_descendant",), store=_overriding(document_count=_document_count_by_string)
    ),
    "FindPathsUnbounded": Mutant(("test_find_paths",), store=_overriding(find_paths=_find_paths_unbounded)),
    "KeywordCaseSensitive": Mutant(("test_search_keyword",), store=_overriding(search_keyword=_keyword_case_sensitive)),
    "GrepAsRegex": Mutant(
        ("test_matching_takes_wildcards_and_metacharacters_literally",), store=_overriding(grep_content=_grep_regex)
    ),
    "GrepZeroBasedLines": Mutant(("test_grep_content",), store=_overriding(grep_content=_grep_zero_based)),
    "GrepWholeLines": Mutant(
        ("test_grep_excerpts_are_bounded_and_hold_the_match",), store=_overriding(grep_content=_grep_whole_lines)
    ),
    "EnabledOnlyTheNode": Mutant(
        ("test_set_node_enabled_applies_to_the_subtree",), store=_overriding(set_node_enabled=_only_the_node("e"))
    ),
    "GroupOnlyTheNode": Mutant(
        ("test_set_node_group_applies_to_the_subtree",), store=_overriding(set_node_group=_only_the_node("g"))
    ),
    "StatsMiscounted": Mutant(
        ("test_stats_count_documents_and_directories",), store=_overriding(stats=_stats_undercount)
    ),
    "HealthyAlways": Mutant(("test_healthy",), store=_overriding(healthy=lambda self: True)),
    # removal and skills
    "RemoveKeepsJobs": Mutant(
        ("test_remove_subtree_removes_every_store",), store=_during("remove_subtree", jobs, "cancel", lambda t, rng: 0)
    ),
    "RemoveKeepsMemories": Mutant(
        ("test_remove_subtree_removes_every_store",),
        store=_during("remove_subtree", memories, "remove_range", lambda t, rng: None),
    ),
    "RemoveKeepsCommits": Mutant(
        ("test_remove_subtree_removes_every_store", "test_a_commit_writes_the_document_and_its_hash_together"),
        store=_during(
            "remove_subtree",
            tree,
            "keys_of",
            lambda t, space, rng: [] if space == tree.COMMITS else _keys_of(t, space, rng),
        ),
    ),
    "RemoveMiscounts": Mutant(
        ("test_stats_count_documents_and_directories",),
        store=_during("remove_subtree", tree, "_count", lambda *a: None),
    ),
    "RemoveRootToo": Mutant(
        (_refusal("remove root"), "test_a_refused_removal_changes_nothing"),
        store=_overriding(remove_subtree=_remove_root_too),
    ),
    "ReplaceSkillMerges": Mutant(
        ("test_replace_skill_replaces_the_whole_subtree",),
        store=_during("replace_skill", tree, "remove", lambda t, segments: 0),
    ),
    "ReplaceSkillInTwoSteps": Mutant(
        ("test_a_failing_replacement_leaves_the_previous_contents", _part_way("replace_skill")),
        store=_overriding(replace_skill=_replace_in_two_steps),
    ),
    # vectors
    "SearchWithoutJoin": Mutant(
        ("test_a_removed_uri_is_never_surfaced", "test_disabled_documents_are_not_hits_and_do_not_use_up_top_k"),
        store=_overriding(search_vector=_search_without_join),
    ),
    "TopKBeforeJoin": Mutant(
        ("test_a_removed_uri_is_never_surfaced", "test_disabled_documents_are_not_hits_and_do_not_use_up_top_k"),
        store=_overriding(search_vector=_search_top_k_first),
    ),
    "ScopeByStringPrefix": Mutant(
        ("test_search_vector_ranks_by_cosine_within_scope",), store=_overriding(search_vector=_search_string_scope)
    ),
    "AnyQueryDimension": Mutant(
        ("test_search_vector_refuses_bad_bounds_and_dimensions",),
        store=_overriding(search_vector=_search_any_dimension),
    ),
    "PositiveCosinesOnly": Mutant(
        ("test_search_vector_returns_the_k_nearest_however_far",),
        store=_overriding(search_vector=_search_positive_only),
    ),
    "MinScoreIgnored": Mutant(
        ("test_search_vector_returns_the_k_nearest_however_far",),
        store=_overriding(search_vector=_search_floor_ignored),
    ),
    "RewriteKeepsVector": Mutant(
        ("test_a_rewritten_document_is_not_ranked_on_its_old_vector",),
        store=_during("put_document", tree, "retire_vector", lambda t, key: None),
    ),
    "EmbeddingWithoutNodeCheck": Mutant(
        (
            "test_an_embedding_for_a_removed_node_is_discarded",
            "test_an_embedding_for_a_rewritten_document_is_discarded",
        ),
        store=_overriding(put_embedding_result=_embed_unchecked),
    ),
    "DiscardLeavesTheJob": Mutant(
        ("test_an_embedding_for_a_removed_node_is_discarded",),
        store=_overriding(put_embedding_result=_discard_leaves_job),
    ),
    "LayerResurrects": Mutant(
        ("test_an_embedding_for_a_removed_node_is_discarded",), store=_overriding(put_layer_result=_layer_resurrects)
    ),
    "VectorsNeverStale": Mutant(
        ("test_reclaiming_the_vector_index",), store=_overriding(vector_index_stats=_vectors_never_stale)
    ),
    "ReclaimNothing": Mutant(
        ("test_reclaiming_the_vector_index",), store=_overriding(reclaim_vector_index=lambda self: 0)
    ),
    "VectorsForUnembedded": Mutant(
        ("test_load_memory_vectors",), store=_overriding(load_memory_vectors=_load_vectors_padded)
    ),
    # memories
    "MemoryInTwoSteps": Mutant(
        (_refusal("memory at a directory with children"), _part_way("put_memory")),
        store=_overriding(put_memory=_memory_apart),
    ),
    "RerecordAppends": Mutant(
        ("test_an_active_rerecord_of_the_same_value_is_a_no_op",),
        store=_during("put_memory", memories, "put", _put_always),
    ),
    "CandidateOverwrites": Mutant(
        ("test_a_candidate_does_not_overwrite_a_document",), store=_overriding(put_memory=_candidate_overwrites)
    ),
    "CandidateWithoutDocument": Mutant(
        ("test_a_candidate_at_an_empty_uri_gets_a_document",), store=_overriding(put_memory=_candidate_without_document)
    ),
    "PromoteKeepsActive": Mutant(
        ("test_promote_memory",),
        store=_during("promote_memory", memories, "_supersede_active", lambda t, rows, now: None),
    ),
    "PromoteWithoutDocument": Mutant(
        ("test_promote_memory",), store=_overriding(promote_memory=_promote_without_document)
    ),
    "RejectDropsHistory": Mutant(
        ("test_reject_keeps_the_active_and_superseded_history",),
        store=_overriding(reject_memory_candidate=_reject_everything),
    ),
    "RecallClamped": Mutant(
        ("test_recall_memories_is_bounded_and_says_when",), store=_overriding(recall_memories=_recall_clamped)
    ),
    "RecallNeverTruncated": Mutant(
        ("test_recall_memories_is_bounded_and_says_when",), store=_overriding(recall_memories=_recall_never_truncated)
    ),
    "SurfacingNotRecorded": Mutant(
        ("test_surfacing_and_memory_stats",), store=_overriding(mark_memories_surfaced=lambda self, ids: None)
    ),
    "ConflictsQuietly": Mutant(
        ("test_memory_conflicts_need_stored_vectors",), store=_overriding(memory_conflict_pairs=_conflicts_quietly)
    ),
    # sessions and commits
    "RestoreOverwrites": Mutant(("test_restore_session",), store=_overriding(restore_session=_restore_overwrites)),
    "AppendCreatesSessions": Mutant(("test_unknown_sessions",), store=_overriding(append_message=_append_creates)),
    "SessionReversed": Mutant(
        ("test_sessions_keep_their_messages_in_order",), store=_overriding(get_session=_session_reversed)
    ),
    "CommitInTwoSteps": Mutant(
        (_part_way("put_commit"),),
        store=_overriding(put_commit=_commit_apart),
    ),
    # jobs
    "DequeueIgnoresKinds": Mutant(
        ("test_a_dequeue_claims_only_the_kinds_asked",), store=_overriding(dequeue_job=_dequeue_any_kind)
    ),
    "DequeueSpendsNoAttempt": Mutant(("test_reset_running_jobs",), store=_overriding(dequeue_job=_dequeue_no_attempt)),
    "FailWithoutBackoff": Mutant(
        ("test_a_failed_job_waits_out_its_backoff",), store=_during("fail_job", jobs, "BACKOFF_MAX_S", 0)
    ),
    "DeferSpendsAnAttempt": Mutant(
        ("test_defer_does_not_spend_an_attempt",), store=_overriding(defer_job=_defer_spends)
    ),
    "CancelPendingOnly": Mutant(
        ("test_cancel_jobs_drops_the_subtree_in_any_state",), store=_overriding(cancel_jobs=_cancel_pending_only)
    ),
    "ResetNothing": Mutant(("test_reset_running_jobs",), store=_overriding(reset_running_jobs=lambda self: 0)),
    "CountJobsByStringPrefix": Mutant(
        ("test_count_jobs_by_statuses_and_subtree",), store=_overriding(count_jobs=_count_jobs_by_string)
    ),
    "CountKindPendingOnly": Mutant(
        ("test_count_jobs_of_kind",), store=_overriding(count_jobs_of_kind=_count_kind_pending)
    ),
    "FailedOldestFirst": Mutant(
        ("test_a_job_out_of_attempts_fails_with_its_reason",), store=_overriding(queue_detail=_failed_oldest_first)
    ),
}
"""Every mutant, by name."""

REFERENCE = Mutant(())
"""The untouched reference: it must pass every test any mutant names."""
