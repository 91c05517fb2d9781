"""`Store.search(..., explain=True)`: the same hits, each with the numbers its score came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.embedding import HashingEmbedder
from hippograph.store import SearchExplanation, text_similarity

WORDS = ["cat", "dog", "mat", "red", "blue", "sat", "ran", "the", "a", "fish", "bird", "tree"]
EMBED = HashingEmbedder(dim=32)


def check(hits: list[hg.StoreHit], weights: tuple[float, float], text: bool, vector: bool) -> None:
    for h in hits:
        e = h.explanation
        assert isinstance(e, SearchExplanation)
        assert e.score == h.score and e.recombined() == h.score
        assert e.fused == (text and vector) and e.weights == weights
        assert (e.text is not None) == text and (e.vector is not None) == vector
        if e.text is not None:
            total = np.float32(0.0)
            for part in e.text.terms:
                total = np.float32(total + np.float32(part.weight))
                assert part.count > 0 and part.word in WORDS
            assert float(total) == e.text.bm25
            if e.text.rank is not None:
                assert e.text.similarity == h.text_score == text_similarity(e.text.bm25)
        if e.vector is not None:
            assert e.vector.similarity == h.vector_score
            assert e.vector.path.startswith("exact scan")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=8), min_size=1, max_size=25),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    weights=st.sampled_from([(0.5, 0.5), (1.0, 0.0), (0.0, 1.0), (0.2, 0.8)]),
    limit=st.integers(1, 10),
)
def test_explained_searches_equal_plain_ones_and_recombine(
    docs: list[list[str]], query: list[str], weights: tuple[float, float], limit: int
) -> None:
    store = hg.Store(InMemory(), embed=EMBED)
    for i, words in enumerate(docs):
        store.put(("s", str(i % 3)), f"k{i}", " ".join(words))
    text = " ".join(query)
    plain = store.search(("s",), text=text, weights=weights, limit=limit)
    explained = store.search(("s",), text=text, weights=weights, limit=limit, explain=True)
    assert explained == plain
    assert [h.explanation for h in plain] == [None] * len(plain)
    check(explained, weights, weights[0] > 0, weights[1] > 0)


def test_lmdb_searches_explain_words_and_vectors(tmp_path: Path) -> None:
    with hg.Store(LMDB(tmp_path / "s"), embed=EMBED, owns_backend=True) as store:
        store.put(("u",), "a", "the cat sat on the mat")
        store.put(("u",), "b", "a dog chased the cat")
        vector = EMBED(["cat"])[0]
        hits = store.search(("u",), text="cat mat", vector=vector, explain=True)
        check(hits, (0.5, 0.5), True, True)
        first = hits[0].explanation
        assert first is not None and [p.word for p in first.text.terms] == ["cat", "mat"]  # type: ignore[union-attr]
        assert "words: rank 1" in str(first)
        only = store.search_vector(vector, ("u",), explain=True)
        check(only, (0.0, 1.0), False, True)
