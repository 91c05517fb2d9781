"""How `HippographStore` lays LangGraph items out in a `Store` and ranks them (docs/langgraph.md).

An item is one entry at ``(namespace, key)``: its value, the texts its index fields yield joined as
its `text`, and the vector of the first text. LangGraph embeds each extracted text on its own and
scores an item by its best vector, so an item with more texts keeps the i-th further vector (i >= 1)
in an entry of kind `VECTOR_KIND` at ``((*namespace, VECTOR_SEGMENT + str(i)), key)``, written in the
same transaction as the item: it counts only while its `updated_at` is the item's. No LangGraph
namespace can reach these scopes (a LangGraph label holds no period), and `Store.forget` of the
namespace erases them with the items.

Nothing here imports LangGraph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..store import Entry, Hit, Scope, Store
from ..store.fusion import RRF_K
from ..store.model import MAX_SEGMENTS
from ._langgraph_filter import Predicate

__all__ = [
    "MAX_LIMIT",
    "VECTOR_KIND",
    "VECTOR_SEGMENT",
    "Ranked",
    "by_vector",
    "cosines",
    "extras_after",
    "has_vector_scopes",
    "hidden",
    "hidden_scope",
    "hybrid",
    "listing",
    "scan",
    "vector_scope",
]

VECTOR_KIND = "langgraph-vector"
"""The kind of the entries holding an item's second and later vectors."""
VECTOR_SEGMENT = ".lg-vector."
"""The last label of the scopes of those entries, followed by the vector's number."""
MAX_LIMIT = 1 << 20
"""The largest `limit` a `Store` read takes; longer reads page."""

Ranked = list[tuple[Entry, float | None]]
"""Items best first, each with its score (None: it has no vector)."""
Ref = tuple[Scope, str]


def vector_scope(namespace: Scope, i: int) -> Scope:
    """The scope of the i-th extra vector (i >= 1) of the items of `namespace`."""
    return (*namespace, f"{VECTOR_SEGMENT}{i}")


def hidden_scope(scope: Scope) -> bool:
    return bool(scope) and scope[-1].startswith(VECTOR_SEGMENT)


def hidden(e: Entry) -> bool:
    """An extra vector, not an item."""
    return hidden_scope(e.scope)


def has_vector_scopes(scope: Scope) -> bool:
    """Whether `scope` leaves room for the extra-vector scopes below it."""
    return len(scope) < MAX_SEGMENTS


def scan(store: Store, scope: Scope, first: int = MAX_LIMIT) -> Iterator[Entry]:
    """Every visible entry of the subtree, newest first (ties by scope, key), read in pages (the first
    of `first` entries)."""
    offset, size = 0, max(1, min(first, MAX_LIMIT))
    while True:
        page = store.list(scope, order="newest", limit=size, offset=offset)
        yield from page
        if len(page) < size:
            return
        offset += size
        size = MAX_LIMIT


def listing(store: Store, scope: Scope, predicate: Predicate | None, offset: int, want: int) -> Ranked:
    """Items of the subtree passing `predicate`, newest first, ``[offset:want]``, without scores."""
    first = MAX_LIMIT if predicate is not None else want + 16
    page: Ranked = []
    n = 0
    for e in scan(store, scope, first):
        if n >= want:
            break
        if hidden(e) or (predicate is not None and not predicate(e.value)):
            continue
        if n >= offset:
            page.append((e, None))
        n += 1
    return page


def _pool(
    store: Store, hits: Sequence[Hit], predicate: Predicate | None, parents: dict[Ref, Entry | None]
) -> list[tuple[Entry, float]]:
    """Hits (entries, best first) as items, best first: an item ranks where its best vector does."""
    out: list[tuple[Entry, float]] = []
    seen: set[Ref] = set()
    for h in hits:
        e = h.entry
        if hidden(e):
            ref: Ref = (e.scope[:-1], e.key)
            if ref not in parents:
                parents[ref] = store.get(*ref)
            item = parents[ref]
            if item is None or hidden(item) or item.updated_at != e.updated_at:
                continue
        else:
            ref, item = e.ref, e
        if ref in seen:
            continue
        seen.add(ref)
        if predicate is None or predicate(item.value):
            out.append((item, float(h.score)))
    return out


def _route(
    store: Store,
    fetch: Callable[[int], Sequence[Hit]],
    predicate: Predicate | None,
    need: int,
    parents: dict[Ref, Entry | None],
) -> tuple[list[tuple[Entry, float]], bool]:
    """The best `need` items of a route, asking it for more entries until it has them; True when
    the route found no more."""
    n = max(2 * need, 16)
    while True:
        size = min(n, MAX_LIMIT)
        hits = fetch(size)
        ranked = _pool(store, hits, predicate, parents)
        done = len(hits) < size or size == MAX_LIMIT
        if len(ranked) >= need or done:
            return ranked[:need], done
        n *= 4


