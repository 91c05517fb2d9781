"""Resource faults: a full map, read-only stores, a full disk, a held writer lock, corrupt directories.

`tests/test_lmdb_processes.py` already covers a map growing under
``apply_changeset``, a foreign directory of plain files, a foreign LMDB
environment with an unnamed key, a data file of random bytes and a newer storage
format; the cases here extend those. Opening anything that may crash the
interpreter (a corrupt data file) happens in a child process, so a crash fails
one test instead of killing the run.

Root: the tests may run as root, for whom permission bits do not stop writes.
The permission test then runs its probe in a child process that drops to user
``nobody``; the full-disk test mounts a 2 MiB tmpfs (root only) and is backed by
a stand-in that works for anyone: a child whose ``RLIMIT_FSIZE`` caps the file
size, so LMDB's writes fail with ``EFBIG`` exactly as they would on a full disk.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb
import msgpack
import pytest
from rel_workload import structure, trajectory

import hippograph as hg
from hippograph.backends import LMDB
from hippograph.testing.graphs import snapshot

HANG_GUARD = 60.0
IS_ROOT = os.geteuid() == 0


def ingest_many(repo: hg.Repo, count: int, start: int = 0) -> list[hg.IngestionReceipt]:
    return [repo.ingest(trajectory(i), structure) for i in range(start, start + count)]


def run_python(code: str, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


def tree_digest(path: Path) -> dict[str, str]:
    """Every file under `path` with the SHA-256 of its bytes (to prove a refusal wrote nothing)."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in path.rglob("*")
        if p.is_file() and p.name != "lock.mdb"  # LMDB's reader table, rewritten by every open
    }


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding six ingestions."""
    path = tmp_path / "store"
    with hg.open_repo("faults", path=path, flush_interval=0) as repo:
        ingest_many(repo, 6)
    return path


# -- a full map ----------------------------------------------------------------


def test_a_full_map_grows_transparently_during_ingestion(tmp_path: Path) -> None:
    with hg.Repo(LMDB(tmp_path / "s", map_size=64 * 1024), flush_interval=0) as repo:
        receipts = ingest_many(repo, 120)
        assert all(repo.backend.get_ingestion(r.source_id).receipt == r for r in receipts)  # type: ignore[union-attr]
        assert repo.verify().ok
    assert (tmp_path / "s" / "data.mdb").stat().st_size > 64 * 1024


def test_a_map_grown_by_another_process_is_adopted_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with hg.Repo(LMDB(path, map_size=64 * 1024), flush_interval=0) as repo:
        ingest_many(repo, 1)
        grower = run_python(
            """
            import sys
            sys.path.insert(0, sys.argv[2])
            import hippograph as hg
            from hippograph.backends import LMDB
            from rel_workload import structure, trajectory
            with hg.Repo(LMDB(sys.argv[1], map_size=64 * 1024), flush_interval=0) as repo:
                for i in range(1000, 1150):
                    repo.ingest(trajectory(i), structure)
            """,
            str(path),
            str(Path(__file__).parent),
        )
        assert grower.returncode == 0, grower.stderr
        ingest_many(repo, 1, start=2)
        assert repo.backend.get_ingestion("src-001149") is not None
        assert repo.verify().ok


# -- read-only stores ------------------------------------------------------------


WRITES: dict[str, Callable[[LMDB], object]] = {
    "apply_changeset": lambda b: b.apply_changeset(hg.Changeset().add_node(hg.Tag(id="new", label="x"))),
    "delete_nodes": lambda b: b.delete_nodes(["src-000000:goal"]),
    "update_metadata": lambda b: b.update_metadata({"src-000000:goal": hg.NodeMetadata()}),
    "modify_metadata": lambda b: b.modify_metadata(["src-000000:goal"], lambda i, m: hg.NodeMetadata()),
    "delete_metadata": lambda b: b.delete_metadata(["src-000000:goal"]),
    "commit_ingestion": lambda b: hg.Repo(b, flush_interval=0).ingest(trajectory(99), structure),
    "rewrite": lambda b: b.rewrite(hg.Changeset(), ["src-000000:goal"], []),
    "delete_ingestion": lambda b: b.delete_ingestion("src-000000"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_read_only_open_refuses_every_write_with_storage_error(store: Path, write: str) -> None:
    with LMDB(store, readonly=True) as backend:
        before = snapshot(backend, sources=["src-000000", "src-000099"])
        with pytest.raises(hg.StorageError):
            WRITES[write](backend)
        assert snapshot(backend, sources=["src-000000", "src-000099"]) == before


RECALL_SUBGOALS = {"params": {"subgoal": {"threshold": 0.0}}}


def test_a_read_only_open_still_reads_and_finds_candidates(store: Path) -> None:
    with LMDB(store, readonly=True) as backend:
        assert backend.get_ingestion("src-000005") is not None
        query = structure(trajectory(0)).additions[0].embedding
        assert backend.find_candidates(["subgoal"], query, [], RECALL_SUBGOALS)
        assert hg.Repo(backend, flush_interval=0).verify().ok


PERMISSION_PROBE = """
import sys
import hippograph as hg
from hippograph.backends import LMDB
for readonly in (False, True):
    try:
        with LMDB(sys.argv[1], readonly=readonly) as b:
            print("open", readonly, "reads", b.get_ingestion("src-000000") is not None)
            try:
                b.delete_nodes(["src-000000:goal"])
                print("write", readonly, "succeeded")
            except hg.StorageError as exc:
                print("write", readonly, "StorageError", exc)
    except hg.StorageError as exc:
        print("open", readonly, "StorageError", exc)
