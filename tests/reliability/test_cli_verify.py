"""``hippograph verify``: prints `Repo.verify`'s report; exit 0 when consistent, 1 when not."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from rel_workload import structure, trajectory

import hippograph as hg
from hippograph.backends.lmdb import LMDB
from hippograph.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A healthy repo with two ingestions (7 + 5 nodes)."""
    path = tmp_path / "store"
    with hg.open_repo("verify", path=path, flush_interval=0) as repo:
        for i in (0, 1):
            repo.ingest(trajectory(i), structure)
    return path


def break_store(path: Path) -> None:
    """Remove a linked node's record behind hippograph's back: its neighbours' links now dangle."""
    env = lmdb.open(str(path), max_dbs=16)
    nodes = env.open_db(b"nodes")
    with env.begin(write=True) as txn:
        assert txn.delete(b"src-000001:goal", db=nodes)
    env.close()


def test_verify_of_a_consistent_repo_exits_0(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, out, err = run(capsys, "verify", "--path", str(store))
    assert code == 0
    assert err == ""
    assert "ok: every invariant holds" in out


def test_verify_prints_how_much_it_checked(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    _, out, _ = run(capsys, "verify", "--path", str(store))
    nodes = len(structure(trajectory(0)).additions) + len(structure(trajectory(1)).additions)
    assert f"checked nodes      {nodes}" in out
    assert "checked records    2" in out


def test_verify_of_a_broken_repo_exits_1_and_lists_the_problems(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    break_store(store)
    code, out, err = run(capsys, "verify", "--path", str(store))
    assert code == 1
    assert err == ""
    assert "problems" in out
    assert "link to missing node 'src-000001:goal'" in out
    assert "embedding without node: number " in out  # the deleted node's, by the number it had


def test_verify_changes_nothing_in_the_store(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    before = hashlib.sha256((store / "data.mdb").read_bytes()).hexdigest()
    run(capsys, "verify", "--path", str(store))
    assert hashlib.sha256((store / "data.mdb").read_bytes()).hexdigest() == before


def test_verify_finds_a_named_repo_under_dot_hippograph(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with hg.open_repo("agent", flush_interval=0) as repo:
        repo.ingest(trajectory(0), structure)
    code, out, _ = run(capsys, "verify", "--name", "agent")
    assert code == 0
    assert "repo 'agent'" in out


def test_verify_of_a_missing_repo_exits_1_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nothing-here"
    code, out, err = run(capsys, "verify", "--path", str(missing))
    assert code == 1
    assert out == ""
    assert "no graph repo at" in err
    assert not missing.exists()


def test_verify_of_a_foreign_lmdb_environment_exits_1_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = lmdb.open(str(tmp_path / "other"), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"someone", b"else")
    env.close()
    code, _, err = run(capsys, "verify", "--path", str(tmp_path / "other"))
    assert code == 1
    assert err.startswith("hippograph: error:")
    assert "another application" in err
    assert "Traceback" not in err


def test_verify_of_a_store_with_damaged_pages_exits_1_naming_the_page(store: Path) -> None:
    data = bytearray((store / "data.mdb").read_bytes())
    psize = struct.unpack_from("<I", data, 16 + 24)[0]  # MDB_meta.mm_dbs[FREE_DBI].md_pad of meta page 0
    for pgno in range(2, len(data) // psize):
        at = pgno * psize
        if struct.unpack_from("<QxxH", data, at) == (pgno, 0x02):  # a leaf page now claims to be a branch
            struct.pack_into("<H", data, at + 10, 0x01)
    (store / "data.mdb").write_bytes(data)
    # In a child: damage the check misses can crash the process reading it.
    result = subprocess.run(
        [sys.executable, "-m", "hippograph.cli", "verify", "--path", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("hippograph: error: open: ")
    assert "data.mdb is corrupt" in result.stderr and "page" in result.stderr
    assert "Traceback" not in result.stderr


def test_verify_with_a_bad_repo_name_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "verify", "--name", "../escape")
    assert code == 1
    assert "repo name" in err


def test_verify_with_an_unknown_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "verify", "--repair")
    assert code == 2
    assert "usage: hippograph" in err


def test_help_lists_verify(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "verify" in out


def test_verify_opens_the_store_read_only(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[bool] = []
    original = LMDB.__init__

    def spy(self: LMDB, *args: object, **kwargs: object) -> None:
        opened.append(bool(kwargs.get("readonly")))
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LMDB, "__init__", spy)
    assert main(["verify", "--path", str(store)]) == 0
    assert opened and all(opened), "every open of the store is read-only"
