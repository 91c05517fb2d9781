"""The README's quickstart runs as written and recalls what it says it recalls."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart(heading: str = "## Quickstart") -> str:
    section = README.read_text(encoding="utf-8").split(f"{heading}\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, f"the {heading} section has no python block"
    return found.group(1)


def run_block(heading: str, cwd: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-c", quickstart(heading)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_quickstart_runs_and_recalls_a_procedure_on_first_use(tmp_path: Path) -> None:
    lines = run_block("## Quickstart", tmp_path)
    assert any("run-42:step:0" in line for line in lines), lines
    procedure = "when 'cargo build fails: missing crate serde': add serde to Cargo.toml"
    assert any(line.endswith(procedure) for line in lines), lines


def test_the_store_quickstart_finds_the_entry_and_erases_the_scope(tmp_path: Path) -> None:
    lines = run_block("### Scoped memory store", tmp_path)
    assert "diet: vegetarian, allergic to peanuts" in lines[0]
    assert "guess" not in "\n".join(lines[:-1])  # pending: invisible to search
    assert lines[-1] == "((('users', 'u42'), 'diet'),)"


def test_the_async_quickstart_finds_the_entry(tmp_path: Path) -> None:
    assert run_block("### Async", tmp_path) == ["['tz']"]


def test_the_context_quickstart_claims_a_job_and_removes_a_subtree(tmp_path: Path) -> None:
    lines = run_block("### Context store", tmp_path)
    assert lines[0] == "[2]"  # the line holding the word, whatever its case
    assert lines[1] == "['proj/notes/build']"
    assert lines[2] == "['helix']"
    assert lines[3].startswith("1 ") and "'pending': 1" in lines[3]  # the memory's document and its job remain
