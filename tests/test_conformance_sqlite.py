"""The public conformance suite run against the worked example, examples/sqlite_backend.py.

It runs with every capability: durability (`reopen`) and several processes
on one database file (`shared`). The examples directory is not a package, so
it goes on `sys.path` here, at import time: the children of the shared tests
are started with ``spawn`` and import this module afresh before they call
`open_in_child`. The tests below the suite cover what it does not know
about: the example's optional `modify_metadata` and its error mapping.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hippograph import Changeset, NodeMetadata, NodeType, Repo, Step, StorageError, Trajectory, ValidationError
from hippograph.embedding import HashingEmbedder
from hippograph.graph.protocol import CommitsIngestions
from hippograph.graph.structuring import episodic
from hippograph.testing import BackendConformance
from hippograph.testing.graphs import NOW, make_node, vec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from sqlite_backend import SQLiteBackend  # noqa: E402


class TestSQLiteBackend(BackendConformance):
    reopen = True
    shared = True

    def make_backend(self, path: Path) -> SQLiteBackend:
        return SQLiteBackend(path / "graph.db")


def _two_nodes(backend: SQLiteBackend) -> None:
    nodes = [make_node(NodeType.SEMANTIC, i, vec(1, 0, 0, 0)) for i in ("a", "b")]
    backend.apply_changeset(Changeset().add_nodes(nodes))


def test_modify_metadata_rewrites_existing_nodes_only(tmp_path: Path) -> None:
    """fn sees each existing node's current metadata (None when it has none); other ids are skipped."""
    kept = NodeMetadata(created_at=NOW, access_count=5)
    seen: list[tuple[str, NodeMetadata | None]] = []

    def touch(node_id: str, meta: NodeMetadata | None) -> NodeMetadata | None:
        seen.append((node_id, meta))
        return None if node_id == "b" else (meta or NodeMetadata(created_at=NOW)).record_access(NOW)

    with SQLiteBackend(tmp_path / "graph.db") as backend:
        _two_nodes(backend)
        backend.update_metadata({"b": kept, "ghost": kept})
        backend.modify_metadata(["a", "b", "ghost"], touch)
        assert seen == [("a", None), ("b", kept)]
        assert backend.get_metadata(["a", "b", "ghost"]) == {
            "a": NodeMetadata(created_at=NOW, access_count=1, last_accessed_at=NOW),
            "b": kept,
            "ghost": kept,
        }


def test_modify_metadata_with_a_bad_result_writes_nothing(tmp_path: Path) -> None:
    """One result that is not NodeMetadata refuses the whole call."""

    def bad_for_b(node_id: str, meta: NodeMetadata | None) -> NodeMetadata:
        return NodeMetadata(created_at=NOW) if node_id == "a" else "oops"  # type: ignore[return-value]

    with SQLiteBackend(tmp_path / "graph.db") as backend:
        _two_nodes(backend)
        with pytest.raises(ValidationError):
            backend.modify_metadata(["a", "b"], bad_for_b)
        assert backend.get_metadata(["a", "b"]) == {}


def test_rewards_through_separate_connections_add_up(tmp_path: Path) -> None:
    """Repos on their own connections (as separate processes have) never lose a reward."""
    path = tmp_path / "graph.db"
    with SQLiteBackend(path) as backend:
        _two_nodes(backend)
    workers, rounds = 4, 20
    barrier = threading.Barrier(workers)

    def reward(_: int) -> None:
        with Repo(SQLiteBackend(path), flush_interval=0) as repo:
            barrier.wait(timeout=60)
            for _ in range(rounds):
                repo.reward(["a"], 1.0)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(reward, range(workers)))
    with SQLiteBackend(path) as backend:
        meta = backend.get_metadata(["a"])["a"]
    assert (meta.reward_count, meta.cumulative_reward) == (workers * rounds, float(workers * rounds))


def test_sqlite_failures_surface_as_storage_error(tmp_path: Path) -> None:
    """A locked database is a StorageError naming the operation, and the call writes nothing."""
    path = tmp_path / "graph.db"
    with SQLiteBackend(path, timeout=0.05) as backend:
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StorageError) as info:
                _two_nodes(backend)
            assert info.value.operation == "apply_changeset"
        finally:
            blocker.close()
        assert backend.get_nodes_by_type([NodeType.SEMANTIC]) == []
        _two_nodes(backend)
        assert len(backend.get_nodes_by_type([NodeType.SEMANTIC])) == 2


def test_unopenable_path_is_a_storage_error(tmp_path: Path) -> None:
    """A database file in a missing directory cannot be opened."""
    with pytest.raises(StorageError) as info:
        SQLiteBackend(tmp_path / "missing" / "graph.db")
    assert info.value.operation == "open"


def test_ingest_many_commits_one_by_one_on_a_backend_without_batches(tmp_path: Path) -> None:
    """`Repo.ingest_many` on a backend without `CommitsIngestions`: each source committed alone."""
    backend = SQLiteBackend(tmp_path / "db.sqlite")
    assert not isinstance(backend, CommitsIngestions)
    batch = [Trajectory(f"run-{i}", f"goal {i}", [Step(f"saw {i}", f"did {i}")]) for i in range(3)]
    with Repo(backend, flush_interval=0) as repo:
        receipts = repo.ingest_many([*batch, batch[0]], episodic(HashingEmbedder(8)))
        assert [r.source_id for r in receipts] == ["run-0", "run-1", "run-2", "run-0"]
        assert receipts[3] == receipts[0]
        assert all(repo.backend.get_ingestion(t.source_id) is not None for t in batch)
