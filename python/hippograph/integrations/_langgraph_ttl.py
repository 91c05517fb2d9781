"""The TTL sweeper of `HippographStore`: a daemon thread deleting expired items every interval, with
the start/stop contract of LangGraph's SqliteStore (docs/langgraph.md, TTL). Nothing here imports
LangGraph."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Sweeper"]

logger = logging.getLogger("hippograph.integrations.langgraph")

T = TypeVar("T")


class Sweeper(Generic[T]):
    """Calls ``sweep(owner)`` every `interval` seconds on a daemon thread that holds `owner` only
    weakly (a store nobody references any more stops being swept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, owner: T, sweep: Callable[[T], int], interval: float) -> concurrent.futures.Future[None]:
        """Starts the thread, unless it runs already; the future completes when it stops, and
        cancelling the future stops it."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                logger.info("the TTL sweeper is already running")
                stop = self._stop
            else:
                stop = self._stop = threading.Event()
                ref = weakref.ref(owner)

                def loop() -> None:
                    while not stop.wait(interval):
                        target = ref()
                        if target is None:
                            break
                        try:
                            swept = sweep(target)
                            if swept:
                                logger.info("TTL sweep deleted %d expired items", swept)
                        except Exception:
                            logger.exception("TTL sweep failed")
                        del target
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        future.set_result(None)

                self._thread = threading.Thread(target=loop, daemon=True, name="hippograph-ttl-sweeper")
                self._thread.start()
        future.add_done_callback(lambda f: stop.set() if f.cancelled() else None)
        return future

    def stop(self, timeout: float | None = None) -> bool:
        """Stops the thread; False when it did not stop within `timeout` seconds."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._thread = None
                return True
            self._stop.set()
        thread.join(timeout)
        if thread.is_alive():
            return False
        with self._lock:
            if self._thread is thread:
                self._thread = None
        return True
