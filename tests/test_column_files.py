"""Saved scoring columns of an LMDB store: mapped at open instead of rebuilt, caught up from the
change log, and never trusted past a check they fail (docs/lmdb.md, "Saved columns")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB
from hippograph.engine import column_files
from hippograph.engine.mapped_ids import MappedIds, encode_ids
from hippograph.graph.model import NodeType
from hippograph.testing.graphs import make_node, random_graph
from lmdb_common import mapped

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def small_stores_save(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(column_files, "SAVE_MIN_ROWS", 10)


def answers(b: LMDB, seed: int) -> list[list[tuple[str, float]]]:
    """Exact answers to a few queries over every type (ids and scores)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(4):
        q = rng.normal(size=8).astype(np.float32)
        got = b.find_candidates(list(NodeType), q, [rng.normal(size=8).astype(np.float32)], None, now=NOW, exact=True)
        out.append([(n.id, round(s, 12)) for n, s in got])
    return out


def rebuilt(path: Path, seed: int) -> list[list[tuple[str, float]]]:
    """The answers of the store's columns rebuilt from its records, the saved set left aside."""
    side = path / "columns" / column_files.SIDECAR
    kept = side.read_bytes() if side.exists() else None
    side.unlink(missing_ok=True)
    try:
        with LMDB(path, readonly=True) as b:
            return answers(b, seed)
    finally:
        if kept is not None:
            side.write_bytes(kept)


def saved_store(path: Path, seed: int = 3, n: int = 300) -> None:
    with LMDB(path) as b:
        b.apply_changeset(random_graph(seed, n=n, now=NOW).changeset)
        answers(b, 0)  # this process reads its columns: close saves them


def state(b: LMDB) -> str:
    got = b.stats()["saved_columns"]["state"]
    assert isinstance(got, str)
    return got


def wait_verified(b: LMDB) -> None:
    if b._cache._verifier is not None:
        b._cache._verifier.join(30)


def test_a_reopened_store_maps_its_saved_columns_and_answers_as_a_rebuild(tmp_path: Path) -> None:
    saved_store(tmp_path / "s")
    assert (tmp_path / "s" / "columns" / column_files.SIDECAR).exists()
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 1)
        assert state(b) in ("mapped", "verified")
        columns = b._cache.columns[NodeType.SEMANTIC]
        assert mapped(columns._vectors._mat)
        wait_verified(b)
        assert state(b) == "verified"
    assert got == rebuilt(tmp_path / "s", 1)


def test_writes_after_the_save_are_replayed_from_the_change_log(tmp_path: Path) -> None:
    saved_store(tmp_path / "s")
    with LMDB(tmp_path / "s") as b:  # writes without reading: this process never loads its columns
        g = random_graph(4, n=40, now=NOW)
        b.apply_changeset(g.changeset)
        cs = hg.Changeset()
        cs.add_node(make_node(NodeType.SEMANTIC, "zz-new", np.ones(8, np.float32)))
        b.apply_changeset(cs)
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 2)
        assert state(b) in ("mapped", "verified")
        assert b.get_node("zz-new") is not None
        assert "zz-new" in b._cache.columns[NodeType.SEMANTIC].row
    assert got == rebuilt(tmp_path / "s", 2)


def test_mapped_columns_take_writes_and_deletions_like_rebuilt_ones(tmp_path: Path) -> None:
    saved_store(tmp_path / "s")
    with LMDB(tmp_path / "s") as b:
        answers(b, 0)
        semantic = b._cache.columns[NodeType.SEMANTIC]
        assert mapped(semantic._vectors._mat)
        doomed = semantic.ids[:5]
        cs = hg.Changeset()
        for i in range(5):  # the same vector five times: their order is the tie-break's
            cs.add_node(make_node(NodeType.SEMANTIC, f"tie-{4 - i}", np.full(8, 0.5, np.float32)))
        b.apply_changeset(cs)
        b.rewrite(hg.Changeset(), doomed, [])
        got = answers(b, 11)
        assert sum(i.startswith("tie-") for i in semantic.ids) == 5
        assert not set(doomed) & set(semantic.row)
    assert got == rebuilt(tmp_path / "s", 11)
    with LMDB(tmp_path / "s") as b:
        q = np.full(8, 0.5, np.float32)
        hits = b.find_candidates([NodeType.SEMANTIC], q, [], None, now=NOW, exact=True)
        assert [n.id for n, _ in hits[:5]] == [f"tie-{i}" for i in range(5)]


