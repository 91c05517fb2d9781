"""LMDB's native context steps (`_core.context_document`, `_core.context_job_move`) write exactly
what the Python path writes, record for record and byte for byte, and leave to it every case they
do not cover."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hippograph.context.queue_calls as queue_calls
import hippograph.context.store as context_store
import hippograph.context.tree as tree
from hippograph import _core
from hippograph.backends import LMDB
from hippograph.backends.lmdb.context import _NATIVE_HANDLES, LmdbKvTxn
from hippograph.context import ContextStore
from hippograph.context.protocol import SPACES
from hippograph.errors import HippographError

NATIVE = LmdbKvTxn.put_document
MOVE = LmdbKvTxn.move_job
CLAIM = LmdbKvTxn.claim_job
"""The steps themselves (the tests below swap the attributes)."""

segment = st.sampled_from(["a", "b", "c", "é"])
uri = st.lists(segment, min_size=1, max_size=3).map("/".join)
text = st.text(st.characters(codec="utf-8"), max_size=40)
layer = st.none() | text
payload = st.dictionaries(
    st.sampled_from(["n", "uri", "x"]),
    st.none() | st.integers(-(2**63), 2**64 - 1) | text | st.lists(st.integers(0, 300), max_size=3),
    max_size=2,
)
job_list = st.none() | st.lists(st.tuples(st.sampled_from(["embed", "sum", "ünï"]), payload), max_size=2)
operation = st.one_of(
    st.tuples(st.just("put"), uri, text, layer, layer, job_list),
    st.tuples(st.just("embed"), uri),
    st.tuples(st.just("group"), uri, st.sampled_from(["", "g1"])),
    st.tuples(st.just("disable"), uri),
    st.tuples(st.just("remove"), uri),
    st.tuples(st.just("claim"), st.lists(st.sampled_from(["embed", "sum", "ünï"]), min_size=1, max_size=2)),
    st.tuples(st.sampled_from(["complete", "fail", "defer"]), st.integers(1, 8)),
)


def contents(store: ContextStore) -> dict[str, list[tuple[bytes, bytes]]]:
    return store.backend.context_read(lambda t: {space: list(t.range(space)) for space in SPACES})  # type: ignore[attr-defined]


def apply(store: ContextStore, op: tuple[Any, ...]) -> object:
    """The operation's outcome: its value, or the type and message of what it raised."""
    try:
        if op[0] == "put":
            _, at, content, abstract, overview, jobs = op
            return store.put_document(at, content, abstract=abstract, overview=overview, jobs=jobs)
        if op[0] == "embed":  # stores a vector for every pending embed job of the document
            done = []
            while (job := store.dequeue_job(["embed"])) is not None:
                done.append(store.put_embedding_result(job.id, job.uri or op[1], np.ones(4, np.float32)))
            return done
        if op[0] == "group":
            return store.set_node_group(op[1], op[2])
        if op[0] == "disable":
            return store.set_node_enabled(op[1], False)
        if op[0] == "claim":
            return store.dequeue_job(op[1])
        if op[0] == "complete":
            return store.complete_job(op[1])
        if op[0] == "fail":
            return store.fail_job(op[1])
        if op[0] == "defer":
            return store.defer_job(op[1])
        return store.remove_subtree(op[1])
    except HippographError as exc:
        return type(exc).__name__, str(exc)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Both stores see the same times (`now[0]` microseconds) and start their vector counters at
    the same value (a new store's is random)."""
    now = [1_700_000_000_000_000]
    for module in (context_store, queue_calls):
        monkeypatch.setattr(module, "now_us", lambda: now[0])
    monkeypatch.setattr(tree.secrets, "randbits", lambda bits: 12_345)
    yield now


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(operation, min_size=1, max_size=12))
def test_the_native_write_stores_what_the_python_path_stores(
    ops: list[tuple[Any, ...]], clock: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int | None] = []
    moves: list[bool] = []

    def counted(self: LmdbKvTxn, *args: Any) -> int | None:
        got = NATIVE(self, *args)
        calls.append(got)
        return got

    def moved(self: LmdbKvTxn, *args: Any) -> bytes | None:
        got = MOVE(self, *args)
        moves.append(got is not None)
        return got

    def claimed(self: LmdbKvTxn, *args: Any) -> tuple[int, bytes | None] | None:
        got = CLAIM(self, *args)
        moves.append(got is not None)
        return got

    with tempfile.TemporaryDirectory() as tmp:
        stores = [ContextStore(LMDB(Path(tmp) / name), document_jobs=["embed"]) for name in ("native", "python")]
        try:
            first = [("put", "a/b", "first", None, None, None), ("claim", ["embed"]), ("complete", 1)]
            for i, op in enumerate([*first, *ops]):
                clock[0] += 1000 + i
                monkeypatch.setattr(LmdbKvTxn, "put_document", counted)
                monkeypatch.setattr(LmdbKvTxn, "move_job", moved)
                monkeypatch.setattr(LmdbKvTxn, "claim_job", claimed)
                mine = apply(stores[0], op)
                monkeypatch.setattr(LmdbKvTxn, "put_document", None)  # the Python path, record by record
                monkeypatch.setattr(LmdbKvTxn, "move_job", None)
                monkeypatch.setattr(LmdbKvTxn, "claim_job", None)
                theirs = apply(stores[1], op)
                assert mine == theirs, op
                assert contents(stores[0]) == contents(stores[1]), op
        finally:
            for store in stores:
                store.backend.close()  # type: ignore[attr-defined]
    assert calls[0] == 1, "a first document is the step's to write"
    assert moves[:2] == [True, True], "its job's claim and completion are the step's too"
    assert len(calls) <= 1 + sum(op[0] == "put" for op in ops)  # a put refused before its transaction never reaches it


