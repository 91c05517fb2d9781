"""`HippographStore`: LangGraph's `BaseStore` over a hippograph `Store` (docs/langgraph.md).

LangGraph's long-term memory (``graph.compile(store=...)``, ``store.put/get/search``) kept in a
hippograph `Store`: in process memory, in an LMDB directory, or in any `Store` you open yourself.
Namespaces are scopes, keys are keys, values are the entries' values; the texts LangGraph's index
configuration extracts become the entry's `text` (what hippograph's BM25 indexes) and its vectors.

Batches keep LangGraph's semantics as `InMemoryStore` implements them: the reads of a batch see the
store as it was before the batch, its writes are applied after them, the last write to a
``(namespace, key)`` wins and ``value=None`` deletes. Searches with a query score every item by the
cosine of its best vector, as LangGraph does; ``hybrid=True`` ranks by hippograph's words-and-meaning
fusion instead.

Needs LangGraph: ``pip install 'hippograph[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from os import PathLike
from typing import Any, Literal, Self, cast

import numpy as np
import numpy.typing as npt

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without langgraph
    raise ImportError("hippograph.integrations.langgraph needs LangGraph: pip install 'hippograph[langgraph]'") from exc

from ..backends.memory import InMemory
from ..engine.checks import finite_float, utcnow
from ..errors import ConfigError, StorageError, ValidationError
from ..store import Entry, Scope, Store, open_store
from ..store.arguments import weights_of
from ..store.model import MAX_SEGMENTS, check_embedding, check_key, check_scope, check_value
from ._langgraph_filter import Predicate, compile_filter
from ._langgraph_rank import (
    VECTOR_KIND,
    VECTOR_SEGMENT,
    Ranked,
    by_vector,
    extras_after,
    hidden_scope,
    hybrid,
    listing,
    vector_scope,
)
from ._langgraph_ttl import Sweeper

__all__ = ["VECTOR_KIND", "VECTOR_SEGMENT", "HippographStore", "NamespaceLimitError"]

_MAX_DEPTH = MAX_SEGMENTS - 1
"""One level is kept for the scopes of the extra vectors."""
_MAX_SCOPES = 1 << 20


class NamespaceLimitError(InvalidNamespaceError, ValidationError):
    """A namespace LangGraph accepts but hippograph cannot hold (more than 31 labels, a label of more
    than 255 UTF-8 bytes or one that is not valid UTF-8): both LangGraph's `InvalidNamespaceError`
    and hippograph's `ValidationError`."""


def _json_copy(value: Any) -> Any:
    """A copy of a JSON value: a caller changing an item's value never reaches the stored entry."""
    if isinstance(value, dict):
        return {k: _json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) for v in value]
    return value


def _item(e: Entry) -> Item:
    return Item(
        value=_json_copy(e.value), key=e.key, namespace=e.scope, created_at=e.created_at, updated_at=e.updated_at
    )


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{what} must be a non-negative int, got {value!r:.40}")
    return value


def _addressable(namespace: object, key: object = None) -> bool:
    """Whether hippograph could hold something there (a read of what cannot exist finds nothing)."""
    try:
        check_scope(namespace, "namespace")
        if key is not None:
            check_key(key)
    except ValidationError:
        return False
    return True


def _item_put(
    scope: Scope, key: str, text: str, value: dict[str, Any], vector: object, kind: str, ttl: float | None
) -> dict[str, Any]:
    """One put as `Store._put_prepared` takes it; only the embedder's vector is checked here."""
    return {
        "scope": scope, "key": key, "text": text, "value": value, "embedding": check_embedding(vector),
        "kind": kind, "importance": 0.5, "pending": False, "ttl": ttl,
    }  # fmt: skip


def _put_scope(namespace: tuple[str, ...]) -> Scope:
    try:
        scope = check_scope(namespace, "namespace")
    except ValidationError as exc:
        raise NamespaceLimitError(str(exc)) from None
    if len(scope) > _MAX_DEPTH:
        raise NamespaceLimitError(f"namespace has {len(scope)} labels; HippographStore holds at most {_MAX_DEPTH}")
    return scope


def _weights(hybrid: object) -> tuple[float, float] | None:
    if hybrid is False or hybrid is None:
        return None
    if hybrid is True:
        return (0.5, 0.5)
    return weights_of(hybrid, "hybrid", ConfigError)


