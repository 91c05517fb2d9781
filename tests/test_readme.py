"""The README's quickstart runs as written and recalls what it says it recalls."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart() -> str:
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the Quickstart section has no python block"
    return found.group(1)


def test_quickstart_runs_and_recalls_a_procedure_on_first_use(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run(
        [sys.executable, "-c", quickstart()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert any("run-42:step:0" in line for line in lines), run.stdout
    procedure = "when 'cargo build fails: missing crate serde': add serde to Cargo.toml"
    assert any(line.endswith(procedure) for line in lines), run.stdout