"""


PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3


def _drop_permission_override() -> None:
    """In the child before exec: take the capabilities that let root ignore permission bits out of
    the bounding set, so the exec'd interpreter is subject to mode bits like any user."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _probe_without_write_permission(path: Path, dir_mode: int = 0o500, file_mode: int = 0o400) -> list[str]:
    """Run `PERMISSION_PROBE` on a store whose directory and files have these modes for their owner."""
    for f in path.iterdir():
        f.chmod(file_mode)
    path.chmod(dir_mode)
    try:
        result = run_python(PERMISSION_PROBE, str(path), preexec_fn=_drop_permission_override if IS_ROOT else None)
    finally:
        path.chmod(0o700)
        for f in path.iterdir():
            f.chmod(0o600)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_store_without_write_permission_fails_with_storage_error_and_is_left_intact(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with hg.open_repo("perm", path=path, flush_interval=0) as repo:
        ingest_many(repo, 2)
    before = tree_digest(path)
    lines = _probe_without_write_permission(path)
    # LMDB writes its reader table into lock.mdb even for read-only transactions,
    # so an unwritable lock file refuses both modes at open; what matters is that
    # the refusal is a StorageError naming the cause and that nothing changed.
    assert lines and all("succeeded" not in line for line in lines), lines
    assert all(" StorageError " in line or " reads True" in line for line in lines), lines
    assert any("Permission denied" in line for line in lines), lines
    assert tree_digest(path) == before


def test_a_store_directory_that_cannot_be_listed_fails_with_storage_error(tmp_path: Path) -> None:
    """Mode 0300 (no read bit): listing the directory fails; that must be a StorageError, not a bare OSError."""
    path = tmp_path / "store"
    with hg.open_repo("perm", path=path, flush_interval=0) as repo:
        ingest_many(repo, 2)
    before = tree_digest(path)
    lines = _probe_without_write_permission(path, dir_mode=0o300, file_mode=0o600)
    assert len(lines) == 2 and all(line.startswith("open ") and " StorageError " in line for line in lines), lines
    assert all("cannot read store directory" in line and "Permission denied" in line for line in lines), lines
    assert tree_digest(path) == before


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs. Needs mount privileges (root, as in CI, which sets ``HIPPOGRAPH_REQUIRE_MOUNT=1`` so
    that a failed mount fails). Elsewhere the tests that need one are left out and their unprivileged
    stand-ins still run: `test_a_file_size_limit_fails_the_write_...` (RLIMIT_FSIZE) for a full disk,
    `test_a_store_without_write_permission_...` for a read-only file system."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
        why = "" if done.returncode == 0 else done.stderr.decode().strip()
    except OSError as exc:  # no mount command at all
        why = str(exc)
    if why:
        if os.environ.get("HIPPOGRAPH_REQUIRE_MOUNT") == "1":
            pytest.fail(f"cannot mount a tmpfs here ({why}), and HIPPOGRAPH_REQUIRE_MOUNT=1 requires it")
        pytest.skip(f"cannot mount a tmpfs here ({why}); the unprivileged stand-in tests run instead")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_file_system_refuses_writes_and_still_reads(tmpfs: Path) -> None:
    path = tmpfs / "store"
    with hg.open_repo("rofs", path=path, flush_interval=0) as repo:
        receipts = ingest_many(repo, 3)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    with pytest.raises(hg.StorageError):
        LMDB(path)
    with LMDB(path, readonly=True) as backend:
        assert [backend.get_ingestion(r.source_id).receipt for r in receipts] == receipts  # type: ignore[union-attr]
        with pytest.raises(hg.StorageError):
            backend.delete_nodes(["src-000000:goal"])


# -- a full disk -----------------------------------------------------------------


def _fill(repo: hg.Repo) -> tuple[list[hg.IngestionReceipt], hg.StorageError]:
    receipts: list[hg.IngestionReceipt] = []
    for i in range(100_000):
        try:
            receipts.append(repo.ingest(trajectory(i), structure))
        except hg.StorageError as exc:
            return receipts, exc
    raise AssertionError("the disk never filled up")


def test_a_full_disk_fails_the_write_with_storage_error_and_keeps_every_acknowledged_ingestion(tmpfs: Path) -> None:
    path = tmpfs / "store"
    with hg.open_repo("full", path=path, flush_interval=0) as repo:
        receipts, error = _fill(repo)
        assert error.operation == "commit_ingestion"
        assert receipts
    with hg.open_repo("full", path=path, flush_interval=0) as repo:
        assert [repo.backend.get_ingestion(r.source_id).receipt for r in receipts] == receipts  # type: ignore[union-attr]
        assert repo.backend.get_ingestion(f"src-{len(receipts):06d}") is None
        assert repo.verify().ok


FSIZE_FILLER = """
import resource, signal, sys, json
sys.path.insert(0, sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
import hippograph as hg
from rel_workload import receipt_json, structure, trajectory
acked = []
with hg.open_repo("full", path=sys.argv[1], flush_interval=0) as repo:
    for i in range(100_000):
        try:
            acked.append(receipt_json(repo.ingest(trajectory(i), structure)))
        except hg.StorageError as exc:
            print(json.dumps({"acked": acked, "error": str(exc), "operation": exc.operation}))
            break
"""


def test_a_file_size_limit_fails_the_write_with_storage_error_and_keeps_every_acknowledged_ingestion(
    tmp_path: Path,
) -> None:
    import json

    from rel_workload import receipt_from_json

    path = tmp_path / "store"
    result = run_python(FSIZE_FILLER, str(path), str(Path(__file__).parent))
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["operation"] == "commit_ingestion"  # LMDB reports EFBIG or EIO, depending on the write
    receipts = [receipt_from_json(r) for r in outcome["acked"]]
    assert receipts
    with hg.open_repo("full", path=path, flush_interval=0) as repo:
        assert [repo.backend.get_ingestion(r.source_id).receipt for r in receipts] == receipts  # type: ignore[union-attr]
        assert repo.verify().ok
        ingest_many(repo, 3, start=50_000)  # without the limit the store takes writes again


# -- another process holding the writer lock ------------------------------------


LOCK_HOLDER = """
import sys, time, lmdb
env = lmdb.open(sys.argv[1], max_dbs=16)
txn = env.begin(write=True)
print("LOCKED", flush=True)
if sys.argv[2] == "forever":
    time.sleep(3600)
time.sleep(float(sys.argv[2]))
print("RELEASING", time.monotonic(), flush=True)
txn.abort()
env.close()
"""


def _hold_writer_lock(path: Path, how_long: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path), how_long], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "LOCKED"
    return holder


