"""Ingestion records, rejected input and closing.

`IngestionConformance` holds the tests of `commit_ingestion`'s compare-and-set,
of malformed calls (each of `BAD_INPUTS` must raise `ValidationError` and
write nothing) and of a closed backend (each of `CALLS_AFTER_CLOSE` must raise
`StorageError`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ..errors import IngestionError, StorageError, ValidationError
from ..graph.changeset import Changeset
from ..graph.model import EdgeType, IngestionReceipt, Node, NodeType, Outcome
from ..graph.protocol import CommitsIngestions, GraphBackend
from ._helpers import E1, E2, SuiteMixin, _ids, _links, _meta, _pairs, _sem
from .graphs import NOW, make_node, make_record, snapshot, vec

__all__ = ["BAD_INPUTS", "CALLS_AFTER_CLOSE", "IngestionConformance"]

Call = Callable[[GraphBackend], object]


def _populate(backend: GraphBackend) -> tuple[list[str], list[str]]:
    """A small graph with links, metadata and one ingestion record; returns (ids, sources)."""
    cs = Changeset()
    cs.add_node(_sem("a", E1)).add_node(_sem("b", E2)).add_node(make_node(NodeType.TAG, "t", vec(1, 1, 0, 0)))
    cs.add_link("a", "b", EdgeType.SIBLING).add_link("a", "t", EdgeType.MEMBERSHIP)
    cs.put_metadata("a", _meta(1.0, 3, (1.0,)))
    backend.apply_changeset(cs)
    record = make_record("src-0", node_ids=("s0",))
    backend.commit_ingestion(record, Changeset().add_node(_sem("s0", vec(0, 0, 1, 0))))
    return ["a", "b", "t", "s0", "x", "ghost"], ["src-0", "src-1"]


def _smuggle_nan(node: Node) -> Node:
    """A node whose embedding was corrupted after construction checks ran."""
    object.__setattr__(node, "embedding", np.array([np.nan, 0, 0, 0], dtype=np.float32))
    return node


def _bad_dimension(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_sem("y", vec(1, 0, 0))).add_node(_sem("z", E2))
    b.apply_changeset(cs.add_link("x", "a", EdgeType.SIBLING).put_metadata("a", _meta()))


def _bad_nan(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_smuggle_nan(_sem("y", E1)))
    b.apply_changeset(cs.add_link("x", "a", EdgeType.SIBLING))


def _bad_edge_type(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).put_metadata("a", _meta())
    cs.links.append(("x", "a", "friend"))  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_empty_link_id(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.links.append(("x", "", EdgeType.SIBLING))
    b.apply_changeset(cs)


def _bad_link_arity(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.links.append(("x", "a"))  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_empty_metadata_id(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.metadata[""] = _meta()
    b.apply_changeset(cs)


def _bad_metadata_value(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.metadata["a"] = {"access_count": 1}  # type: ignore[assignment]
    b.apply_changeset(cs)


def _bad_addition(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1))
    cs.additions.append("y")  # type: ignore[arg-type]
    b.apply_changeset(cs)


def _bad_not_a_changeset(b: GraphBackend) -> None:
    b.apply_changeset({"additions": [_sem("x", E1)]})  # type: ignore[arg-type]


def _bad_ingestion_changeset(b: GraphBackend) -> None:
    cs = Changeset().add_node(_sem("x", E1)).add_node(_sem("y", vec(1, 0)))
    b.commit_ingestion(make_record("src-1", node_ids=("x", "y")), cs)


def _bad_ingestion_record(b: GraphBackend) -> None:
    b.commit_ingestion({"source_id": "src-1"}, Changeset().add_node(_sem("x", E1)))  # type: ignore[arg-type]


def _bad_metadata_update(b: GraphBackend) -> None:
    b.update_metadata({"b": _meta(), "a": "not metadata"})  # type: ignore[dict-item]


BAD_INPUTS: dict[str, Call] = {
    "wrong_dimension_in_one_of_several_additions": _bad_dimension,
    "nan_embedding": _bad_nan,
    "unknown_edge_type_in_raw_link": _bad_edge_type,
    "empty_id_in_raw_link": _bad_empty_link_id,
    "link_that_is_not_a_triple": _bad_link_arity,
    "empty_metadata_id": _bad_empty_metadata_id,
    "metadata_that_is_not_node_metadata": _bad_metadata_value,
    "addition_that_is_not_a_node": _bad_addition,
    "not_a_changeset": _bad_not_a_changeset,
    "invalid_changeset_in_commit_ingestion": _bad_ingestion_changeset,
    "not_an_ingestion_record": _bad_ingestion_record,
    "one_bad_entry_in_update_metadata": _bad_metadata_update,
}

CALLS_AFTER_CLOSE: dict[str, Call] = {
    "apply_changeset": lambda b: b.apply_changeset(Changeset().add_node(_sem("z", E1))),
    "delete_nodes": lambda b: b.delete_nodes(["a"]),
    "find_candidates": lambda b: b.find_candidates([NodeType.SEMANTIC], E1, [], None),
    "get_node": lambda b: b.get_node("a"),
    "get_linked_nodes": lambda b: b.get_linked_nodes(["a"]),
    "get_nodes_by_type": lambda b: b.get_nodes_by_type([NodeType.SEMANTIC]),
    "get_metadata": lambda b: b.get_metadata(["a"]),
    "update_metadata": lambda b: b.update_metadata({"a": _meta()}),
    "delete_metadata": lambda b: b.delete_metadata(["a"]),
    "get_ingestion": lambda b: b.get_ingestion("src-0"),
    "commit_ingestion": lambda b: b.commit_ingestion(make_record("src-9"), Changeset()),
    "delete_ingestion": lambda b: b.delete_ingestion("src-0"),
}


class IngestionConformance(SuiteMixin):
    """Ingestion records, rejected input and closing."""

    # -- ingestion -----------------------------------------------------------

    def test_get_ingestion_of_unknown_source_is_none(self, backend: GraphBackend) -> None:
        """A source never committed has no record."""
        assert backend.get_ingestion("never") is None

    def test_commit_ingestion_inserts_when_absent(self, backend: GraphBackend) -> None:
        """A new source commits its nodes, links, metadata and record, returning INSERTED."""
        backend.apply_changeset(Changeset().add_node(_sem("old", E2)))
        record = make_record("src", node_ids=("a", "b"), stored_at=datetime(2024, 7, 1, 1, 2, 3, 456789, tzinfo=UTC))
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E1)]).add_link("a", "old", EdgeType.PROVENANCE)
        outcome, receipt = backend.commit_ingestion(record, cs.put_metadata("a", _meta(1.0, 1)))
        assert outcome is Outcome.INSERTED
        assert receipt == record.receipt
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["a", "b", "old"]
        assert _links(backend.get_node("old")) == {EdgeType.PROVENANCE: {"a"}}
        assert backend.get_metadata(["a"]) == {"a": _meta(1.0, 1)}
        stored = backend.get_ingestion("src")
        assert stored == record
        assert stored is not None and stored.receipt.stored_at.microsecond == 456789

    def test_equal_commit_returns_the_stored_receipt_and_applies_nothing(self, backend: GraphBackend) -> None:
        """Same digest and version: EXISTING with the first receipt, the new changeset discarded."""
        first = make_record("src", node_ids=("a",), stored_at=datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
        backend.commit_ingestion(first, Changeset().add_node(_sem("a", E1)))
        before = snapshot(backend, ["a", "b"], ["src"])
        again = make_record("src", node_ids=("b",), stored_at=datetime(2025, 1, 1, tzinfo=UTC))
        cs = Changeset().add_node(_sem("b", E2)).add_link("a", "b", EdgeType.SIBLING).put_metadata("a", _meta())
        outcome, receipt = backend.commit_ingestion(again, cs)
        assert outcome is Outcome.EXISTING
        assert receipt == first.receipt
        assert (receipt.source_id, receipt.node_ids, receipt.stored_at) == ("src", ("a",), first.receipt.stored_at)
        assert receipt.stored_at.microsecond == 1
        assert snapshot(backend, ["a", "b"], ["src"]) == before

    @pytest.mark.parametrize(
        "changed", [{"payload": "other payload"}, {"version": 2}], ids=["different_digest", "different_version"]
    )
    def test_conflicting_commit_raises_and_changes_nothing(
        self, backend: GraphBackend, changed: dict[str, Any]
    ) -> None:
        """A different digest or fingerprint version is a source_conflict; nothing is written."""
        backend.commit_ingestion(make_record("src", node_ids=("a",)), Changeset().add_node(_sem("a", E1)))
        before = snapshot(backend, ["a", "b"], ["src"])
        cs = Changeset().add_node(_sem("b", E2)).add_link("a", "b", EdgeType.SIBLING).put_metadata("a", _meta())
        with pytest.raises(IngestionError) as info:
            backend.commit_ingestion(make_record("src", node_ids=("b",), **changed), cs)
        assert info.value.reason == "source_conflict"
        assert info.value.source_id == "src"
        assert snapshot(backend, ["a", "b"], ["src"]) == before

    def test_record_survives_delete_nodes_and_blocks_recreation(self, backend: GraphBackend) -> None:
        """After its nodes are deleted, re-committing a source returns the original receipt and recreates nothing."""
        first = make_record("src", node_ids=("a",))
        backend.commit_ingestion(first, Changeset().add_node(_sem("a", E1)))
        backend.delete_nodes(["a"])
        outcome, receipt = backend.commit_ingestion(
            make_record("src", node_ids=("a",), stored_at=NOW + timedelta(days=1)), Changeset().add_node(_sem("a", E1))
        )
        assert (outcome, receipt) == (Outcome.EXISTING, first.receipt)
        assert backend.get_node("a") is None

    def test_delete_ingestion_removes_only_the_record(self, backend: GraphBackend) -> None:
        """delete_ingestion reports whether a record existed and leaves the nodes."""
        backend.commit_ingestion(make_record("src", node_ids=("a",)), Changeset().add_node(_sem("a", E1)))
        assert backend.delete_ingestion("src") is True
        assert backend.delete_ingestion("src") is False
        assert backend.delete_ingestion("never") is False
        assert backend.get_ingestion("src") is None
        assert backend.get_node("a") is not None
        second = make_record("src", payload="new", node_ids=("b",))
        assert backend.commit_ingestion(second, Changeset().add_node(_sem("b", E1))) == (
            Outcome.INSERTED,
            second.receipt,
        )

    def test_concurrent_commits_of_one_source_insert_once(self, backend: GraphBackend) -> None:
        """16 threads committing one source: one INSERTED, every caller gets the same receipt."""
        threads = 16
        barrier = threading.Barrier(threads)

        def commit(i: int) -> tuple[Outcome, IngestionReceipt]:
            record = make_record("src", node_ids=(f"t{i:02d}",), stored_at=NOW + timedelta(microseconds=i))
            cs = Changeset().add_node(_sem(f"t{i:02d}", E1))
            barrier.wait(timeout=60)
            return backend.commit_ingestion(record, cs)

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(commit, range(threads)))
        inserted = [r for o, r in results if o is Outcome.INSERTED]
        assert len(inserted) == 1
        winner = inserted[0]
        assert all(r == winner for _, r in results)
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == list(winner.node_ids)
        stored = backend.get_ingestion("src")
        assert stored is not None and stored.receipt == winner

    # -- many ingestions at once (the optional `CommitsIngestions`) ---------

    def _batching(self, backend: GraphBackend) -> CommitsIngestions:
        if not isinstance(backend, CommitsIngestions):
            pytest.skip("the backend does not offer the optional CommitsIngestions")
        return backend

    def test_commit_ingestions_answers_each_in_input_order(self, backend: GraphBackend) -> None:
        """New sources are inserted, a stored one answers its stored receipt, a repeated one its first item's."""
        batching = self._batching(backend)
        stored = make_record("old", node_ids=("o",), stored_at=NOW - timedelta(days=1))
        backend.commit_ingestion(stored, Changeset().add_node(_sem("o", E2)))
        a, b = make_record("a", node_ids=("a1",)), make_record("b", node_ids=("b1",))
        again = make_record("a", node_ids=("zz",), stored_at=NOW + timedelta(hours=1))
        items = [
            (a, Changeset().add_node(_sem("a1", E1)).add_link("a1", "o", EdgeType.PROVENANCE)),
            (make_record("old", node_ids=("x",)), Changeset().add_node(_sem("x", E1))),
            (again, Changeset().add_node(_sem("zz", E1))),
            (
                b,
                Changeset().add_node(_sem("b1", E1)).add_link("b1", "a1", EdgeType.SIBLING).put_metadata("b1", _meta()),
            ),
        ]
        got = batching.commit_ingestions(items)
        assert got == [
            (Outcome.INSERTED, a.receipt),
            (Outcome.EXISTING, stored.receipt),
            (Outcome.EXISTING, a.receipt),
            (Outcome.INSERTED, b.receipt),
        ]
        assert _ids(backend.get_nodes_by_type([NodeType.SEMANTIC])) == ["a1", "b1", "o"]
        assert _links(backend.get_node("a1")) == {EdgeType.PROVENANCE: {"o"}, EdgeType.SIBLING: {"b1"}}
        assert backend.get_metadata(["b1"]) == {"b1": _meta()}
        assert backend.get_ingestion("a") == a and backend.get_ingestion("b") == b

    @pytest.mark.parametrize("where", ["stored", "in_batch"])
    def test_commit_ingestions_with_a_conflict_writes_nothing(self, backend: GraphBackend, where: str) -> None:
        """A source_conflict anywhere in the batch raises, naming the source, and stores none of it."""
        batching = self._batching(backend)
        backend.commit_ingestion(make_record("old", node_ids=("o",)), Changeset().add_node(_sem("o", E2)))
        before = snapshot(backend, ["o", "n1", "n2"], ["old", "new"])
        clash = "old" if where == "stored" else "new"
        items = [
            (make_record("new", node_ids=("n1",)), Changeset().add_node(_sem("n1", E1)).put_metadata("o", _meta())),
            (make_record(clash, payload="other", node_ids=("n2",)), Changeset().add_node(_sem("n2", E1))),
        ]
        with pytest.raises(IngestionError) as info:
            batching.commit_ingestions(items)
        assert (info.value.reason, info.value.source_id) == ("source_conflict", clash)
        assert snapshot(backend, ["o", "n1", "n2"], ["old", "new"]) == before

    @pytest.mark.parametrize(
        "items",
        [
            lambda: ((make_record("a"), Changeset().add_node(_sem("a", E1))),),  # a tuple is fine: the next ones fail
            lambda: [(make_record("a"), Changeset().add_node(_sem("a", E1))), (make_record("b"), "not a changeset")],
            lambda: [(make_record("a"), Changeset().add_node(_sem("a", E1))), ("src", Changeset())],
            lambda: [(make_record("a"), Changeset().add_node(_sem("a", E1))), (make_record("b"),)],
            lambda: [
                (make_record("a"), Changeset().add_node(_sem("a", E1))),
                (make_record("b"), Changeset().add_node(_sem("b", vec(1, 0)))),
            ],
            lambda: {"a": (make_record("a"), Changeset())},
        ],
        ids=["valid_tuple", "not_a_changeset", "not_a_record", "not_a_pair", "other_dimension", "not_a_list"],
    )
    def test_commit_ingestions_refuses_a_malformed_batch_whole(
        self, backend: GraphBackend, items: Callable[[], object]
    ) -> None:
        """Every item is checked before anything is written: one bad item refuses the batch."""
        batching = self._batching(backend)
        batch = items()
        if isinstance(batch, tuple):
            assert batching.commit_ingestions(batch) == [(Outcome.INSERTED, batch[0][0].receipt)]
            return
        with pytest.raises(ValidationError):
            batching.commit_ingestions(batch)  # type: ignore[arg-type]  # refused: the point of the test
        assert backend.get_nodes_by_type(list(NodeType)) == []
        assert backend.get_ingestion("a") is None

    # -- rejected input ------------------------------------------------------

    @pytest.mark.parametrize("bad", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
    def test_rejected_call_writes_nothing(self, backend: GraphBackend, bad: Call) -> None:
        """Malformed input raises ValidationError and leaves the store exactly as it was."""
        ids, sources = _populate(backend)
        before = snapshot(backend, ids, sources)
        with pytest.raises(ValidationError):
            bad(backend)
        assert snapshot(backend, ids, sources) == before

    def test_rejected_first_changeset_does_not_fix_the_dimension(self, backend: GraphBackend) -> None:
        """A refused changeset into an empty store leaves the dimension open."""
        with pytest.raises(ValidationError):
            backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0))).add_node(_sem("b", vec(1, 0, 0))))
        assert backend.get_nodes_by_type(list(NodeType)) == []
        backend.apply_changeset(Changeset().add_node(_sem("c", vec(1, 0, 0))))
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], vec(0, 0, 1), [vec(2, 0, 0)], None)) == [("c", 1.0)]

    def test_first_embedding_fixes_the_dimension(self, backend: GraphBackend) -> None:
        """Once a dimension is stored, another one is refused even in a later call."""
        backend.apply_changeset(Changeset().add_node(_sem("a", vec(1, 0, 0))))
        with pytest.raises(ValidationError):
            backend.apply_changeset(Changeset().add_node(_sem("b", E1)))
        assert backend.get_node("b") is None

    # -- closing -------------------------------------------------------------

    @pytest.mark.parametrize("call", list(CALLS_AFTER_CLOSE.values()), ids=list(CALLS_AFTER_CLOSE))
    def test_calls_after_close_raise_storage_error(self, backend: GraphBackend, call: Call) -> None:
        """A closed backend refuses every operation with StorageError."""
        _populate(backend)
        backend.close()
        with pytest.raises(StorageError):
            call(backend)

    def test_close_twice_is_harmless(self, backend: GraphBackend) -> None:
        """close() may be called again on a closed backend."""
        backend.close()
        backend.close()

    def test_context_manager_closes(self, store_path: Path) -> None:
        """Leaving a with-block closes the backend."""
        outer = self.make_backend(store_path)
        with outer as inner:
            inner.apply_changeset(Changeset().add_node(_sem("a", E1)))
            assert inner.get_node("a") is not None
        with pytest.raises(StorageError):
            outer.get_node("a")
