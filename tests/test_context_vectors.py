"""The context store's `search_vector` over random vectors: the k nearest documents by cosine, with no
similarity floor unless `min_score` asks for one.

The oracle ranks in float64 from the rule (cosine, a zero vector scoring 0 against everything);
the store ranks float32 vectors, so scores are compared within `TOL` and near-ties are not ordered
by the oracle. A floored search must be exactly the unfloored ranking cut at `min_score`.
"""

from __future__ import annotations

import itertools
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.context import ContextStore, open_context, tree, vector_snapshot
from hippograph.context.keys import COUNTERS, uri_of
from hippograph.context.vector_snapshot import VectorSnapshot, changed
from hippograph.errors import ValidationError
from hippograph.testing.context import EMBED, embed_pending, plant_vector

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


DIRECTIONS = (*([1.0, a / 4, 0.0] for a in range(8)), [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0])
"""Cosines from 1 down to -1 with the query [1, 0, 0]: well apart, or (the same pick) tied exactly."""


@SETTINGS
@given(
    docs=st.lists(st.tuples(st.integers(0, len(DIRECTIONS) - 1), st.booleans()), min_size=1, max_size=40),
    top_k=st.integers(1, 6),
    floor=st.sampled_from((None, -0.5, 0.5)),
)
def test_the_k_nearest_skip_disabled_documents_however_many_rank_above(
    docs: list[tuple[int, bool]], top_k: int, floor: float | None
) -> None:
    """The scan ranks only the best few rows before reading their documents back; when disabled
    documents take their places, it ranks the rest, so the answer is the rule's whatever the mix."""
    vectors = {f"d/{i:02d}": DIRECTIONS[p] for i, (p, _) in enumerate(docs)}
    store = embedded(vectors)
    for i, (_, enabled) in enumerate(docs):
        if not enabled:
            store.set_node_enabled(f"d/{i:02d}", False)
    query = [1.0, 0.0, 0.0]
    kept = [
        u
        for (u, x), (_, on) in zip(vectors.items(), docs, strict=True)
        if on and (floor is None or cosine(x, query) > floor)
    ]
    want = sorted(kept, key=lambda u: (-cosine(vectors[u], query), u))[:top_k]
    assert [h.uri for h in store.search_vector(query, top_k, min_score=floor)] == want


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


ANN = hg.AnnConfig(min_nodes=100, ef_search=128, ef_construction=200, background=False, min_speedup=0)


def clustered(n: int, seed: int) -> tuple[dict[str, list[float]], np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, 16))
    rows = centres[rng.integers(0, 8, n)] + 0.4 * rng.standard_normal((n, 16))
    return {f"{'big' if i % 4 else 'small'}/d{i:04d}": r.tolist() for i, r in enumerate(rows)}, centres


def large(docs: dict[str, list[float]], ann: hg.AnnConfig | None, backend: InMemory | None = None) -> ContextStore:
    store = ContextStore(backend or InMemory(), document_jobs=[EMBED], ann=ann)
    for uri in docs:
        store.put_document(uri, uri)
    embed_pending(store, docs)
    return store


