"""Every ``python`` code block of README.md and docs/*.md runs as printed.

Each block is found by reading the Markdown (a new block is a new test, with nothing to register),
and runs alone in a child Python process in a fresh temporary directory, as a reader pasting it
into a new file would run it; the test asserts exit status 0. A fragment that cannot run is not a
``python`` block (mark it ``text``). A block whose info string is ``text output`` right after a
python block is that block's output as printed: the test asserts the block prints exactly it.

A block importing ``hippograph.backends.postgres`` gets the test server of `pg_server` through
``$HIPPOGRAPH_PG_DSN``, the variable the PostgreSQL backend reads when it is given no DSN (one with
pgvector when the block asks for ``search="server"``); the repos it names (``repo="..."``) are
dropped before and after it runs. Without a server it fails, or is left out exactly when the other
PostgreSQL tests are (``HIPPOGRAPH_SKIP_PG=1`` without ``HIPPOGRAPH_REQUIRE_PG``). A block
importing ``langgraph`` is left out only when langgraph is not installed, as
tests/test_langgraph_store.py is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import pg_server

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "python3"}

# A fenced block: its indentation, its info string's first word, its text up to the closing fence
# at the same indentation. Every fence is matched, so a closing fence never opens a block.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```[ \t]*(?P<lang>[^\s`]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
OPENING = re.compile(r"^[ \t]*```[ \t]*(?P<lang>[^\s`]+)", re.M)
OUTPUT = re.compile(r"[ \t]*```[ \t]*text[ \t]+output\b")
REPO_NAME = re.compile(r"""\brepo\s*=\s*(["'])(?P<name>[^"']+)\1""")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    code: str
    output: str | None = None
    """The ``text output`` block that follows it, when one does."""

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def python_blocks(document: Path) -> list[Block]:
    text = document.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    out = []
    for at, found in enumerate(fences):
        if found.group("lang").lower() not in PYTHON:
            continue
        after = fences[at + 1] if at + 1 < len(fences) else None
        printed = None
        if after is not None and not text[found.end() : after.start()].strip() and OUTPUT.match(after.group(0)):
            printed = textwrap.dedent(after.group("code"))
        out.append(
            Block(document, text.count("\n", 0, found.start()) + 1, textwrap.dedent(found.group("code")), printed)
        )
    return out


BLOCKS = [block for document in DOCUMENTS for block in python_blocks(document)]


def test_every_python_fence_is_collected() -> None:
    """The blocks run below are all the python fences the documents open (none missed by the parser)."""
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        opened = [
            text.count("\n", 0, found.start()) + 1
            for found in OPENING.finditer(text)
            if found.group("lang").lower() in PYTHON
        ]
        assert opened == [block.line for block in python_blocks(document)], document.name
    assert BLOCKS


def _postgres(block: Block) -> dict[str, str]:
    """The environment a PostgreSQL block needs: the test server's DSN (skips or fails without one)."""
    pg_server.require_psycopg()
    server = (
        pg_server.require_vector_dsn()
        if re.search(r"""search\s*=\s*["']server""", block.code)
        else pg_server.require_dsn()
    )
    return {pg_server.DSN_ENV: server}


def _drop_repos(server: str, block: Block) -> None:
    from hippograph.backends.postgres import drop_repo

    for name in {found.group("name") for found in REPO_NAME.finditer(block.code)}:
        drop_repo(server, repo=name)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_the_block_runs_as_printed(block: Block, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if re.search(r"^\s*(from|import)\s+langgraph\b", block.code, re.M):
        pytest.importorskip("langgraph")
    postgres = "hippograph.backends.postgres" in block.code
    if postgres:
        env.update(_postgres(block))
        _drop_repos(env[pg_server.DSN_ENV], block)
    try:
        run = subprocess.run(
            [sys.executable, "-c", block.code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        if postgres:
            _drop_repos(env[pg_server.DSN_ENV], block)
    assert run.returncode == 0, f"{block.name} exits with {run.returncode}:\n{run.stderr}"
    if block.output is not None:
        assert run.stdout == block.output, f"{block.name} prints otherwise than its output block"
