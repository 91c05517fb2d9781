"""Mixed readers and writers across processes and threads on one LMDB store, and on one PostgreSQL repo.

Four processes with two threads each (sharing one `Repo` per process) ingest
their own sources, sources every worker ingests with the same payload, and
contested sources every worker ingests with a payload of its own; they recall,
reward and delete while the others write. The operations are designed to
commute: deletes and rewards only touch ingestions the same thread saw
acknowledged (so the nodes exist and never come back), rewards are exactly
representable binary fractions, and recalls log what they returned. The final
store must then equal a serial replay of the acknowledged operations on
`InMemory`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rel_concurrency_child import open_store
from rel_workload import diff, receipt_from_json, source_id, state, structure, trajectory

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.graph.fingerprint import FINGERPRINT_VERSION, fingerprint
from hippograph.testing.graphs import Snapshot
from pg_server import pg_dsn

__all__ = ["pg_dsn"]

CHILD = Path(__file__).with_name("rel_concurrency_child.py")
PROCESSES, THREADS, OPS = 4, 2, 60
HANG_GUARD = 300.0


@pytest.fixture(scope="module", params=["lmdb", "postgres"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the workload once per backend; every test below reads its log and final state."""
    if request.param == "lmdb":
        spec = f"lmdb:{tmp_path_factory.mktemp('concurrency') / 'store'}"
    else:
        dsn = request.getfixturevalue("pg_dsn")
        spec = f"postgres:concurrency-{uuid.uuid4().hex}"
    open_store(spec).close()  # created (or migrated) once, before the workers race
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), spec, str(p), str(THREADS), str(OPS), "7"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(PROCESSES)
    ]
    ops: list[dict[str, Any]] = []
    statuses, errors = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=HANG_GUARD)
        statuses.append(proc.returncode)
        errors.append(err)
        ops += [json.loads(line) for line in out.splitlines()]
    with open_store(spec) as backend:
        report = hg.Repo(backend, flush_interval=0).verify()
        expected, sources, ids = serial_replay(ops)
        actual = state(backend, ids, sources)
    yield {
        "ops": ops,
        "statuses": statuses,
        "stderr": errors,
        "report": report,
        "expected": expected,
        "actual": actual,
    }
    if request.param == "postgres":
        from hippograph.backends.postgres import drop_repo

        drop_repo(dsn, repo=spec.partition(":")[2])


def serial_replay(ops: list[dict[str, Any]]) -> tuple[Snapshot, set[str], set[str]]:
    """The state a single thread reaches applying the acknowledged operations one by one."""
    mem = InMemory(ann=None)
    winners: dict[int, dict[str, Any]] = {}
    for op in ops:
        if op["op"] == "ingest" and "receipt" in op:
            winners.setdefault(op["i"], op)
    sources = {source_id(op["i"]) for op in ops if op["op"] == "ingest"}
    ids: set[str] = set()
    for i, op in sorted(winners.items()):
        t = trajectory(i, op["variant"])
        receipt = receipt_from_json(op["receipt"])
        mem.commit_ingestion(
            hg.IngestionRecord(t.source_id, fingerprint(t), FINGERPRINT_VERSION, receipt), structure(t)
        )
        ids |= set(receipt.node_ids)
    for op in ops:
        if op["op"] == "delete" and "error" not in op:
            mem.delete_nodes(op["ids"])
    repo = hg.Repo(mem, flush_interval=0)
    for op in ops:
        if op["op"] == "reward" and "error" not in op:
            repo.reward(op["ids"], op["r"])
    counts: Counter[str] = Counter()
    last: dict[str, datetime] = {}
    for op in ops:
        if op["op"] == "recall" and "error" not in op:
            now = datetime.fromisoformat(op["now"])
            for node_id in op["hits"]:
                counts[node_id] += 1
                last[node_id] = max(last.get(node_id, now), now)
    metas = mem.get_metadata(list(counts))
    updates = {}
    for node_id, n in counts.items():
        base = metas[node_id]
        when = max(t for t in (base.last_accessed_at, last[node_id]) if t is not None)
        updates[node_id] = replace(base, access_count=base.access_count + n, last_accessed_at=when)
    mem.update_metadata(updates)
    return state(mem, ids, sources), sources, ids


def live_only(snap: Snapshot) -> Snapshot:
    """Metadata of deleted nodes is left out: whether a recall's access reached it first is a race."""
    return Snapshot(snap.nodes, {i: m for i, m in snap.metadata.items() if i in snap.nodes}, snap.records)


def test_every_worker_process_exits_cleanly(run: dict[str, Any]) -> None:
    assert run["statuses"] == [0] * PROCESSES, run["stderr"]


def test_no_exception_other_than_a_source_conflict(run: dict[str, Any]) -> None:
    assert [op["error"] for op in run["ops"] if "error" in op] == []


def test_every_planned_operation_was_acknowledged(run: dict[str, Any]) -> None:
    assert len(run["ops"]) == PROCESSES * THREADS * OPS
    kinds = Counter(op["op"] for op in run["ops"])
    assert set(kinds) == {"ingest", "recall", "reward", "delete"}


def test_conflicts_happen_only_on_contested_sources(run: dict[str, Any]) -> None:
    conflicted = {op["i"] for op in run["ops"] if op.get("conflict")}
    assert conflicted
    assert all(50 <= i < 56 for i in conflicted)


def test_each_contested_source_has_exactly_one_winning_payload(run: dict[str, Any]) -> None:
    won: dict[int, set[int]] = defaultdict(set)
    for op in run["ops"]:
        if op["op"] == "ingest" and 50 <= op["i"] < 56 and "receipt" in op:
            won[op["i"]].add(op["variant"])
    assert won
    assert all(len(variants) == 1 for variants in won.values()), won


def test_every_acknowledgement_of_a_source_carries_the_same_receipt(run: dict[str, Any]) -> None:
    receipts: dict[int, set[str]] = defaultdict(set)
    for op in run["ops"]:
        if "receipt" in op:
            receipts[op["i"]].add(json.dumps(op["receipt"], sort_keys=True))
    shared = [i for i in receipts if i < 12]
    assert shared
    assert all(len(r) == 1 for r in receipts.values())


def test_a_recall_never_returns_a_node_deleted_before_it_started(run: dict[str, Any]) -> None:
    deletes = [(op["t1"], set(op["ids"])) for op in run["ops"] if op["op"] == "delete"]
    stale = [
        (op["w"], sorted(set(op["hits"]) & ids))
        for op in run["ops"]
        if op["op"] == "recall"
        for done, ids in deletes
        if done < op["t0"] and set(op["hits"]) & ids
    ]
    assert stale == []


def test_final_state_equals_a_serial_replay_of_the_acknowledged_operations(run: dict[str, Any]) -> None:
    expected, actual = live_only(run["expected"]), live_only(run["actual"])
    assert expected == actual, diff(expected, actual)


def test_verify_reports_no_problem_after_the_concurrent_run(run: dict[str, Any]) -> None:
    assert run["report"].ok, run["report"].problems
