"""SIGKILL while the vector index is being saved: the next open adopts a sound index or rebuilds, never a wrong one.

Each run (`rel_ann_child.py`) opens the store, reports what it found, then
writes and saves the index until it kills itself at a chosen step of a save
(every step of the saver is the last one of some run) or, in the random
runs, until the parent kills it at a random moment. The next run's report
must show approximate answers equal to the exact ones (the HNSW search is
made exhaustive, so any difference is a stale, deleted or wrong vector), no
hit the store lacks, and a clean `verify`. Over the runs the saved index must
have been adopted (verified, caught up from the change log) as well as
refused and rebuilt.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("rel_ann_child.py")
STEPS = 14
"""Kill points counted across save rounds: a full save has six file steps, a sidecar-only save two."""
RANDOM_KILLS = 6
HANG_GUARD = 120.0


def _spawn(store: Path, run: int, kill_at: int, rounds: int) -> subprocess.Popen[str]:
    args = [sys.executable, str(CHILD), str(store), str(run), str(kill_at), str(rounds)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the child died before reporting: {proc.stderr.read() if proc.stderr else ''}"
    report: dict[str, Any] = json.loads(line)
    return report


def _check(report: dict[str, Any], run: int) -> None:
    assert report["approximate"] == report["exact"], f"run {run}: the vector index answered differently"
    assert report["missing"] == [], f"run {run}: hits the store does not hold"
    assert report["verify"] == [], f"run {run}: {report['verify']}"


def test_kills_during_index_saves_never_leave_an_index_that_answers_wrongly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = random.Random(11)
    outcomes: list[bool] = []
    plans = [(step, None) for step in range(1, STEPS + 1)] + [(0, rng.uniform(0.05, 0.6)) for _ in range(RANDOM_KILLS)]
    for run, (kill_at, delay) in enumerate(plans):
        proc = _spawn(store, run, kill_at, rounds=10**6 if delay else 40)
        report = _report(proc)
        if run:
            outcomes.append(report["loaded"])
        _check(report, run)
        if delay is not None:
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD)
        assert proc.returncode == -signal.SIGKILL, f"run {run} ended with {proc.returncode}: {proc.stderr}"
    final = _spawn(store, len(plans), 0, rounds=0)
    _check(_report(final), len(plans))
    assert final.wait(timeout=HANG_GUARD) == 0
    assert any(outcomes), "no run adopted the saved index"
    assert not all(outcomes), "no kill left files that had to be refused and rebuilt"
