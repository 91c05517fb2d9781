"""Explaining a store search: the `SearchExplanation` of each hit (`hippograph.store.explained`).

The numbers are the search's own: the text route's parts come from the lexical index, which adds
them in the order its search does (their float32 sum is the BM25 score the route ranked by), and
the ranks and similarities are those the fusion read.
"""

from __future__ import annotations

from collections.abc import Callable

from .explained import SearchExplanation, TermWeight, TextRoute, VectorRoute
from .fusion import Fused, text_similarity
from .index import EntryIndex, Ranked

__all__ = ["explainer"]


def explainer(
    ix: EntryIndex,
    text: str | None,
    by_text: Ranked,
    by_vector: Ranked,
    fused: Fused,
    weights: tuple[float, float],
    both: bool,
    vector_path: str | None,
) -> Callable[[int], SearchExplanation]:
    """How to explain a slot the fusion scored (text None: the words route did not run;
    vector_path None: the vector route did not run)."""
    scores, text_scores, vector_scores = fused
    text_rank = {s: r for r, s in enumerate(by_text[0], start=1)}
    vector_rank = {s: r for r, s in enumerate(by_vector[0], start=1)}
    average = ix.lexical.average_length()

    def explain(slot: int) -> SearchExplanation:
        text_part = None
        if text is not None:
            parts, length, bm25 = ix.lexical.explain(text, slot) or ([], 0, 0.0)
            terms = tuple(TermWeight(w, idf, tf, weight) for w, idf, tf, weight in parts)
            similarity = text_scores.get(slot, text_similarity(bm25))
            text_part = TextRoute(terms, bm25, similarity, text_rank.get(slot), length, average)
        vector_part = None
        if vector_path is not None:
            vector_part = VectorRoute(vector_scores.get(slot), vector_rank.get(slot), vector_path)
        return SearchExplanation(float(scores[slot]), text_part, vector_part, weights, both)

    return explain
