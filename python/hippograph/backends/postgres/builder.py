"""`IndexBuilder`: builds and calibrates a repo's server-side HNSW indexes in a background thread.

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
from .search import ServerSearch
from .tx import Conn

__all__ = ["RECHECK", "IndexBuilder"]

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


def connector(dsn: str, kwargs: Mapping[str, Any], configure: Callable[[Conn], None]) -> Callable[[], Conn]:
    """Opens a configured connection like the pool's."""

    def connect() -> Conn:
        conn: Conn = psycopg.connect(dsn, **kwargs)
        configure(conn)
        return conn

    return connect
