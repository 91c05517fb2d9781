"""Half-precision scanned vectors (``vector_dtype="float16"``): answers within f16's rounding of
the float32 ones, no f32 copy held, kept in step with every write, saved and mapped like the
float32 columns, and never mapped by a store opened with the other precision."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.backends.postgres import Postgres
from hippograph.engine import column_files
from hippograph.errors import ConfigError
from hippograph.graph.model import NodeType
from hippograph.testing.graphs import make_node, random_graph
from lmdb_common import mapped
from pg_server import pg_dsn, pg_store

__all__ = ["pg_dsn", "pg_store"]  # fixtures

NOW = datetime(2026, 6, 1, tzinfo=UTC)
TOL = 1e-3
"""How far a relevance read from f16 unit rows may lie from the f32 one (11 significant bits)."""


def _load(backend: hg.GraphBackend, vectors: np.ndarray, accesses: list[int]) -> None:
    cs = hg.Changeset()
    for i, v in enumerate(vectors):
        cs.add_node(make_node(NodeType.SEMANTIC, f"n{i:04d}", v))
        cs.put_metadata(f"n{i:04d}", hg.NodeMetadata(created_at=NOW, access_count=accesses[i]))
    backend.apply_changeset(cs)


def _all(backend: hg.GraphBackend, queries: np.ndarray, top_k: int) -> list[tuple[str, float]]:
    config = {"params": {NodeType.SEMANTIC: {"top_k": top_k, "threshold": 0.0}}}
    got = backend.find_candidates([NodeType.SEMANTIC], queries[0], list(queries[1:]), config, now=NOW, exact=True)
    return [(n.id, s) for n, s in got]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 120),
    dim=st.integers(1, 40),
    tags=st.integers(0, 3),
    top_k=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_half_answers_are_the_f32_answers_within_rounding(n: int, dim: int, tags: int, top_k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = (rng.standard_normal((n, dim)) * rng.uniform(0.01, 100.0, (n, 1))).astype(np.float32)
    vectors[rng.random(n) < 0.1] = 0.0  # some rows hold a zero vector
    accesses = rng.integers(0, 30, n).tolist()
    queries = rng.standard_normal((1 + tags, dim)).astype(np.float32)
    full, half = InMemory(ann=None), InMemory(ann=None, vector_dtype="float16")
    for b in (full, half):
        _load(b, vectors, accesses)
    reference = dict(_all(full, queries, n))  # every row's f32 score
    got = _all(half, queries, top_k)
    want = _all(full, queries, top_k)
    assert len(got) == len(want)
    for node_id, score in got:
        assert abs(score - reference[node_id]) <= TOL, node_id
    # The same rows, except where f32 scores lie within the rounding of the k-th.
    if want:
        kth = want[-1][1]
        assert {i for i, s in want if s > kth + 2 * TOL} <= {i for i, _ in got}
        assert all(reference[i] >= kth - 2 * TOL for i, _ in got)


def test_half_storage_holds_no_f32_rows() -> None:
    b = InMemory(ann=None, vector_dtype="float16")
    rng = np.random.default_rng(1)
    _load(b, rng.standard_normal((50, 16)).astype(np.float32), [0] * 50)
    columns = b._derived.columns[NodeType.SEMANTIC]
    assert columns.vector_dtype == "float16"
    assert columns._vectors._mat.size == 0
    assert columns._vectors.shadow.half.dtype == np.uint16
    assert set(columns.norms().tolist()) == {1.0}
    decoded = columns.matrix()
    assert decoded.dtype == np.float32 and np.allclose(np.linalg.norm(decoded, axis=1), 1.0, atol=TOL)


def test_half_rows_follow_puts_changes_and_deletions() -> None:
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((60, 12)).astype(np.float32)
    b = InMemory(ann=None, vector_dtype="float16")
    _load(b, vectors, [1] * 60)
    cs = hg.Changeset()
    vectors[3] = rng.standard_normal(12).astype(np.float32)  # a new vector
    cs.add_node(make_node(NodeType.SEMANTIC, "n0003", vectors[3]))
    cs.add_node(make_node(NodeType.SEMANTIC, "n0007", vectors[7]))  # the same vector again
    cs.add_node(make_node(NodeType.SEMANTIC, "n0009", None))  # no vector any more
    b.apply_changeset(cs)
    b.delete_nodes(["n0000", "n0010", "n0059"])  # swap-removes move rows
    fresh = InMemory(ann=None, vector_dtype="float16")
    keep = [i for i in range(60) if i not in (0, 10, 59)]
    final = hg.Changeset()
    for i in keep:
        final.add_node(make_node(NodeType.SEMANTIC, f"n{i:04d}", None if i == 9 else vectors[i]))
        final.put_metadata(f"n{i:04d}", hg.NodeMetadata(created_at=NOW, access_count=1))
    fresh.apply_changeset(final)
    queries = rng.standard_normal((3, 12)).astype(np.float32)
    assert _all(b, queries, 57) == _all(fresh, queries, 57)


def test_half_candidates_from_the_vector_index() -> None:
    """A type large enough for its HNSW index answers approximately from the decoded rows.

    One build thread, one search depth and no speed gate: the graph, the depth and the index's use
    do not depend on how busy the machine is (by default a scan this small is often found too fast
    for the index to be worth it, and the answers would be the exact scan's)."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((20, 24))
    vectors = (centres[rng.integers(0, 20, 3000)] + 0.3 * rng.standard_normal((3000, 24))).astype(np.float32)
    ann = hg.AnnConfig(min_nodes=500, background=False, threads=1, min_speedup=0.0, ef_search=64, max_ef_search=64)
    b = InMemory(ann=ann, vector_dtype="float16")
    _load(b, vectors, [0] * 3000)
    assert b.build_vector_index([NodeType.SEMANTIC])
    assert not b.vector_index_stats()[NodeType.SEMANTIC.value].get("exact_fallback")
    hits = found = 0
    for q in rng.standard_normal((20, 24)).astype(np.float32):
        exact = {n.id for n, _ in b.find_candidates([NodeType.SEMANTIC], q, [], None, now=NOW, exact=True)}
        approx = {n.id for n, _ in b.find_candidates([NodeType.SEMANTIC], q, [], None, now=NOW)}
        hits, found = hits + len(exact & approx), found + len(exact)
    assert found and hits / found >= 0.95


def test_postgres_client_columns_in_half_precision(pg_store: Callable[..., Any]) -> None:
    """PostgreSQL's client-side columns follow the option: the same answers as float32 within rounding."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((200, 16)).astype(np.float32)
    accesses = rng.integers(0, 20, 200).tolist()
    half = pg_store(vector_dtype="float16")
    _load(half, vectors, accesses)
    full = InMemory(ann=None)
    _load(full, vectors, accesses)
    columns = half._cache.columns[NodeType.SEMANTIC]
    queries = rng.standard_normal((2, 16)).astype(np.float32)
    reference = dict(_all(full, queries, 200))
    got = _all(half, queries, 20)
    assert columns.vector_dtype == "float16" and columns._vectors._mat.size == 0
    assert len(got) == 20 and all(abs(s - reference[i]) <= TOL for i, s in got)


@pytest.fixture
def small_stores_save(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(column_files, "SAVE_MIN_ROWS", 10)


def _answers(b: LMDB) -> list[list[tuple[str, float]]]:
    rng = np.random.default_rng(5)
    out = []
    for _ in range(4):
        q = rng.normal(size=8).astype(np.float32)
        got = b.find_candidates(list(NodeType), q, [rng.normal(size=8).astype(np.float32)], None, now=NOW, exact=True)
        out.append([(n.id, s) for n, s in got])
    return out


@pytest.mark.usefixtures("small_stores_save")
def test_saved_half_columns_are_mapped_and_answer_as_a_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with LMDB(path, vector_dtype="float16") as b:
        b.apply_changeset(random_graph(3, n=300, now=NOW).changeset)
        _answers(b)  # this process reads its columns: close saves them
    with LMDB(path, vector_dtype="float16") as b:
        got = _answers(b)
        assert b.stats()["saved_columns"]["state"] in ("mapped", "verified")
        columns = b._cache.columns[NodeType.SEMANTIC]
        assert mapped(columns._vectors.shadow.half) and columns._vectors._mat.shape[1] == 0
    (path / "columns" / column_files.SIDECAR).unlink()
    with LMDB(path, vector_dtype="float16", readonly=True) as b:
        assert _answers(b) == got
        assert b.stats()["saved_columns"]["state"] == "none"


@pytest.mark.usefixtures("small_stores_save")
def test_a_store_opened_with_the_other_precision_rebuilds(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with LMDB(path, vector_dtype="float16") as b:
        b.apply_changeset(random_graph(4, n=300, now=NOW).changeset)
        half = _answers(b)
    with LMDB(path) as b:  # float32: the saved f16 set is not read
        full = _answers(b)
        assert b.stats()["saved_columns"]["state"] == "none"
        assert not mapped(b._cache.columns[NodeType.SEMANTIC]._vectors._mat)
    with LMDB(path, vector_dtype="float16") as b:  # the f32 set saved at that close is not read either
        assert _answers(b) == half
        assert b.stats()["saved_columns"]["state"] == "none"
    for h, f in zip(half, full, strict=True):
        reference = dict(f)
        assert all(abs(s - reference.get(i, s)) <= TOL for i, s in h)


@pytest.mark.parametrize("bad", ["float64", "f16", None, 16])
def test_an_unknown_vector_dtype_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="vector_dtype"):
        LMDB(tmp_path / "s", vector_dtype=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()
    with pytest.raises(ConfigError, match="vector_dtype"):
        InMemory(vector_dtype=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="vector_dtype"):
        Postgres("postgresql://127.0.0.1:1/none", vector_dtype=bad)  # type: ignore[arg-type]


def test_a_store_index_in_half_precision() -> None:
    """The scoped store's index keeps the f16 unit vectors only and ranks as the float32 one does."""
    rng = np.random.default_rng(8)
    table = {f"t{i}": rng.standard_normal(12).astype(np.float32) for i in range(80)}

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([table[t] for t in texts])

    full = hg.Store(InMemory(), embed=embed, ann=None)
    half = hg.Store(InMemory(), embed=embed, ann=None, vector_dtype="float16")
    for s in (full, half):
        for i in range(79):
            s.put(("u",), f"k{i}", f"t{i}")
    assert half._index.vectors._mat.size == 0
    want = [(h.entry.key, h.score) for h in full.search(("u",), vector=table["t79"], limit=10)]
    got = [(h.entry.key, h.score) for h in half.search(("u",), vector=table["t79"], limit=10)]
    assert [k for k, _ in got] == [k for k, _ in want]
    assert all(abs(a[1] - b[1]) <= TOL for a, b in zip(got, want, strict=True))


def test_open_store_refuses_an_unknown_vector_dtype(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="vector_dtype"):
        hg.open_store("s", path=tmp_path / "s", vector_dtype="bfloat16")  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()
