"""Planner statistics kept in step with a growing repo.

PostgreSQL plans each statement from table statistics that autovacuum
refreshes about once a minute (never, where it is turned off). Until then a
freshly filled table looks nearly empty, and the cached generic plans of the
backend's key lookups (`id = ANY($2)`, links by either end) scan every row of
the repo instead: a write that takes a millisecond takes tens. So a process
refreshes the graph tables' statistics itself, off the caller's thread, each
time the rows it wrote reach a threshold that doubles each time: a handful of
`ANALYZE`s over a store's life, none once it stops growing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

__all__ = ["ANALYZE_FIRST", "Refresher"]

ANALYZE_FIRST = 500
"""Rows written by this process before its first refresh."""


class Refresher:
    """Runs `analyze` in a background thread when the rows written reach the next threshold."""

    def __init__(self, analyze: Callable[[], object]) -> None:
        self._analyze = analyze
        self._written = 0
        self._next = ANALYZE_FIRST
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.runs = 0
        """Refreshes started (for tests and stats)."""

    def wrote(self, rows: int) -> None:
        with self._lock:
            self._written += rows
            if self._written < self._next or (self._thread is not None and self._thread.is_alive()):
                return
            self._next = 2 * self._written
            self.runs += 1
            self._thread = threading.Thread(target=self._run, name="hippograph-pg-analyze", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # housekeeping: autovacuum still refreshes them
            self._analyze()

    def close(self) -> None:
        """Waits for a refresh under way (it holds one of the pool's connections)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
