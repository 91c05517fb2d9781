"""Group commit: the `sync` write transactions of one environment's threads share one commit.

An fsync costs far more than a typical write's own work, and LMDB runs one
write transaction at a time. So each write joins a queue: the writer at its
head becomes the leader, takes every write queued behind it, runs each in a
nested transaction of one parent (a write that raises is rolled back alone,
the others stand), commits the parent once, and only then acknowledges every
write of the group. Writes that arrive during that commit form the next
group. A lone writer runs exactly as without grouping (one transaction, no
nesting), so nothing changes for it but a queue check.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ...errors import StorageError

__all__ = ["GroupCommit", "Job"]

T = TypeVar("T")

MAX_GROUP = 64
"""Writes one commit takes at most: a bound on how long the first of them waits for the rest."""


LEAD_ROUNDS = 4
"""Groups a leader commits before it returns: the writes queued behind its own go on at once,
without waiting for another thread to wake (and win the GIL) to lead them."""


class Job(Generic[T]):
    """One queued write: `fn` runs inside the group's transaction; `finish` records how it ended."""

    __slots__ = ("_error", "_value", "done", "finished", "fn", "wake")

    def __init__(self, fn: Callable[[Any], T]) -> None:
        self.fn = fn
        self.done = False
        """The group is over: the job's thread may return."""
        self.finished = False
        self.wake = threading.Event()
        """Set when the job's group is over, or when its thread is to lead the next groups: each
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
        self._queue: deque[Job[Any]] = deque()
        self._leading = False
        """A thread is committing groups (or has been handed the lead): the others wait. While it
        is False the queue is empty."""

    def submit(self, fn: Callable[[Any], T], execute: Callable[[list[Job[Any]]], None]) -> T:
        """Runs `fn` in a group and returns its result (or raises its error) once the group's
        commit is durable. `execute` runs a group: it calls `finish` on every job, or raises, in
        which case every job of the group not yet finished gets that error."""
        job: Job[T] = Job(fn)
        with self._lock:
            self._queue.append(job)
            leads = not self._leading
            self._leading = True
        if not leads:
            job.wake.wait()
            if job.done:
                return job.outcome()
        try:  # this thread leads: its job is at the head of the queue
            for _ in range(LEAD_ROUNDS):
                with self._lock:
                    if not self._queue:
                        break
                    batch = [self._queue[i] for i in range(min(MAX_GROUP, len(self._queue)))]
                try:
                    execute(batch)
                except BaseException as exc:  # the group failed as a whole (or the leader was interrupted)
                    for j in batch:
                        if not j.finished:
                            j.finish(None, exc if isinstance(exc, Exception) or j is job else _interrupted(exc))
                    if not isinstance(exc, Exception):
                        raise
                finally:
                    with self._lock:
                        for j in batch:
                            j.done = True
                            self._queue.popleft()
                    for j in batch:
                        j.wake.set()
        finally:
            with self._lock:
                if self._queue:  # hand the lead to the oldest waiting write
                    self._queue[0].wake.set()
                else:
                    self._leading = False
        return job.outcome()

    def waiting(self) -> int:
        """Writes queued now (for tests and stats)."""
        with self._lock:
            return len(self._queue)
