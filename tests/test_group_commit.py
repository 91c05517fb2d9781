"""Group commit on LMDB `sync`: concurrent writes share one transaction and its fsync, each is
acknowledged only once that commit returned, and a write that fails is rolled back alone."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hippograph as hg
from hippograph.backends.lmdb import LMDB
from hippograph.backends.lmdb.group import GroupCommit, Job
from hippograph.errors import StorageError


def _held_group(backend: LMDB, writes: list[Callable[[Any], object]]) -> list[tuple[object, BaseException | None]]:
    """Runs a first write that holds the environment's queue until every one of `writes` waits in it,
    so they commit as one group after it; each write's result or error, in order."""
    queue = backend._shared.group
    release = threading.Event()
    outcomes: list[tuple[object, BaseException | None]] = [(None, None)] * len(writes)

    def first(t: Any) -> None:
        t.put("info", b"test-holder", b"x")
        release.wait(10)

    def run(i: int) -> None:
        try:
            outcomes[i] = (backend._write("test", writes[i]), None)
        except Exception as exc:
            outcomes[i] = (None, exc)

    leader = threading.Thread(target=backend._write, args=("test", first))
    leader.start()
    queued = _wait_for(lambda: queue.waiting() >= 1)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writes))]
    for th in threads:
        th.start()
    queued = queued and _wait_for(lambda: queue.waiting() >= 1 + len(writes))
    release.set()
    for th in [leader, *threads]:
        th.join(10)
    assert queued, "the writes never waited in the environment's queue"
    return outcomes


def _wait_for(condition: Callable[[], bool]) -> bool:
    """Polls `condition` for up to ten seconds (a bound against a hang, not a timing assertion)."""
    stop = threading.Event()
    for _ in range(10_000):
        if condition():
            return True
        stop.wait(0.001)
    return False


@pytest.fixture(params=["sync environment", "environment opened fast"])
def sync_handle(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., LMDB]:
    """Opens a `sync` handle: alone, or in an environment a `fast` handle of this process opened
    first (commits that do not sync and a map written in place: the group commits write by write,
    then syncs once)."""
    opened: list[LMDB] = []

    def open_(**kw: Any) -> LMDB:
        if request.param == "environment opened fast":
            opened.append(LMDB(tmp_path / "s", durability="fast", **kw))
        opened.append(LMDB(tmp_path / "s", durability="sync", **kw))
        return opened[-1]

    yield open_  # type: ignore[misc]
    for b in reversed(opened):
        b.close()


def _txnid(backend: LMDB) -> int:
    return int(backend._env.info()["last_txnid"])


def test_writes_queued_behind_a_commit_share_the_next_one(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "s", durability="sync")
    before = _txnid(backend)

    def put(i: int) -> Callable[[Any], int]:
        def write(t: Any) -> int:
            t.put("info", f"test-{i}".encode(), b"x")
            return i

        return write

    got = _held_group(backend, [put(i) for i in range(7)])
    assert got == [(i, None) for i in range(7)]
    assert _txnid(backend) - before == 2  # the holding write, then the seven together
    backend.close()
    reopened = LMDB(tmp_path / "s", durability="sync")
    assert all(reopened._read(lambda t, i=i: t.get("info", f"test-{i}".encode())) == b"x" for i in range(7))
    reopened.close()


def test_a_write_that_raises_is_rolled_back_alone(sync_handle: Callable[..., LMDB]) -> None:
    backend = sync_handle()

    def good(i: int) -> Callable[[Any], None]:
        return lambda t: t.put("info", f"good-{i}".encode(), b"1")

    def bad(t: Any) -> None:
        t.put("info", b"bad", b"1")
        raise ValueError("refused inside the transaction")

    got = _held_group(backend, [good(0), bad, good(1)])
    assert got[0] == (None, None) and got[2] == (None, None)
    assert isinstance(got[1][1], ValueError)
    read = backend._read
    assert read(lambda t: t.get("info", b"good-0")) == b"1"
    assert read(lambda t: t.get("info", b"good-1")) == b"1"
    assert read(lambda t: t.get("info", b"bad")) is None


def test_a_full_map_grows_and_the_whole_group_runs_again(sync_handle: Callable[..., LMDB]) -> None:
    backend = sync_handle(map_size=1 << 16)
    big = b"v" * 20_000

    def put(i: int) -> Callable[[Any], int]:
        def write(t: Any) -> int:
            t.put("info", f"big-{i}".encode(), big)
            return i

        return write

    got = _held_group(backend, [put(i) for i in range(6)])
    assert got == [(i, None) for i in range(6)]
    assert all(backend._read(lambda t, i=i: t.get("info", f"big-{i}".encode())) == big for i in range(6))


def test_concurrent_ingestions_are_all_acknowledged_and_stored(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "s", durability="sync")
    repo = hg.Repo(backend)
    rng = np.random.default_rng(0)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for j in range(12):
                vector = rng.standard_normal(8).astype(np.float32)
                node = hg.Semantic(id=f"n{k}-{j}", proposition="p", confidence=0.5, embedding=vector)
                backend.apply_changeset(hg.Changeset().add_node(node))
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors
    repo.close()
    reopened = LMDB(tmp_path / "s", durability="sync")
    assert all(reopened.get_node(f"n{k}-{j}") is not None for k in range(6) for j in range(12))
    reopened.close()


def test_a_failed_group_fails_every_write_in_it() -> None:
    queue = GroupCommit()

    def execute(jobs: list[Job[Any]]) -> None:
        raise StorageError("the disk went away", operation="test")

    with pytest.raises(StorageError, match="disk went away"):
        queue.submit(lambda t: 1, execute)
    assert queue.waiting() == 0
    # The queue is free again: the next write leads its own group.
    assert queue.submit(lambda t: 2, lambda jobs: [j.finish(j.fn(None), None) for j in jobs] and None) == 2


def test_an_interrupted_leader_fails_the_other_writes_with_a_storage_error() -> None:
    """A KeyboardInterrupt in the leader's thread is the leader's: a write of another thread in the
    group it was committing was not committed and gets a StorageError saying so; the queue is free."""
    queue = GroupCommit()
    gate = threading.Event()
    groups: list[int] = []

    def execute(jobs: list[Job[Any]]) -> None:
        groups.append(len(jobs))
        if len(groups) == 1:  # the leader's own write, held until the other one queues behind it
            gate.wait(10)
            for j in jobs:
                j.finish(j.fn(None), None)
            return
        raise KeyboardInterrupt  # while the leader commits the next group (the other thread's write)

    got: dict[str, object] = {}

    def run(name: str, value: int) -> None:
        try:
            got[name] = queue.submit(lambda t: value, execute)
        except BaseException as exc:  # recorded: the assertions below name what each must be
            got[name] = exc

    leader = threading.Thread(target=run, args=("leader", 1))
    leader.start()
    assert _wait_for(lambda: queue.waiting() == 1)
    other = threading.Thread(target=run, args=("other", 2))
    other.start()
    assert _wait_for(lambda: queue.waiting() == 2)
    gate.set()
    leader.join(10)
    other.join(10)
    assert groups == [1, 1]
    assert isinstance(got["leader"], KeyboardInterrupt)
    assert isinstance(got["other"], StorageError) and "interrupted" in str(got["other"])
    assert queue.waiting() == 0
    assert queue.submit(lambda t: 3, lambda jobs: [j.finish(j.fn(None), None) for j in jobs] and None) == 3
