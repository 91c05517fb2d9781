"""The capability tests: durability (``reopen``) and several processes on one store (``shared``).

`DurabilityConformance` closes the backend and reopens the same path;
`MultiProcessConformance` starts ``spawn`` children that open the store through
the test class's `open_in_child`. Their workers are module-level functions so
the children can unpickle them. conformance.py turns these mixins into
`PersistentConformance` and `SharedConformance`, and copies their tests onto a
`BackendConformance` subclass that sets the matching flag.
"""

from __future__ import annotations

import multiprocessing
import queue
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ..errors import ValidationError
from ..graph.changeset import Changeset
from ..graph.model import EdgeType, IngestionReceipt, IngestionRecord, NodeMetadata, NodeType, Outcome
from ..graph.protocol import GraphBackend
from ._helpers import E1, E2, KEEP_ALL, SuiteMixin, _ids, _links, _meta, _sem
from .graphs import NOW, make_record, nodes_with_optionals_unset, random_graph, sample_nodes, snapshot, vec

__all__ = ["DurabilityConformance", "MultiProcessConformance"]


def _reopen(test: SuiteMixin, backend: GraphBackend, path: Path) -> GraphBackend:
    backend.close()
    return test.make_backend(path)


class DurabilityConformance(SuiteMixin):
    """Durability: what a backend stored survives close and reopen on the same path."""

    def test_everything_survives_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """Every node field, link, metadata record and the exact receipt survive a restart."""
        nodes = sample_nodes() + nodes_with_optionals_unset()
        cs = Changeset().add_nodes(nodes)
        for i, edge in enumerate(EdgeType):
            cs.add_link(nodes[i].id, nodes[i + 1].id, edge)
        meta = NodeMetadata(
            created_at=datetime(2024, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
            access_count=7,
            last_accessed_at=datetime(2024, 3, 5, 0, 0, 0, 1, tzinfo=UTC),
            cumulative_reward=1 / 3,
            reward_count=2,
            custom={"origin": "тест", "n": 3, "w": 0.1, "l": ["a", 1]},
        )
        backend.apply_changeset(cs.put_metadata(nodes[0].id, meta).put_metadata("no-node", _meta(5.0, 2)))
        record = make_record("src", node_ids=("i1",), stored_at=datetime(2024, 7, 1, 1, 2, 3, 456789, tzinfo=UTC))
        backend.commit_ingestion(record, Changeset().add_node(_sem("i1", vec(1, 2, 3, 4))))
        ids = [n.id for n in nodes] + ["i1", "no-node"]
        before = snapshot(backend, ids, ["src"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert snapshot(reopened, ids, ["src"]) == before
            stored = reopened.get_ingestion("src")
            assert stored is not None
            assert stored.receipt == record.receipt
            assert stored.payload_digest == record.payload_digest
            assert stored.receipt.stored_at.microsecond == 456789
        finally:
            reopened.close()

    def test_ingestion_record_survives_delete_nodes_and_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """A source whose nodes were deleted still answers EXISTING after a restart."""
        record = make_record("src", node_ids=("a",))
        backend.commit_ingestion(record, Changeset().add_node(_sem("a", E1)))
        backend.delete_nodes(["a"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert reopened.get_ingestion("src") == record
            again = make_record("src", node_ids=("a",), stored_at=NOW + timedelta(days=1))
            assert reopened.commit_ingestion(again, Changeset().add_node(_sem("a", E1))) == (
                Outcome.EXISTING,
                record.receipt,
            )
            assert reopened.get_node("a") is None
        finally:
            reopened.close()

    def test_deletes_survive_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """Deleted nodes, their links and deleted metadata stay gone after a restart."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).add_link("a", "b", EdgeType.SIBLING)
        backend.apply_changeset(cs.put_metadata("a", _meta()).put_metadata("b", _meta()))
        backend.delete_nodes(["a"])
        backend.delete_metadata(["b"])
        reopened = _reopen(self, backend, store_path)
        try:
            assert reopened.get_node("a") is None
            assert _links(reopened.get_node("b")) == {}
            assert set(reopened.get_metadata(["a", "b"])) == {"a"}
            assert [n.id for n, _ in reopened.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)] == ["b"]
        finally:
            reopened.close()

    def test_dimension_survives_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """The store's embedding dimension is enforced after a restart."""
        backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0, 0))))
        reopened = _reopen(self, backend, store_path)
        try:
            with pytest.raises(ValidationError):
                reopened.apply_changeset(Changeset().add_node(_sem("b", E1)))
            with pytest.raises(ValidationError):
                reopened.find_candidates([NodeType.SEMANTIC], E1, [], None)
        finally:
            reopened.close()

    def test_candidates_survive_reopen(self, backend: GraphBackend, store_path: Path) -> None:
        """find_candidates answers the same after a restart."""
        graph = random_graph(7, n=60)
        backend.apply_changeset(graph.changeset)
        query, tags = graph.queries[0]
        before = backend.find_candidates(list(NodeType), query, tags, KEEP_ALL, now=NOW, exact=True)
        reopened = _reopen(self, backend, store_path)
        try:
            after = reopened.find_candidates(list(NodeType), query, tags, KEEP_ALL, now=NOW, exact=True)
            assert [n for n, _ in after] == [n for n, _ in before]
            assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=1e-6)
        finally:
            reopened.close()


