"""tests/test_ann.py once more with hnswlib as the engine (the `ann` extra), in a child pytest run:
the opt-in engine keeps every guarantee the core's graph does."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_the_approximate_path_suite_passes_on_hnswlib(tmp_path: Path) -> None:
    importlib.import_module("hnswlib")  # the `dev` extra installs it: this run must happen, not be skipped
    env = {**os.environ, "HIPPOGRAPH_TEST_ANN_ENGINE": "hnswlib"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(HERE / "test_ann.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
