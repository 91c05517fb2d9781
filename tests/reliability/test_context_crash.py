"""SIGKILL of a context-store writer mid-operation (LMDB): whatever the kill interrupted, the
groups that must agree still do (`verify_context`), the jobs the writer held go back to the queue
with `reset_running_jobs`, and the store takes writes again. Every kill lands at a random moment
of a loop of removals, skill replacements, claims and multi-group writes."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hippograph.backends.lmdb import LMDB
from hippograph.context import ContextStore
from hippograph.context.inspect import verify_context

CHILD = Path(__file__).with_name("rel_context_crash_child.py")


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_killed_writers_leave_every_group_agreeing(tmp_path: Path, durability: str) -> None:
    path = tmp_path / "ctx"
    rng = random.Random(7)
    for round_ in range(6):
        proc = subprocess.Popen([sys.executable, str(CHILD), str(path), str(round_), durability],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))  # where the kill lands; nothing asserted on timing
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        backend = LMDB(path, durability=durability)
        try:
            assert verify_context(backend) == []
            ctx = ContextStore(backend)
            ctx.reset_running_jobs()
            assert ctx.queue_stats()["running"] == 0
            ctx.put_document("after/kill", f"round {round_}")
            assert ctx.get_node("after/kill") is not None
            assert verify_context(backend) == []
        finally:
            backend.close()
    with ContextStore(LMDB(path), owns_backend=True) as ctx:
        assert ctx.stats()["documents"] > 1  # the writers did write
