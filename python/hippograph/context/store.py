"""`ContextStore`: documents in a URI tree, memory assertions, sessions, commit bookkeeping and a
durable job queue, every group that must agree changed in one transaction (docs/context.md).

Each method checks its arguments before it touches the backend (a refused call writes nothing) and
runs in one backend transaction, so a removal, a skill replacement or a claimed job is all or
nothing, across processes sharing the backend.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..engine.checks import as_embedding, check_choice, check_flag, finite_float
from ..engine.paths import check_repo_name, store_path
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from ..errors import NotFoundError, ValidationError
from . import jobs, scan, tree
from .base import (
    DIM,
    MAX_LIMIT,
    MAX_TOP_K,
    JobSpec,
    fields_of,
    job_id_of,
    now_us,
    scope_of,
)
from .keys import add, counter, decode, encode, node_key, subtree, uri_of
from .memory_calls import MemoryCalls
from .model import (
    ContextHit,
    IsRootError,
    LineMatch,
    PathMatch,
    SkillFile,
    TreeNode,
    check_limit,
    check_name,
    check_offset,
    check_query,
    check_text,
    check_uri,
    check_uris,
)
from .protocol import ContextBackend, KvTxn
from .queue_calls import QueueCalls
from .vector_snapshot import VectorSnapshot

__all__ = ["ContextStore", "open_context"]


def _matches(text: str | None, needle: str) -> bool:
    return text is not None and needle in text.casefold()


class ContextStore(MemoryCalls, QueueCalls):
    """The context store over any `ContextBackend` (`open_context` opens one on LMDB).

    `document_jobs`: the background work every written document gets unless a call names its own
    (kinds, each enqueued with ``{"uri": ...}``), so a file written by `replace_skill` is like one
    written by `put_document`. `dim`: the vector dimension (None: the first stored vector's).
    `ann`: the vector index that answers searches over most of a large store (None: exact scans).
    """

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
        self._write(lambda t: self._document(t, segments, text, *layers, work, now_us()))

    def get_node(self, uri: str, *, fields: Iterable[str] | None = None) -> TreeNode | None:
        segments = check_uri(uri)
        chosen = tree.ALL_FIELDS if fields is None else fields_of(fields)
        get = self._context_get
        raw = get(tree.NODES, node_key(segments)) if get is not None else self._get_one(tree.NODES, node_key(segments))
        return None if raw is None else tree.to_node(uri, decode(raw, "context node"), chosen)

    def get_nodes(self, uris: Sequence[str]) -> list[TreeNode | None]:
        """The nodes at `uris` in one read, in input order (None where nothing is stored)."""
        all_segments = check_uris(uris)

        def run(t: KvTxn) -> list[TreeNode | None]:
            out: list[TreeNode | None] = []
            for segments in all_segments:
                rec = tree.node(t, segments)
                out.append(None if rec is None else tree.to_node("/".join(segments), rec))
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
        segments = scope_of(scope)
        check_limit(limit, "limit", MAX_LIMIT)
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
        if value is not None and not isinstance(value, Mapping):
            raise ValidationError(f"filter must be a mapping, got {type(value).__name__}")
        f = dict(value or {})
        unknown = set(f) - {"substring", "include_disabled", "group", "owner"}
        if unknown:
            raise ValidationError(f"unknown filter {sorted(unknown)[0]!r:.40}")
        sub = None if f.get("substring") is None else check_query(f["substring"], "filter substring").casefold()
        group = None if f.get("group") is None else check_text(f["group"], "filter group")
        disabled = check_flag(f.get("include_disabled", False), "filter include_disabled")

        def keep(uri: str, rec: dict[str, Any]) -> bool:
            return ((disabled or bool(rec.get("e", True))) and (sub is None or sub in uri.casefold())
                    and (group is None or rec.get("g", "") == group))  # fmt: skip

        return keep

    def document_count(self, prefix: str = "") -> int:
        """Documents at `prefix` or below it (whole segments; directories not counted)."""
        segments = scope_of(prefix, "prefix")
        if not segments:
            return self._read(lambda t: counter(t, tree.DOCS))
        return self._read(lambda t: sum(1 for _ in self._docs(t, segments)))

    def find_paths(self, query: str, scope_uri: str | None = None, limit: int = 50) -> list[PathMatch]:
        """Nodes whose URI holds `query` (literally, any case) under `scope_uri`, in URI order."""
        needle = check_query(query).casefold()
        segments = scope_of(scope_uri, "scope_uri")
        check_limit(limit, "limit", MAX_LIMIT)

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
        segments = check_uri(uri, root=True)
        if not segments:
            raise IsRootError("the root of the tree cannot be removed")

        def run(t: KvTxn) -> None:
            if tree.node(t, segments) is None:
                raise NotFoundError("node", uri)
            tree.remove(t, segments)

        self._write(run)

    def replace_skill(self, uri: str, files: Sequence[SkillFile], *, owner: str | None = None) -> dict[str, Any]:
        """Replaces the whole subtree at `uri` with `files` in one step (each with the usual jobs);
        ``{"replaced": whether something was there, "files": how many}``."""
        segments = check_uri(uri, root=True)
        if not segments:
            raise IsRootError("the root of the tree cannot be replaced")
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
            now = now_us()
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
        check_limit(limit, "limit", MAX_LIMIT)
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
        segments = scope_of(scope_prefix, "scope_prefix")
        check_limit(limit, "limit", MAX_LIMIT)
        chosen = fields_of(fields)

        return self._read(lambda t: scan.keyword(t, segments, needle, limit, chosen))

    def grep_content(self, query: str, scope_uri: str | None = None, limit: int = 100) -> list[LineMatch]:
        """Lines of full document content holding `query` (literally, any case), in URI then line
        order, each with its one-based number and an excerpt of at most 280 characters around the match."""
        needle = check_query(query).casefold()
        segments = scope_of(scope_uri, "scope_uri")
        check_limit(limit, "limit", MAX_LIMIT)

        def run(t: KvTxn) -> list[LineMatch]:
            out = []
            for uri, rec in self._docs(t, segments):
                content = rec.get("c")
                if not rec.get("e", True) or not _matches(content, needle):
                    continue
                for number, raw_line in enumerate(str(content).split("\n"), 1):
                    line = raw_line.removesuffix("\r")  # lines end at LF; a CRLF's CR is not content
                    span = _find(line, needle)
                    if span is not None:
                        out.append(LineMatch(uri=uri, line_number=number, excerpt=_excerpt(line, *span)))
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
        self,
        vector: object,
        top_k: int = 10,
        scope_prefix: str | None = None,
        fields: Iterable[str] | None = None,
        *,
        min_score: float | None = None,
    ) -> list[ContextHit]:
        """The `top_k` enabled documents under `scope_prefix` nearest the query by cosine, best
        first (ties by URI), however far they are: None for `min_score` sets no floor, a number
        keeps only hits scoring above it. A hit is only returned for a document the store holds
        now; rows it does not hold do not count towards `top_k`."""
        check_limit(top_k, "top_k", MAX_TOP_K)
        segments = scope_of(scope_prefix, "scope_prefix")
        chosen = fields_of(fields)
        floor = None if min_score is None else finite_float(min_score, "min_score")

        def run(t: KvTxn) -> list[ContextHit]:
            query = self._query(t, vector)
            cache = self._vectors.current(t, self._active_dim(t))
            lo, hi = cache.slice_of(segments)
            if hi > lo:  # most of the store: its vector index's best rows, when they hold the answer
                depth = -(-top_k * len(cache.keys) // (hi - lo)) + top_k
                got = self._vectors.nearest(cache, query, lo, hi, depth, floor)
                if got is not None:
                    out = _hits(t, cache, *got[:2], chosen, top_k)
                    if len(out) >= top_k or got[2]:
                        return out
            rows, sims, whole = cache.ranked(query, lo, hi, floor, 2 * top_k)
            out = _hits(t, cache, rows, sims, chosen, top_k)
            if len(out) >= top_k or whole:
                return out
            return _hits(t, cache, *cache.ranked(query, lo, hi, floor)[:2], chosen, top_k)

        return self._read(run)

    def load_memory_vectors(self, uris: Sequence[str]) -> dict[str, bytes]:
        """Stored vectors of `uris` in the active dimension, as little-endian float32 bytes; a URI
        without one is absent. Reads storage only."""
        all_segments = check_uris(uris)

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
        job_id = job_id_of(job_id)
        segments = check_uri(uri)
        emb = as_embedding(vector)

        def run(t: KvTxn) -> Literal["stored", "discarded"]:
            dim = self._active_dim(t)
            if dim is not None and len(emb) != dim:
                raise ValidationError(f"embedding has dimension {len(emb)}; the store's is {dim}")
            job = jobs.find(t, job_id)
            if job is None:  # cancelled, or removed with its document: the result is not wanted
                return "discarded"
            rec = tree.node(t, segments)
            now = now_us()
            jobs.complete(t, job_id, now)
            if rec is None or rec["k"] != "doc" or (job.get("r") is not None and job["r"] != rec.get("r")):
                return "discarded"
            if dim is None:
                add(t, DIM, len(emb))
            key = node_key(segments)
            if t.get(tree.VECTORS, key) is None:
                add(t, tree.VECTOR_COUNT, 1)
            t.put(tree.VECTORS, key, encode({"d": len(emb), "v": emb.astype("<f4").tobytes(), "r": rec.get("r")}))
            tree.vectors_changed(t, key)
            return "stored"

        return self._write(run)

    def put_layer_result(self, job_id: int, uri: str, layer: str, text: str) -> Literal["stored", "discarded"]:
        """Stores a job's `abstract` or `overview` of the document at `uri`, unless it is gone (or
        written again since); the job is completed either way."""
        job_id = job_id_of(job_id)
        segments = check_uri(uri)
        check_choice(layer, ("abstract", "overview"), "layer")
        value = check_text(text, "text")

        def run(t: KvTxn) -> Literal["stored", "discarded"]:
            job = jobs.find(t, job_id)
            if job is None:
                return "discarded"
            rec = tree.node(t, segments)
            jobs.complete(t, job_id, now_us())
            if rec is None or rec["k"] != "doc" or (job.get("r") is not None and job["r"] != rec.get("r")):
                return "discarded"
            rec["a" if layer == "abstract" else "o"] = value
            t.put(tree.NODES, node_key(segments), encode(rec))
            return "stored"

        return self._write(run)

    def build_vector_index(self) -> bool:
        """Builds and measures the vector index of the documents' vectors now, instead of in the
        background after the first search over most of the store; True when this call built it
        (False: built already, or no more rows than `AnnConfig.min_nodes`)."""
        return self._read(lambda t: self._vectors.build(self._vectors.current(t, self._active_dim(t))))

    def vector_index_stats(self) -> dict[str, Any]:
        """``available``, ``vectors`` (rows held; None when unavailable), ``documents`` (documents
        they describe), ``reclaimable`` (rows naming a URI the store no longer holds); and
        ``index``, the HNSW index's own figures, once this process holds more rows than
        `AnnConfig.min_nodes` and has searched them."""

        def run(t: KvTxn) -> dict[str, Any]:
            vectors = counter(t, tree.VECTOR_COUNT)
            reclaimable = self._reclaimable(t)
            return {"available": True, "vectors": vectors, "documents": vectors - len(reclaimable),
                    "reclaimable": len(reclaimable), "dim": self._active_dim(t)}  # fmt: skip

        out = self._read(run)
        index = self._vectors.stats()
        return out if index is None else out | {"index": index}

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


_EXCERPT = 280


def _allocated(path: str) -> int:
    """The bytes a file occupies on disk: LMDB's map may make it sparse, its apparent size the map's."""
    st = os.stat(path)
    return min(st.st_size, st.st_blocks * 512)


def _find(line: str, needle: str) -> tuple[int, int] | None:
    """Where `needle` (case-folded) first matches `line` ignoring case, as a span of `line` itself:
    case folding can change a text's length (ß folds to ss), so a span of the folded line is mapped
    back character by character."""
    folded = line.casefold()
    at = folded.find(needle)
    if at < 0:
        return None
    if len(folded) == len(line):
        return at, at + len(needle)
    ends = list(itertools.accumulate(len(c.casefold()) for c in line))
    start = bisect.bisect_right(ends, at)
    return start, bisect.bisect_left(ends, at + len(needle)) + 1


def _excerpt(line: str, start: int, end: int) -> str:
    """At most `_EXCERPT` characters of `line` holding its span ``[start, end)`` (its start, when the
    span is longer), centred on it where the line allows."""
    if len(line) <= _EXCERPT:
        return line
    end = min(end, start + _EXCERPT)
    first = max(0, min(start - (_EXCERPT - (end - start)) // 2, len(line) - _EXCERPT))
    return line[first : first + _EXCERPT]


def _hits(
    t: KvTxn, cache: VectorSnapshot, rows: list[int], sims: list[float], chosen: frozenset[str], top_k: int
) -> list[ContextHit]:
    """The first `top_k` of the ranked rows whose documents `t` holds, enabled."""
    out = []
    for row, sim in zip(rows, sims, strict=True):
        key = cache.keys[row]
        raw = t.get(tree.NODES, key)
        if raw is None:
            continue
        rec = decode(raw, "context node")
        if rec["k"] != "doc" or not rec.get("e", True):
            continue
        n = tree.to_node(uri_of(key), rec, chosen)
        out.append(ContextHit(uri=n.uri, content=n.content, abstract=n.abstract, overview=n.overview, score=sim))
        if len(out) >= top_k:
            break
    return out


def open_context(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: ContextBackend | None = None,
    durability: Literal["sync", "fast"] = "sync",
    document_jobs: Sequence[str] = (),
    dim: int | None = None,
    ann: AnnConfig | None = DEFAULT_ANN,
) -> ContextStore:
    """Opens (creating if needed) the context store `name`: LMDB in `path`, or
    ``./.hippograph/<name>``; or any `ContextBackend` passed as `backend`. The directory may hold
    a graph repo and a scoped store as well. `ann`: the vector index that answers searches over
    most of a large store (None: exact scans only)."""
    check_repo_name(name)
    if backend is not None and path is not None:
        raise ValidationError("pass either path or backend, not both")
    if backend is not None:
        return ContextStore(backend, document_jobs=document_jobs, dim=dim, ann=ann)
    from ..backends.lmdb import LMDB

    lmdb = LMDB(store_path(name, path), durability=durability)
    return ContextStore(lmdb, document_jobs=document_jobs, dim=dim, owns_backend=True, ann=ann)
