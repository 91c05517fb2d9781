"""LMDB across processes: racing writers, SIGKILLed writers, cross-process freshness."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import hippograph as hg
from hippograph.backends import LMDB
from lmdb_common import DIM, commit_args, vector

TESTS_DIR = str(Path(__file__).parent)


CHILD_PRELUDE = f"import sys\nsys.path.insert(0, {TESTS_DIR!r})\nfrom lmdb_common import commit_args, vector\n"


def run_child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


RACER = """
import sys, json
from hippograph.backends import LMDB
path, writer, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
with LMDB(path) as b:
    for s in range(n):
        source = f"src-{s:04d}"
        outcome, receipt = b.commit_ingestion(*commit_args(source, writer))
        out.append([source, outcome.value, list(receipt.node_ids), receipt.stored_at.isoformat()])
print(json.dumps(out))
"""


def test_eight_processes_racing_commit_exactly_one_winner_per_source(tmp_path: Path) -> None:
    import json

    path = tmp_path / "store"
    LMDB(path).close()
    sources = 200
    procs = [run_child(RACER, str(path), str(w), str(sources)) for w in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    with LMDB(path) as b:
        all_nodes = {n.id for n in b.get_nodes_by_type(["semantic"])}
        expected_nodes: set[str] = set()
        for s in range(sources):
            source = f"src-{s:04d}"
            rows = [r[s] for r in results]
            assert [r[1] for r in rows].count("inserted") == 1, source
            stored = b.get_ingestion(source)
            assert stored is not None
            for r in rows:
                assert tuple(r[2]) == stored.receipt.node_ids
                assert datetime.fromisoformat(r[3]) == stored.receipt.stored_at
            expected_nodes |= set(stored.receipt.node_ids)
        assert all_nodes == expected_nodes


STREAMER = """
import sys
from hippograph.backends import LMDB
path, start = sys.argv[1], int(sys.argv[2])
b = LMDB(path)
i = start
while True:
    b.commit_ingestion(*commit_args(f"crash-{i:07d}", 0, nodes=4))
    print(i, flush=True)
    i += 1
