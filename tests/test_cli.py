"""The ``hippograph`` command line: demo, stats, index, exit codes."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest

import hippograph as hg
from hippograph.backends import LMDB
from hippograph.cli import demo_trajectories, human_size, main, progress_bar


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "demo-store"


def test_demo_exits_zero(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    code, _, err = run(capsys, "demo", "--path", str(store))
    assert code == 0
    assert err == ""


def test_demo_ingests_every_sample_trajectory(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    n = len(demo_trajectories())
    _, out, _ = run(capsys, "demo", "--path", str(store))
    assert f"ingested {n} trajectories" in out
    assert f"{n} INSERTED, 0 EXISTING" in out


def test_demo_prints_recalls_as_an_aligned_table(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    _, out, _ = run(capsys, "demo", "--path", str(store))
    lines = out.splitlines()
    headers = [i for i, line in enumerate(lines) if re.fullmatch(r"\s+score\s+type\s+id\s+text", line)]
    assert len(headers) >= 3
    rows = lines[headers[0] + 2 : headers[0] + 5]
    assert all(re.match(r"\s+\d\.\d{3}\s+(episodic|subgoal|source)\s+\S+\s+\S", row) for row in rows)
    type_columns = {row.index(row.split()[1]) for row in rows}
    assert len(type_columns) == 1


def test_demo_recall_finds_the_matching_trajectory(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    _, out, _ = run(capsys, "demo", "--path", str(store))
    assert re.search(r"\d\.\d{3}\s+subgoal\s+deploy-0002:goal\s+Roll back a bad release", out)


def test_demo_shows_that_reingesting_returns_the_identical_receipt(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    _, out, _ = run(capsys, "demo", "--path", str(store))
    first = re.search(r"first:\s+(.*)", out)
    again = re.search(r"again:\s+(.*)", out)
    assert first is not None and again is not None
    assert first.group(1) == again.group(1)
    assert "identical: yes" in out


def test_second_demo_run_reports_every_receipt_existing(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    n = len(demo_trajectories())
    run(capsys, "demo", "--path", str(store))
    code, out, _ = run(capsys, "demo", "--path", str(store))
    assert code == 0
    assert f"0 INSERTED, {n} EXISTING" in out
    assert "already ingested" in out


def test_second_demo_run_writes_no_new_nodes(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    run(capsys, "demo", "--path", str(store))
    with hg.open_repo("demo", path=store, flush_interval=0) as repo:
        before = repo.stats()
    run(capsys, "demo", "--path", str(store))
    with hg.open_repo("demo", path=store, flush_interval=0) as repo:
        after = repo.stats()
    assert (after.nodes, after.links, after.ingestion_records) == (before.nodes, before.links, before.ingestion_records)


def test_demo_recalls_a_procedure_with_the_default_thresholds(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    _, out, _ = run(capsys, "demo", "--path", str(store))
    section = out.split("(types: procedural;", 1)[1].split("recall ", 1)[0]
    assert re.search(r"\d\.\d{3}\s+procedural\s+build-0001:procedure:0", section), section


def test_demo_defaults_to_dot_hippograph_demo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "demo")[0] == 0
    assert (tmp_path / ".hippograph" / "demo" / "data.mdb").is_file()


def test_stats_prints_the_counts_of_the_demo_repo(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    n = len(demo_trajectories())
    nodes = sum(1 + 3 * len(t.steps) for t in demo_trajectories())  # goal; per step episodic, source, procedure
    run(capsys, "demo", "--path", str(store))
    code, out, _ = run(capsys, "stats", "--path", str(store))
    assert code == 0
    assert re.search(rf"ingestion records\s+{n}\b", out)
    assert re.search(rf"nodes\s+{nodes}\b", out)
    assert re.search(r"subgoal\s+" + str(n) + r"\b", out)
    assert re.search(r"procedural\s+" + str(sum(len(t.steps) for t in demo_trajectories())) + r"\b", out)
    assert re.search(r"dimension\s+384\b", out)


def test_stats_finds_a_named_repo_under_dot_hippograph(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run(capsys, "demo")
    code, out, _ = run(capsys, "stats", "--name", "demo")
    assert code == 0
    assert "repo 'demo'" in out


def test_stats_of_a_missing_repo_exits_1_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nothing-here"
    code, out, err = run(capsys, "stats", "--path", str(missing))
    assert code == 1
    assert out == ""
    assert "no hippograph store" in err
    assert "Traceback" not in err
    assert not missing.exists()
    # ... and it says how to make one
    assert f"hippograph.open_repo('nothing-here', path={str(missing)!r})" in err
    assert f"hippograph demo --path {missing}" in err


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"hippograph {hg.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", hg.__version__)


def test_second_demo_run_says_its_recalls_still_record_accesses(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    run(capsys, "demo", "--path", str(store))
    with hg.open_repo("demo", path=store, flush_interval=0) as repo:
        before = repo.backend.get_metadata([n.id for n in repo.backend.get_nodes_by_type(list(hg.NodeType))])
    _, out, _ = run(capsys, "demo", "--path", str(store))
    assert "no memory was added" in out and "record their accesses" in out and "nothing was written" not in out
    with hg.open_repo("demo", path=store, flush_interval=0) as repo:
        after = repo.backend.get_metadata(list(before))
    assert sum(m.access_count for m in after.values()) > sum(m.access_count for m in before.values())


@pytest.mark.parametrize(("n", "shown"), [(0, "0 bytes"), (1023, "1,023 bytes"), (1536, "1.5 KiB (1,536 bytes)"),
                                          (5 * 2**30, "5.0 GiB (5,368,709,120 bytes)")])  # fmt: skip
def test_sizes_print_in_binary_units_beside_the_exact_count(n: int, shown: str) -> None:
    assert human_size(n) == shown


def test_stats_prints_the_size_on_disk_in_human_units(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    run(capsys, "demo", "--path", str(store))
    _, out, _ = run(capsys, "stats", "--path", str(store))
    assert re.search(r"on disk\s+\d+\.\d (KiB|MiB) \([\d,]+ bytes\)", out), out


def test_progress_stays_silent_for_its_first_second() -> None:
    now = [0.0]
    log = io.StringIO()
    show = progress_bar(log, clock=lambda: now[0])
    show("phase", 10, 100)
    now[0] = 0.99
    show("phase", 50, 100)
    assert log.getvalue() == ""
    now[0] = 1.0
    show("phase", 60, 100)
    assert log.getvalue() == "phase: 60% (60/100)\n"


def test_verify_and_store_commands_report_progress_on_stderr(
    capsys: pytest.CaptureFixture[str], store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hippograph.cli as cli

    monkeypatch.setattr(cli, "progress_bar", lambda err: progress_bar(err, after=0))
    run(capsys, "demo", "--path", str(store))
    _, _, err = run(capsys, "verify", "--path", str(store))
    assert re.search(r"verify links: 100% \(\d+/\d+\)", err)
    with hg.open_store("demo", path=store) as s:
        s.put(("u",), "k", "peanuts")
    code, out, err = run(capsys, "store", "stats", "--path", str(store))
    assert code == 0 and "index entries: 100% (1/1)" in err and re.search(r"entries\s+1\b", out)


def test_a_hippograph_error_exits_1_with_the_message_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    not_a_store = tmp_path / "notes.txt"
    not_a_store.write_text("my notes\n")
    code, _, err = run(capsys, "demo", "--path", str(not_a_store))
    assert code == 1
    assert err.startswith("hippograph: error:")
    assert "not a hippograph store" in err
    assert "Traceback" not in err


def test_a_bad_repo_name_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "stats", "--name", "../escape")
    assert code == 1
    assert "repo name" in err


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["demo", "--nope"], ["stats", "--path"], ["demo", "extra"]],
    ids=["no-command", "unknown-command", "unknown-option", "missing-value", "extra-argument"],
)
def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "usage: hippograph" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "demo" in out and "stats" in out


def test_demo_data_holds_20_to_50_valid_trajectories_of_2_to_6_steps() -> None:
    trajectories = demo_trajectories()
    assert 20 <= len(trajectories) <= 50
    for t in trajectories:
        hg.validate_trajectory(t)
        assert 2 <= len(t.steps) <= 6, t.source_id


def test_demo_source_ids_are_unique() -> None:
    ids = [t.source_id for t in demo_trajectories()]
    assert len(set(ids)) == len(ids)


def large_store(path: Path, n: int) -> Path:
    """A store whose semantic type is above the default vector-index threshold when n > 20,000."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, 8)).astype(np.float32)
    cs = hg.Changeset()
    for i in range(n):
        cs.add_node(hg.Semantic(id=f"s{i:06d}", proposition="p", confidence=0.5, embedding=vectors[i]))
    with LMDB(path) as b:
        b.apply_changeset(cs)
    return path