def test_a_saved_set_newer_than_the_store_is_not_read(tmp_path: Path) -> None:
    saved_store(tmp_path / "s")
    side = tmp_path / "s" / "columns" / column_files.SIDECAR
    doc = json.loads(side.read_bytes())
    doc["seq"] += 1000  # as after restoring an older copy of the store beside newer columns
    side.write_text(json.dumps(doc))
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 5)
        assert state(b) == "none"
    assert got == rebuilt(tmp_path / "s", 5)


def test_a_row_that_disagrees_with_the_store_rejects_the_set_before_any_answer(tmp_path: Path) -> None:
    saved_store(tmp_path / "s")
    side = json.loads((tmp_path / "s" / "columns" / column_files.SIDECAR).read_bytes())
    path = tmp_path / "s" / "columns" / side["set"] / "semantic.matrix.npy"
    matrix = np.load(path, mmap_mode="r+")
    row = int(np.flatnonzero(np.abs(matrix).sum(axis=1) > 0)[0])  # row 0 of the sample, with a vector
    matrix[row] += 1.0
    matrix.flush()
    del matrix
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 6)
        assert state(b) == "none"
    assert got == rebuilt(tmp_path / "s", 6)


def test_a_file_whose_hash_differs_is_dropped_and_the_columns_rebuilt(tmp_path: Path) -> None:
    saved_store(tmp_path / "s", n=600)
    side = json.loads((tmp_path / "s" / "columns" / column_files.SIDECAR).read_bytes())
    path = tmp_path / "s" / "columns" / side["set"] / "semantic.timestamp.npy"
    stamps = np.load(path, mmap_mode="r+")
    stamps[1] += 7200.0  # metadata is not sampled: only the hash can tell
    stamps.flush()
    del stamps
    with LMDB(tmp_path / "s") as b:
        answers(b, 7)
        wait_verified(b)
        assert state(b) == "rejected"
        assert not (tmp_path / "s" / "columns" / column_files.SIDECAR).exists()
        got = answers(b, 7)  # the next read rebuilds from the store
        assert b._cache.seq >= 0 and not mapped(b._cache.columns[NodeType.SEMANTIC]._vectors._mat)
    assert got == rebuilt(tmp_path / "s", 7)


@pytest.mark.parametrize(
    "damage",
    ["truncate", "sidecar", "dimension", "unknown type", "older format", "id offsets go back", "id offsets overrun"],
)
def test_damaged_or_foreign_sets_are_never_read(tmp_path: Path, damage: str) -> None:
    saved_store(tmp_path / "s")
    columns = tmp_path / "s" / "columns"
    side = columns / column_files.SIDECAR
    doc = json.loads(side.read_bytes())
    if damage == "truncate":
        path = columns / doc["set"] / "semantic.norms.npy"
        path.write_bytes(path.read_bytes()[:-8])
    elif damage == "sidecar":
        side.write_bytes(b"{not json")
    elif damage == "dimension":
        doc["dim"] = 9
        side.write_text(json.dumps(doc))
    elif damage == "unknown type":
        doc["types"]["no-such-type"] = 1
        side.write_text(json.dumps(doc))
    elif damage == "older format":
        doc["format"] = column_files.COLUMNS_FORMAT - 1
        side.write_text(json.dumps(doc))
    else:
        ends = np.load(columns / doc["set"] / "semantic.id_ends.npy", mmap_mode="r+")
        if damage == "id offsets go back":
            ends[3], ends[4] = ends[4], ends[3]
        else:
            ends[-1] += 1
        ends.flush()
        del ends
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 8)
        assert state(b) == "none"
    assert got == rebuilt(tmp_path / "s", 8)


