"""How the store's two routes become one answer: BM25 mapped into [0, 1), weighted reciprocal-rank
fusion, the best hits cut by score then (scope, key), and the threads hybrid searches rank words on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .explained import RRF_K
from .index import EntryIndex, Ranked
from .model import Hit, detached

__all__ = ["PARALLEL_MIN", "RRF_K", "best_hits", "fuse", "routes", "text_similarity"]


def text_similarity(bm25: float) -> float:
    """BM25 mapped monotonically into [0, 1): ``s / (s + 1)``, so 1 needs a perfect match and the
    order of any two scores is kept."""
    return bm25 / (bm25 + 1.0)


PARALLEL_MIN = 20_000
"""Entries from which a hybrid search ranks words on another thread (below, the hand-over costs more)."""

_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def routes() -> ThreadPoolExecutor:
    """The threads hybrid searches rank words on, started at the first one."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="hippograph-store-route"))
        return _POOL[0]


Fused = tuple[dict[int, float], dict[int, float], dict[int, float]]
"""Per slot: the score, the text route's similarity, the vector route's similarity."""


def fuse(by_text: Ranked, by_vector: Ranked, w: tuple[float, float], fused: bool) -> Fused:
    """Weighted reciprocal-rank fusion of the routes that ran, normalised so that first place in every
    route scores 1.0; a single route keeps its own similarity as the score."""
    text_scores = {s: text_similarity(v) for s, v in zip(*by_text, strict=True)}
    vector_scores = dict(zip(*by_vector, strict=True))
    if not fused:
        return (text_scores or vector_scores), text_scores, vector_scores
    total = w[0] / (RRF_K + 1) + w[1] / (RRF_K + 1)
    score: dict[int, float] = {}
    for weight, (slots, _) in ((w[0], by_text), (w[1], by_vector)):
        for rank, s in enumerate(slots, start=1):
            score[s] = score.get(s, 0.0) + weight / (RRF_K + rank)
    return {s: min(1.0, v / total) for s, v in score.items()}, text_scores, vector_scores


def best_hits(
    ix: EntryIndex, fused: Fused, floor: float, offset: int, limit: int, explain: Callable[[int], object] | None = None
) -> list[Hit]:
    """Hits above `floor`, best first (ties by scope, key), after `offset`, at most `limit`: only those
    become `Hit`s (each with `explain(slot)` as its explanation, when given)."""
    scores, text_scores, vector_scores = fused
    refs = ix.refs
    kept = [s for s, v in scores.items() if v > floor and ix.entries[s] is not None]
    kept.sort(key=lambda s: (-scores[s], refs[s]))
    out = []
    for s in kept[offset : offset + limit]:
        e = ix.entries[s]
        assert e is not None
        # Built as `detached` builds an entry: a frozen dataclass's __init__ costs more than the rest.
        hit = object.__new__(Hit)
        hit.__dict__.update(entry=detached(e), score=float(scores[s]), text_score=text_scores.get(s),
                            vector_score=vector_scores.get(s))  # fmt: skip
        hit.__dict__["explanation"] = None if explain is None else explain(s)
        out.append(hit)
    return out
