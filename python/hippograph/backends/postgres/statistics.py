"""Planner statistics kept in step with a growing repo.

PostgreSQL plans each statement from table statistics that autovacuum
refreshes about once a minute (never, where it is turned off). Until then a
freshly filled table looks nearly empty, and the cached generic plans of the
backend's key lookups (`id = ANY($2)`, links by either end) scan every row of
the repo instead: a write that takes a millisecond takes tens, more with every
row the table gains. So a process refreshes a graph table's statistics itself,
off the caller's thread, each time the rows it wrote to that table reach a
threshold that doubles each time: a handful of `ANALYZE`s per table over a
store's life, none once it stops growing. Counting per table matters: a table
that starts filling late (links after a bulk load of nodes) would otherwise
keep its empty-table plans until the whole store doubled again.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Mapping

__all__ = ["ANALYZE_FIRST", "TABLES", "Refresher"]

ANALYZE_FIRST = 500
"""Rows written to a table by this process before its first refresh."""

TABLES = ("nodes", "embeddings", "links", "metadata", "ingestion")
"""The graph tables whose statistics a `Refresher` keeps fresh."""


class Refresher:
    """Runs `analyze(tables)` in a background thread for the tables whose rows written reach their
    next threshold."""

    def __init__(self, analyze: Callable[[list[str]], object]) -> None:
        self._analyze = analyze
        self._written: Counter[str] = Counter()
        self._next = dict.fromkeys(TABLES, ANALYZE_FIRST)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.runs = 0
        """Refreshes started (for tests and stats)."""

    def wrote(self, rows: Mapping[str, int]) -> None:
        """Counts rows written per table (tables outside `TABLES` are ignored)."""
        with self._lock:
            self._written.update({t: n for t, n in rows.items() if t in self._next})
            if self._thread is not None and self._thread.is_alive():
                return  # counted: the next write after this refresh starts the one that is due
            due = [t for t in TABLES if self._written[t] >= self._next[t]]
            if not due:
                return
            for t in due:
                self._next[t] = 2 * self._written[t]
            self.runs += 1
            self._thread = threading.Thread(target=self._run, args=(due,), name="hippograph-pg-analyze", daemon=True)
            self._thread.start()

    def _run(self, tables: list[str]) -> None:
        with contextlib.suppress(Exception):  # housekeeping: autovacuum still refreshes them
            self._analyze(tables)

    def close(self) -> None:
        """Waits for a refresh under way (it holds one of the pool's connections)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