def test_index_builds_saves_and_then_loads_the_vector_index(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hippograph.cli as cli

    monkeypatch.setattr(cli, "progress_bar", lambda err: progress_bar(err, after=0))  # however fast the build
    store = large_store(tmp_path / "big", 20_001)
    code, out, err = run(capsys, "index", "--path", str(store))
    assert code == 0
    assert re.search(r"semantic\s+20,001 vectors\s+built and saved", out)
    assert "vector index semantic: 100% (20,001/20,001)" in err
    assert (store / "ann" / "semantic.bin").is_file()
    code, out, err = run(capsys, "index", "--path", str(store))
    assert code == 0 and err == ""
    assert re.search(r"semantic\s+20,001 vectors\s+loaded from saved files", out)


def test_index_of_a_small_repo_says_recall_scans_exactly(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = large_store(tmp_path / "small", 50)
    code, out, _ = run(capsys, "index", "--path", str(store))
    assert code == 0
    assert "no node type is large enough for a vector index" in out
    assert not (store / "ann").exists()


def test_index_of_a_missing_repo_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "index", "--path", str(tmp_path / "nothing"))
    assert code == 1 and "no graph repo" in err
    assert not (tmp_path / "nothing").exists()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_redraws_one_line_on_a_terminal_and_logs_tenths_otherwise() -> None:
    tty, log = Terminal(), io.StringIO()
    for sink in (tty, log):
        show = progress_bar(sink, width=10, after=0)
        for done in range(0, 101, 5):
            show("phase", done, 100)
    assert tty.getvalue().count("\r") == 21 and tty.getvalue().endswith("[##########] 100% 100/100\n")
    lines = log.getvalue().splitlines()
    assert lines[0] == "phase: 0% (0/100)" and lines[-1] == "phase: 100% (100/100)" and len(lines) == 11


def test_recall_prints_hits_their_explanations_and_why_another_was_left_out(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    run(capsys, "demo", "--path", str(store))
    args = ("recall", "roll back a bad release", "--path", str(store), "--type", "episodic", "--top-k", "2")
    code, plain, _ = run(capsys, *args)
    assert code == 0 and "deploy-0002:step:1" in plain and "relevance" not in plain
    code, out, _ = run(capsys, *args, "--explain", "--why-not", "deploy-0002:step:0", "--why-not", "deploy-0002:goal")
    assert code == 0 and out.startswith(plain)
    assert "deploy-0002:step:1 (episodic): score" in out and "rank 1 of top_k 2" in out
    assert re.search(r"value: recency [\d.]+ \([\d.]+ h", out) and "gate: score" in out and "path: exact scan" in out
    assert "why not deploy-0002:step:0: outranked: score" in out
    assert "why not deploy-0002:goal: type_not_requested" in out
    code, _, err = run(capsys, "recall", "x", "--path", str(store), "--why-not", "no-such-node")
    assert code == 1 and "node 'no-such-node' not found" in err
    code, _, err = run(capsys, "recall", "x", "--path", str(store), "--embedder", "word2vec")
    assert code == 1 and "--embedder must be" in err


def test_recall_reads_without_recording_accesses(capsys: pytest.CaptureFixture[str], store: Path) -> None:
    run(capsys, "demo", "--path", str(store))
    with hg.Repo(LMDB(store, readonly=True)) as repo:
        before = repo.backend.get_metadata(["deploy-0002:step:1"])
    run(capsys, "recall", "roll back a bad release", "--path", str(store), "--type", "episodic", "--explain")
    with hg.Repo(LMDB(store, readonly=True)) as repo:
        assert repo.backend.get_metadata(["deploy-0002:step:1"]) == before
