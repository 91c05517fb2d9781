"""`StoreConformance` catches broken scoped-store backends (tests/store_mutants.py).

For each mutant a small test module runs the suite against it in a fresh interpreter with ``-x``;
the run must fail. The control runs the suite against the untouched `InMemory`, which must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from store_mutants import MUTANTS

TESTS_DIR = Path(__file__).resolve().parent

MODULE = """
from store_mutants import MUTANTS
from hippograph.backends import InMemory
from hippograph.testing import StoreConformance


class TestTarget(StoreConformance):
    def make_backend(self, path):
        return {make}
"""


def run_suite(where: Path, mutant: str | None) -> int:
    make = "InMemory()" if mutant is None else f"MUTANTS[{mutant!r}]()"
    module = where / "test_target.py"
    module.write_text(MODULE.format(make=make), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", str(module)],
        cwd=where, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return done.returncode


def test_the_reference_backend_passes(tmp_path: Path) -> None:
    assert run_suite(tmp_path, None) == 0


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_suite_catches_the_mutant(tmp_path: Path, mutant: str) -> None:
    assert run_suite(tmp_path, mutant) == 1
