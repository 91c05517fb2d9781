"""Group commit under SIGKILL: threads of one process ingesting into an LMDB `sync` store share
commits; a kill at any moment loses no acknowledged ingestion and leaves none half-written.

The child (`rel_group_child.py`) runs 6 threads calling `Repo.ingest` at once and prints an
acknowledgement after each call returns. The parent kills it after a random delay, reopens the
store and checks: every acknowledged source has its record with the exact receipt, every
record's nodes exist (a group's writes are each whole or absent), and `verify_storage` finds no
problem. The rounds continue on the same store with new sources.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rel_workload import receipt_from_json

from hippograph.backends.lmdb import LMDB
from hippograph.graph import codec

CHILD = Path(__file__).with_name("rel_group_child.py")
THREADS = 6
ROUNDS = 6


def _round(path: Path, first: int, delay: float) -> tuple[list[dict[str, object]], int]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), str(first), str(THREADS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    guard = threading.Timer(60.0, proc.kill)  # a child that never gets ready must not hang the run
    guard.start()
    try:
        assert proc.stdout.readline().strip() == "READY"
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        rest, errors = proc.communicate()
    finally:
        guard.cancel()
    acked = [
        json.loads(line[4:])
        for line in rest.splitlines(keepends=True)
        if line.startswith("ACK ") and line.endswith("\n")
    ]
    assert proc.returncode == -signal.SIGKILL, errors[-2000:]
    return acked, proc.returncode


def test_acknowledged_grouped_ingestions_survive_a_kill_whole(tmp_path: Path) -> None:
    path = tmp_path / "store"
    rng = random.Random(20251203)
    first, acknowledged = 0, {}
    for _ in range(ROUNDS):
        acked, _ = _round(path, first, rng.uniform(0.3, 0.8))
        for a in acked:
            acknowledged[a["source"]] = receipt_from_json(a["receipt"])  # type: ignore[arg-type]
        first += 10_000  # each round ingests sources of its own
        with LMDB(path, durability="sync") as store:
            for source, receipt in acknowledged.items():
                stored = store.get_ingestion(source)
                assert stored is not None, f"acknowledged ingestion {source} was lost"
                assert stored.receipt == receipt
            records = store.stats()["ingestion_records"]
            ids = [i for r in _records(store) for i in r]
            missing = [i for i in ids if store.get_node(i) is None]
            assert not missing, f"records whose nodes are missing: {missing[:5]}"
            problems, checked = store.verify_storage()
            assert problems == [] and checked == records
    assert len(acknowledged) > 4 * ROUNDS  # the rounds ingested, in parallel, before each kill
    with LMDB(path, durability="sync") as store:
        commits, records = int(store._env.info()["last_txnid"]), store.stats()["ingestion_records"]
    assert commits < records, (commits, records)  # writes shared commits: the path under test ran


def _records(store: LMDB) -> list[tuple[str, ...]]:
    """The node ids of every stored ingestion record, acknowledged or not."""

    def read(t: Any) -> list[tuple[str, ...]]:
        return [codec.decode_record(t.id_of(k), v).receipt.node_ids for k, v in t.items("ingest")]

    return store._read(read)