"""


def check_consistent(b: LMDB, acknowledged: list[int]) -> int:
    """Every acknowledged commit is whole; no node exists without its record."""
    nodes = {n.id: n for n in b.get_nodes_by_type(["semantic"])}
    owners = {node_id.split("/")[0] for node_id in nodes}
    for source in owners:
        record = b.get_ingestion(source)
        assert record is not None, f"nodes of unrecorded ingestion {source}"
    for i in acknowledged:
        record = b.get_ingestion(f"crash-{i:07d}")
        assert record is not None, f"acknowledged commit {i} lost"
    recorded = 0
    for source in owners | {f"crash-{i:07d}" for i in acknowledged}:
        record = b.get_ingestion(source)
        assert record is not None
        assert all(node_id in nodes for node_id in record.receipt.node_ids), f"partial ingestion {source}"
        for node in (nodes[n] for n in record.receipt.node_ids):
            assert all(other in nodes for ids in node.links.values() for other in ids)
        recorded += 1
    return recorded


@pytest.mark.parametrize("trials", [pytest.param(20, id="ci"), pytest.param(200, marks=pytest.mark.slow, id="slow")])
def test_sigkilled_writer_loses_no_acknowledged_commit(tmp_path: Path, trials: int) -> None:
    path = tmp_path / "store"
    LMDB(path).close()
    rng = random.Random(1234)
    start = 0
    for _ in range(trials):
        proc = run_child(STREAMER, str(path), str(start))
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.strip(), proc.stderr.read() if proc.stderr else ""
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged = [int(first)] + [int(line) for line in out.split()]
        with LMDB(path) as b:
            check_consistent(b, acknowledged)
        start = acknowledged[-1] + 1_000


def test_write_in_one_process_is_seen_by_the_next_read_of_another(tmp_path: Path) -> None:
    path = tmp_path / "store"
    query = np.ones(DIM, np.float32)
    with LMDB(path) as a, LMDB(path) as b:
        assert b.find_candidates(["semantic"], query, [], None) == []
        writer = run_child(
            """
            import sys
            from hippograph.backends import LMDB
            with LMDB(sys.argv[1]) as w:
                w.commit_ingestion(*commit_args("fresh", 0))
            """,
            str(path),
        )
        assert writer.wait(timeout=60) == 0
        seen = {
            n.id for n, _ in b.find_candidates(["semantic"], query, [], {"params": {"semantic": {"threshold": -1.0}}})
        }
        assert seen == {"fresh/w0/n0", "fresh/w0/n1", "fresh/w0/n2"}
        assert {n.id for n, _ in a.find_candidates(["semantic"], query, [], None)} <= seen


def test_deletes_by_another_process_are_never_returned(tmp_path: Path) -> None:
    path = tmp_path / "store"
    query = np.ones(DIM, np.float32)
    params = {"params": {"semantic": {"threshold": -1.0}}}
    with LMDB(path) as a:
        a.commit_ingestion(*commit_args("gone", 0))
        assert len(a.find_candidates(["semantic"], query, [], params)) == 3
        deleter = run_child(
            """
            import sys
            from hippograph.backends import LMDB
            with LMDB(sys.argv[1]) as w:
                w.delete_nodes(["gone/w0/n0", "gone/w0/n2"])
            """,
            str(path),
        )
        assert deleter.wait(timeout=60) == 0
        assert [n.id for n, _ in a.find_candidates(["semantic"], query, [], params)] == ["gone/w0/n1"]
        assert a.get_node("gone/w0/n1") is not None
        assert a.get_node("gone/w0/n1").links == {}  # type: ignore[union-attr]


def test_cache_rebuilds_when_another_process_outran_the_change_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hippograph.backends import lmdb as lmdb_module

    monkeypatch.setattr(lmdb_module.layout, "LOG_KEEP", 3)
    path = tmp_path / "store"
    query = np.ones(DIM, np.float32)
    params = {"params": {"semantic": {"threshold": -1.0, "top_k": 100}}}
    with LMDB(path) as reader, LMDB(path) as writer:
        writer.commit_ingestion(*commit_args("s0", 0))
        assert len(reader.find_candidates(["semantic"], query, [], params)) == 3
        for s in range(1, 8):
            writer.commit_ingestion(*commit_args(f"s{s}", 0))
        writer.delete_nodes(["s0/w0/n0"])
        got = {n.id for n, _ in reader.find_candidates(["semantic"], query, [], params)}
        assert len(got) == 8 * 3 - 1
        assert "s0/w0/n0" not in got


def test_sync_and_fast_durability_are_accepted_and_others_refused(tmp_path: Path) -> None:
    with LMDB(tmp_path / "a", durability="fast") as b:
        b.commit_ingestion(*commit_args("x", 0))
    with LMDB(tmp_path / "a") as b:
        assert b.get_ingestion("x") is not None
    with pytest.raises(hg.ValidationError):
        LMDB(tmp_path / "b", durability="eventually")  # type: ignore[arg-type]


def test_full_map_grows_and_the_write_succeeds(tmp_path: Path) -> None:
    with LMDB(tmp_path / "s", map_size=256 * 1024) as b:
        for s in range(40):
            cs = hg.Changeset()
            for i in range(50):
                cs.add_node(hg.Semantic(id=f"{s}-{i}", proposition="x" * 200, confidence=1.0, embedding=vector(i)))
            b.apply_changeset(cs)
        assert len(b.get_nodes_by_type(["semantic"])) == 2000


def test_foreign_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(hg.StorageError, match="not a hippograph store"):
        LMDB(tmp_path)


def test_foreign_lmdb_environment_is_refused(tmp_path: Path) -> None:
    import lmdb

    env = lmdb.open(str(tmp_path / "other"), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"someone", b"else")
    env.close()
    with pytest.raises(hg.StorageError, match="another application"):
        LMDB(tmp_path / "other")


def test_corrupt_data_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.mkdir()
    (path / "data.mdb").write_bytes(os.urandom(64 * 1024))
    with pytest.raises(hg.StorageError):
        LMDB(path)


def test_newer_storage_format_is_refused(tmp_path: Path) -> None:
    import struct

    import lmdb

    path = tmp_path / "s"
    LMDB(path).close()
    env = lmdb.open(str(path), max_dbs=16)
    info = env.open_db(b"info")
    with env.begin(write=True) as txn:
        txn.put(b"format", struct.pack(">I", 99), db=info)
    env.close()
    with pytest.raises(hg.StorageError, match="storage format 99"):
        LMDB(path)


def test_store_files_are_private_to_the_user(tmp_path: Path) -> None:
    path = tmp_path / "private"
    LMDB(path).close()
    assert path.stat().st_mode & 0o777 == 0o700
    assert (path / "data.mdb").stat().st_mode & 0o777 == 0o600
    assert (path / "lock.mdb").stat().st_mode & 0o777 == 0o600


def test_missing_parents_of_a_store_are_created_private(tmp_path: Path) -> None:
    LMDB(tmp_path / "a" / "b" / "store").close()
    for directory in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "store"):
        assert directory.stat().st_mode & 0o777 == 0o700, directory


def test_the_default_root_of_open_repo_lists_repo_names_only_to_the_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    hg.open_repo("agent", flush_interval=0).close()
    assert (tmp_path / ".hippograph").stat().st_mode & 0o777 == 0o700


def test_an_existing_empty_directory_becomes_a_private_store(tmp_path: Path) -> None:
    path = tmp_path / "made-by-hand"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    LMDB(path).close()
    assert path.stat().st_mode & 0o777 == 0o700


def test_use_after_fork_is_refused_in_the_child(tmp_path: Path) -> None:
    b = LMDB(tmp_path / "s")
    pid = os.fork()
    if pid == 0:  # child: must refuse, and exit without touching the parent's environment
        try:
            b.get_node("x")
        except hg.StorageError:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    b.close()
    assert os.WEXITSTATUS(status) == 0


def test_stored_at_round_trips_to_the_microsecond(tmp_path: Path) -> None:
    record, cs = commit_args("micro", 0)
    exact = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    receipt = hg.IngestionReceipt(source_id="micro", node_ids=record.receipt.node_ids, stored_at=exact)
    with LMDB(tmp_path / "s") as b:
        b.commit_ingestion(hg.IngestionRecord("micro", record.payload_digest, 1, receipt), cs)
    with LMDB(tmp_path / "s") as b:
        stored = b.get_ingestion("micro")
        assert stored is not None and stored.receipt == receipt


def test_handles_on_one_directory_in_one_process_share_its_environment(tmp_path: Path) -> None:
    """LMDB allows one environment per directory per process (py-lmdb 2 and later refuse a second
    open): a repo and a store opened separately on one directory share it, each sees the other's
    writes, and closing one leaves the other working."""
    path = tmp_path / "both"
    repo = hg.open_repo("r", path=path, durability="fast")
    store = hg.open_store("s", path=path, durability="sync")
    store.put(("u",), "k", "peanuts")
    node = hg.Semantic(id="n1", proposition="p", confidence=0.5, embedding=vector(1))
    repo.backend.apply_changeset(hg.Changeset(additions=[node]))
    reader = LMDB(path, readonly=True)
    assert reader.get_node("n1") is not None and hg.Store(reader).get(("u",), "k") is not None
    with pytest.raises(hg.StorageError, match="read-only"):
        reader.apply_changeset(hg.Changeset(additions=[hg.Semantic(id="n2", proposition="q", confidence=0.5)]))
    repo.close()
    store.put(("u",), "k2", "walnuts")  # the environment outlives the handle that opened it
    assert [h.entry.key for h in store.search_text("walnuts")] == ["k2"]
    store.close()
    assert reader.get_node("n1") is not None
    reader.close()
    again = LMDB(path)  # every handle closed: a fresh open
    assert again.get_node("n1") is not None
    again.close()


def test_a_directory_open_read_only_is_not_reopened_for_writing_in_the_same_process(tmp_path: Path) -> None:
    LMDB(tmp_path / "s").close()
    reader = LMDB(tmp_path / "s", readonly=True)
    with pytest.raises(hg.StorageError, match="open read-only in this process"):
        LMDB(tmp_path / "s")
    reader.close()
    LMDB(tmp_path / "s").close()
