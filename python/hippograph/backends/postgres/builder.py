"""`IndexBuilder`: builds and calibrates a repo's server-side HNSW indexes in a background thread;
`Settler`: indexes the rows writes leave pending, in another.

The thread works on a connection of its own (an index build takes minutes per million rows and
must not hold a pooled connection). `due` starts it again every `RECHECK` seconds, for types that
grew past ``ann.min_nodes`` or by a quarter; `close` stops it between steps and cancels the
statement it is running.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from ...engine.vector_index import AnnConfig
from . import upkeep
from .search import ServerSearch
from .tx import Conn

__all__ = ["RECHECK", "IndexBuilder", "Settler"]

RECHECK = 300.0
"""Seconds between a server-side search process's checks for indexes to build or calibrate."""


class IndexBuilder:
    def __init__(
        self,
        search: ServerSearch,
        ann: AnnConfig,
        connect: Callable[[], Conn],
        name: str,
    ) -> None:
        self.search = search
        self.ann = ann
        self.connect = connect
        self.name = name
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.conns: list[Conn] = []
        self.next_check = 0.0

    def _work(self) -> None:
        with contextlib.suppress(psycopg.Error), self.connect() as conn:
            self.conns.append(conn)
            if not self.stop.is_set():
                self.search.prepare(conn, self.ann, stop=self.stop)

    def start(self) -> None:
        """Starts the thread unless it runs (or the builder is closed)."""
        with self.lock:
            if not self.stop.is_set() and (self.thread is None or not self.thread.is_alive()):
                self.conns = []
                self.thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self.thread.start()
            self.next_check = time.monotonic() + RECHECK

    def due(self) -> None:
        """Starts the thread when the next check is due."""
        if time.monotonic() >= self.next_check:
            self.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stops the thread: it checks `stop` between statements, and the running one is cancelled."""
        self.stop.set()
        with self.lock:
            thread, conns = self.thread, self.conns
        deadline = time.monotonic() + timeout
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            for conn in list(conns):
                with contextlib.suppress(psycopg.Error):
                    conn.cancel()
            thread.join(timeout=0.2)


class Settler:
    """Inserts the repo's pending rows into its HNSW indexes (`upkeep.settle`) on a connection of its
    own, woken by each write (`nudge`): the writer has committed without those inserts, and queries
    scan the rows exactly until they settle. A settle starts once writes pause for `QUIET` seconds
    (at most `LONGEST` after the write that woke it), so a burst of writes commits without the
    index inserts competing with it for the server's cores. The thread ends after `IDLE` seconds
    without a write."""

    IDLE = 30.0
    QUIET = 0.05
    LONGEST = 1.0

    def __init__(self, schema: str, repo: str, connect: Callable[[], Conn], name: str) -> None:
        self.schema = schema
        self.repo = repo
        self.connect = connect
        self.name = name
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.conn: Conn | None = None

    def nudge(self) -> None:
        """Asks for a settle soon; starts the thread unless it runs (or the settler is closed)."""
        self.wake.set()
        with self.lock:
            if not self.stop.is_set() and self.thread is None:
                self.thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self.thread.start()

    def _work(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.wake.wait(self.IDLE):
                    with self.lock:
                        if not self.wake.is_set():
                            self.thread = None
                            return
                self.wake.clear()
                woken = time.monotonic()
                while not self.stop.is_set() and time.monotonic() - woken < self.LONGEST:
                    if not self.wake.wait(self.QUIET):
                        break
                    self.wake.clear()
                if self.conn is None:
                    self.conn = self.connect()
                upkeep.settle(self.conn, self.schema, self.repo, self.stop)
        except psycopg.Error:
            with self.lock:
                self.thread = None
        finally:
            conn, self.conn = self.conn, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.close()

    def close(self, timeout: float = 10.0) -> None:
        """Stops the thread; the statement it runs is cancelled (a chunk rolls back and stays pending)."""
        self.stop.set()
        self.wake.set()
        with self.lock:
            thread = self.thread
        deadline = time.monotonic() + timeout
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            conn = self.conn
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    conn.cancel()
            thread.join(timeout=0.2)


def connector(dsn: str, kwargs: Mapping[str, Any], configure: Callable[[Conn], None]) -> Callable[[], Conn]:
    """Opens a configured connection like the pool's."""

    def connect() -> Conn:
        conn: Conn = psycopg.connect(dsn, **kwargs)
        configure(conn)
        return conn

    return connect