def _write_in_background(backend: LMDB) -> tuple[threading.Thread, list[float]]:
    finished: list[float] = []

    def write() -> None:
        backend.apply_changeset(hg.Changeset().add_node(hg.Tag(id="after-the-lock", label="x")))
        finished.append(time.monotonic())

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread, finished


def test_a_write_waits_for_another_process_holding_the_writer_lock_then_succeeds(store: Path) -> None:
    with LMDB(store) as backend:
        holder = _hold_writer_lock(store, "1.0")
        thread, finished = _write_in_background(backend)
        out, _ = holder.communicate(timeout=HANG_GUARD)
        thread.join(HANG_GUARD)
        assert finished, "the write never completed"
        released = float(out.split()[1])
        assert finished[0] > released  # ordering across processes (CLOCK_MONOTONIC is system-wide)
        assert backend.get_node("after-the-lock") is not None
        assert hg.Repo(backend, flush_interval=0).verify().ok


def test_a_writer_killed_while_holding_the_lock_does_not_block_the_next_write(store: Path) -> None:
    with LMDB(store) as backend:
        holder = _hold_writer_lock(store, "forever")
        holder.send_signal(signal.SIGKILL)
        holder.wait(HANG_GUARD)
        thread, finished = _write_in_background(backend)
        thread.join(HANG_GUARD)
        assert finished, "the write is stuck behind a dead process's lock"
        assert hg.Repo(backend, flush_interval=0).verify().ok


