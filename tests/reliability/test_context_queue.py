"""The context store's job queue drained by several processes at once (LMDB).

Four worker processes of two threads each drain a queue; in the crash runs, some workers kill
themselves (SIGKILL) mid-job, after a claim and before its completion, and `reset_running_jobs`
then returns their jobs to the queue for a second round. Checked from the workers' logs and the
store: no job is ever claimed twice at the same attempt (two workers never hold one job), every
job ends done, completed by exactly one worker unless its claimer died, and the store's counts
agree. The ``slow`` profile drains 10,000 jobs with ``durability="sync"``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hippograph.backends.lmdb import LMDB
from hippograph.context import ContextStore

CHILD = Path(__file__).with_name("rel_context_queue_child.py")


def _fill(path: Path, n: int, durability: str) -> list[int]:
    with ContextStore(LMDB(path, durability=durability), owns_backend=True) as ctx:
        ids = [ctx.enqueue_job("work", {"i": i}) for i in range(n)]
        ctx.enqueue_job("other", {})  # a kind no worker asked for: never claimed
        return ids


def _run(path: Path, logs: Path, workers: int, die_after: list[int], durability: str) -> int:
    """Runs the workers to the end; how many of them killed themselves."""
    go = logs / f"go-{len(list(logs.glob('go-*')))}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                str(path),
                str(logs / f"w{i}.log"),
                "2",
                str(die_after[i]),
                durability,
                str(go),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    for p in procs:
        p.wait(timeout=600)
    codes = [p.returncode for p in procs]
    assert all(c in (0, -signal.SIGKILL) for c in codes), f"a worker failed or was stuck (its stacks above): {codes}"
    return codes.count(-signal.SIGKILL)


def _logs(logs: Path) -> tuple[list[tuple[int, int]], list[int]]:
    claims: list[tuple[int, int]] = []
    done: list[int] = []
    for f in sorted(logs.glob("*.log")):
        for line in f.read_text().splitlines():
            parts = line.split()
            if parts[0] == "claim" and len(parts) == 3:
                claims.append((int(parts[1]), int(parts[2])))
            elif parts[0] == "done" and len(parts) == 2:
                done.append(int(parts[1]))
    return claims, done


def _drain(tmp_path: Path, n: int, kills: bool, durability: str) -> None:
    path = tmp_path / "ctx"
    logs = tmp_path / "logs"
    logs.mkdir()
    ids = _fill(path, n, durability)
    killed = _run(path, logs, 4, [n // 20, 0, n // 13, 0] if kills else [0] * 4, durability)
    # A worker told to die does so at its claim that many; on a busy machine the others may drain
    # the queue before it gets that far, so count the workers that did.
    assert killed >= 1 if kills else killed == 0
    with ContextStore(LMDB(path, durability=durability), owns_backend=True) as ctx:
        stranded = ctx.reset_running_jobs()
        assert killed <= stranded <= 2 * killed  # each killed worker held one job or two
    _run(path, logs, 4, [0] * 4, durability)
    claims, done = _logs(logs)
    assert len(claims) == len(set(claims)), "a job was claimed twice at one attempt: two workers held it"
    claimed = Counter(job for job, _ in claims)
    assert set(claimed) == set(ids)
    assert all(c == 1 for c in Counter(done).values()), "no job is completed twice"
    if not kills:
        assert all(c == 1 for c in claimed.values())
    with ContextStore(LMDB(path, durability=durability), owns_backend=True) as ctx:
        assert ctx.queue_stats() == {"pending": 1, "running": 0, "done": n, "failed": 0}  # every job done
        assert ctx.count_jobs_of_kind("work") == n and ctx.dequeue_job(["work"]) is None


@pytest.mark.parametrize("kills", [False, True], ids=["clean", "workers-killed"])
def test_four_processes_drain_a_queue_each_job_once(tmp_path: Path, kills: bool) -> None:
    _drain(tmp_path, 600, kills, "fast")


@pytest.mark.slow
@pytest.mark.parametrize("kills", [False, True], ids=["clean", "workers-killed"])
def test_four_processes_drain_ten_thousand_jobs(tmp_path: Path, kills: bool) -> None:
    _drain(tmp_path, 10_000, kills, "sync")