_PROCESSES = 4
_SOURCES = 50


def _race_worker(
    opener: Callable[[Path], GraphBackend],
    path: Path,
    proc: int,
    barrier: Any,
    results: Any,
) -> None:
    """Child process: commit every source with this process's own changeset."""
    try:
        backend = opener(path)
        try:
            barrier.wait(timeout=120)
            out = []
            for s in range(_SOURCES):
                source, node_id = f"src-{s:02d}", f"src-{s:02d}/p{proc}"
                record = make_record(source, node_ids=(node_id,), stored_at=NOW + timedelta(microseconds=proc))
                outcome, receipt = backend.commit_ingestion(record, Changeset().add_node(_sem(node_id, E1)))
                out.append((source, outcome.value, receipt))
        finally:
            backend.close()
        results.put((proc, out, None))
    except BaseException:
        results.put((proc, None, traceback.format_exc()))


def _visibility_worker(opener: Callable[[Path], GraphBackend], path: Path, results: Any) -> None:
    """Child process: read the parent's node, then add one of its own."""
    try:
        backend = opener(path)
        try:
            parent = backend.get_node("from-parent")
            backend.apply_changeset(
                Changeset().add_node(_sem("from-child", E2)).add_link("from-child", "from-parent", "sibling")
            )
        finally:
            backend.close()
        results.put((0, parent, None))
    except BaseException:
        results.put((0, None, traceback.format_exc()))


def _run_children(target: Callable[..., None], args: list[tuple[Any, ...]], results: Any) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=a, daemon=True) for a in args]
    for p in procs:
        p.start()
    out: list[Any] = []
    try:
        for _ in procs:
            try:
                _, value, error = results.get(timeout=300)
            except queue.Empty:
                pytest.fail("a child process did not report back")
            assert error is None, f"child process failed:\n{error}"
            out.append(value)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return out


class MultiProcessConformance(SuiteMixin):
    """Several processes on one store: the ingestion compare-and-set holds across them."""

    def test_processes_racing_commit_ingestion_insert_once(self, backend: GraphBackend, store_path: Path) -> None:
        """4 processes commit the same 50 sources: one winner each, everyone sees its receipt."""
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(_PROCESSES), ctx.Queue()
        opener = type(self).open_in_child
        args = [(opener, store_path, proc, barrier, results) for proc in range(_PROCESSES)]
        outputs = _run_children(_race_worker, args, results)
        by_source: dict[str, list[tuple[str, IngestionReceipt]]] = {}
        for out in outputs:
            for source, outcome, receipt in out:
                by_source.setdefault(source, []).append((outcome, receipt))
        assert len(by_source) == _SOURCES
        winners: set[str] = set()
        for source, answers in by_source.items():
            inserted = [r for o, r in answers if o == Outcome.INSERTED.value]
            assert len(inserted) == 1, f"{source}: {len(inserted)} INSERTED"
            assert all(r == inserted[0] for _, r in answers), f"{source}: receipts differ"
            record = backend.get_ingestion(source)
            assert isinstance(record, IngestionRecord) and record.receipt == inserted[0]
            winners |= set(inserted[0].node_ids)
        assert set(_ids(backend.get_nodes_by_type(list(NodeType)))) == winners
        hits = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert sorted(n.id for n, _ in hits) == sorted(winners)

    def test_writes_are_visible_across_processes(self, backend: GraphBackend, store_path: Path) -> None:
        """A child sees the parent's node; the parent's open backend sees the child's node and link."""
        node = _sem("from-parent", E1)
        backend.apply_changeset(Changeset().add_node(node))
        results = multiprocessing.get_context("spawn").Queue()
        (seen,) = _run_children(_visibility_worker, [(type(self).open_in_child, store_path, results)], results)
        assert seen == node
        assert _links(backend.get_node("from-parent")) == {EdgeType.SIBLING: {"from-child"}}
        assert sorted(n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E2, [], KEEP_ALL)) == [
            "from-child",
            "from-parent",
        ]