def _ttl_config(ttl: object) -> TTLConfig | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping):
        raise ConfigError(f"ttl must be a TTLConfig (a dict), got {type(ttl).__name__}")
    unknown = set(ttl) - {"default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired"}
    if unknown:
        raise ConfigError(f"ttl: unknown setting {sorted(unknown)[0]!r:.40}")
    for name in ("default_ttl", "sweep_interval_minutes"):
        if ttl.get(name) is not None and finite_float(ttl[name], f"ttl[{name!r}]") <= 0:
            raise ConfigError(f"ttl[{name!r}] must be a positive number of minutes or None")
    if not isinstance(ttl.get("refresh_on_read", True), bool):
        raise ConfigError("ttl['refresh_on_read'] must be a bool")
    return cast(TTLConfig, dict(ttl))


def _tokens(path: str) -> str | list[str]:
    """A field path as `get_text_at_path` takes it: ``"$"`` (the whole value) as is, else tokenized.
    (LangGraph's stores tokenize a per-put ``"$"`` too, which then extracts nothing.)"""
    return path if path == "$" else tokenize_path(path)


def _does_match(condition: MatchCondition, namespace: Scope) -> bool:
    """`InMemoryStore`'s match: whole labels, ``"*"`` matching any one."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[len(namespace) - len(path) :] if condition.match_type == "suffix" else namespace[: len(path)]
    return all(p == "*" or p == s for p, s in zip(path, part, strict=True))


@dataclass
class _Write:
    scope: Scope
    key: str
    value: dict[str, Any] | None
    """None deletes."""
    texts: list[str] = field(default_factory=list)
    ttl: float | None = None
    """Seconds."""


@dataclass
class _Search:
    op: SearchOp
    scope: Scope | None
    """None: a prefix hippograph cannot hold, so nothing is under it."""
    predicate: Predicate | None
    query: str | None
    """The query, when some route ranks by it (else the search lists)."""


@dataclass
class _Plan:
    """A checked batch: its ops, its writes (the last one per ref), the texts and queries to embed."""

    ops: list[Op]
    searches: dict[int, _Search] = field(default_factory=dict)
    writes: dict[tuple[Scope, str], _Write] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)


class HippographStore(BaseStore):
    """LangGraph's `BaseStore` over a hippograph `Store` (docs/langgraph.md).

    - ``HippographStore()``: in process memory; ``HippographStore(path=...)``: an LMDB directory
      (``durability="fast"`` skips the fsync of each write); ``HippographStore(store)``: any `Store`
      (`close` leaves it open).
    - `index`: LangGraph's `IndexConfig` (``embed``, ``dims``, ``fields``, default ``["$"]``).
    - `ttl`: LangGraph's `TTLConfig` (minutes); `start_ttl_sweeper` deletes expired items.
    - `hybrid`: False ranks a query search as LangGraph does (the cosine of each item's best vector,
      every item returned); True, or a pair of weights (text, vector), ranks by hippograph's fusion
      of BM25 over the extracted texts with those cosines, returning only the items found.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        store: Store | None = None,
        *,
        path: str | PathLike[str] | None = None,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        durability: Literal["sync", "fast"] = "sync",
        hybrid: bool | tuple[float, float] = False,
    ) -> None:
        if store is not None and path is not None:
            raise ConfigError("pass either a store or a path, not both")
        if store is not None and not isinstance(store, Store):
            raise ConfigError(f"store must be a hippograph Store, got {type(store).__name__}")
        self._weights = _weights(hybrid)
        self.index_config: IndexConfig | None = None
        self.embeddings: Embeddings | None = None
        if index is not None:
            self.index_config = cast(IndexConfig, dict(index))
            if index.get("embed") is not None:
                self.embeddings = ensure_embeddings(index["embed"])
            elif self._weights is None:
                raise ConfigError("index needs embed (or hybrid=True, to rank by words alone)")
        fields = (index or {}).get("fields") or ["$"]
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ConfigError("index['fields'] must be a list of str paths")
        self._fields = [_tokens(f) for f in fields]
        self._extract = self.embeddings is not None or self._weights is not None
        self.ttl_config = _ttl_config(ttl)
        self._owns = store is None
        if store is None:
            store = (
                Store(InMemory(), owns_backend=True)
                if path is None
                else open_store("langgraph", path=path, durability=durability)
            )
        self.store: Store = store
        self._closed = False
        self._sweeper: Sweeper[HippographStore] = Sweeper()

    @classmethod
    @contextmanager
    def from_path(cls, path: str | PathLike[str], **kwargs: Any) -> Iterator[HippographStore]:
        """A store on the LMDB directory `path`, closed (its TTL sweeper stopped) on leaving."""
        store = cls(path=path, **kwargs)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        """Stops the TTL sweeper and closes the `Store` this object opened; idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stop_ttl_sweeper()
        if self._owns:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- batches --------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._prepare(ops)
        texts: list[Any] = []
        queries: list[Any] = []
        if self.embeddings is not None:
            if plan.texts:
                texts = self.embeddings.embed_documents(plan.texts)
            queries = [self.embeddings.embed_query(q) for q in plan.queries]
        return self._execute(plan, texts, queries)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` without blocking the event loop: checking, reading and writing run on a worker
        thread, the embedder through its async methods (LangChain runs a sync one on a thread)."""
        plan = await asyncio.to_thread(self._prepare, list(ops))
        texts: list[Any] = []
        queries: list[Any] = []
        if self.embeddings is not None:
            if plan.texts:
                texts = await self.embeddings.aembed_documents(plan.texts)
            if plan.queries:
                queries = list(await asyncio.gather(*(self.embeddings.aembed_query(q) for q in plan.queries)))
        return await asyncio.to_thread(self._execute, plan, texts, queries)

    def _check_open(self, operation: str = "batch") -> None:
        if self._closed:
            raise StorageError("the HippographStore is closed", operation=operation)

    def _texts(self, value: dict[str, Any], index: object) -> list[str]:
        """The distinct texts the index paths find in `value`, in order."""
        if not self._extract or index is False:
            return []
        if index is None:
            paths = self._fields
        elif isinstance(index, list) and all(isinstance(p, str) for p in index):
            paths = [_tokens(p) for p in index]
        else:
            raise ValidationError(f"index must be None, False or a list of str paths, got {type(index).__name__}")
        found: dict[str, None] = {}
        for path in paths:
            found.update(dict.fromkeys(get_text_at_path(value, path)))
        return list(found)

    def _prepare(self, ops: Iterable[Op]) -> _Plan:
        """Checks every op before anything is embedded, read or written."""
        self._check_open()
        plan = _Plan(list(ops))
        texts: dict[str, None] = {}
        queries: dict[str, None] = {}
        for i, op in enumerate(plan.ops):
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValidationError(f"unknown operation type: {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                write = self._prepare_put(op)
                if write is not None:
                    plan.writes[(write.scope, write.key)] = write
            elif isinstance(op, SearchOp):
                search = plan.searches[i] = self._prepare_search(op)
                if search.query is not None and self._vector_route:
                    queries.setdefault(search.query)
            elif isinstance(op, ListNamespacesOp):
                _count(op.limit, "limit"), _count(op.offset, "offset")
                if op.max_depth is not None:
                    _count(op.max_depth, "max_depth")
                for condition in op.match_conditions or ():
                    if condition.match_type not in ("prefix", "suffix"):
                        raise ValidationError(f"unsupported match type: {condition.match_type!r:.40}")
            elif not isinstance(op.key, str):
                raise ValidationError(f"key must be a str, got {type(op.key).__name__}")
        if self.embeddings is not None:
            for write in plan.writes.values():
                texts.update(dict.fromkeys(write.texts))
        plan.texts, plan.queries = list(texts), list(queries)
        return plan

    def _prepare_put(self, op: PutOp) -> _Write | None:
        """The labels are checked already (`validate_op_namespace`). LangGraph refuses the empty
        namespace and the root label ``"langgraph"`` in `put`/`aput` only, and its stores let a raw
        `PutOp` write there, so `batch` does too."""
        if op.value is None:
            # A delete where hippograph can hold nothing (too many labels, too long a label) is a no-op.
            if not _addressable(op.namespace, op.key):
                return None
            return _Write(check_scope(op.namespace), check_key(op.key), None)
        scope, key = _put_scope(op.namespace), check_key(op.key)
        value = check_value(op.value)
        ttl = None
        if op.ttl is not None:
            minutes = finite_float(op.ttl, "ttl")
            if minutes <= 0:
                raise ValidationError(f"ttl must be a positive number of minutes, got {minutes}")
            ttl = minutes * 60.0
        return _Write(scope, key, value, self._texts(value, op.index), ttl)

    def _prepare_search(self, op: SearchOp) -> _Search:
        _count(op.limit, "limit"), _count(op.offset, "offset")
        if op.query is not None and not isinstance(op.query, str):
            raise ValidationError(f"query must be a str, got {type(op.query).__name__}")
        predicate = compile_filter(op.filter)
        scope = check_scope(op.namespace_prefix) if _addressable(op.namespace_prefix) else None
        ranks = self._text_route or self._vector_route
        return _Search(op, scope, predicate, (op.query or None) if ranks else None)

    @property
    def _text_route(self) -> bool:
        return self._weights is not None and self._weights[0] > 0

    @property
    def _vector_route(self) -> bool:
        return self.embeddings is not None and (self._weights is None or self._weights[1] > 0)

    def _execute(self, plan: _Plan, texts: Sequence[Any], queries: Sequence[Any]) -> list[Result]:
        """Reads in order, then the TTL refreshes they asked for, then the writes."""
        self._check_open()
        if len(texts) != len(plan.texts) or len(queries) != len(plan.queries):
            raise ConfigError(
                f"the embedder returned {len(texts)} vectors for {len(plan.texts)} texts "
                f"and {len(queries)} for {len(plan.queries)} queries"
            )
        doc_vectors = dict(zip(plan.texts, texts, strict=True))
        query_vectors = {q: np.asarray(v, np.float64) for q, v in zip(plan.queries, queries, strict=True)}
        results: list[Result] = []
        refresh: dict[tuple[Scope, str], None] = {}
        for i, op in enumerate(plan.ops):
            if isinstance(op, GetOp):
                got = self.store.get(op.namespace, op.key) if _addressable(op.namespace, op.key) else None
                if got is not None and op.refresh_ttl and got.expires_at is not None:
                    refresh.setdefault(got.ref)
                results.append(None if got is None else _item(got))
            elif isinstance(op, SearchOp):
                search = plan.searches[i]
                found = self._search(search, None if search.query is None else query_vectors.get(search.query))
                if op.refresh_ttl:
                    refresh.update(dict.fromkeys(e.ref for e, _ in found if e.expires_at is not None))
                results.append(
                    [SearchItem(e.scope, e.key, _json_copy(e.value), e.created_at, e.updated_at, s) for e, s in found]
                )
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        if refresh:
            self._refresh_ttl(list(refresh))
        if plan.writes:
            self._write(list(plan.writes.values()), doc_vectors)
        return results

    # -- writes ---------------------------------------------------------------------------------

    def _write(self, writes: list[_Write], doc_vectors: Mapping[str, Any]) -> None:
        """The puts, with their extra vectors, in one transaction, which also finds the extra vectors
        of earlier versions the puts left over; then, only when there are deletes or such leftovers
        (which never score: an extra vector counts only while its `updated_at` is its item's), a
        second that removes them."""
        items: list[dict[str, Any]] = []
        extras: dict[tuple[Scope, str], int] = {}
        for w in writes:
            if w.value is None:
                continue
            vectors = [doc_vectors[t] for t in w.texts] if self.embeddings is not None else []
            extras[(w.scope, w.key)] = max(len(vectors) - 1, 0)
            text = "\n".join(w.texts)
            first = vectors[0] if vectors else None
            # Complete as `Store` checks them: scope, key, value and texts were checked in `_prepare`.
            items.append(_item_put(w.scope, w.key, text, w.value, first, "semantic", w.ttl))
            items.extend(
                _item_put(vector_scope(w.scope, i), w.key, "", {}, v, VECTOR_KIND, w.ttl)
                for i, v in enumerate(vectors[1:], start=1)
            )
        deletes = [(w.scope, w.key) for w in writes if w.value is None]
        stale: list[tuple[Scope, str, int]] = []

        def leftover(t: Any, replaced: list[Entry | None]) -> None:
            # In the puts' own transaction: the extra vectors of earlier versions they left over. Only
            # an item that was there has any (this store writes and deletes them with their item;
            # extras a delete past it left behind never score, and go at the item's next replacement).
            # (Assigned, not added to: a backend may run a transaction again.)
            was = {e.ref for e in replaced if e is not None}
            stale[:] = [
                (sc, k, n + 1) for (sc, k), n in extras.items() if (sc, k) in was and any(extras_after(t, sc, k, n + 1))
            ]

        if items:
            self.store._put_prepared(items, leftover, copies=False)
        if not deletes and not stale:
            return

        def run(t: Any) -> None:
            for sc, k in deletes:
                t.delete(sc, k)
            for sc, k, first in [*((sc, k, 1) for sc, k in deletes), *stale]:
                for scope in list(extras_after(t, sc, k, first)):
                    t.delete(scope, k)

        self.store.backend.entry_write(run)

    def _refresh_ttl(self, refs: list[tuple[Scope, str]]) -> None:
        """Restarts the TTL of each item, and of its extra vectors, from now. (Not `Store.get(...,
        refresh_ttl=True)`, which measures the TTL from `updated_at` and so lengthens it by the
        time since the last write at every refresh after the first.)"""

        def run(t: Any) -> None:
            now = utcnow()
            for sc, k in refs:
                e = t.get(sc, k)
                if e is None or e.expires_at is None or not e.visible(now):
                    continue
                length = e.expires_at - max(e.updated_at, e.accessed_at)
                if length <= timedelta(0):
                    continue
                expires = now + length
                t.put(replace(e, accessed_at=now, access_count=e.access_count + 1, expires_at=expires))
                for scope in list(extras_after(t, sc, k, 1)):
                    x = t.get(scope, k)
                    if x is not None and x.updated_at == e.updated_at:
                        t.put(replace(x, accessed_at=now, expires_at=expires))

        self.store.backend.entry_write(run)

    # -- reads ----------------------------------------------------------------------------------

    def _search(self, s: _Search, qv: npt.NDArray[np.float64] | None) -> Ranked:
        op = s.op
        want = op.offset + op.limit
        if s.scope is None or op.limit == 0:
            return []
        if s.query is not None and self._weights is not None:
            return hybrid(self.store, s.scope, s.predicate, s.query, qv, self._weights, op.offset, want)
        if s.query is not None and qv is not None:
            return by_vector(self.store, s.scope, s.predicate, qv, op.offset, want)
        return listing(self.store, s.scope, s.predicate, op.offset, want)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found: list[Scope] = []
        offset = 0
        while True:
            page = self.store.list_scopes(limit=_MAX_SCOPES, offset=offset)
            found.extend(s for s in page if not hidden_scope(s))
            if len(page) < _MAX_SCOPES:
                break
            offset += _MAX_SCOPES
        conditions = op.match_conditions or ()
        chosen = [s for s in found if all(_does_match(c, s) for c in conditions)]
        if op.max_depth is not None:
            chosen = sorted({s[: op.max_depth] for s in chosen})
        return chosen[op.offset : op.offset + op.limit]

    # -- TTL ------------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Deletes the expired items now, with their extra vectors; the number of items deleted."""
        self._check_open("sweep_ttl")
        return sum(1 for scope, _ in self.store.sweep().keys if not hidden_scope(scope))

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> concurrent.futures.Future[None]:
        """Deletes expired items every `sweep_interval_minutes` (else the TTL config's, else 5) on a
        daemon thread, as LangGraph's SqliteStore does. The future completes when the sweeper stops;
        cancelling it stops the sweeper. Without a TTL config or an interval nothing starts."""
        if not self.ttl_config and sweep_interval_minutes is None:
            future: concurrent.futures.Future[None] = concurrent.futures.Future()
            future.set_result(None)
            return future
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        interval = finite_float(minutes, "sweep_interval_minutes") * 60.0
        if interval <= 0:
            raise ConfigError("sweep_interval_minutes must be positive")
        self._check_open("start_ttl_sweeper")
        return self._sweeper.start(self, HippographStore.sweep_ttl, interval)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stops the sweeper; False when it did not stop within `timeout` seconds."""
        return self._sweeper.stop(timeout)
