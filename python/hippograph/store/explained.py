"""What a store search's explanation holds (`Store.search(..., explain=True)`; built by
`hippograph.store.explain`): each hit's BM25 words and weights, its vector similarity, its rank in
each route and how the fused score follows from them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RRF_K", "SearchExplanation", "TermWeight", "TextRoute", "VectorRoute"]

RRF_K = 60
"""Reciprocal-rank fusion's constant: a route's rank r contributes ``w / (RRF_K + r)``."""


@dataclass(frozen=True)
class TermWeight:
    """One query word's part in an entry's BM25 score."""

    word: str
    idf: float
    count: int
    """How often the word occurs in the entry's text."""
    weight: float
    """idf × count × (k1 + 1) / (count + k1 × (1 − b + b × length / average length)); k1 = 1.2, b = 0.75."""


@dataclass(frozen=True)
class TextRoute:
    """The entry as the words route saw it."""

    terms: tuple[TermWeight, ...]
    bm25: float
    """The sum of the weights (in float32, in the order listed)."""
    similarity: float
    """bm25 / (bm25 + 1): the route's score, in [0, 1)."""
    rank: int | None
    """1-based place in the route's ranking; None when it ranked too low to be fused (or matched no word)."""
    length: int
    average_length: float


@dataclass(frozen=True)
class VectorRoute:
    """The entry as the vector route saw it."""

    similarity: float | None
    """Cosine to the query vector (None when the route did not rank the entry)."""
    rank: int | None
    path: str
    """Which path ranked the vectors: the exact scan, or the certified vector index."""


@dataclass(frozen=True)
class SearchExplanation:
    """Why an entry scored what it did in one search."""

    score: float
    text: TextRoute | None
    """None: the words route did not run."""
    vector: VectorRoute | None
    """None: the vector route did not run."""
    weights: tuple[float, float]
    fused: bool
    """Both routes ran: the score is their weighted reciprocal-rank fusion, else the one route's similarity."""
    rrf_k: int = RRF_K

    def recombined(self) -> float:
        """The score rebuilt from the parts, as the fusion computes it: with both routes,
        min(1, (w_text / (k + text rank) + w_vector / (k + vector rank)) / ((w_text + w_vector) / (k + 1)))
        over the routes that ranked the entry, added in that order; else the route's similarity."""
        if not self.fused:
            route = self.text if self.text is not None else self.vector
            return 0.0 if route is None or route.similarity is None else route.similarity
        w, k = self.weights, self.rrf_k
        total = w[0] / (k + 1) + w[1] / (k + 1)
        acc = 0.0
        for weight, route in ((w[0], self.text), (w[1], self.vector)):
            if route is not None and route.rank is not None:
                acc += weight / (k + route.rank)
        return min(1.0, acc / total)

    def lines(self) -> list[str]:
        """A readable account, one fact per line."""
        out = [f"score {self.score:.6g}" + (f" (fused, weights {self.weights}, k {self.rrf_k})" if self.fused else "")]
        if self.text is not None:
            t = self.text
            rank = "not ranked" if t.rank is None else f"rank {t.rank}"
            out.append(f"  words: {rank}, similarity {t.similarity:.4g} (BM25 {t.bm25:.4g}, {t.length} words)")
            out += [f"    {p.word!r}: idf {p.idf:.4g} x {p.count} -> {p.weight:.4g}" for p in t.terms]
        if self.vector is not None:
            v = self.vector
            rank = "not ranked" if v.rank is None else f"rank {v.rank}"
            sim = "-" if v.similarity is None else f"{v.similarity:.4g}"
            out.append(f"  vector: {rank}, similarity {sim} ({v.path})")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())
