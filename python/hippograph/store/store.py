"""`Store`: entries filed under scopes, found by words and by meaning, with a lifecycle (docs/store.md).

Every call checks its arguments before it touches the backend (a refused call writes nothing),
writes in one backend transaction, and reads through the derived `EntryIndex` after catching it
up with the backend, so a read sees every write committed before it, by any process.
"""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal, Self

import numpy as np
import numpy.typing as npt

from ..engine.checks import (
    Progress,
    as_datetime,
    as_embedding,
    check_flag,
    check_progress,
    check_text,
    finite_float,
    utcnow,
)
from ..engine.paths import check_repo_name, store_path
from ..engine.routes import SCAN
from ..engine.rows import VectorDtype, check_vector_dtype
from ..engine.vector_index import DEFAULT_ANN, AnnConfig, check_ann
from ..errors import ConfigError, NotFoundError, StorageError, ValidationError
from .arguments import ORDERS, PUT_FIELDS, UPDATE_FIELDS, checked, count, kinds_of, ttl_of, weights_of
from .explain import explainer
from .filters import compile_filter
from .fusion import PARALLEL_MIN, RRF_K, best_hits, fuse, routes, text_similarity
from .index import EntryIndex, Ranked
from .model import (
    Entry,
    Hit,
    Scope,
    ScopeReceipt,
    check_embedding,
    check_importance,
    check_key,
    check_kind,
    check_scope,
    check_value,
    detached,
    trusted_entry,
)
from .protocol import CountsWrites, EntryBackend, EntryTxn

__all__ = ["RRF_K", "Embedder", "Store", "open_store", "text_similarity"]

Embedder = Callable[[list[str]], Any]
"""Maps texts to an ``(n, d)`` array of vectors."""

_CountedWrite = Callable[[Callable[[EntryTxn], list[Entry]]], tuple[list[Entry], int, int]]

Then = Callable[[EntryTxn, list[Entry | None]], None]
"""What runs after a transaction's puts, in it: handed the entry each put replaced (None: new)."""


