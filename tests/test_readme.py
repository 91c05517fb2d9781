"""The README's quickstart runs as written and recalls what it says it recalls."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hippograph.context import open_context

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
    assert lines[3] == "1 {'pending': 0, 'running': 0, 'done': 1, 'failed': 0}"  # the memory's document, its job done


def test_the_context_quickstart_run_twice_answers_the_same_and_stores_nothing_twice(tmp_path: Path) -> None:
    """A second run in the same directory finds the first run's store: its worker must not claim a job
    the first run left (it would embed another document than the one it searches for), and the
    re-recorded memory must not add a document, an assertion or a job."""
    first = run_block("### Context store", tmp_path)
    assert run_block("### Context store", tmp_path) == first
    with open_context("agent", path=tmp_path / ".hippograph" / "agent") as ctx:
        assert [r.value for r in ctx.recall_memories("", statuses=("active", "superseded", "candidate"))] == ["helix"]
        assert ctx.list_all_documents()[1] == 1
        assert ctx.queue_stats() == {"pending": 0, "running": 0, "done": 1, "failed": 0}


# -- examples/ --------------------------------------------------------------------------------------

EXAMPLES = sorted((README.parent / "examples").glob("*.py"))
ARGS = {"langgraph_agent.py": ["memory"]}
"""Arguments that make an example keep what it stores in the directory it runs in."""


def check_langgraph_agent(cwd: Path) -> None:
    from hippograph.integrations.langgraph import HippographStore

    with HippographStore(path=cwd / "memory") as store:
        texts = [item.value["text"] for item in store.search(("memories", "u42"), limit=100)]
    assert sorted(texts) == ["I am vegetarian", "allergic to peanuts"]


CHECKS = {"langgraph_agent.py": check_langgraph_agent}
"""What each example must have stored once, after two runs."""


def run_example(example: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, str(example), *ARGS.get(example.name, [])],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


def files(cwd: Path) -> set[str]:
    return {str(f.relative_to(cwd)) for f in cwd.rglob("*") if f.is_file()}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_an_example_run_twice_prints_the_same_and_stores_nothing_twice(example: Path, tmp_path: Path) -> None:
    source = example.read_text(encoding="utf-8")
    if re.search(r"^(from|import) langgraph", source, re.M):
        pytest.importorskip("langgraph")
    first = run_example(example, tmp_path)
    stored = files(tmp_path)
    assert run_example(example, tmp_path) == first
    assert files(tmp_path) == stored
    if 'if __name__ == "__main__":' in source:
        assert first.strip(), "an example that runs prints what it did"
        assert example.name in CHECKS, "say what a runnable example must have stored once"
    if example.name in CHECKS:
        CHECKS[example.name](tmp_path)