def cosines(query: npt.NDArray[np.float64], rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """LangGraph's cosine similarity of each row to `query` (a zero vector scores 0)."""
    norms = np.linalg.norm(rows, axis=1) * float(np.linalg.norm(query))
    out = np.zeros(len(rows), np.float64)
    ok = norms > 0
    out[ok] = (rows[ok] @ query) / norms[ok]
    return out


def by_vector(
    store: Store, scope: Scope, predicate: Predicate | None, query: npt.NDArray[np.float64], offset: int, want: int
) -> Ranked:
    """LangGraph's ranking, ``[offset:want]``: every item by the cosine of its best vector, best
    first, then the items without a vector, newest first. The items scoring above 0 come from the
    store's vector route (ties by scope, key); the rest, when the page reaches them, from a scan of
    the subtree (ties newest first)."""
    parents: dict[Ref, Entry | None] = {}
    ranked, exhausted = _route(store, lambda n: store.search_vector(query, scope, limit=n), predicate, want, parents)
    out: Ranked = list(ranked)
    if len(out) < want and exhausted:
        out.extend(_rest(store, scope, predicate, query, {e.ref for e, _ in ranked}))
    return out[offset:want]


def _rest(
    store: Store, scope: Scope, predicate: Predicate | None, query: npt.NDArray[np.float64], seen: set[Ref]
) -> Ranked:
    """The items of the subtree not in `seen`: those with vectors by their best cosine, then the others."""
    items: list[Entry] = []
    extras: dict[Ref, list[Entry]] = {}
    for e in scan(store, scope):
        if hidden(e):
            extras.setdefault((e.scope[:-1], e.key), []).append(e)
        elif e.ref not in seen and (predicate is None or predicate(e.value)):
            items.append(e)
    rows: list[npt.NDArray[np.float32]] = []
    owner: list[int] = []
    for n, e in enumerate(items):
        vectors = [] if e.embedding is None else [e.embedding]
        vectors += [
            x.embedding for x in extras.get(e.ref, ()) if x.updated_at == e.updated_at and x.embedding is not None
        ]
        rows.extend(vectors)
        owner.extend([n] * len(vectors))
    best = np.full(len(items), -np.inf)
    if rows:
        np.maximum.at(best, np.asarray(owner, np.intp), cosines(query, np.stack(rows).astype(np.float64)))
    scored = sorted((n for n in range(len(items)) if best[n] > -np.inf), key=lambda n: -best[n])
    out: Ranked = [(items[n], float(best[n])) for n in scored]
    out.extend((items[n], None) for n in range(len(items)) if best[n] == -np.inf)
    return out


def hybrid(
    store: Store,
    scope: Scope,
    predicate: Predicate | None,
    text: str,
    query: npt.NDArray[np.float64] | None,
    weights: tuple[float, float],
    offset: int,
    want: int,
) -> Ranked:
    """hippograph's ranking, ``[offset:want]``: weighted reciprocal-rank fusion of BM25 over the items'
    texts and of the cosine of their best vectors, each route ranking its best ``max(4 × want, 50)``
    items after the filter, normalised so that first place in both scores 1; with one route, that
    route's similarity. Only the items a route finds, best first (ties by namespace, key)."""
    depth = max(4 * want, 50)
    parents: dict[Ref, Entry | None] = {}
    routes: list[tuple[float, list[tuple[Entry, float]]]] = []
    if weights[0] > 0:
        found, _ = _route(store, lambda n: store.search_text(text, scope, limit=n), predicate, depth, parents)
        routes.append((weights[0], found))
    if weights[1] > 0 and query is not None:
        found, _ = _route(store, lambda n: store.search_vector(query, scope, limit=n), predicate, depth, parents)
        routes.append((weights[1], found))
    items: dict[Ref, Entry] = {}
    scores: dict[Ref, float] = {}
    if len(routes) == 1:
        for e, score in routes[0][1]:
            items[e.ref], scores[e.ref] = e, score
    else:
        total = sum(w for w, _ in routes) / (RRF_K + 1)
        for weight, ranked in routes:
            for rank, (e, _) in enumerate(ranked, start=1):
                items[e.ref] = e
                scores[e.ref] = scores.get(e.ref, 0.0) + weight / (RRF_K + rank) / total
    order = sorted((ref for ref in scores if scores[ref] > 0), key=lambda ref: (-scores[ref], ref))
    out: Ranked = [(items[ref], min(1.0, scores[ref])) for ref in order]
    return out[offset:want]


def extras_after(t: Any, scope: Scope, key: str, first: int) -> Iterator[Scope]:
    """The scopes of the extra vectors of ``(scope, key)`` from number `first` on, in transaction `t`."""
    if not has_vector_scopes(scope):
        return
    i = first
    while t.get(vector_scope(scope, i), key) is not None:
        yield vector_scope(scope, i)
        i += 1
