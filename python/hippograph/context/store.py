"""`ContextStore`: documents in a URI tree, memory assertions, sessions, commit bookkeeping and a
durable job queue, every group that must agree changed in one transaction (docs/context.md).

Each method checks its arguments before it touches the backend (a refused call writes nothing) and
runs in one backend transaction, so a removal, a skill replacement or a claimed job is all or
nothing, across processes sharing the backend.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar

import numpy as np

from ..engine.checks import as_embedding, finite_float
from ..engine.paths import check_repo_name, store_path
from ..errors import ConfigError, NotFoundError, ValidationError
from . import jobs, memories, sessions, tree
from .keys import add, counter, decode, encode, node_key, subtree, uri_of
from .model import (
    ConflictPair,
    ContextHit,
    EmbeddingsUnavailableError,
    IsRootError,
    Job,
    LineMatch,
    MemoryRow,
    Message,
    PathMatch,
    SessionConflictError,
    SkillFile,
    TreeNode,
    check_limit,
    check_name,
    check_offset,
    check_payload,
    check_query,
    check_text,
    check_unit,
    check_uri,
)
from .protocol import ContextBackend, KvTxn
from .vectors import VectorCache

__all__ = ["ContextStore", "open_context"]

T = TypeVar("T")
JobSpec = tuple[str, Mapping[str, Any] | None]
_DIM = b"dim"
_MAX_TOP_K = 1000
_MAX_LIMIT = 10_000
_EXCERPT = 280
_FIELDS = frozenset({"uri", "content", "abstract", "overview", "score"})
_MEMORY_STATUSES = frozenset({"active", "superseded", "candidate"})
_JOB_STATUSES = frozenset(jobs.STATUSES)


def _now() -> int:
    return time.time_ns() // 1000


def _fields(value: object) -> frozenset[str]:
    if value is None:
        return tree.ALL_FIELDS
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError("fields must be a collection of field names")
    got = frozenset(value)
    unknown = got - _FIELDS
    if unknown:
        raise ValidationError(f"unknown field {sorted(map(str, unknown))[0]!r:.40}")
    return got | {"uri"}


def _scope(value: object, what: str = "scope") -> tuple[str, ...]:
    return () if value is None else check_uri(value, what, root=True)


def _matches(text: str | None, needle: str) -> bool:
    return text is not None and needle in text.casefold()


class ContextStore:
    """The context store over any `ContextBackend` (`open_context` opens one on LMDB).

    `document_jobs`: the background work every written document gets unless a call names its own
    (kinds, each enqueued with ``{"uri": ...}``), so a file written by `replace_skill` is like one
    written by `put_document`. `dim`: the vector dimension (None: the first stored vector's).
    """

    def __init__(
        self,
        backend: ContextBackend,
        *,
        document_jobs: Sequence[str] = (),
        dim: int | None = None,
        max_attempts: int = 5,
        owns_backend: bool = False,
    ) -> None:
        for name in ("context_write", "context_read"):
            if not callable(getattr(backend, name, None)):
                raise ConfigError(f"{type(backend).__name__} does not hold a context store (no {name})")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0):
            raise ConfigError(f"dim must be a positive int, got {dim!r}")
        self.backend = backend
        self.document_jobs = tuple(check_name(k, "document_jobs kind") for k in document_jobs)
        self.max_attempts = check_limit(max_attempts, "max_attempts", 1000)
        self._dim = dim
        self._vectors = VectorCache()
        self._owns = owns_backend

    # -- plumbing -------------------------------------------------------------------------------

    def close(self) -> None:
        if self._owns:
            close = getattr(self.backend, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_write(fn)

    def _read(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_read(fn)

    def _jobs(self, value: object) -> list[tuple[str, dict[str, Any]]]:
        if value is None:
            return [(k, {}) for k in self.document_jobs]
        if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):
            raise ValidationError("jobs must be a list of (kind, payload) pairs")
        out = []
        for item in value:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValidationError("jobs must be a list of (kind, payload) pairs")
            out.append((check_name(item[0], "job kind"), check_payload(item[1])))
        return out

    def _document(
        self,
        t: KvTxn,
        segments: tuple[str, ...],
        content: str,
        abstract: str | None,
        overview: str | None,
        work: list[tuple[str, dict[str, Any]]],
        now: int,
    ) -> None:
        """A document and its background work: one outcome (the caller's transaction)."""
        revision = tree.put_document(t, segments, content, abstract, overview)
        uri = "/".join(segments)
        for kind, payload in work:
            jobs.enqueue(t, kind, {"uri": uri, **payload}, now, uri=segments, revision=revision,
                         max_attempts=self.max_attempts)  # fmt: skip

    def _active_dim(self, t: KvTxn) -> int | None:
        return self._dim or counter(t, _DIM) or None

    # -- documents ------------------------------------------------------------------------------

    def put_document(
        self,
        uri: str,
        content: str,
        *,
        abstract: str | None = None,
        overview: str | None = None,
        jobs: Iterable[JobSpec] | None = None,
    ) -> None:
        """Writes the document (missing parents created) and its jobs in one step; a layer passed
        as None keeps the stored one; the document's previous vector is retired."""
        segments = check_uri(uri)
        text = check_text(content, "content")
        assert text is not None
        layers = check_text(abstract, "abstract", none=True), check_text(overview, "overview", none=True)
        work = self._jobs(jobs)
        self._write(lambda t: self._document(t, segments, text, *layers, work, _now()))

    def get_node(self, uri: str, *, fields: Iterable[str] | None = None) -> TreeNode | None:
        segments = check_uri(uri)
        chosen = _fields(fields)
        rec = self._read(lambda t: tree.node(t, segments))
        return None if rec is None else tree.to_node(segments, rec, chosen)

    def get_nodes(self, uris: Sequence[str]) -> list[TreeNode | None]:
        """The nodes at `uris` in one read, in input order (None where nothing is stored)."""
        if isinstance(uris, str):
            raise ValidationError("uris must be a sequence of str, got a single str")
        all_segments = [check_uri(u) for u in uris]

        def run(t: KvTxn) -> list[TreeNode | None]:
            out: list[TreeNode | None] = []
            for segments in all_segments:
                rec = tree.node(t, segments)
                out.append(None if rec is None else tree.to_node(segments, rec))
            return out

        return self._read(run)

    def list_children(self, uri: str = "") -> list[str]:
        """Names of the node's direct children, sorted (`NotFoundError` when no directory is there)."""
        segments = check_uri(uri, root=True)

        def run(t: KvTxn) -> list[str]:
            if segments:
                rec = tree.node(t, segments)
                if rec is None or rec["k"] != "dir":
                    raise NotFoundError("directory", uri)
            head = node_key(segments)[:-1] + b"\x01" if segments else b""
            stop = node_key(segments)[:-1] + b"\x02" if segments else None
            names: list[str] = []
            start = head
            while True:
                got = next(t.range(tree.NODES, start, stop), None)
                if got is None:
                    return names
                name_end = got[0].index(b"\x00", len(head))
                sep = got[0].find(b"\x01", len(head))
                end = name_end if sep < 0 else min(sep, name_end)
                names.append(got[0][len(head) : end].decode())
                start = got[0][:end] + b"\x02"  # past this child's subtree

        return self._read(run)

    def _docs(self, t: KvTxn, segments: tuple[str, ...]) -> Iterable[tuple[str, dict[str, Any]]]:
        for key, raw in t.range(tree.NODES, *subtree(segments)):
            rec = decode(raw, "context node")
            if rec["k"] == "doc":
                yield uri_of(key), rec

    def list_all_documents(
        self, scope: str = "", limit: int = 100, offset: int = 0, filter: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Documents under `scope` in URI order, paged: (rows of uri, enabled, group_tag; the
        filtered total). `filter`: ``substring`` (of the URI, any case), ``include_disabled``
        (default False), ``group``."""
        segments = _scope(scope)
        check_limit(limit, "limit", _MAX_LIMIT)
        check_offset(offset)
        keep = self._listing_filter(filter)

        def run(t: KvTxn) -> tuple[list[dict[str, Any]], int]:
            rows, total = [], 0
            for uri, rec in self._docs(t, segments):
                if keep(uri, rec):
                    if offset <= total < offset + limit:
                        rows.append({"uri": uri, "enabled": bool(rec.get("e", True)), "group_tag": rec.get("g", "")})
                    total += 1
            return rows, total

        return self._read(run)

    @staticmethod
    def _listing_filter(value: Mapping[str, Any] | None) -> Callable[[str, dict[str, Any]], bool]:
        f = dict(value or {})
        unknown = set(f) - {"substring", "include_disabled", "group", "owner"}
        if unknown:
            raise ValidationError(f"unknown filter {sorted(unknown)[0]!r:.40}")
        sub = None if f.get("substring") is None else check_query(f["substring"], "filter substring").casefold()
        group = None if f.get("group") is None else check_text(f["group"], "filter group")
        disabled = f.get("include_disabled", False)
        if not isinstance(disabled, bool):
            raise ValidationError("filter include_disabled must be a bool")

        def keep(uri: str, rec: dict[str, Any]) -> bool:
            return ((disabled or bool(rec.get("e", True))) and (sub is None or sub in uri.casefold())
                    and (group is None or rec.get("g", "") == group))  # fmt: skip

        return keep

    def document_count(self, prefix: str = "") -> int:
        """Documents at `prefix` or below it (whole segments; directories not counted)."""
        segments = _scope(prefix, "prefix")
        if not segments:
            return self._read(lambda t: counter(t, tree.DOCS))
        return self._read(lambda t: sum(1 for _ in self._docs(t, segments)))

    def find_paths(self, query: str, scope_uri: str | None = None, limit: int = 50) -> list[PathMatch]:
        """Nodes whose URI holds `query` (literally, any case) under `scope_uri`, in URI order."""
        needle = check_query(query).casefold()
        segments = _scope(scope_uri, "scope_uri")
        check_limit(limit, "limit", _MAX_LIMIT)

        def run(t: KvTxn) -> list[PathMatch]:
            out = []
            for key, raw in t.range(tree.NODES, *subtree(segments)):
                uri = uri_of(key)
                if needle in uri.casefold():
                    out.append(PathMatch(uri=uri, name=uri.rsplit("/", 1)[-1], kind=decode(raw, "context node")["k"]))
                    if len(out) >= limit:
                        break
            return out

        return self._read(run)

    def set_node_enabled(self, uri: str, enabled: bool) -> None:
        """Enables or disables the node and its subtree (disabled: kept, but out of search and listings)."""
        segments = check_uri(uri)
        if not isinstance(enabled, bool):
            raise ValidationError("enabled must be a bool")
        self._set_field(segments, "e", enabled)

    def set_node_group(self, uri: str, group_tag: str) -> None:
        """Tags the node and its subtree with an operator group (empty: no group)."""
        segments = check_uri(uri)
        tag = check_text(group_tag, "group_tag")
        if tag:
            check_name(tag, "group_tag")
        self._set_field(segments, "g", tag)

    def _set_field(self, segments: tuple[str, ...], name: str, value: Any) -> None:
        def run(t: KvTxn) -> None:
            if tree.node(t, segments) is None:
                raise NotFoundError("node", "/".join(segments))
            tree.set_field(t, segments, name, value)

        self._write(run)

    def remove_subtree(self, uri: str) -> None:
        """Removes the node and everything below it from every group keyed by URI (documents,
        vectors, memories, commit bookkeeping, jobs) in one step. The root is refused."""
        if uri == "":
            raise IsRootError("the root of the tree cannot be removed")
        segments = check_uri(uri)

        def run(t: KvTxn) -> None:
            if tree.node(t, segments) is None:
                raise NotFoundError("node", uri)
            tree.remove(t, segments)

        self._write(run)

    def replace_skill(self, uri: str, files: Sequence[SkillFile], *, owner: str | None = None) -> dict[str, Any]:
        """Replaces the whole subtree at `uri` with `files` in one step (each with the usual jobs);
        ``{"replaced": whether something was there, "files": how many}``."""
        if uri == "":
            raise IsRootError("the root of the tree cannot be replaced")
        segments = check_uri(uri)
        if isinstance(files, (str, Mapping)) or not isinstance(files, Sequence) or not files:
            raise ValidationError("files must be a non-empty sequence of SkillFile")
        placed: dict[tuple[str, ...], str] = {}
        for i, f in enumerate(files):
            if not isinstance(f, SkillFile):
                raise ValidationError(f"files[{i}] must be a SkillFile, got {type(f).__name__}")
            path = check_uri("/".join(f.path) if isinstance(f.path, (tuple, list)) else f.path, f"files[{i}].path")
            text = check_text(f.content, f"files[{i}].content")
            assert text is not None
            placed[segments + path] = text
        owned = None if owner is None else check_name(owner, "owner")
        work = self._jobs(None)

        def run(t: KvTxn) -> dict[str, Any]:
            replaced = tree.node(t, segments) is not None
            if replaced:
                tree.remove(t, segments)
            now = _now()
            for path, text in placed.items():
                self._document(t, path, text, None, None, work, now)
            root = tree.node(t, segments)
            if root is None or root["k"] != "dir":
                raise ValidationError(f"a skill's files go below its root {uri!r}, not at it")
            root["s"] = {"owner": owned, "files": len(placed)}
            t.put(tree.NODES, node_key(segments), encode(root))
            return {"replaced": replaced, "files": len(placed)}

        return self._write(run)

    def list_skill_roots(
        self, limit: int = 100, offset: int = 0, filter: Mapping[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        """Installed skill roots in URI order, paged: (rows of name, owner, uri, files, enabled,
        group_tag; the filtered total). `filter` as `list_all_documents`, plus ``owner``."""
        check_limit(limit, "limit", _MAX_LIMIT)
        check_offset(offset)
        keep = self._listing_filter(filter)
        owner = None if filter is None or filter.get("owner") is None else check_name(filter["owner"], "filter owner")

        def run(t: KvTxn) -> tuple[list[dict[str, Any]], int]:
            rows, total = [], 0
            for key, raw in t.range(tree.NODES):
                rec = decode(raw, "context node")
                skill = rec.get("s")
                uri = uri_of(key)
                if not skill or not keep(uri, rec) or (owner is not None and skill.get("owner") != owner):
                    continue
                if offset <= total < offset + limit:
                    rows.append({"name": uri.rsplit("/", 1)[-1], "owner": skill.get("owner"), "uri": uri,
                                 "files": skill.get("files", 0), "enabled": bool(rec.get("e", True)),
                                 "group_tag": rec.get("g", "")})  # fmt: skip
                total += 1
            return rows, total

        return self._read(run)

    # -- search ---------------------------------------------------------------------------------

    def search_keyword(
        self, query: str, scope_prefix: str | None = None, limit: int = 50, fields: Iterable[str] | None = None
    ) -> list[TreeNode]:
        """Enabled documents whose content, abstract or overview holds `query` (literally, any
        case), under `scope_prefix`, in URI order, at most `limit` (read no further)."""
        needle = check_query(query).casefold()
        segments = _scope(scope_prefix, "scope_prefix")
        check_limit(limit, "limit", _MAX_LIMIT)
        chosen = _fields(fields)

        def run(t: KvTxn) -> list[TreeNode]:
            out = []
            for uri, rec in self._docs(t, segments):
                if rec.get("e", True) and any(_matches(rec.get(f), needle) for f in ("c", "a", "o")):
                    out.append(tree.to_node(tuple(uri.split("/")), rec, chosen))
                    if len(out) >= limit:
                        break
            return out

        return self._read(run)

    def grep_content(self, query: str, scope_uri: str | None = None, limit: int = 100) -> list[LineMatch]:
        """Lines of full document content holding `query` (literally, any case), in URI then line
        order, each with its one-based number and an excerpt of at most 280 characters around the match."""
        needle = check_query(query).casefold()
        segments = _scope(scope_uri, "scope_uri")
        check_limit(limit, "limit", _MAX_LIMIT)

        def run(t: KvTxn) -> list[LineMatch]:
            out = []
            for uri, rec in self._docs(t, segments):
                content = rec.get("c")
                if not rec.get("e", True) or not _matches(content, needle):
                    continue
                for number, line in enumerate(str(content).splitlines(), 1):
                    at = line.casefold().find(needle)
                    if at >= 0:
                        out.append(LineMatch(uri=uri, line_number=number, excerpt=_excerpt(line, at, len(needle))))
                        if len(out) >= limit:
                            return out
            return out

        return self._read(run)

    def _query(self, t: KvTxn, vector: object) -> np.ndarray[Any, np.dtype[np.float32]]:
        query = as_embedding(vector, "query vector")
        dim = self._active_dim(t)
        if dim is not None and len(query) != dim:
            raise ValidationError(f"query vector has dimension {len(query)}; the store's is {dim}")
        return query

    def search_vector(
        self, vector: object, top_k: int = 10, scope_prefix: str | None = None, fields: Iterable[str] | None = None
    ) -> list[ContextHit]:
        """Nearest enabled documents by cosine under `scope_prefix`, best first (ties by URI). A
        hit is only returned for a document the store holds now; rows it does not hold do not
        count towards `top_k`."""
        check_limit(top_k, "top_k", _MAX_TOP_K)
        segments = _scope(scope_prefix, "scope_prefix")
        chosen = _fields(fields)

        def run(t: KvTxn) -> list[ContextHit]:
            query = self._query(t, vector)
            cache = self._vectors.current(t, self._active_dim(t))
            lo, hi = cache.slice_of(segments)
            rows, sims = cache.ranked(query, lo, hi)
            out = []
            for row, sim in zip(rows, sims, strict=True):
                key = cache.keys[row]
                raw = t.get(tree.NODES, key)
                if raw is None:
                    continue
                rec = decode(raw, "context node")
                if rec["k"] != "doc" or not rec.get("e", True):
                    continue
                n = tree.to_node(tuple(uri_of(key).split("/")), rec, chosen)
                out.append(
                    ContextHit(uri=n.uri, content=n.content, abstract=n.abstract, overview=n.overview, score=sim)
                )
                if len(out) >= top_k:
                    break
            return out

        return self._read(run)

    def load_memory_vectors(self, uris: Sequence[str]) -> dict[str, bytes]:
        """Stored vectors of `uris` in the active dimension, as little-endian float32 bytes; a URI
        without one is absent. Reads storage only."""
        if isinstance(uris, str):
            raise ValidationError("uris must be a sequence of str, got a single str")
        all_segments = [check_uri(u) for u in uris]

        def run(t: KvTxn) -> dict[str, bytes]:
            dim = self._active_dim(t)
            out = {}
            for segments in all_segments:
                raw = t.get(tree.VECTORS, node_key(segments))
                if raw is not None:
                    rec = decode(raw, "context vector")
                    if rec["d"] == dim:
                        out["/".join(segments)] = bytes(rec["v"])
            return out

        return self._read(run)

    def put_embedding_result(self, job_id: int, uri: str, vector: object) -> Literal["stored", "discarded"]:
        """Stores a job's embedding of the document at `uri`, unless the document is gone or was
        written again since the job was enqueued (`discarded`); the job is completed either way."""
        job_id = _job_id(job_id)
        segments = check_uri(uri)
        emb = as_embedding(vector)

        def run(t: KvTxn) -> Literal["stored", "discarded"]:
            dim = self._active_dim(t)
            if dim is not None and len(emb) != dim:
                raise ValidationError(f"embedding has dimension {len(emb)}; the store's is {dim}")
            job = jobs.get(t, job_id)
            rec = tree.node(t, segments)
            now = _now()
            jobs.complete(t, job_id, now)
            if rec is None or rec["k"] != "doc" or (job.get("r") is not None and job["r"] != rec.get("r")):
                return "discarded"
            if dim is None:
                add(t, _DIM, len(emb))
            key = node_key(segments)
            if t.get(tree.VECTORS, key) is None:
                add(t, tree.VECTOR_COUNT, 1)
            t.put(tree.VECTORS, key, encode({"d": len(emb), "v": emb.astype("<f4").tobytes(), "r": rec.get("r")}))
            add(t, tree.VECTOR_SEQ, 1)
            return "stored"

        return self._write(run)

    def put_layer_result(self, job_id: int, uri: str, layer: str, text: str) -> Literal["stored", "discarded"]:
        """Stores a job's `abstract` or `overview` of the document at `uri`, unless it is gone (or
        written again since); the job is completed either way."""
        job_id = _job_id(job_id)
        segments = check_uri(uri)
        if layer not in ("abstract", "overview"):
            raise ValidationError(f"layer must be 'abstract' or 'overview', got {layer!r:.40}")
        value = check_text(text, "text")

        def run(t: KvTxn) -> Literal["stored", "discarded"]:
            job = jobs.get(t, job_id)
            rec = tree.node(t, segments)
            jobs.complete(t, job_id, _now())
            if rec is None or rec["k"] != "doc" or (job.get("r") is not None and job["r"] != rec.get("r")):
                return "discarded"
            rec["a" if layer == "abstract" else "o"] = value
            t.put(tree.NODES, node_key(segments), encode(rec))
            return "stored"

        return self._write(run)

    def vector_index_stats(self) -> dict[str, Any]:
        """``available``, ``vectors`` (rows held; None when unavailable), ``documents`` (documents
        they describe), ``reclaimable`` (rows naming a URI the store no longer holds)."""

        def run(t: KvTxn) -> dict[str, Any]:
            vectors = counter(t, tree.VECTOR_COUNT)
            reclaimable = self._reclaimable(t)
            return {"available": True, "vectors": vectors, "documents": vectors - len(reclaimable),
                    "reclaimable": len(reclaimable), "dim": self._active_dim(t)}  # fmt: skip

        return self._read(run)

    @staticmethod
    def _reclaimable(t: KvTxn) -> list[bytes]:
        out = []
        for key, _ in t.range(tree.VECTORS):
            raw = t.get(tree.NODES, key)
            if raw is None or decode(raw, "context node")["k"] != "doc":
                out.append(key)
        return out

    def vector_index_reclaimable(self) -> int:
        return self._read(lambda t: len(self._reclaimable(t)))

    def reclaim_vector_index(self) -> int:
        """Deletes every vector row naming a URI the store no longer holds; how many."""

        def run(t: KvTxn) -> int:
            doomed = self._reclaimable(t)
            for key in doomed:
                tree.retire_vector(t, key)
            return len(doomed)

        return self._write(run)

    # -- memories -------------------------------------------------------------------------------

    def put_memory(
        self,
        uri: str,
        value: str,
        confidence: float,
        source: str | None = None,
        *,
        importance: float | None = None,
        status: Literal["active", "candidate"] = "active",
        jobs: Iterable[JobSpec] | None = None,
    ) -> None:
        """Records an assertion at `uri` with its document and jobs in one step. An active
        re-record of the active value is a no-op; a candidate does not overwrite an existing document."""
        segments = check_uri(uri)
        text = check_text(value, "value")
        assert text is not None
        conf = check_unit(confidence, "confidence")
        imp = None if importance is None else check_unit(importance, "importance")
        src = None if source is None else check_name(source, "source")
        if status not in ("active", "candidate"):
            raise ValidationError(f"status must be 'active' or 'candidate', got {status!r:.40}")
        work = self._jobs(jobs)

        def run(t: KvTxn) -> None:
            now = _now()
            if memories.put(t, segments, text, conf, src, imp, status, now) is None:
                return
            if status == "active" or tree.node(t, segments) is None:
                self._document(t, segments, text, None, None, work, now)

        self._write(run)

    def recall_memories(
        self,
        prefix: str = "",
        source: str | None = None,
        statuses: Iterable[str] = ("active",),
        *,
        top_k: int = 500,
    ) -> list[MemoryRow]:
        """Assertions at `prefix` or below with one of `statuses`, most confident first, at most
        `top_k` (1..500); every row says whether more matched (`truncated`)."""
        segments = _scope(prefix, "prefix")
        src = None if source is None else check_name(source, "source")
        if isinstance(statuses, str) or not isinstance(statuses, Iterable):
            raise ValidationError("statuses must be a collection of str")
        wanted = frozenset(statuses)
        if not wanted or wanted - _MEMORY_STATUSES:
            raise ValidationError(f"statuses must be a non-empty subset of {sorted(_MEMORY_STATUSES)}")
        check_limit(top_k, "top_k", 500)
        return self._read(lambda t: memories.recall(t, subtree(segments), src, wanted, top_k))

    def promote_memory(self, uri: str) -> None:
        """The latest candidate at `uri` becomes the active assertion (the prior one superseded) and
        the document's content (`NoCandidateError` when none waits)."""
        segments = check_uri(uri)

        def run(t: KvTxn) -> None:
            now = _now()
            value = memories.promote(t, segments, now)
            self._document(t, segments, value, None, None, self._jobs(None), now)

        self._write(run)

    def reject_memory_candidate(self, uri: str) -> None:
        segments = check_uri(uri)
        self._write(lambda t: memories.reject(t, segments))

    def memory_recorded(self, uri: str) -> bool:
        segments = check_uri(uri)
        return self._read(lambda t: memories.recorded(t, segments))

    def mark_memories_surfaced(self, ids: Iterable[int]) -> None:
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise ValidationError("ids must be a collection of int")
        checked = [_job_id(i, "memory id") for i in ids]
        self._write(lambda t: memories.mark_surfaced(t, checked, _now()))

    def memory_conflict_pairs(self, prefix: str = "", threshold: float = 0.9) -> list[ConflictPair]:
        """Pairs of active memories at distinct URIs under `prefix` whose stored vectors have a
        cosine of at least `threshold`, most similar first (`EmbeddingsUnavailableError` when none
        of them has a vector)."""
        segments = _scope(prefix, "prefix")
        floor = finite_float(threshold, "threshold")

        def run(t: KvTxn) -> tuple[list[str], list[bytes]]:
            uris = memories.active_under(t, subtree(segments))
            dim = self._active_dim(t)
            got, rows = [], []
            for u in uris:
                raw = t.get(tree.VECTORS, node_key(tuple(u.split("/"))))
                if raw is not None:
                    rec = decode(raw, "context vector")
                    if rec["d"] == dim:
                        got.append(u)
                        rows.append(bytes(rec["v"]))
            if uris and not got:
                raise EmbeddingsUnavailableError(f"no active memory under {prefix!r} has a stored vector")
            return got, rows

        uris, rows = self._read(run)
        if len(uris) < 2:
            return []
        m = np.frombuffer(b"".join(rows), "<f4").astype(np.float32).reshape(len(rows), -1)
        norms = np.linalg.norm(m, axis=1)
        norms[norms == 0] = np.inf
        unit = m / norms[:, None]
        sims = unit @ unit.T
        a, b = np.nonzero(np.triu(sims >= floor, k=1))
        pairs = [
            ConflictPair(uris[i], uris[j], float(min(1.0, sims[i, j])))
            for i, j in zip(a.tolist(), b.tolist(), strict=True)
        ]
        pairs.sort(key=lambda p: (-p.similarity, p.uri_a, p.uri_b))
        return pairs

    def memory_stats(self) -> dict[str, Any]:
        return self._read(memories.stats)

    # -- sessions and commits -------------------------------------------------------------------

    def create_session(self) -> str:
        session_id = uuid.uuid4().hex
        self._write(lambda t: sessions.create(t, session_id, _now()))
        return session_id

    def append_message(self, session_id: str, role: str, content: str) -> int:
        """Appends a message (`NotFoundError` for an unknown session); its sequence number."""
        sid, r = check_name(session_id, "session_id"), check_name(role, "role")
        text = check_text(content, "content")
        assert text is not None
        return self._write(lambda t: sessions.append(t, sid, r, text))

    def get_session(self, session_id: str) -> list[Message]:
        sid = check_name(session_id, "session_id")
        return self._read(lambda t: sessions.messages(t, sid))

    def list_session_ids(self) -> list[str]:
        return self._read(sessions.ids)

    def restore_session(self, session_id: str, messages: Sequence[Message | tuple[str, str]]) -> str:
        """Creates the session with `messages` (``"imported"``); ``"skipped"`` when it already holds
        exactly these (role, content) pairs; `SessionConflictError` when it holds others."""
        sid = check_name(session_id, "session_id")
        pairs = []
        for i, m in enumerate(messages):
            role, content = (m.role, m.content) if isinstance(m, Message) else m
            text = check_text(content, f"messages[{i}].content")
            assert text is not None
            pairs.append((check_name(role, f"messages[{i}].role"), text))

        def run(t: KvTxn) -> str:
            if sessions.exists(t, sid):
                if [(m.role, m.content) for m in sessions.messages(t, sid)] == pairs:
                    return "skipped"
                raise SessionConflictError(sid)
            sessions.create(t, sid, _now())
            for role, content in pairs:
                sessions.append(t, sid, role, content)
            return "imported"

        return self._write(run)

    def put_commit(self, session_id: str, uri: str, content: str, content_hash: str) -> None:
        """Writes the committed document and its (session, destination) hash in one step."""
        sid = check_name(session_id, "session_id")
        segments = check_uri(uri)
        text = check_text(content, "content")
        digest = check_name(content_hash, "content_hash")
        assert text is not None
        work = self._jobs(None)

        def run(t: KvTxn) -> None:
            self._document(t, segments, text, None, None, work, _now())
            sessions.put_commit_hash(t, sid, segments, digest)

        self._write(run)

    def commit_hash(self, session_id: str, uri: str) -> str | None:
        sid = check_name(session_id, "session_id")
        segments = check_uri(uri)
        return self._read(lambda t: sessions.commit_hash(t, sid, segments))

    # -- jobs -----------------------------------------------------------------------------------

    def enqueue_job(
        self, kind: str, payload: Mapping[str, Any] | None = None, *, uri: str | None = None, delay_s: float = 0.0
    ) -> int:
        """Records durable background work (for `uri`, when given: removing it drops the job); its id."""
        k = check_name(kind, "kind")
        body = check_payload(payload)
        segments = None if uri is None else check_uri(uri)
        delay = _delay(delay_s)
        return self._write(lambda t: jobs.enqueue(t, k, body, _now(), uri=segments,
                                                  max_attempts=self.max_attempts, delay_us=delay))  # fmt: skip

    def dequeue_job(self, kinds: Iterable[str]) -> Job | None:
        """Claims the runnable job of one of `kinds` due first, its attempts advanced (None: none)."""
        if isinstance(kinds, str) or not isinstance(kinds, Iterable):
            raise ValidationError("kinds must be a collection of str")
        wanted = sorted({check_name(k, "kind") for k in kinds})
        if not wanted:
            raise ValidationError("kinds must not be empty")
        return self._write(lambda t: jobs.claim(t, wanted, _now()))

    def complete_job(self, job_id: int) -> None:
        i = _job_id(job_id)
        self._write(lambda t: jobs.complete(t, i, _now()))

    def fail_job(self, job_id: int, reason: str | None = None) -> str:
        """Pending again after ``min(300, 2^(attempts-1))`` s while attempts remain, else failed;
        the job's status. `reason`: a classification, never content."""
        i = _job_id(job_id)
        why = None if reason is None else check_name(reason, "reason")
        return self._write(lambda t: jobs.fail(t, i, why, _now()))

    def defer_job(self, job_id: int, delay_s: float = 0.0) -> None:
        """Puts a job back without spending an attempt, due after `delay_s`."""
        i = _job_id(job_id)
        delay = _delay(delay_s)
        self._write(lambda t: jobs.defer(t, i, delay, _now()))

    def cancel_jobs(self, uri: str) -> int:
        """Drops every job for `uri` or below it, in any state; how many."""
        segments = check_uri(uri)
        return self._write(lambda t: jobs.cancel(t, subtree(segments)))

    def reset_running_jobs(self) -> int:
        """Jobs left running (by a process that died) are pending again; how many."""
        return self._write(lambda t: jobs.reset_running(t, _now()))

    def count_jobs(self, uri: str, statuses: Iterable[str]) -> int:
        segments = check_uri(uri, root=True)
        if isinstance(statuses, str) or not isinstance(statuses, Iterable):
            raise ValidationError("statuses must be a collection of str")
        wanted = frozenset(statuses)
        if wanted - _JOB_STATUSES:
            raise ValidationError(f"statuses must be a subset of {sorted(_JOB_STATUSES)}")
        return self._read(lambda t: jobs.count(t, subtree(segments), wanted))

    def count_jobs_of_kind(self, kind: str) -> int:
        k = check_name(kind, "kind")
        return self._read(lambda t: jobs.count_kind(t, k))

    def queue_stats(self) -> dict[str, int]:
        return self._read(jobs.stats)

    def queue_detail(self, limit: int = 20) -> dict[str, Any]:
        """`queue_stats` with ``oldest_pending_ms`` (None when nothing is runnable) and the newest
        `limit` failed jobs with their reasons."""
        check_limit(limit, "limit", _MAX_LIMIT)
        return self._read(lambda t: jobs.detail(t, limit, _now()))

    # -- health ---------------------------------------------------------------------------------

    def healthy(self) -> bool:
        """Whether the durable state can be read at all."""
        try:
            self._read(lambda t: t.get(tree.NODES, b""))
        except Exception:
            return False
        return True

    def stats(self) -> dict[str, Any]:
        """Counts of documents and directories, documents per top subtree, and the bytes the
        database file occupies (None where the backend has no single file); from counters, never a walk."""
        path = getattr(self.backend, "path", None)
        data = None if path is None else os.path.join(path, "data.mdb")
        db_bytes = _allocated(data) if data is not None and os.path.isfile(data) else None

        def run(t: KvTxn) -> dict[str, Any]:
            return {"documents": counter(t, tree.DOCS), "directories": counter(t, tree.DIRS),
                    "by_top_subtree": tree.top_counts(t), "db_bytes": db_bytes, "wal_bytes": None}  # fmt: skip

        return self._read(run)


def _allocated(path: str) -> int:
    """The bytes a file occupies on disk: LMDB's map may make it sparse, its apparent size the map's."""
    st = os.stat(path)
    return min(st.st_size, st.st_blocks * 512)


def _job_id(value: object, what: str = "job id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(f"{what} must be a positive int, got {value!r:.40}")
    return value


def _delay(value: object) -> int:
    seconds = finite_float(value, "delay_s")
    if not 0 <= seconds <= 366 * 86400:
        raise ValidationError(f"delay_s must be in [0, one year], got {seconds}")
    return int(seconds * 1_000_000)


def _excerpt(line: str, at: int, length: int) -> str:
    """At most `_EXCERPT` characters of `line` holding the match at `at`."""
    if len(line) <= _EXCERPT:
        return line
    start = max(0, min(at - (_EXCERPT - length) // 2, len(line) - _EXCERPT))
    return line[start : start + _EXCERPT]


def open_context(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: ContextBackend | None = None,
    durability: Literal["sync", "fast"] = "sync",
    document_jobs: Sequence[str] = (),
    dim: int | None = None,
) -> ContextStore:
    """Opens (creating if needed) the context store `name`: LMDB in `path`, or
    ``./.hippograph/<name>``; or any `ContextBackend` passed as `backend`. The directory may hold
    a graph repo and a scoped store as well."""
    check_repo_name(name)
    if backend is not None and path is not None:
        raise ValidationError("pass either path or backend, not both")
    if backend is not None:
        return ContextStore(backend, document_jobs=document_jobs, dim=dim)
    from ..backends.lmdb import LMDB

    lmdb = LMDB(store_path(name, path), durability=durability)
    return ContextStore(lmdb, document_jobs=document_jobs, dim=dim, owns_backend=True)