# -- corrupt and foreign directories ---------------------------------------------


OPEN_PROBE = """
import sys
import hippograph as hg
from hippograph.backends import LMDB
try:
    with LMDB(sys.argv[1]) as b:
        b.get_nodes_by_type(list(hg.NodeType))
        print("OPENED")
except hg.StorageError as exc:
    print("StorageError", exc)
"""


def open_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    """Open `path` in a child: a corrupt file may crash the interpreter, which must not take pytest down."""
    return run_python(OPEN_PROBE, str(path))


def assert_refused(path: Path) -> None:
    before = tree_digest(path)
    result = open_in_child(path)
    assert result.returncode == 0, f"the open crashed the process (status {result.returncode}): {result.stderr}"
    assert result.stdout.startswith("StorageError"), result.stdout
    assert tree_digest(path) == before


def test_a_data_file_with_a_garbage_header_is_refused(store: Path) -> None:
    with (store / "data.mdb").open("r+b") as f:
        f.write(os.urandom(8192))
    assert_refused(store)


def test_a_data_file_truncated_to_a_few_bytes_is_refused(store: Path) -> None:
    os.truncate(store / "data.mdb", 100)
    assert_refused(store)


def test_zeroed_data_pages_are_refused(store: Path) -> None:
    size = (store / "data.mdb").stat().st_size
    with (store / "data.mdb").open("r+b") as f:
        f.seek(8192)
        f.write(b"\0" * (size - 8192))
    assert_refused(store)


def test_a_plain_file_where_the_store_directory_should_be_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "store"
    target.write_bytes(b"my notes\n")
    with pytest.raises(hg.StorageError, match="not a hippograph store"):
        LMDB(target)
    assert target.read_bytes() == b"my notes\n"


def test_a_directory_named_data_mdb_is_refused(tmp_path: Path) -> None:
    (tmp_path / "store" / "data.mdb").mkdir(parents=True)
    with pytest.raises(hg.StorageError):
        LMDB(tmp_path / "store")
    assert list((tmp_path / "store").iterdir()) == [tmp_path / "store" / "data.mdb"]


def test_an_lmdb_environment_with_foreign_named_databases_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other"
    env = lmdb.open(str(path), max_dbs=4)
    for name in (b"users", b"sessions"):
        with env.begin(write=True, db=env.open_db(name)) as txn:
            txn.put(b"alice", b"x")
    env.close()
    before = tree_digest(path)
    with pytest.raises(hg.StorageError, match="another application"):
        LMDB(path)
    assert tree_digest(path) == before


def test_an_lmdb_environment_whose_info_names_another_magic_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other"
    env = lmdb.open(str(path), max_dbs=4)
    with env.begin(write=True, db=env.open_db(b"info")) as txn:
        txn.put(b"magic", b"some-other-app")
    env.close()
    with pytest.raises(hg.StorageError, match="not a hippograph store"):
        LMDB(path)


def test_a_garbage_lock_file_is_rebuilt_and_the_data_stays_readable(store: Path) -> None:
    with (store / "lock.mdb").open("r+b") as f:
        f.write(os.urandom(4096))
    with hg.open_repo("faults", path=store, flush_interval=0) as repo:
        assert repo.stats().ingestion_records == 6
        assert repo.verify().ok


# -- regression tests of bugs found here (see README.md) ------------------------