class Store:
    """A scoped memory store over any `EntryBackend` (`open_store` opens one on LMDB)."""

    def __init__(
        self,
        backend: EntryBackend,
        *,
        embed: Embedder | None = None,
        ann: AnnConfig | None = DEFAULT_ANN,
        owns_backend: bool = False,
        vector_dtype: VectorDtype = "float32",
    ) -> None:
        """`ann`: the vector index of unrestricted vector searches (None: always the exact scan).
        `vector_dtype`: the precision the index's scans read the vectors in (`hippograph.engine.rows`)."""
        dtype = check_vector_dtype(vector_dtype)
        for name in ("entry_write", "entry_read"):
            if not callable(getattr(backend, name, None)):
                raise ConfigError(f"{type(backend).__name__} does not hold entries (no {name})")
        if embed is not None and not callable(embed):
            raise ConfigError(f"embed must be callable (list of texts -> (n, d) array), got {type(embed).__name__}")
        self.backend = backend
        self.embed = embed
        self._owns = check_flag(owns_backend, "owns_backend")
        self._index = EntryIndex(check_ann(ann), dtype)
        self._counted: _CountedWrite | None = None
        if isinstance(backend, CountsWrites):
            self._counted = backend.entry_write_counted
        self._closed = False
        self._lock = threading.Lock()

    # -- life of the handle ---------------------------------------------------------------------

    def close(self) -> None:
        """Closes the backend when `open_store` opened it; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._index.close()
        close = getattr(self.backend, "close", None)
        if self._owns and callable(close):
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, operation: str) -> None:
        if self._closed:
            raise StorageError("the store is closed", operation=operation)

    def _fresh(self) -> EntryIndex:
        self._index.refresh(self.backend)
        return self._index

    # -- vectors --------------------------------------------------------------------------------

    def _embed(self, texts: builtins.list[str]) -> builtins.list[npt.NDArray[np.float32]]:
        assert self.embed is not None
        try:
            raw = np.asarray(self.embed(texts), dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"the embedder did not return numbers: {type(exc).__name__}") from None
        if raw.ndim != 2 or raw.shape[0] != len(texts):
            raise ConfigError(f"the embedder returned shape {raw.shape} for {len(texts)} texts; needs (n, d)")
        return [as_embedding(row, "embedder output") for row in raw]

    def _check_dims(self, vectors: Iterable[npt.NDArray[np.float32] | None], what: str) -> None:
        """Every vector has the store's dimension (the first vector written sets it; once known it
        never changes, so only a store that has none yet is read for it)."""
        vectors = [v for v in vectors if v is not None]
        dim = self._index.dim
        if dim is None and vectors:
            dim = self._fresh().dim
        for v in vectors:
            if v is None:
                continue
            if dim is None:
                dim = len(v)
            elif len(v) != dim:
                error = ConfigError if what == "embedder output" else ValidationError
                raise error(f"{what} has dimension {len(v)}; the store's is {dim}")

    def _query_vector(self, vector: object, text: str | None) -> npt.NDArray[np.float32] | None:
        if vector is not None:
            v = as_embedding(vector, "vector")
            self._check_dims([v], "vector")
            return v
        if text is not None and self.embed is not None:
            v = self._embed([text])[0]
            self._check_dims([v], "embedder output")
            return v
        return None

    # -- writes ---------------------------------------------------------------------------------

    def _put_entries(self, run: Callable[[EntryTxn], builtins.list[Entry]]) -> builtins.list[Entry]:
        """Runs a write whose result is every entry it put. With a backend that reports its change
        counter, the index takes those entries in at once instead of reading them back later."""
        if self._counted is None:
            return self.backend.entry_write(run)
        written, before, after = self._counted(run)
        self._index.take_own(before, after, written)
        return written

    @staticmethod
    def _prepared(item: Mapping[str, Any], where: str) -> dict[str, Any]:
        unknown = set(item) - PUT_FIELDS
        if unknown:
            raise ValidationError(f"{where}: unknown field {sorted(unknown)[0]!r:.40}")
        if "scope" not in item or "key" not in item:
            raise ValidationError(f"{where}: needs scope and key")
        return checked(where, **item)

    def _fill_vectors(self, items: builtins.list[dict[str, Any]]) -> None:
        need = [i for i, it in enumerate(items) if it["embedding"] is None and it["text"] and self.embed is not None]
        if need:
            for i, v in zip(need, self._embed([items[i]["text"] for i in need]), strict=True):
                items[i]["embedding"] = v
            self._check_dims([items[i]["embedding"] for i in need], "embedder output")
        self._check_dims([it["embedding"] for it in items], "embedding")

    @staticmethod
    def _entry(it: Mapping[str, Any], old: Entry | None, now: datetime) -> Entry:
        return trusted_entry({
            "scope": it["scope"], "key": it["key"], "text": it["text"], "value": it["value"], "kind": it["kind"],
            "importance": it["importance"], "embedding": it["embedding"],
            "status": "pending" if it["pending"] else "active", "created_at": now if old is None else old.created_at,
            "updated_at": now, "accessed_at": now if old is None else old.accessed_at,
            "access_count": 0 if old is None else old.access_count,
            "expires_at": None if it["ttl"] is None else now + timedelta(seconds=it["ttl"]),
        })  # fmt: skip

    def put(
        self,
        scope: Sequence[str],
        key: str,
        text: str = "",
        value: Mapping[str, Any] | None = None,
        *,
        embedding: object = None,
        kind: str = "semantic",
        importance: float = 0.5,
        pending: bool = False,
        ttl: float | None = None,
    ) -> Entry:
        """Files (or replaces) the entry at `(scope, key)`; a replaced entry keeps `created_at` and
        its access history. With an embedder and no `embedding`, `text` is embedded."""
        self._open("put")
        item = checked("put", scope, key, text, value, embedding, kind, importance, pending, ttl)
        return self._put_prepared([item])[0]

    def put_many(self, items: Iterable[Mapping[str, Any]]) -> builtins.list[Entry]:
        """Puts every item (each a mapping of `put`'s arguments) in one transaction: all or none."""
        return self._put_many(items)

    def _put_many(self, items: Iterable[Mapping[str, Any]], then: Then | None = None) -> builtins.list[Entry]:
        """`put_many`; `then(t, replaced)` runs in the same transaction after the puts (reads a caller
        needs of the state they leave, without a transaction of its own; `replaced`: the entry each put
        replaced, None where it was new), and its error undoes them."""
        self._open("put_many")
        if isinstance(items, Mapping) or not isinstance(items, Iterable):
            raise ValidationError("put_many needs a collection of mappings")
        prepared = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValidationError(f"put_many item {i} must be a mapping, got {type(item).__name__}")
            prepared.append(self._prepared(item, f"put_many item {i}"))
        return self._put_prepared(prepared, then)

    def _put_prepared(
        self,
        prepared: builtins.list[dict[str, Any]],
        then: Then | None = None,
        *,
        copies: bool = True,
    ) -> builtins.list[Entry]:
        """Puts checked items (`arguments.checked`'s) in one transaction, embedding those that need it.
        Without `copies` it hands back the entries the index holds, for a caller that reads none."""
        self._fill_vectors(prepared)
        now = utcnow()

        def run(t: EntryTxn) -> builtins.list[Entry]:
            out, replaced = [], []
            for it in prepared:
                old = t.get(it["scope"], it["key"])
                e = self._entry(it, old, now)
                t.put(e)
                out.append(e)
                replaced.append(old)
            if then is not None:
                then(t, replaced)
            return out

        written = self._put_entries(run)
        return [detached(e) for e in written] if copies else written

    def update(self, /, scope: Sequence[str], key: str, **changes: Any) -> Entry:
        """Changes the named fields of an existing entry (`NotFoundError` if there is none)."""
        self._open("update")
        sc, k = check_scope(scope), check_key(key)
        unknown = set(changes) - UPDATE_FIELDS
        if unknown:
            raise ValidationError(f"update: unknown field {sorted(unknown)[0]!r:.40}")
        fields: dict[str, Any] = {}
        if "text" in changes:
            if not isinstance(changes["text"], str):
                raise ValidationError("text must be a str")
            fields["text"] = check_text(changes["text"], "text")
        if "value" in changes:
            fields["value"] = check_value(changes["value"])
        if "kind" in changes:
            fields["kind"] = check_kind(changes["kind"])
        if "importance" in changes:
            fields["importance"] = check_importance(changes["importance"])
        if "embedding" in changes:
            fields["embedding"] = check_embedding(changes["embedding"])
        elif fields.get("text") and self.embed is not None:
            fields["embedding"] = self._embed([fields["text"]])[0]
        self._check_dims([fields.get("embedding")], "embedding")
        ttl = ttl_of(changes["ttl"]) if "ttl" in changes else None
        now = utcnow()

        def run(t: EntryTxn) -> builtins.list[Entry]:
            old = t.get(sc, k)
            if old is None:
                raise NotFoundError("entry", _ref_text(sc, k))
            extra: dict[str, Any] = {"updated_at": now}
            if "ttl" in changes:
                extra["expires_at"] = None if ttl is None else now + timedelta(seconds=ttl)
            elif old.expires_at is not None:  # a write restarts the TTL at its length
                extra["expires_at"] = now + _ttl_length(old)
            new = replace(old, **fields, **extra)
            t.put(new)
            return [new]

        return detached(self._put_entries(run)[0])

    def delete(self, scope: Sequence[str], key: str) -> bool:
        """Removes the entry at `(scope, key)`, whatever its status; False when there was none."""
        self._open("delete")
        sc, k = check_scope(scope), check_key(key)
        return self.backend.entry_write(lambda t: t.delete(sc, k))

    # -- lifecycle ------------------------------------------------------------------------------

    def _sweep_scope(
        self, scope: Sequence[str], operation: str, change: Callable[[EntryTxn, Entry], bool]
    ) -> ScopeReceipt:
        self._open(operation)
        sc = check_scope(scope)

        def run(t: EntryTxn) -> ScopeReceipt:
            changed = sorted(e.ref for e in list(t.scan(sc)) if change(t, e))
            return ScopeReceipt(sc, tuple(changed))

        return self.backend.entry_write(run)

    def flush(self, scope: Sequence[str]) -> ScopeReceipt:
        """Makes the pending entries of the subtree active."""
        now = utcnow()

        def change(t: EntryTxn, e: Entry) -> bool:
            if e.status != "pending":
                return False
            t.put(replace(e, status="active", updated_at=now))
            return True

        return self._sweep_scope(scope, "flush", change)

    def discard(self, scope: Sequence[str]) -> ScopeReceipt:
        """Deletes only the pending entries of the subtree: a turn takes back its own writes."""
        return self._sweep_scope(scope, "discard", lambda t, e: e.status == "pending" and t.delete(*e.ref))

    def forget(self, scope: Sequence[str], *, everything: bool = False) -> ScopeReceipt:
        """Erases the subtree, every status, with its vectors and words, in one transaction
        (`forget(())` needs ``everything=True``)."""
        if isinstance(scope, (tuple, list)) and len(scope) == 0 and everything is not True:
            raise ValidationError("forget(()) erases the whole store: pass everything=True")
        return self._sweep_scope(scope, "forget", lambda t, e: t.delete(*e.ref))

    def retract(self, scope: Sequence[str], key: str) -> ScopeReceipt:
        """Hides an entry from every read until `prune` deletes it (`NotFoundError` if none)."""
        self._open("retract")
        sc, k = check_scope(scope), check_key(key)
        now = utcnow()

        def run(t: EntryTxn) -> ScopeReceipt:
            e = t.get(sc, k)
            if e is None:
                raise NotFoundError("entry", _ref_text(sc, k))
            if e.status == "retracted":
                return ScopeReceipt(sc, ())
            t.put(replace(e, status="retracted", updated_at=now))
            return ScopeReceipt(sc, ((sc, k),))

        return self.backend.entry_write(run)

    def prune(self, scope: Sequence[str] = ()) -> ScopeReceipt:
        """Deletes the retracted entries of the subtree."""
        return self._sweep_scope(scope, "prune", lambda t, e: e.status == "retracted" and t.delete(*e.ref))

    def sweep(self, scope: Sequence[str] = (), *, now: datetime | None = None) -> ScopeReceipt:
        """Deletes the expired entries of the subtree."""
        at = utcnow() if now is None else as_datetime(now, "now")

        def expired(t: EntryTxn, e: Entry) -> bool:
            return e.expires_at is not None and e.expires_at <= at and t.delete(*e.ref)

        return self._sweep_scope(scope, "sweep", expired)

    # -- reads ----------------------------------------------------------------------------------

    def _touch(
        self, refs: builtins.list[tuple[Scope, str]], now: datetime, refresh_ttl: bool
    ) -> dict[tuple[Scope, str], Entry]:
        """Records an access to each of `refs`, extending a TTL by its original length."""

        def run(t: EntryTxn) -> dict[tuple[Scope, str], Entry]:
            out = {}
            for sc, k in refs:
                e = t.get(sc, k)
                if e is None or not e.visible(now):
                    continue
                expires = e.expires_at
                if refresh_ttl and expires is not None:
                    expires = now + _ttl_length(e)
                new = replace(e, accessed_at=now, access_count=e.access_count + 1, expires_at=expires)
                t.put(new)
                out[new.ref] = new
            return out

        return self.backend.entry_write(run)

    def get(
        self, scope: Sequence[str], key: str, *, include_pending: bool = False, refresh_ttl: bool = False
    ) -> Entry | None:
        """The entry at `(scope, key)`, or None when there is none or it is pending (unless
        `include_pending`), retracted or expired. `refresh_ttl` extends its TTL (a write)."""
        self._open("get")
        sc, k = check_scope(scope), check_key(key)
        include_pending = check_flag(include_pending, "include_pending")
        refresh_ttl = check_flag(refresh_ttl, "refresh_ttl")
        now = utcnow()
        e = self.backend.entry_read(lambda t: t.get(sc, k))
        if e is None or e.status == "retracted" or (e.expires_at is not None and e.expires_at <= now):
            return None
        if e.status == "pending" and not include_pending:
            return None
        if refresh_ttl and e.status == "active":
            touched = self._touch([e.ref], now, True).get(e.ref)
            return None if touched is None else detached(touched)
        return detached(e)

    def list(
        self,
        scope: Sequence[str] = (),
        *,
        filter: Mapping[str, Any] | None = None,
        kinds: Iterable[str] | None = None,
        order: Literal["newest", "oldest", "key"] = "newest",
        limit: int = 100,
        offset: int = 0,
        include_pending: bool = False,
    ) -> builtins.list[Entry]:
        """Entries of the subtree, newest first by default (ties by scope, key)."""
        self._open("list")
        sc, keep = check_scope(scope), self._keep(filter, kinds)
        if not isinstance(order, str) or order not in ORDERS:
            raise ValidationError(f"order must be one of {ORDERS}, got {order!r:.40}")
        include_pending = check_flag(include_pending, "include_pending")
        limit, offset = count(limit, "limit"), count(offset, "offset")
        now = utcnow()
        with self._index.lock:
            ix = self._fresh()
            slots = ix.candidates(sc, now, keep, include_pending)
            chosen = [e for e in (ix.entries if slots is None else (ix.entries[s] for s in slots.tolist())) if e]
        if order == "key":
            chosen.sort(key=lambda e: e.ref)
        else:
            chosen.sort(key=lambda e: e.ref)
            chosen.sort(key=lambda e: e.updated_at, reverse=order == "newest")
        return [detached(e) for e in chosen[offset : offset + limit]]

    @staticmethod
    def _keep(filter: object, kinds: object) -> Callable[[Entry], bool] | None:
        predicate, wanted = compile_filter(filter), kinds_of(kinds)
        if predicate is None and wanted is None:
            return None

        def keep(e: Entry) -> bool:
            return (wanted is None or e.kind in wanted) and (predicate is None or predicate(e.value))

        return keep

    def search(
        self,
        scope: Sequence[str] = (),
        *,
        text: str | None = None,
        vector: object = None,
        filter: Mapping[str, Any] | None = None,
        kinds: Iterable[str] | None = None,
        limit: int = 10,
        offset: int = 0,
        min_score: float = 0.0,
        weights: tuple[float, float] = (0.5, 0.5),
        refresh_ttl: bool = False,
        explain: bool = False,
    ) -> builtins.list[Hit]:
        """Entries of the subtree by words (BM25 over `text`) and by meaning (cosine to `vector`, or
        to `text` embedded when the store has an embedder), fused by weighted reciprocal rank.

        With one route, a hit's score is that route's similarity; with both, the fused score (1.0
        for an entry ranked first by both). Hits scoring above `min_score`, best first (ties by
        scope, key), after `offset`, at most `limit`. With `explain`, each hit's `explanation`
        holds its words' BM25 weights, its vector similarity, its rank in each route and the fusion.
        """
        self._open("search")
        sc, keep = check_scope(scope), self._keep(filter, kinds)
        if text is not None and not isinstance(text, str):
            raise ValidationError(f"text must be a str, got {type(text).__name__}")
        limit, offset = count(limit, "limit"), count(offset, "offset")
        floor = finite_float(min_score, "min_score")
        w = weights_of(weights)
        explain, refresh_ttl = check_flag(explain, "explain"), check_flag(refresh_ttl, "refresh_ttl")
        qv = self._query_vector(vector, text if w[1] > 0 else None)
        if text is None and qv is None:
            raise ValidationError("search needs text or a vector")
        lexical, semantic = text is not None and w[0] > 0, qv is not None and w[1] > 0
        want = limit + offset
        now = utcnow()
        with self._index.lock:
            ix = self._fresh()
            allowed = ix.candidates(sc, now, keep)
            fused = lexical and semantic
            depth = max(4 * want, 50) if fused else want
            wide = now if ix.unrestricted(sc, keep) else None
            by_text: Ranked = ([], [])
            by_vector: Ranked = ([], [])
            route: list[str] | None = [] if explain else None
            if fused and text is not None and qv is not None and len(ix.slot_of) >= PARALLEL_MIN:
                # Both routes release the GIL: the words are ranked on another core meanwhile.
                words = routes().submit(ix.ranked_text, text, allowed, depth)
                by_vector = ix.ranked_vector(qv, allowed, depth, wide, route)
                by_text = words.result()
            else:
                if lexical and text is not None:
                    by_text = ix.ranked_text(text, allowed, depth)
                if semantic and qv is not None:
                    by_vector = ix.ranked_vector(qv, allowed, depth, wide, route)
            scored = fuse(by_text, by_vector, w, fused)
            why = None
            if route is not None:
                path = (route or [SCAN])[-1] if semantic else None
                why = explainer(ix, text if lexical else None, by_text, by_vector, scored, w, fused, path)
            hits = best_hits(ix, scored, floor, offset, limit, why)
        if refresh_ttl and hits:
            touched = self._touch([h.entry.ref for h in hits], now, True)
            hits = [replace(h, entry=detached(touched[h.entry.ref])) for h in hits if h.entry.ref in touched]
        return hits

    def search_text(self, /, query: str, scope: Sequence[str] = (), **kw: Any) -> builtins.list[Hit]:
        """The lexical route alone."""
        if not isinstance(query, str):
            raise ValidationError(f"query must be a str, got {type(query).__name__}")
        return self.search(scope, text=query, weights=(1.0, 0.0), **kw)

    def search_vector(self, /, vector: object, scope: Sequence[str] = (), **kw: Any) -> builtins.list[Hit]:
        """The vector route alone."""
        if vector is None:
            raise ValidationError("vector must be a sequence of numbers, got None")
        return self.search(scope, vector=vector, weights=(0.0, 1.0), **kw)

    def list_scopes(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[Scope]:
        """Scopes holding at least one visible entry, sorted; ``"*"`` in `prefix` or `suffix` matches
        any one segment; `max_depth` truncates deeper scopes (deduplicated)."""
        self._open("list_scopes")
        pre = None if prefix is None else check_scope(prefix, "prefix")
        suf = None if suffix is None else check_scope(suffix, "suffix")
        depth = None if max_depth is None else count(max_depth, "max_depth", 32)
        limit, offset = count(limit, "limit"), count(offset, "offset")
        now = utcnow()
        with self._index.lock:
            ix = self._fresh()
            found = {
                s for s, slots in ix.scopes.items()
                if any(e is not None and e.visible(now) for e in (ix.entries[i] for i in slots))
            }  # fmt: skip
        chosen = {
            (s if depth is None else s[:depth]) for s in found if _matches(s, pre, False) and _matches(s, suf, True)
        }
        return sorted(chosen)[offset : offset + limit]

    def refresh(self, *, progress: Progress | None = None) -> None:
        """Catches the derived indexes (words, vectors, scopes) up with every write committed so far,
        by any process; every read does this first, so calling it only moves that work off a read.
        A first read (or one after the change log was trimmed) rebuilds them from a scan, reporting
        ``progress("index entries", done, total)``."""
        check_progress(progress)
        self._open("refresh")
        with self._index.lock:
            self._index.refresh(self.backend, progress)

    def build_vector_index(self) -> bool:
        """Builds and measures the vector index now instead of in the background after the first
        unrestricted vector search (below `AnnConfig.min_nodes` entries there is none: the exact scan
        answers); True when this call built it."""
        self._open("build_vector_index")
        with self._index.lock:
            return self._fresh().build_vector_index(utcnow())

    def vector_index_stats(self) -> dict[str, Any]:
        """The vector index's state and calibration, as `GraphBackend.vector_index_stats` reports a type's."""
        self._open("vector_index_stats")
        with self._index.lock:
            self._fresh()
            return self._index.vector_stats()

    def stats(self) -> dict[str, Any]:
        """Counts by status and the derived indexes' sizes."""
        self._open("stats")
        now = utcnow()
        with self._index.lock:
            ix = self._fresh()
            live = [e for e in ix.entries if e is not None]
            by_status = {s: sum(e.status == s for e in live) for s in ("active", "pending", "retracted")}
            expired = sum(e.expires_at is not None and e.expires_at <= now for e in live)
            return {**ix.stats(), **by_status, "expired": expired}


def _matches(scope: Scope, pattern: Scope | None, from_end: bool) -> bool:
    if pattern is None:
        return True
    if len(pattern) > len(scope):
        return False
    part = scope[len(scope) - len(pattern) :] if from_end else scope[: len(pattern)]
    return all(p == "*" or p == s for p, s in zip(pattern, part, strict=True))


def _ttl_length(e: Entry) -> timedelta:
    """How long an entry's TTL runs: from its last write or refresh to its expiry."""
    assert e.expires_at is not None
    return e.expires_at - max(e.updated_at, e.accessed_at)


def _ref_text(scope: Scope, key: str) -> str:
    return "/".join((*scope, key))


def open_store(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: EntryBackend | None = None,
    embed: Embedder | None = None,
    durability: Literal["sync", "fast"] = "sync",
    ann: AnnConfig | None = DEFAULT_ANN,
    vector_dtype: VectorDtype = "float32",
) -> Store:
    """Opens (creating if needed) the store `name`: LMDB in `path`, or ``./.hippograph/<name>``; or
    any `EntryBackend` passed as `backend`. The directory may hold a graph repo as well."""
    check_repo_name(name)
    if backend is not None and path is not None:
        raise ValidationError("pass either path or backend, not both")
    if backend is not None:
        return Store(backend, embed=embed, ann=ann, vector_dtype=vector_dtype)
    check_vector_dtype(vector_dtype)  # before the store's directory is made
    from ..backends.lmdb import LMDB

    backend = LMDB(store_path(name, path), durability=durability)
    return Store(backend, embed=embed, ann=ann, owns_backend=True, vector_dtype=vector_dtype)