def test_the_vector_index_answers_a_large_store_as_the_exact_scan_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over most of a store past `min_nodes`, the HNSW index answers; a narrow scope, a floor or a
    store without the index give the same documents with the same scores."""
    scans: list[int] = []
    monkeypatch.setattr(VectorSnapshot, "ranked", _counted(VectorSnapshot.ranked, scans))
    docs, centres = clustered(800, 1)
    indexed, exact = large(docs, ANN), large(docs, None)
    assert indexed.build_vector_index() and not indexed.build_vector_index()
    stats = indexed.vector_index_stats()["index"]
    assert stats["available"] and not stats["exact_fallback"]
    assert "index" not in exact.vector_index_stats() and not exact.build_vector_index()
    rng = np.random.default_rng(2)
    asked = found = 0
    for query, scope, floor in itertools.product(
        [*centres[:4], *rng.standard_normal((4, 16))], (None, "big", "small"), (None, 0.0, 0.5)
    ):
        got = indexed.search_vector(query.tolist(), 10, scope, min_score=floor)
        want = exact.search_vector(query.tolist(), 10, scope, min_score=floor)
        assert len(got) == len(want)
        truth = {h.uri: h.score for h in want}
        for h in got:  # every hit is a document of the scope with its exact score
            assert in_scope(h.uri, scope) and h.score == pytest.approx(cosine(docs[h.uri], query.tolist()), abs=TOL)
            assert floor is None or h.score > floor
        asked += len(want)
        found += sum(h.uri in truth for h in got)
        scanned = len(scans) == 2  # the exact store's scan, and the indexed store's own
        scans.clear()
        assert scanned == (scope == "small") or floor == 0.5, "the index answers most of the store"
    assert found / asked >= 0.98


def _counted(fn: Any, calls: list[int]) -> Any:
    def wrapper(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return fn(*args, **kw)

    return wrapper


def test_the_index_never_returns_a_document_the_store_does_not_hold_or_has_disabled() -> None:
    docs, centres = clustered(600, 3)
    store = large(docs, ANN)
    assert store.build_vector_index()
    query = centres[0].tolist()
    first = [h.uri for h in store.search_vector(query, 10)]
    store.set_node_enabled(first[0], False)
    store.remove_subtree(first[1])
    again = [h.uri for h in store.search_vector(query, 10)]
    assert len(again) == 10 and first[0] not in again and first[1] not in again
    assert again[:8] == first[2:]


def test_another_writer_s_vector_reaches_the_index() -> None:
    """A vector written through another store on the same backend (another process's write) is
    found by the next search, the index catching up with only what changed."""
    docs, centres = clustered(600, 4)
    backend = InMemory()
    store = large(docs, ANN, backend)
    assert store.build_vector_index()
    other = ContextStore(backend, document_jobs=[EMBED])
    target = (centres[5] + 0.01).tolist()
    other.put_document("big/new", "new")
    moved = next(iter(docs))
    embed_pending(other, {"big/new": target, moved: (-centres[5]).tolist()})
    hits = store.search_vector(target, 3)
    assert hits[0].uri == "big/new" and moved not in [h.uri for h in store.search_vector(centres[5].tolist(), 50)]
    assert store.vector_index_stats()["index"]["available"]


@SETTINGS
@given(
    old=st.dictionaries(st.binary(min_size=1, max_size=3), st.integers(0, 3), max_size=30),
    new=st.dictionaries(st.binary(min_size=1, max_size=3), st.integers(0, 3), max_size=30),
)
def test_a_reload_hands_the_index_exactly_the_rows_that_changed(old: dict[bytes, int], new: dict[bytes, int]) -> None:
    """Between two snapshots: every row new or with other bits is fresh, every lost key gone, and
    nothing else (the columns of the vector index are brought up to date with only those)."""

    def snapshot(rows: dict[bytes, int]) -> VectorSnapshot:
        keys = sorted(rows)
        return VectorSnapshot.of_rows(0, 2, keys, [np.array([rows[k], 1.0], "<f4").tobytes() for k in keys])

    before, after = snapshot(old), snapshot(new)
    fresh, gone = changed(before, after)
    assert [k for k, f in zip(after.keys, fresh, strict=True) if f] == [k for k in after.keys if old.get(k) != new[k]]
    assert gone == [k for k in before.keys if k not in new]


steps = st.lists(
    st.one_of(
        st.tuples(st.just("embed"), uris, vectors),
        st.tuples(st.just("rewrite"), uris),
        st.tuples(st.just("remove"), st.sampled_from(("d", "d/b", "d/c", "e", "f"))),
        st.tuples(st.just("disable"), uris),
        st.tuples(st.just("plant"), uris, vectors),
        st.tuples(st.just("read")),
    ),
    max_size=25,
)


def _fully_read(backend: InMemory) -> VectorSnapshot:
    """The snapshot a process with an empty cache would build now."""
    fresh = ContextStore(backend, document_jobs=[EMBED], ann=None)
    return fresh._read(lambda t: fresh._vectors.current(t, fresh._active_dim(t)))


@SETTINGS
@given(ops=steps, min_nodes=st.sampled_from((2, 1000)), slack=st.sampled_from((0, 1024)))
@example(
    ops=[("embed", "d/a", [1.0, 0.0, 0.0]), ("read",), ("remove", "d"), ("embed", "f", [0.0, 1.0, 0.0])],
    min_nodes=2,
    slack=1024,
)
@example(ops=[("embed", "e/a", [1.0, 0.0, 0.0]), ("read",), ("embed", "e/a", [0.0, 2.0, 0.0])], min_nodes=2, slack=1024)
def test_a_cache_caught_up_from_the_change_log_holds_what_a_full_read_finds(
    ops: list[tuple[Any, ...]], min_nodes: int, slack: int
) -> None:
    """A reader that last looked any number of changes ago (other writers' embeddings, rewrites that
    retire a vector, subtree removals, a writer that logs nothing) holds exactly the vectors a fresh
    read finds, scores them alike, and its vector index holds exactly those rows; whether the
    rows are picked from older versions' (`slack` 1024) or gathered at each change (0)."""
    backend = InMemory()
    writer = ContextStore(backend, document_jobs=[EMBED])
    reader = ContextStore(backend, document_jobs=[EMBED], ann=hg.AnnConfig(min_nodes=min_nodes, background=False))
    vector_snapshot._SLACK, kept_slack = slack, vector_snapshot._SLACK
    writer.put_document("z", "z")
    embed_pending(writer, {"z": [1.0, 0.0, 0.0]})  # the store's dimension, so `plant` may write
    try:
        _replay(writer, reader, backend, ops)
    finally:
        vector_snapshot._SLACK = kept_slack


def _replay(writer: ContextStore, reader: ContextStore, backend: InMemory, ops: list[tuple[Any, ...]]) -> None:
    for op, *args in [*ops, ("read",)]:
        if op == "embed":
            writer.put_document(args[0], "text")
            embed_pending(writer, {args[0]: args[1]})
        elif op == "rewrite" and writer.get_node(args[0]) is not None:
            writer.put_document(args[0], "again")
        elif op == "remove" and writer.get_node(args[0]) is not None:
            writer.remove_subtree(args[0])
        elif op == "disable" and writer.get_node(args[0]) is not None:
            writer.set_node_enabled(args[0], False)
        elif op == "plant":
            plant_vector(backend, args[0], args[1])
        elif op == "read":
            reader.search_vector([1.0, 1.0, 1.0], 3)
            held, truth = reader._vectors.snapshot, _fully_read(backend)
            assert held.keys == truth.keys
            assert held.matrix.tobytes() == truth.matrix.tobytes()
            assert held.norms.tobytes() == truth.norms.tobytes()
            for query in ([1.0, -0.5, 2.0], [0.0, 0.0, 0.0]):
                q = np.asarray(query, np.float32)
                for depth in (None, 1, 2):
                    got, want = (
                        held.ranked(q, 0, len(held.keys), None, depth),
                        truth.ranked(q, 0, len(truth.keys), None, depth),
                    )
                    assert dict(zip(*got[:2], strict=True)) == pytest.approx(
                        dict(zip(*want[:2], strict=True)), abs=1e-6
                    )
            cols = reader._vectors.columns
            if reader._vectors._synced is not None:
                assert sorted(cols.ids) == sorted(k.hex() for k in truth.keys)
                for i, key in enumerate(cols.ids):
                    assert cols.matrix()[i].tobytes() == truth.matrix[truth.keys.index(bytes.fromhex(key))].tobytes()


def test_the_change_log_keeps_a_bounded_tail_and_a_reader_further_behind_reads_everything() -> None:
    backend = InMemory()
    writer = ContextStore(backend, document_jobs=[EMBED])
    reader = ContextStore(backend, document_jobs=[EMBED])
    writer.put_document("a", "a")
    embed_pending(writer, {"a": [1.0, 0.0, 0.0]})
    assert [h.uri for h in reader.search_vector([1.0, 0.0, 0.0], 5)] == ["a"]
    writer.put_document("b", "b")
    embed_pending(writer, {"b": [0.0, 1.0, 0.0]})
    backend.context_write(lambda t: [tree.vectors_changed(t) for _ in range(2 * tree.VECTOR_LOG_KEPT)])
    log = (tree.VECTOR_LOG, tree.VECTOR_LOG + b"\xff")
    logged = backend.context_read(lambda t: sum(1 for _ in t.range(COUNTERS, *log)))
    assert tree.VECTOR_LOG_KEPT <= logged <= tree.VECTOR_LOG_KEPT + 256
    assert [h.uri for h in reader.search_vector([0.0, 1.0, 0.0], 5)] == ["b", "a"]


def test_rows_appended_after_a_version_never_overwrite_the_rows_an_earlier_version_reads() -> None:
    """Two versions derived from one (a successor of a version that is no longer the newest) each
    keep their own appended rows, whatever the buffer grew to."""
    first = vector_snapshot._Appended(2)
    one = first.extended(0, np.ones((1, 2), np.float32))
    many = one.extended(1, np.full((100, 2), 2.0, np.float32))
    other = one.extended(1, np.full((1, 2), 3.0, np.float32))
    assert one.buf[0].tolist() == [1.0, 1.0] and many.buf[1].tolist() == [2.0, 2.0] and many.size == 101
    assert other.buf[:2].tolist() == [[1.0, 1.0], [3.0, 3.0]] and many.buf[1].tolist() == [2.0, 2.0]


def test_the_best_rows_found_by_the_core_s_scan_are_the_head_of_the_whole_ranking() -> None:
    """`ranked` with a depth (the Rust core's scan, through the rows' half-precision shadow after a
    few scans) gives the first rows of the full ranking and their scores, over any slice, for a
    version read whole and for one derived from it by rewrites, appends and removals."""
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((1500, 32))
    rows[::7] += 3.0 * rows[0]  # a cluster, for near ties
    store = embedded({f"g{i % 3}/d{i:04d}": r.tolist() for i, r in enumerate(rows)})
    versions = [store._read(lambda t: store._vectors.current(t, store._active_dim(t)))]
    store.remove_subtree("g1")
    for i in range(40):
        store.put_document(f"g{i % 3}/new{i}", "new")
    embed_pending(store, {f"g{i % 3}/new{i}": rng.standard_normal(32).tolist() for i in range(40)})
    versions.append(store._read(lambda t: store._vectors.current(t, store._active_dim(t))))
    assert versions[1].pick is not None  # derived from the first, not read again
    for snap in versions:
        n = len(snap.keys)
        for i in range(12):
            query = rng.standard_normal(32).astype(np.float32) if i % 2 else snap.matrix[i * 11] + 0.01
            lo, hi = (0, n) if i % 3 else (n // 5, n // 2)
            head, scores, whole = snap.ranked(query, lo, hi, None, 20)
            every, every_scores, _ = snap.ranked(query, lo, hi)
            assert not whole and head[:20] == every[:20] and scores[:20] == pytest.approx(every_scores[:20], abs=1e-6)
        assert snap.root.shadow is not None


def test_readers_at_two_versions_never_make_each_other_read_every_vector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search whose transaction began before a vector write finds its own version among the last
    few, and the next search at the newest version finds that one: neither reads every vector."""
    store = open_context("c", path=tmp_path, durability="fast", document_jobs=[EMBED], ann=None)
    store.put_document("a", "a")
    embed_pending(store, {"a": [1.0, 0.0, 0.0]})
    store.search_vector([1.0, 0.0, 0.0], 5)
    reads: list[int] = []
    monkeypatch.setattr(VectorSnapshot, "of_rows", _counted(VectorSnapshot.of_rows, reads))
    started, written = threading.Event(), threading.Event()
    seen: list[list[str]] = []

    def old_reader(t: Any) -> None:
        started.set()
        written.wait(10)
        snap = store._vectors.current(t, store._active_dim(t))
        seen.append([uri_of(k) for k in snap.keys])

    reader = threading.Thread(target=store._read, args=(old_reader,))
    reader.start()
    started.wait(10)
    for i in range(3):
        store.put_document(f"b{i}", "b")
        embed_pending(store, {f"b{i}": [0.0, 1.0, float(i)]})
        assert store.search_vector([0.0, 1.0, 0.0], 1)[0].uri.startswith("b")
    written.set()
    reader.join(10)
    assert seen == [["a"]]  # the version its transaction reads
    assert [h.uri for h in store.search_vector([0.0, 1.0, 0.0], 5)] == ["b0", "b1", "b2", "a"]
    assert reads == []
    store.close()