def test_a_data_file_truncated_to_half_is_refused_without_crashing(store: Path) -> None:
    with hg.open_repo("faults", path=store, flush_interval=0) as repo:
        ingest_many(repo, 300, start=100)  # a B-tree several pages deep
    os.truncate(store / "data.mdb", (store / "data.mdb").stat().st_size // 2)
    assert_refused(store)


def test_random_bytes_inside_data_pages_are_refused_without_crashing(store: Path) -> None:
    with hg.open_repo("faults", path=store, flush_interval=0) as repo:
        ingest_many(repo, 300, start=100)
    size = (store / "data.mdb").stat().st_size
    noise = random.Random(3).randbytes(size // 4)
    with (store / "data.mdb").open("r+b") as f:
        f.seek(size // 2)
        f.write(noise)
    result = open_in_child(store)
    assert result.returncode == 0, f"the open crashed the process (status {result.returncode}): {result.stderr}"
    assert result.stdout.startswith("StorageError open: "), result.stdout
    assert "data.mdb is corrupt" in result.stdout and "page" in result.stdout, result.stdout


def test_verify_refuses_a_store_damaged_after_it_was_opened(store: Path) -> None:
    backend = LMDB(store)
    try:
        leaves = [pgno for pgno, flags, _ in tree_pages(store) if flags == P_LEAF]
        psize = page_size(store)
        with (store / "data.mdb").open("r+b") as f:
            for leaf in leaves:  # each leaf now claims to be a branch: LMDB's IS_LEAF assertion would abort
                f.seek(leaf * psize + 10)
                f.write(struct.pack("<H", P_BRANCH))
        with pytest.raises(hg.StorageError, match=r"data.mdb is corrupt: .*page \d+: flags 0x0001") as caught:
            backend.verify_storage()
        assert caught.value.operation == "verify"
    finally:
        backend.close()


GARBAGE_RECORDS = {
    "node record": ("nodes", b"src-000001:goal", b"\x01\x01\xc1\xc1"),
    "node key": ("nodes", b"src-\xc3\x28", None),
    "embedding": ("vectors", struct.pack(">Q", 1), b"\x00" * 5),
    "embedding of format 1": ("emb", b"src-000001:goal", b"\x00" * 5),
    "links": ("links", b"src-000001:goal", b"\x01" + msgpack.packb([1, 2])),
    "metadata": ("meta", b"src-000001:goal", b"\x01" + msgpack.packb("x")),
    "ingestion record": ("ingest", b"src-000001", b"\x01" + msgpack.packb([1, 2, 3, 4])),
    "change log entry": ("log", struct.pack(">Q", 1), b"\xc1"),
}


@pytest.mark.parametrize("record", GARBAGE_RECORDS)
def test_garbage_in_a_record_is_a_storage_error_on_read_and_a_problem_for_verify(store: Path, record: str) -> None:
    db, key, value = GARBAGE_RECORDS[record]
    env = lmdb.open(str(store), max_dbs=16)
    with env.begin(write=True) as txn:
        handle = env.open_db(db.encode(), txn=txn)
        if value is None:  # a copy of a real record under a key that is not UTF-8
            value = txn.get(b"src-000001:goal", db=handle)
        txn.put(key, value, db=handle)
    env.close()
    with hg.Repo(LMDB(store), flush_interval=0) as repo:
        problems, _ = repo.backend.verify_storage()
        named = (
            key.decode("utf-8", "replace"),
            key.hex(),
            f"number {int.from_bytes(key, 'big')}" if db == "vectors" else key.hex(),
        )
        assert any(any(n in p for n in named) for p in problems), problems
        try:
            repo.backend.get_nodes_by_type(list(hg.NodeType))
            for node_type in hg.NodeType:
                repo.backend.copy_columns(node_type)
            repo.backend.get_ingestion("src-000001")
        except hg.StorageError as exc:
            assert exc.operation in ("decode", "get_nodes_by_type", "copy_columns", "get_ingestion"), exc


# -- random damage inside the B-trees (B2) -----------------------------------------

P_BRANCH, P_LEAF = 0x01, 0x02
DAMAGE_KINDS = ("aligned", "unaligned", "page_header", "node_pointer", "node_header", "key")

DAMAGE_PROBE = """
import sys
import hippograph as hg
from hippograph.backends import LMDB
for path in sys.argv[1:]:
    try:
        with hg.Repo(LMDB(path), flush_interval=0) as repo:
            nodes = repo.backend.get_nodes_by_type(list(hg.NodeType))
            repo.backend.get_metadata([n.id for n in nodes])
            for node_type in hg.NodeType:
                repo.backend.copy_columns(node_type)
            repo.stats()
            repo.verify()
        print("OPENED", path, flush=True)
    except hg.StorageError as exc:
        print("StorageError", path, exc, flush=True)
"""


def page_size(path: Path) -> int:
    """The page size recorded in meta page 0 (`MDB_meta.mm_dbs[FREE_DBI].md_pad`)."""
    with (path / "data.mdb").open("rb") as f:
        f.seek(16 + 24)
        return int(struct.unpack("<I", f.read(4))[0])


def tree_pages(path: Path) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Every page that looks like a branch or leaf page: (pgno, flags, [(node offset, key size)])."""
    data = (path / "data.mdb").read_bytes()
    psize = page_size(path)
    pages = []
    for pgno in range(2, len(data) // psize):
        page = data[pgno * psize : (pgno + 1) * psize]
        number, (flags, lower, upper) = struct.unpack_from("<Q", page)[0], struct.unpack_from("<HHH", page, 10)
        if number != pgno or flags not in (P_BRANCH, P_LEAF) or not 16 <= lower <= upper <= psize:
            continue
        nodes = []
        for i in range((lower - 16) // 2):
            ptr = struct.unpack_from("<H", page, 16 + 2 * i)[0]
            if ptr + 8 <= psize:
                nodes.append((ptr, struct.unpack_from("<H", page, ptr + 6)[0]))
        pages.append((pgno, flags, nodes))
    return pages


def damage(path: Path, kind: str, rng: random.Random) -> str:
    """Damages `path`'s data.mdb in the way `kind` names; returns what was done."""
    psize = page_size(path)
    size = (path / "data.mdb").stat().st_size
    pages = [p for p in tree_pages(path) if p[2]]
    pgno, _, nodes = rng.choice(pages)
    ptr, ksize = rng.choice(nodes)
    base = pgno * psize
    if kind == "aligned":
        offset, patch = rng.randrange(size // psize) * psize, rng.randbytes(rng.choice((16, 64, psize)))
    elif kind == "unaligned":
        offset, patch = rng.randrange(size), rng.randbytes(rng.randint(1, 300))
    else:
        offset = {
            "page_header": base + rng.randrange(16),
            "node_pointer": base + 16 + 2 * rng.randrange(len(nodes)) + rng.randrange(2),
            "node_header": base + ptr + rng.randrange(8),
            "key": base + ptr + 8 + rng.randrange(max(ksize, 1)),
        }[kind]
        with (path / "data.mdb").open("rb") as f:
            f.seek(offset)
            patch = bytes([f.read(1)[0] ^ rng.randint(1, 255)])
    with (path / "data.mdb").open("r+b") as f:
        f.seek(offset)
        f.write(patch[: max(0, size - offset)])
    return f"{kind}: {len(patch)} bytes at offset {offset} (page {offset // psize})"


@pytest.fixture(scope="module")
def deep_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose trees are several pages deep (copied, never changed)."""
    path = tmp_path_factory.mktemp("deep") / "store"
    with hg.open_repo("faults", path=path, flush_interval=0) as repo:
        ingest_many(repo, 120)
    return path


def assert_damage_never_crashes(deep_store: Path, tmp_path: Path, kind: str, seeds: range) -> None:
    cases = {}
    for seed in seeds:
        target = tmp_path / f"{kind}-{seed}"
        target.mkdir()
        shutil.copyfile(deep_store / "data.mdb", target / "data.mdb")
        cases[str(target)] = damage(target, kind, random.Random(f"{kind}-{seed}"))
    result = run_python(DAMAGE_PROBE, *cases)
    done = [line.split(" ", 2) for line in result.stdout.splitlines()]
    crashed = list(cases)[len(done)] if len(done) < len(cases) else None
    assert result.returncode == 0 and crashed is None, (
        f"status {result.returncode} at {cases.get(crashed or '')}: {result.stderr[-2000:]}"
    )
    assert [path for _, path, *_ in done] == list(cases)
    assert {outcome for outcome, *_ in done} <= {"OPENED", "StorageError"}


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_damaged_pages_either_open_with_every_record_readable_or_raise_storage_error(
    deep_store: Path, tmp_path: Path, kind: str
) -> None:
    assert_damage_never_crashes(deep_store, tmp_path, kind, range(6))


@pytest.mark.slow
@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_damaged_pages_never_crash_over_many_seeds(deep_store: Path, tmp_path: Path, kind: str) -> None:
    assert_damage_never_crashes(deep_store, tmp_path, kind, range(6, 206))


def test_a_store_whose_creation_was_killed_after_lock_mdb_opens_as_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    path.mkdir(mode=0o700)
    (path / "lock.mdb").write_bytes(b"")  # LMDB creates lock.mdb before data.mdb
    with hg.open_repo("fresh", path=path, flush_interval=0) as repo:
        ingest_many(repo, 1)
        assert repo.verify().ok


def test_a_repo_over_a_read_only_store_recalls_and_closes_cleanly(store: Path) -> None:
    repo = hg.Repo(LMDB(store, readonly=True), flush_interval=0)
    query = structure(trajectory(0)).additions[0].embedding
    assert repo.recall(query, types=["subgoal"], value_function=RECALL_SUBGOALS)
    repo.close()