def test_a_type_without_any_vector_is_saved_and_mapped(tmp_path: Path) -> None:
    with LMDB(tmp_path / "s") as b:
        rng = np.random.default_rng(9)
        g = hg.Changeset()
        for i in range(60):
            g.add_node(make_node(NodeType.SEMANTIC, f"s-{i:02d}", rng.normal(size=8).astype(np.float32)))
        for i in range(30):
            g.add_node(make_node(NodeType.INTENT, f"intent-{i:02d}", None))
        b.apply_changeset(g)
        answers(b, 0)
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 9)
        assert state(b) in ("mapped", "verified")
        assert len(b._cache.columns[NodeType.INTENT]) == 30
    assert got == rebuilt(tmp_path / "s", 9)


def test_a_save_that_fails_midway_leaves_the_last_set_named_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved_store(tmp_path / "s")
    columns = tmp_path / "s" / "columns"
    before = json.loads((columns / column_files.SIDECAR).read_bytes())
    real, calls = np.save, []

    def failing(*args: object, **kwargs: object) -> None:
        calls.append(1)
        if len(calls) == 5:
            raise OSError("no space left on device")
        real(*args, **kwargs)  # type: ignore[arg-type]

    with LMDB(tmp_path / "s") as b:
        answers(b, 0)
        wait_verified(b)
        cs = hg.Changeset()
        cs.add_node(make_node(NodeType.SEMANTIC, "zz-late", np.ones(8, np.float32)))
        b.apply_changeset(cs)
        answers(b, 0)
        monkeypatch.setattr(column_files.np, "save", failing)
        with pytest.warns(RuntimeWarning, match="scoring columns not saved"):
            b.close()
    monkeypatch.setattr(column_files.np, "save", real)
    assert json.loads((columns / column_files.SIDECAR).read_bytes()) == before
    assert sorted(p.name for p in columns.iterdir()) == sorted([column_files.SIDECAR, before["set"]])
    with LMDB(tmp_path / "s") as b:
        got = answers(b, 10)
        assert state(b) in ("mapped", "verified") and b.get_node("zz-late") is not None
    assert got == rebuilt(tmp_path / "s", 10)


def test_small_stores_save_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(column_files, "SAVE_MIN_ROWS", 10_000)
    saved_store(tmp_path / "s")
    assert not (tmp_path / "s" / "columns").exists()


@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), max_size=40))
@settings(max_examples=200, deadline=None)
def test_mapped_ids_read_back_every_id_as_saved(ids: list[str]) -> None:
    mapped = MappedIds(*encode_ids(ids))
    assert len(mapped) == len(ids)
    assert list(mapped) == ids
    assert [mapped[i] for i in range(len(ids))] == ids
    assert [mapped[-i] for i in range(1, len(ids) + 1)] == [ids[-i] for i in range(1, len(ids) + 1)]
    assert mapped[1:-1:2] == ids[1:-1:2]
    for outside in (len(ids), -len(ids) - 1):
        with pytest.raises(IndexError):
            mapped[outside]
    assert encode_ids(mapped) is mapped.arrays  # saved again as read, not re-encoded


def test_a_reader_keeps_saved_ids_mapped_until_it_writes(tmp_path: Path) -> None:
    saved_store(tmp_path / "s", n=400)
    want = rebuilt(tmp_path / "s", 12)
    with LMDB(tmp_path / "s") as b:
        assert answers(b, 12) == want
        semantic = b._cache.columns[NodeType.SEMANTIC]
        assert isinstance(semantic.ids, MappedIds)  # answering decoded only the hits
        cs = hg.Changeset()
        cs.add_node(make_node(NodeType.SEMANTIC, "tie-new", np.ones(8, np.float32)))
        b.apply_changeset(cs)
        assert isinstance(semantic.ids, list) and semantic.ids[-1] == "tie-new"
        after = answers(b, 12)
    assert after == rebuilt(tmp_path / "s", 12)
