"""A scoped-store backend (`hippograph.EntryBackend`) on the standard library's `sqlite3` and `json`.

The worked example of docs/custom-backends.md, section "Holding a scoped store"; it passes
`hippograph.testing.PersistentStoreConformance`. What it shows:

- a write is one SQLite transaction (`BEGIN IMMEDIATE` takes the write lock up front, so writers
  queue instead of failing half-way); the function the store hands over runs inside it, and if it
  raises the transaction rolls back: nothing is written;
- a read is one deferred transaction, which in WAL mode sees one snapshot for as long as it lasts;
- a subtree is a range of the `scope_key` column: each segment's UTF-8 bytes then a NUL (segments
  hold no NUL), so the scopes under a prefix are exactly the keys between it and it + 0xFF (a byte
  UTF-8 never uses);
- every write that changes something bumps the change counter and logs the refs it changed, in the
  same transaction, so another process's store catches up;
- entries are stored as JSON text (the vector as a list of floats, times in ISO 8601): no pickle.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from hippograph.engine.checks import as_embedding
from hippograph.errors import StorageError
from hippograph.store import Entry, EntryTxn, Scope

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (scope_key BLOB NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL,
                                    PRIMARY KEY (scope_key, key));
CREATE TABLE IF NOT EXISTS elog (seq INTEGER PRIMARY KEY, refs TEXT NOT NULL);
"""


def scope_key(scope: Scope) -> bytes:
    return b"".join(s.encode() + b"\0" for s in scope)


def encode(e: Entry) -> str:
    def when(t: datetime | None) -> str | None:
        return None if t is None else t.isoformat()

    doc = {
            "scope": list(e.scope), "key": e.key, "text": e.text, "value": e.value, "kind": e.kind,
            "importance": e.importance, "status": e.status, "access_count": e.access_count,
            "embedding": None if e.embedding is None else [float(x) for x in e.embedding],
            "created_at": when(e.created_at), "updated_at": when(e.updated_at),
            "accessed_at": when(e.accessed_at), "expires_at": when(e.expires_at),
    }  # fmt: skip
    return json.dumps(doc)


def decode(doc: str) -> Entry:
    d: dict[str, Any] = json.loads(doc)
    times = {k: None if d[k] is None else datetime.fromisoformat(d[k]) for k in
             ("created_at", "updated_at", "accessed_at", "expires_at")}  # fmt: skip
    emb = None if d["embedding"] is None else as_embedding(d["embedding"])
    return Entry(
        scope=tuple(d["scope"]), key=d["key"], text=d["text"], value=d["value"], kind=d["kind"],
        importance=d["importance"], embedding=emb, status=d["status"], access_count=d["access_count"],
        created_at=times["created_at"], updated_at=times["updated_at"],  # type: ignore[arg-type]
        accessed_at=times["accessed_at"], expires_at=times["expires_at"],  # type: ignore[arg-type]
    )  # fmt: skip


class _Txn:
    """`EntryTxn` over one SQLite transaction."""

    def __init__(self, db: sqlite3.Connection, writable: bool) -> None:
        self.db = db
        self.writable = writable
        self.changed: set[tuple[Scope, str]] = set()

    def get(self, scope: Scope, key: str) -> Entry | None:
        row = self.db.execute("SELECT doc FROM entries WHERE scope_key = ? AND key = ?", (scope_key(scope), key))
        found = row.fetchone()
        return None if found is None else decode(found[0])

    def scan(self, scope: Scope) -> Iterator[Entry]:
        low = scope_key(scope)
        rows = self.db.execute("SELECT doc FROM entries WHERE scope_key >= ? AND scope_key < ?", (low, low + b"\xff"))
        return (decode(doc) for (doc,) in rows.fetchall())

    def _check(self) -> None:
        if not self.writable:
            raise StorageError("a read transaction cannot write", operation="entry_read")

    def put(self, entry: Entry) -> None:
        self._check()
        self.db.execute(
            "INSERT OR REPLACE INTO entries (scope_key, key, doc) VALUES (?, ?, ?)",
            (scope_key(entry.scope), entry.key, encode(entry)),
        )
        self.changed.add(entry.ref)

    def delete(self, scope: Scope, key: str) -> bool:
        self._check()
        gone = self.db.execute("DELETE FROM entries WHERE scope_key = ? AND key = ?", (scope_key(scope), key))
        if gone.rowcount:
            self.changed.add((scope, key))
        return gone.rowcount > 0

    def changes(self, since: int) -> tuple[int, list[tuple[Scope, str]] | None]:
        seq = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM elog").fetchone()[0]
        if since >= seq:
            return seq, []
        if since < 0:
            return seq, None
        refs: list[tuple[Scope, str]] = []
        for (doc,) in self.db.execute("SELECT refs FROM elog WHERE seq > ? ORDER BY seq", (since,)):
            refs.extend((tuple(s), k) for s, k in json.loads(doc))
        return seq, refs

    def log(self) -> None:
        if self.changed:
            refs = json.dumps([[list(s), k] for s, k in sorted(self.changed)])
            self.db.execute("INSERT INTO elog (refs) VALUES (?)", (refs,))


class SQLiteStoreBackend:
    """Entries of a scoped store in one SQLite file (WAL mode; several processes may share it)."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        try:
            self.db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = FULL")
            self.db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {str(path)!r}: {exc}", operation="open") from None
        self.lock = threading.Lock()

    def _run(self, begin: str, fn: Callable[[_Txn], T], writable: bool, operation: str) -> T:
        with self.lock:
            try:
                self.db.execute(begin)
            except sqlite3.Error as exc:
                raise StorageError(str(exc), operation=operation) from None
            try:
                t = _Txn(self.db, writable)
                result = fn(t)
                t.log()
                self.db.execute("COMMIT")
                return result
            except BaseException as exc:
                self.db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(str(exc), operation=operation) from None
                raise

    def entry_write(self, fn: Callable[[EntryTxn], T]) -> T:
        return self._run("BEGIN IMMEDIATE", fn, True, "entry_write")

    def entry_read(self, fn: Callable[[EntryTxn], T]) -> T:
        return self._run("BEGIN", fn, False, "entry_read")

    def close(self) -> None:
        with self.lock:
            self.db.close()
