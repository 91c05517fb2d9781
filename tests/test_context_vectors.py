"""The context store's `search_vector` over random vectors: the k nearest documents by cosine, with no
similarity floor unless `min_score` asks for one.

The oracle ranks in float64 from the rule (cosine, a zero vector scoring 0 against everything);
the store ranks float32 vectors, so scores are compared within `TOL` and near-ties are not ordered
by the oracle. A floored search must be exactly the unfloored ranking cut at `min_score`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hippograph.backends import InMemory
from hippograph.context import ContextStore
from hippograph.errors import ValidationError
from hippograph.testing.context import EMBED, embed_pending

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DIM = 3
TOL = 1e-5

coords = st.sampled_from((-2.0, -1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 3.0))
vectors = st.lists(coords, min_size=DIM, max_size=DIM)
uris = st.sampled_from(("d/a", "d/b", "d/b-old", "d/c/x", "e/a", "e/b", "f"))
scopes = st.sampled_from((None, "d", "d/b", "d/c", "e", "g"))
floors = st.one_of(st.none(), st.floats(-1.5, 1.5), st.sampled_from((-1.0, -0.5, 0.0, 0.5, 1.0)))


def cosine(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    n = float(np.linalg.norm(x) * np.linalg.norm(y))
    return 0.0 if n == 0.0 else float(x @ y) / n


def in_scope(uri: str, scope: str | None) -> bool:
    return scope is None or uri == scope or uri.startswith(scope + "/")


def embedded(docs: dict[str, list[float]]) -> ContextStore:
    store = ContextStore(InMemory(), document_jobs=[EMBED])
    for uri in docs:
        store.put_document(uri, uri)
    embed_pending(store, docs)
    return store


@SETTINGS
@given(docs=st.dictionaries(uris, vectors, max_size=7), query=vectors, top_k=st.integers(1, 8), scope=scopes)
def test_the_k_nearest_however_far(
    docs: dict[str, list[float]], query: list[float], top_k: int, scope: str | None
) -> None:
    hits = embedded(docs).search_vector(query, top_k, scope)
    expected = {u: cosine(x, query) for u, x in docs.items() if in_scope(u, scope)}
    assert len(hits) == min(top_k, len(expected))  # no floor: every document in scope can be a hit
    assert len({h.uri for h in hits}) == len(hits)
    for h in hits:
        assert h.score == pytest.approx(expected[h.uri], abs=TOL)
        assert -1.0 <= h.score <= 1.0
    for a, b in itertools.pairwise(hits):
        assert a.score >= b.score and (a.score > b.score or a.uri < b.uri)  # ties by URI
    if hits:
        returned = {h.uri for h in hits}
        assert all(s <= hits[-1].score + TOL for u, s in expected.items() if u not in returned)


@SETTINGS
@given(docs=st.dictionaries(uris, vectors, max_size=7), query=vectors, top_k=st.integers(1, 8), floor=floors)
def test_min_score_cuts_the_ranking_and_nothing_else(
    docs: dict[str, list[float]], query: list[float], top_k: int, floor: float | None
) -> None:
    store = embedded(docs)
    everything = store.search_vector(query, 1000)
    got = store.search_vector(query, top_k, min_score=floor)
    assert got == [h for h in everything if floor is None or h.score > floor][:top_k]
    if floor is not None:
        assume(all(abs(cosine(x, query) - floor) > TOL for x in docs.values()))
        assert len(got) == min(top_k, sum(cosine(x, query) > floor for x in docs.values()))


def finite_number(value: object) -> bool:
    """The rule for `min_score`: None, or an int or float that is a finite float."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


@SETTINGS
@given(
    floor=st.one_of(
        st.none(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(10**400), 10**400),
        st.booleans(),
        st.text(max_size=3),
        st.lists(st.floats(-1, 1), max_size=1),
        st.just(float("nan")),
    )
)
def test_min_score_is_refused_unless_a_finite_number(floor: Any) -> None:
    store = embedded({"d/a": [1.0, 0.0, 0.0], "d/b": [-1.0, 0.0, 0.0]})
    if finite_number(floor):
        got = store.search_vector([1.0, 0.0, 0.0], 5, min_score=floor)
        assert [h.uri for h in got] == [u for u, s in (("d/a", 1.0), ("d/b", -1.0)) if floor is None or s > floor]
    else:
        with pytest.raises(ValidationError):
            store.search_vector([1.0, 0.0, 0.0], 5, min_score=floor)
