"""Proof that a call runs off the event loop, without timing anything.

A worker step calls `LoopWitness.wait()`, which blocks until a task on the
event loop has ticked five times. Off the loop, the ticks arrive and the step
goes on at once; on the loop, nothing can tick, so the step waits out its
10 s and records False.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class LoopWitness:
    def __init__(self) -> None:
        self._ticked = threading.Event()
        self.waited: list[bool] = []

    def wait(self) -> None:
        self.waited.append(self._ticked.wait(10))
        self._ticked.clear()

    @property
    def proven(self) -> bool:
        """At least one step waited, and every one saw the loop tick."""
        return bool(self.waited) and all(self.waited)

    async def during(self, work: Awaitable[T]) -> T:
        """Awaits `work` while a task on the same loop ticks."""
        done = asyncio.Event()

        async def tick() -> None:
            count = 0
            while not done.is_set():
                count += 1
                if count % 5 == 0:
                    self._ticked.set()
                await asyncio.sleep(0.001)

        ticker = asyncio.create_task(tick())
        try:
            return await work
        finally:
            done.set()
            await ticker
