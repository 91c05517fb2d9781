"""Group commit: the `sync` write transactions of one environment's threads share one commit.

An fsync costs far more than a typical write's own work, and LMDB runs one
write transaction at a time. So each write joins a queue: the writer at its
head becomes the leader, takes every write queued behind it, runs each in a
nested transaction of one parent (a write that raises is rolled back alone,
the others stand), commits the parent once, and only then acknowledges every
write of the group. A lone writer runs exactly as without grouping (one
transaction, no nesting), so nothing changes for it but a queue check.

Writers that write back to back come back together: every one of them waits
for the commit of its group, and each starts its next write when that commit
returns. A leader that started at once would take the first of them alone and
leave the rest to the next commit, splitting the writers into groups half as
large, each paying an fsync. So a leader first waits, briefly, until as many
writes are queued as the last group and the writes queued behind it counted
(`_demand`): never longer than the last group's commit took (a wait that
finds nobody costs at most the commit it hoped to save) nor `GATHER_WAIT`,
and not at all when one writer writes alone.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ...errors import StorageError

__all__ = ["GroupCommit", "Job"]

T = TypeVar("T")

MAX_GROUP = 64
"""Writes one commit takes at most: a bound on how long the first of them waits for the rest."""

GATHER_WAIT = 0.002
"""Seconds a leader waits at most for the writers of the last group to queue again."""


class Job(Generic[T]):
    """One queued write: `fn` runs inside the group's transaction; `finish` records how it ended."""

    __slots__ = ("_error", "_value", "done", "finished", "fn", "wake")

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.done = False
        """The group is over: the job's thread may return."""
        self.finished = False
        self.wake = threading.Event()
        """Set when the job's group is over, or when its thread is to lead the next group: each
        waiting thread is woken once, by name, instead of every waiter at every commit."""
        self._value: T | None = None
        self._error: BaseException | None = None

    def finish(self, value: T | None, error: BaseException | None) -> None:
        self._value, self._error, self.finished = value, error, True

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by `finish` before `done`


def _interrupted(exc: BaseException) -> StorageError:
    """What the other writers of a group get when its leader's thread is interrupted (a
    `KeyboardInterrupt`, a `SystemExit`): their writes were not committed, and the interruption
    belongs to the leader's thread alone."""
    return StorageError(f"the commit of this write's group was interrupted ({type(exc).__name__})", operation="write")


class GroupCommit:
    """The queue of one environment's grouped writes (one per `SharedEnv`, so every handle of the
    store in this process groups with the others)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        """Notified when a write queues while a leader gathers its group."""
        self._queue: deque[Job[Any]] = deque()
        self._leading = False
        """A thread is committing a group (or has been handed the lead): the others wait. While it
        is False the queue is empty."""
        self._demand = 0
        """Writes the last group took plus those queued behind it when it was committed: how many
        the next leader waits for."""
        self._awaited = 0
        """Writes a gathering leader waits for (0: no leader waits)."""
        self._spent = 0.0
        """Seconds the last group's commit took: the longest a leader waits for more writes."""

    def submit(self, fn: Callable[[Any], T], execute: Callable[[list[Job[Any]]], None]) -> T:
        """Runs `fn` in a group and returns its result (or raises its error) once the group's
        commit is durable. `execute` runs a group: it calls `finish` on every job, or raises, in
        which case every job of the group not yet finished gets that error."""
        job: Job[T] = Job(fn)
        with self._lock:
            self._queue.append(job)
            leads = not self._leading
            self._leading = True
            if self._awaited and len(self._queue) >= self._awaited:
                self._joined.notify()
        if not leads:
            job.wake.wait()
            if job.done:
                return job.outcome()
        batch: list[Job[Any]] = []
        try:  # this thread leads: its job is at the head of the queue
            with self._lock:
                self._gather()
                batch = [self._queue[i] for i in range(min(MAX_GROUP, len(self._queue)))]
            started = time.monotonic()
            try:
                execute(batch)
            except BaseException as exc:  # the group failed as a whole (or the leader was interrupted)
                for j in batch:
                    if not j.finished:
                        j.finish(None, exc if isinstance(exc, Exception) or j is job else _interrupted(exc))
                if not isinstance(exc, Exception):
                    raise
            finally:
                self._spent = time.monotonic() - started
        finally:
            with self._lock:
                for j in batch:
                    j.done = True
                    self._queue.popleft()
                if not batch:  # interrupted while gathering: the leader's own write leaves unwritten
                    self._queue.remove(job)
                self._demand = len(batch) + len(self._queue)
                if self._queue:  # hand the lead to the oldest waiting write
                    self._queue[0].wake.set()
                else:
                    self._leading = False
            for j in batch:
                j.wake.set()
        return job.outcome()

    def _gather(self) -> None:
        """Waits (the lock held, released while waiting) until the queue holds `_demand` writes, or
        for as long as the last commit took, at most `GATHER_WAIT`."""
        want = min(self._demand, MAX_GROUP)
        if len(self._queue) >= want:
            return
        deadline = time.monotonic() + min(GATHER_WAIT, self._spent)
        self._awaited = want
        try:
            while len(self._queue) < want:
                left = deadline - time.monotonic()
                if left <= 0 or not self._joined.wait(left):
                    break
        finally:
            self._awaited = 0

    def waiting(self) -> int:
        """Writes queued now (for tests and stats)."""
        with self._lock:
            return len(self._queue)
