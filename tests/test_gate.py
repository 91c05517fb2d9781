"""The backends' readers–writer gate (`RWLock`, native): readers share it, a writer is alone, a
waiting writer goes before new readers, and every wait lets other Python threads run."""

from __future__ import annotations

import threading
import time

from hippograph.backends._base import RWLock


def wait_until(cond: object, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.001)
    return False


def test_readers_hold_the_gate_together() -> None:
    lock = RWLock()
    both = threading.Barrier(2, timeout=10)

    def reader() -> None:
        with lock.read():
            both.wait()  # breaks (BrokenBarrierError) unless the other reader is inside too

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not both.broken


def test_a_writer_waits_for_the_readers_and_new_readers_wait_for_it() -> None:
    lock = RWLock()
    order: list[str] = []
    lock.read().__enter__()  # this thread reads; the writer must wait
    wrote = threading.Event()

    def writer() -> None:
        with lock.write():
            order.append("write")
        wrote.set()

    def late_reader() -> None:
        with lock.read():
            order.append("late read")

    w = threading.Thread(target=writer)
    w.start()
    assert wait_until(lambda: lock._gate.held()[2] == 1), "the writer waits (and let this thread run)"
    r = threading.Thread(target=late_reader)
    r.start()
    assert wait_until(lambda: r.is_alive()) and not wrote.wait(0.05)
    assert order == [], "neither the writer nor a reader arriving after it got in"
    lock.read().__exit__(None, None, None)
    w.join(10)
    r.join(10)
    assert order == ["write", "late read"]
    assert lock._gate.held() == (0, False, 0)


def test_writers_exclude_each_other_and_every_reader() -> None:
    lock = RWLock()
    inside = [0, 0]  # readers, writers
    seen_bad: list[str] = []
    count = threading.Lock()  # the counts change in one step each (readers overlap)

    def step(i: int, by: int) -> list[int]:
        with count:
            inside[i] += by
            return list(inside)

    def work(i: int) -> None:
        for _ in range(300):
            if i % 3 == 0:
                with lock.write():
                    now = step(1, 1)
                    if now != [0, 1]:
                        seen_bad.append(f"writer with {now}")
                    time.sleep(0)
                    step(1, -1)
            else:
                with lock.read():
                    if step(0, 1)[1]:
                        seen_bad.append("reader beside a writer")
                    time.sleep(0)
                    step(0, -1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert seen_bad == []
    assert lock._gate.held() == (0, False, 0)