def test_the_common_writes_take_the_native_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new document, and a document written again, are the step's: the equality above is not
    the Python path answering both times."""
    written: list[int | None] = []
    monkeypatch.setattr(LmdbKvTxn, "put_document", lambda self, *a: written.append(NATIVE(self, *a)) or written[-1])
    store = ContextStore(LMDB(tmp_path / "s"), document_jobs=["embed"])
    store.put_document("p/q/r", "one")
    store.put_document("p/q/r", "two", abstract="a")
    assert written == [1, 2]
    node = store.get_node("p/q/r")
    assert node is not None and (node.content, node.abstract) == ("two", "a")
    store.backend.close()  # type: ignore[attr-defined]


def test_what_the_step_cannot_take_as_given_is_left_to_the_python_path() -> None:
    """Arguments it does not convert (text with a lone surrogate, a negative time) write nothing
    and answer None; the Python path then decides."""
    with tempfile.TemporaryDirectory() as tmp:
        b = LMDB(Path(tmp) / "s")
        try:

            def run(t: LmdbKvTxn) -> list[int | None]:
                h = _NATIVE_HANDLES(t.dbs)
                return [
                    _core.context_document(t.txn, h, ["a"], "\ud800", None, None, [], 1, 5),
                    _core.context_document(t.txn, h, ["a"], "x", None, None, [], -1, 5),
                    _core.context_document(t.txn, h, ["a"], "x", None, None, [], 1, -5),
                ]

            assert b.context_write(run) == [None, None, None]  # type: ignore[arg-type]
            assert b.context_read(lambda t: list(t.range("ctx_nodes"))) == []
        finally:
            b.close()


def test_a_claim_over_several_kinds_takes_the_job_due_first(clock: list[int]) -> None:
    """Each kind's queue is read from its first key; the claim takes the earliest due of those,
    then the lowest id, as the Python path does."""
    with tempfile.TemporaryDirectory() as tmp:
        store = ContextStore(LMDB(Path(tmp) / "s"))
        try:
            for at, (uri, kind) in [
                (300, ("a", "sum")),
                (100, ("b", "embed")),
                (200, ("c", "sum")),
                (100, ("d", "zed")),
            ]:
                clock[0] = at
                store.put_document(uri, uri, jobs=[(kind, {})])
            clock[0] = 1_000
            order = [store.dequeue_job(["sum", "embed", "zed"]) for _ in range(5)]
            assert [j and (j.id, j.uri) for j in order] == [(2, "b"), (4, "d"), (3, "c"), (1, "a"), None]
        finally:
            store.backend.close()  # type: ignore[attr-defined]
