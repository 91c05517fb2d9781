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
from hippograph.backends.lmdb import LMDB, group
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
    first (commits that do not sync: the group's commit is followed by one explicit sync)."""
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
        if len(groups) == 1:  # the first write, held until the other two queue behind it
            gate.wait(10)
            for j in jobs:
                j.finish(j.fn(None), None)
            return
        raise KeyboardInterrupt  # while the next leader commits its group (its write and the other)

    got: dict[str, object] = {}

    def run(name: str, value: int) -> None:
        try:
            got[name] = queue.submit(lambda t: value, execute)
        except BaseException as exc:  # recorded: the assertions below name what each must be
            got[name] = exc

    names = ["first", "leader", "other"]
    threads = {name: threading.Thread(target=run, args=(name, i)) for i, name in enumerate(names)}
    for count, th in enumerate(threads.values(), start=1):
        th.start()
        assert _wait_for(lambda count=count: queue.waiting() == count)
    gate.set()
    for th in threads.values():
        th.join(10)
    assert groups == [1, 2]
    assert got["first"] == 0
    assert isinstance(got["leader"], KeyboardInterrupt)
    assert isinstance(got["other"], StorageError) and "interrupted" in str(got["other"])
    assert queue.waiting() == 0
    assert queue.submit(lambda t: 3, lambda jobs: [j.finish(j.fn(None), None) for j in jobs] and None) == 3


def _run_all(jobs: list[Job[Any]]) -> None:
    for j in jobs:
        j.finish(j.fn(None), None)


class _Clock:
    """The group module's `time`: a monotonic clock that moves only when a test moves it, so how
    long a commit "took" (the bound of the next leader's wait) is the test's to say."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(group, "time", fake)
    monkeypatch.setattr(group, "GATHER_WAIT", 60.0)  # the tests end long before, or hang
    return fake


def _held_first(queue: GroupCommit, writers: int, execute: Callable[[list[Job[Any]]], None]) -> list[threading.Thread]:
    """Starts `writers` threads, each submitting its index, one after another, so that the first
    leads a group of its own and the others queue behind it (`execute` holds that first group)."""
    threads = [threading.Thread(target=queue.submit, args=(lambda t, i=i: i, execute)) for i in range(writers)]
    for count, th in enumerate(threads, start=1):
        th.start()
        assert _wait_for(lambda count=count: queue.waiting() == count)
    return threads


def test_a_leader_waits_for_the_last_groups_writers_to_queue_again(clock: _Clock) -> None:
    """Writers that write back to back come back after their commit one by one: the next leader
    waits until as many are queued as the last group and its queue held, so they share one commit
    instead of splitting into smaller groups each paying an fsync."""
    queue = GroupCommit()
    gate = threading.Event()
    groups: list[list[int]] = []

    def execute(jobs: list[Job[Any]]) -> None:
        groups.append([j.fn(None) for j in jobs])
        if len(groups) == 1:
            gate.wait(10)
            clock.now += 1.0  # the first commit took a second: the next leader may wait that long
        _run_all(jobs)

    first = _held_first(queue, 3, execute)
    gate.set()
    first[0].join(10)
    back = threading.Thread(target=queue.submit, args=(lambda t: 3, execute))  # the first writer, again
    back.start()
    for th in [*first, back]:
        th.join(10)
    assert not any(th.is_alive() for th in [*first, back])
    assert groups[0] == [0] and sorted(groups[1]) == [1, 2, 3] and len(groups) == 2


def test_a_lone_writer_never_waits_nor_longer_than_the_last_commit_took(clock: _Clock) -> None:
    """One writer alone commits at once; a leader expecting more writers than come waits at most
    as long as the last commit took, and the group after it expects only as many as came."""
    queue = GroupCommit()
    waits: list[float | None] = []
    real_wait = queue._joined.wait

    def wait(timeout: float | None = None) -> bool:
        waits.append(timeout)
        return real_wait(timeout)

    queue._joined.wait = wait  # type: ignore[method-assign]
    assert [queue.submit(lambda t, i=i: i, _run_all) for i in range(3)] == [0, 1, 2]
    assert waits == []
    gate = threading.Event()
    sizes: list[int] = []

    def execute(jobs: list[Job[Any]]) -> None:
        sizes.append(len(jobs))
        if len(sizes) == 1:
            gate.wait(10)
            clock.now += 0.01  # the held commit took 10 ms
        _run_all(jobs)

    threads = _held_first(queue, 3, execute)
    gate.set()
    for th in threads:
        th.join(10)
    assert sizes == [1, 2]  # the second leader expected three and waited out the 10 ms for the third
    assert waits == [pytest.approx(0.01)]
    assert queue._demand == 2
    assert queue.submit(lambda t: 5, _run_all) == 5  # expects two, but the last commit took no time
    assert queue._demand == 1 and len(waits) == 1
    clock.now += 100.0
    assert queue.submit(lambda t: 6, _run_all) == 6  # alone after a group of one: no wait
    assert len(waits) == 1


def test_a_leader_interrupted_while_gathering_leaves_the_queue_to_the_others(
    monkeypatch: pytest.MonkeyPatch, clock: _Clock
) -> None:
    """An interruption in the wait for the last group's writers is the leader's: its write was never
    run, and the write queued behind it leads its own group."""
    queue = GroupCommit()
    queue._demand, queue._spent = 3, 1.0  # as after a group of three writers that took a second
    ran: list[int] = []

    def execute(jobs: list[Job[Any]]) -> None:
        ran.extend(j.fn(None) for j in jobs)
        _run_all(jobs)

    real_wait = queue._joined.wait
    other = threading.Thread(target=lambda: got.append(queue.submit(lambda t: 2, execute)))
    got: list[int] = []

    def interrupted_wait(timeout: float | None = None) -> bool:
        """The leader's wait: interrupted once a second write queued behind it."""
        other.start()
        for _ in range(1000):
            real_wait(0.01)  # releases the lock, so the other write can queue
            if len(queue._queue) == 2:
                raise KeyboardInterrupt
        return False

    monkeypatch.setattr(queue._joined, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        queue.submit(lambda t: 1, execute)
    other.join(10)
    assert got == [2] and ran == [2]
    assert queue.waiting() == 0
