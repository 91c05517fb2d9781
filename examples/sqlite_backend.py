"""A complete hippograph backend on the standard library's `sqlite3`.

It is the worked example of docs/custom-backends.md and passes the public
conformance suite (`hippograph.testing.BackendConformance`), including the
multi-process case. What it shows:

- every mutating call is one SQLite transaction (`BEGIN IMMEDIATE` takes the
  database's write lock up front, so concurrent writers queue instead of
  failing half-way);
- `commit_ingestion`'s compare-and-set rests on the PRIMARY KEY of the
  ingestion table: `INSERT ... ON CONFLICT DO NOTHING`, then the stored row is
  read in the same transaction. No read-then-write in Python;
- records are stored with `hippograph.graph.codec` (versioned msgpack, never pickle);
- candidates are scored by `hippograph.graph.recall.score_nodes` on the Rust core.
  This example keeps no derived index, so each query loads the requested types
  (fine for thousands of nodes; the built-in LMDB backend keeps a cache);
- one optional method beyond the protocol, `modify_metadata`, which `Repo`
  uses for access counts and rewards: its read-modify-write runs in one
  transaction, so concurrent processes never lose each other's updates.

Every failure of SQLite itself surfaces as `StorageError`, and a call that
raises has rolled back whatever it wrote.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from hippograph.engine.checks import check_id
from hippograph.errors import StorageError, ValidationError
from hippograph.graph import codec
from hippograph.graph.changeset import Changeset, check_changeset, normalised_links
from hippograph.graph.model import (
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    as_edge_type,
    as_node_types,
)
from hippograph.graph.protocol import existing_receipt
from hippograph.graph.recall import score_nodes
from hippograph.graph.value import ValueFunctionConfig

SCHEMA = """
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, type TEXT NOT NULL, record BLOB NOT NULL, embedding BLOB);
CREATE INDEX IF NOT EXISTS nodes_by_type ON nodes (type, id);
CREATE TABLE IF NOT EXISTS links (a TEXT NOT NULL, b TEXT NOT NULL, edge TEXT NOT NULL, PRIMARY KEY (a, edge, b));
CREATE INDEX IF NOT EXISTS links_by_b ON links (b);
CREATE TABLE IF NOT EXISTS meta (id TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS ingestion (source_id TEXT PRIMARY KEY, record BLOB NOT NULL);
"""


def _ids(ids: Iterable[str]) -> list[str]:
    """A list of valid ids; a bare str is refused (it would iterate its characters)."""
    if isinstance(ids, (str, bytes)):
        raise ValidationError(f"expected a collection of ids, got a single {type(ids).__name__}")
    try:
        return [check_id(i) for i in ids]
    except TypeError:
        raise ValidationError(f"expected a collection of ids, got {type(ids).__name__}") from None


def _check_metadata(updates: Mapping[str, NodeMetadata]) -> list[tuple[str, bytes]]:
    """Rows for the meta table; any bad entry refuses the whole update."""
    if not isinstance(updates, Mapping):
        raise ValidationError("metadata updates must be a mapping of id to NodeMetadata")
    rows = []
    for node_id, meta in updates.items():
        if not isinstance(meta, NodeMetadata):
            raise ValidationError(f"metadata of {node_id!r} must be NodeMetadata, got {type(meta).__name__}")
        rows.append((check_id(node_id, "metadata id"), codec.encode_meta(meta)))
    return rows


class SQLiteBackend:
    """hippograph's `GraphBackend` contract on one SQLite file (WAL mode)."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._closed = False
        try:
            # isolation_level=None: no implicit transactions, `_tx` issues BEGIN/COMMIT itself.
            self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {str(self.path)!r}: {exc}", operation="open") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            self._db.close()
            raise StorageError(f"cannot open {str(self.path)!r}: {exc}", operation="open") from None

    # -- plumbing --------------------------------------------------------------

    @contextmanager
    def _tx(self, operation: str, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction; IMMEDIATE for writes so the write lock is taken first.

        The connection is shared by the threads of this process, so the lock
        lets one call at a time use it. Any exception rolls back; an SQLite
        failure becomes a `StorageError` naming the operation.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the backend is closed", operation=operation)
            try:
                self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                finally:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise StorageError(f"{operation} failed in {str(self.path)!r}: {exc}", operation=operation) from exc

    def _dim(self, db: sqlite3.Connection) -> int | None:
        row = db.execute("SELECT value FROM info WHERE key = 'dim'").fetchone()
        return None if row is None else int(row[0])

    def _exists(self, db: sqlite3.Connection, node_id: str) -> bool:
        return db.execute("SELECT 1 FROM nodes WHERE id = ?", (node_id,)).fetchone() is not None

    def _node(self, db: sqlite3.Connection, node_id: str) -> Node | None:
        row = db.execute("SELECT record, embedding FROM nodes WHERE id = ?", (node_id,)).fetchone()
        if row is None:
            return None
        links: dict[EdgeType, set[str]] = {}
        for b, edge in db.execute("SELECT b, edge FROM links WHERE a = ?", (node_id,)):
            links.setdefault(EdgeType(edge), set()).add(b)
        embedding = None if row[1] is None else codec.decode_embedding(row[1])
        return codec.decode_node(row[0], node_id, embedding, {e: frozenset(i) for e, i in links.items()})

    def _meta(self, db: sqlite3.Connection, node_id: str) -> NodeMetadata | None:
        row = db.execute("SELECT record FROM meta WHERE id = ?", (node_id,)).fetchone()
        return None if row is None else codec.decode_meta(row[0])

    def _unlink(self, db: sqlite3.Connection, node_id: str) -> None:
        db.execute("DELETE FROM links WHERE a = ? OR b = ?", (node_id, node_id))

    def _apply(self, db: sqlite3.Connection, cs: Changeset) -> None:
        dim = check_changeset(cs, self._dim(db))
        for node in cs.additions:
            self._unlink(db, node.id)
            emb = None if node.embedding is None else codec.encode_embedding(node.embedding)
            db.execute(
                "INSERT OR REPLACE INTO nodes (id, type, record, embedding) VALUES (?, ?, ?, ?)",
                (node.id, node.node_type.value, codec.encode_node(node), emb),
            )
        for a, b, edge in normalised_links(cs):
            if a != b and self._exists(db, a) and self._exists(db, b):
                db.executemany(
                    "INSERT OR IGNORE INTO links (a, b, edge) VALUES (?, ?, ?)",
                    [(a, b, edge.value), (b, a, edge.value)],
                )
        db.executemany(
            "INSERT OR REPLACE INTO meta (id, record) VALUES (?, ?)",
            [(i, codec.encode_meta(m)) for i, m in cs.metadata.items()],
        )
        if dim is not None:
            db.execute("INSERT OR IGNORE INTO info (key, value) VALUES ('dim', ?)", (dim,))

    # -- writes ----------------------------------------------------------------

    def apply_changeset(self, cs: Changeset) -> None:
        check_changeset(cs, None)
        with self._tx("apply_changeset") as db:
            self._apply(db, cs)

    def delete_nodes(self, ids: Iterable[str]) -> None:
        wanted = _ids(ids)
        with self._tx("delete_nodes") as db:
            for node_id in wanted:
                self._unlink(db, node_id)
                db.execute("DELETE FROM nodes WHERE id = ?", (node_id,))

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        rows = _check_metadata(updates)
        with self._tx("update_metadata") as db:
            db.executemany("INSERT OR REPLACE INTO meta (id, record) VALUES (?, ?)", rows)

    def modify_metadata(
        self, ids: Iterable[str], fn: Callable[[str, NodeMetadata | None], NodeMetadata | None]
    ) -> None:
        """Optional extension: `fn(id, current)` → new metadata (None: keep), for existing nodes, in one transaction."""
        wanted = _ids(ids)
        with self._tx("modify_metadata") as db:
            updates = {}
            for node_id in wanted:
                if self._exists(db, node_id):
                    new = fn(node_id, self._meta(db, node_id))
                    if new is not None:
                        updates[node_id] = new
            db.executemany("INSERT OR REPLACE INTO meta (id, record) VALUES (?, ?)", _check_metadata(updates))

    def delete_metadata(self, ids: Iterable[str]) -> None:
        wanted = _ids(ids)
        with self._tx("delete_metadata") as db:
            db.executemany("DELETE FROM meta WHERE id = ?", [(i,) for i in wanted])

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        if not isinstance(record, IngestionRecord):
            raise ValidationError(f"expected an IngestionRecord, got {type(record).__name__}")
        check_changeset(cs, None)
        encoded = codec.encode_record(record)
        with self._tx("commit_ingestion") as db:
            inserted = db.execute(
                "INSERT INTO ingestion (source_id, record) VALUES (?, ?) ON CONFLICT (source_id) DO NOTHING",
                (record.source_id, encoded),
            ).rowcount
            if inserted == 1:
                self._apply(db, cs)
                return Outcome.INSERTED, record.receipt
            row = db.execute("SELECT record FROM ingestion WHERE source_id = ?", (record.source_id,)).fetchone()
            stored = codec.decode_record(record.source_id, row[0])
        return Outcome.EXISTING, existing_receipt(stored, record.payload_digest, record.fingerprint_version)

    def delete_ingestion(self, source_id: str) -> bool:
        check_id(source_id, "source_id")
        with self._tx("delete_ingestion") as db:
            return db.execute("DELETE FROM ingestion WHERE source_id = ?", (source_id,)).rowcount == 1

    # -- reads -----------------------------------------------------------------

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: ValueFunctionConfig | Mapping[str, Any] | None,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> list[tuple[Node, float]]:
        with self._tx("find_candidates", write=False) as db:

            def load(node_type: NodeType) -> Iterator[tuple[Node, NodeMetadata | None]]:
                ids = [r[0] for r in db.execute("SELECT id FROM nodes WHERE type = ?", (node_type.value,))]
                for node_id in ids:
                    node = self._node(db, node_id)
                    if node is not None:
                        yield node, self._meta(db, node_id)

            return score_nodes(load, types, query, tags, value_function, now=now, dimension=self._dim(db))

    def get_node(self, node_id: str) -> Node | None:
        check_id(node_id)
        with self._tx("get_node", write=False) as db:
            return self._node(db, node_id)

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        wanted = _ids(ids)
        edge = None if edge_type is None else as_edge_type(edge_type)
        with self._tx("get_linked_nodes", write=False) as db:
            found: set[str] = set()
            for node_id in wanted:
                rows = db.execute("SELECT b, edge FROM links WHERE a = ?", (node_id,))
                found |= {b for b, e in rows if edge is None or e == edge.value}
            return [n for n in (self._node(db, i) for i in sorted(found)) if n is not None]

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        wanted = list(dict.fromkeys(as_node_types(types)))
        with self._tx("get_nodes_by_type", write=False) as db:
            out: list[Node] = []
            for node_type in wanted:
                ids = [r[0] for r in db.execute("SELECT id FROM nodes WHERE type = ?", (node_type.value,))]
                out += [n for n in (self._node(db, i) for i in sorted(ids)) if n is not None]
            return out

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        wanted = _ids(ids)
        with self._tx("get_metadata", write=False) as db:
            found = {i: self._meta(db, i) for i in wanted}
            return {i: m for i, m in found.items() if m is not None}

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        check_id(source_id, "source_id")
        with self._tx("get_ingestion", write=False) as db:
            row = db.execute("SELECT record FROM ingestion WHERE source_id = ?", (source_id,)).fetchone()
            return None if row is None else codec.decode_record(source_id, row[0])

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
