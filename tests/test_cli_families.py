"""The ``hippograph`` command line on every memory family: what ``stats`` lists, and names or families
that are not there (exit 1, a message naming what is, nothing created)."""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import hippograph as hg
from hippograph.cli import main
from hippograph.context import open_context


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def graph_repo(where: Path, n: int = 2) -> Path:
    cs = hg.Changeset()
    for i in range(n):
        cs.add_node(hg.Semantic(id=f"s{i}", proposition="p", confidence=0.5))
    with hg.open_repo("g", path=where, flush_interval=0) as repo:
        repo.backend.apply_changeset(cs)
    return where


def scoped_store(where: Path) -> Path:
    with hg.open_store("s", path=where) as store:
        store.put(("users", "u42"), "diet", "vegetarian, allergic to peanuts")
    return where


def context_store(where: Path) -> Path:
    with open_context("c", path=where) as context:
        context.put_document("notes/today", "hello")
    return where


def snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` and a digest of its bytes (``lock.mdb`` only by name: readers use it)."""
    return {
        str(f.relative_to(root)): "" if f.name == "lock.mdb" else hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(root.rglob("*"))
        if f.is_file()
    }


@pytest.fixture
def only_assistant(tmp_path: Path) -> Path:
    """A directory of stores holding only the scoped store ``assistant``."""
    scoped_store(tmp_path / "stores" / "assistant")
    return tmp_path / "stores"


@pytest.fixture
def every_family(tmp_path: Path) -> Path:
    root = tmp_path / "stores"
    graph_repo(root / "agent", 3)
    scoped_store(root / "assistant")
    context_store(root / "notes")
    return root


def test_stats_of_a_directory_holding_only_a_scoped_store_shows_that_store(
    capsys: pytest.CaptureFixture[str], only_assistant: Path
) -> None:
    code, out, err = run(capsys, "stats", "--path", str(only_assistant))
    assert code == 0 and err == ""
    assert f"scoped store 'assistant' at {only_assistant / 'assistant'}" in out
    assert re.search(r"entries\s+1\b", out) and re.search(r"scopes\s+1\b", out)
    assert "repo" not in out and "nodes" not in out


def test_stats_of_a_scoped_stores_own_directory_shows_it_by_its_name(
    capsys: pytest.CaptureFixture[str], only_assistant: Path
) -> None:
    code, out, _ = run(capsys, "stats", "--path", str(only_assistant / "assistant"))
    assert code == 0
    assert out.startswith("scoped store 'assistant' at ")
    assert re.search(r"entries\s+1\b", out) and "repo" not in out


def test_stats_lists_every_store_by_family_and_name_with_its_figures(
    capsys: pytest.CaptureFixture[str], every_family: Path
) -> None:
    code, out, _ = run(capsys, "stats", "--path", str(every_family))
    assert code == 0
    headers = [line for line in out.splitlines() if " at " in line]
    assert headers == [
        f"graph repo 'agent' at {every_family / 'agent'}",
        f"scoped store 'assistant' at {every_family / 'assistant'}",
        f"context store 'notes' at {every_family / 'notes'}",
    ]
    agent, assistant, notes = out.split("\n\n")
    assert re.search(r"nodes\s+3\b", agent) and re.search(r"semantic\s+3\b", agent)
    assert re.search(r"entries\s+1\b", assistant)
    assert re.search(r"documents\s+1\b", notes) and re.search(r"directories\s+1\b", notes)
    assert all(re.search(r"on disk\s+\d+\.\d KiB", section) for section in (agent, assistant, notes))


def test_stats_with_a_name_shows_only_that_store(capsys: pytest.CaptureFixture[str], every_family: Path) -> None:
    code, out, _ = run(capsys, "stats", "--path", str(every_family), "--name", "notes")
    assert code == 0
    assert out.startswith("context store 'notes' at ") and "graph repo" not in out and "scoped store" not in out


def test_stats_of_a_directory_holding_two_families_shows_both_and_their_shared_size(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    both = scoped_store(graph_repo(tmp_path / "agent"))
    code, out, _ = run(capsys, "stats", "--path", str(both))
    assert code == 0
    assert f"graph repo 'agent' at {both}" in out and f"scoped store 'agent' at {both}" in out
    assert "shared with the scoped store" in out and "shared with the graph repo" in out


def test_stats_lists_the_default_directory_of_stores(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    graph_repo(Path(".hippograph", "agent"))
    context_store(Path(".hippograph", "notes"))
    code, out, _ = run(capsys, "stats")
    assert code == 0
    assert "graph repo 'agent' at .hippograph/agent" in out and "context store 'notes' at .hippograph/notes" in out


def test_a_graph_repo_whose_nodes_are_all_deleted_is_still_a_graph_repo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    where = graph_repo(tmp_path / "agent")
    with hg.open_repo("agent", path=where, flush_interval=0) as repo:
        repo.backend.delete_nodes(["s0", "s1"])
    code, out, _ = run(capsys, "stats", "--path", str(where))
    assert code == 0 and out.startswith("graph repo 'agent'") and re.search(r"nodes\s+0\b", out)


def test_a_store_opened_but_never_written_is_listed_as_such(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hg.open_store("blank", path=tmp_path / "blank").close()
    code, out, _ = run(capsys, "stats", "--path", str(tmp_path))
    assert code == 0 and out.startswith(f"store 'blank' at {tmp_path / 'blank'}: nothing written yet")
    code, out, _ = run(capsys, "store", "stats", "--path", str(tmp_path), "--name", "blank")
    assert code == 0 and re.search(r"entries\s+0\b", out)


def test_an_unreadable_store_is_an_error_and_the_others_are_still_listed(
    capsys: pytest.CaptureFixture[str], every_family: Path
) -> None:
    (every_family / "broken").mkdir()
    (every_family / "broken" / "data.mdb").write_bytes(b"not an LMDB file" * 512)
    code, out, err = run(capsys, "stats", "--path", str(every_family))
    assert code == 1
    assert "graph repo 'agent'" in out and "scoped store 'assistant'" in out and "context store 'notes'" in out
    assert err.startswith("hippograph: error:") and "broken" in err and "not an LMDB file" in err
    code, _, err = run(capsys, "verify", "--path", str(every_family), "--name", "nosuch")
    assert code == 1 and "unreadable store 'broken'" in err


@pytest.mark.parametrize("where", ["stores", "stores/assistant"], ids=["directory-of-stores", "store-directory"])
def test_stats_of_a_name_that_is_not_there_exits_1_naming_the_stores_that_are(
    capsys: pytest.CaptureFixture[str], only_assistant: Path, where: str
) -> None:
    path = only_assistant.parent / where
    code, out, err = run(capsys, "stats", "--path", str(path), "--name", "nosuch")
    assert code == 1 and out == ""
    assert err.startswith("hippograph: error: no hippograph store named 'nosuch'")
    assert "it holds scoped store 'assistant'" in err


def test_the_missing_name_error_names_the_stores_by_family(
    capsys: pytest.CaptureFixture[str], every_family: Path
) -> None:
    code, _, err = run(capsys, "stats", "--path", str(every_family), "--name", "nosuch")
    assert code == 1
    assert "it holds graph repo 'agent'; scoped store 'assistant'; context store 'notes'" in err


def test_store_stats_of_a_name_that_is_not_there_exits_1(
    capsys: pytest.CaptureFixture[str], only_assistant: Path
) -> None:
    code, out, err = run(capsys, "store", "stats", "--path", str(only_assistant), "--name", "nosuch")
    assert code == 1 and out == ""
    assert "no scoped store named 'nosuch'" in err and "scoped store 'assistant'" in err


@pytest.mark.parametrize("action", [["stats"], ["verify"], ["search", "peanuts"]])
def test_store_commands_on_a_graph_repo_exit_1_naming_the_graph_repo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, action: list[str]
) -> None:
    where = graph_repo(tmp_path / "agent")
    code, out, err = run(capsys, "store", *action, "--path", str(where))
    assert code == 1 and out == ""
    assert f"no scoped store at {str(where)!r}: it holds graph repo 'agent'" in err


@pytest.mark.parametrize("command", ["verify", "index"])
def test_graph_commands_on_a_scoped_store_exit_1_naming_it(
    capsys: pytest.CaptureFixture[str], only_assistant: Path, command: str
) -> None:
    for path in (only_assistant, only_assistant / "assistant"):
        code, out, err = run(capsys, command, "--path", str(path))
        assert code == 1 and out == ""
        assert "no graph repo" in err and "scoped store 'assistant'" in err


def test_graph_commands_pick_the_one_graph_repo_of_a_directory(
    capsys: pytest.CaptureFixture[str], every_family: Path
) -> None:
    code, out, _ = run(capsys, "verify", "--path", str(every_family))
    assert code == 0 and out.startswith("graph repo 'agent' at ") and "ok: every invariant holds" in out
    code, out, _ = run(capsys, "store", "search", "peanuts", "--path", str(every_family))
    assert code == 0 and "users/u42 :: diet" in out


def test_two_graph_repos_without_a_name_exit_1_naming_both(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph_repo(tmp_path / "a")
    graph_repo(tmp_path / "b")
    code, _, err = run(capsys, "verify", "--path", str(tmp_path))
    assert code == 1 and "2 graph repos ('a', 'b'): choose one with --name" in err
    code, out, _ = run(capsys, "verify", "--path", str(tmp_path), "--name", "b")
    assert code == 0 and out.startswith(f"graph repo 'b' at {tmp_path / 'b'}")


def test_reading_commands_create_and_change_nothing(
    capsys: pytest.CaptureFixture[str], every_family: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(tmp_path)
    for argv in (["stats"], ["stats", "--name", "nosuch"], ["verify"], ["verify", "--name", "assistant"],
                 ["store", "stats"], ["store", "verify", "--name", "nosuch"], ["store", "stats", "--name", "agent"],
                 ["store", "search", "peanuts"]):  # fmt: skip
        run(capsys, *argv, "--path", str(every_family))
    monkeypatch.chdir(tmp_path)
    for argv in (["stats"], ["stats", "--name", "nosuch"], ["store", "stats", "--name", "nosuch"]):
        assert run(capsys, *argv)[0] == 1
    assert not (tmp_path / ".hippograph").exists()
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("argv", [["stats"], ["verify"], ["index"], ["store", "stats"]])
def test_a_plain_file_as_path_exits_1_without_a_hint_that_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    text = tmp_path / "notastore.txt"
    text.write_text("my notes\n")
    code, _, err = run(capsys, *argv, "--path", str(text))
    assert code == 1
    assert f"{str(text)!r} is a file, not a hippograph store" in err
    assert "hippograph demo" not in err
    assert text.read_text() == "my notes\n"


@pytest.mark.parametrize("kind", ["missing", "empty", "unrelated"])
def test_the_demo_command_a_missing_store_suggests_makes_the_command_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    where = tmp_path / "here"
    if kind != "missing":
        where.mkdir()
    if kind == "unrelated":
        (where / "notes.txt").write_text("not a store\n")
    code, _, err = run(capsys, "stats", "--path", str(where))
    assert code == 1
    hint = re.search(r"`hippograph (demo[^`]*)`", err)
    assert hint is not None, err
    assert run(capsys, *shlex.split(hint.group(1)))[0] == 0
    code, out, _ = run(capsys, "stats", "--path", str(where))
    assert code == 0 and "graph repo" in out


def test_no_demo_hint_where_the_sample_repo_would_not_answer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "store", "stats", "--path", str(tmp_path / "missing"))
    assert code == 1
    assert f"hippograph.open_store('missing', path={str(tmp_path / 'missing')!r})" in err
    assert "hippograph demo" not in err


def test_the_installed_command_exits_1_on_a_missing_name(only_assistant: Path) -> None:
    script = Path(sys.executable).with_name("hippograph")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "hippograph.cli"]
    done = subprocess.run(
        [*command, "stats", "--path", str(only_assistant), "--name", "nosuch"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "no hippograph store named 'nosuch'" in done.stderr and "scoped store 'assistant'" in done.stderr


def test_store_search_explains_each_hits_words(capsys: pytest.CaptureFixture[str], every_family: Path) -> None:
    code, out, _ = run(capsys, "store", "search", "peanuts", "--path", str(every_family), "--explain")
    assert code == 0 and "users/u42 :: diet" in out
    assert re.search(r"words: rank 1, similarity [\d.]+ \(BM25 [\d.]+, \d+ words\)", out)
    assert re.search(r"'peanuts': idf [\d.]+ x 1 -> [\d.]+", out)
