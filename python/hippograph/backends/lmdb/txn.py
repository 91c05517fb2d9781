"""Typed views over one LMDB transaction.

`_Txn` reads and writes the named databases by id (long ids through ``longids``);
`_Writer` plans one write transaction's graph changes in the Rust core and
writes them at `finish`, so every mutating call logs exactly what it changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from ..._core import GraphWrite, node_vector
from ...engine.codec import to_us
from ...errors import StorageError
from ...graph import codec
from ...graph.changeset import Changeset
from ...graph.model import EdgeType, Node, NodeMetadata, as_edge_type
from .._base import ReadOnlyLinks
from . import layout
from .layout import _LONG, _key, _number, _vector_key

Txn = Any

MODEL = (codec.NODE_KINDS, codec.EDGE_CODES, datetime, UTC, to_us, codec.encode_meta, as_edge_type)
"""What the Rust core's `GraphWrite` reads the graph model by: node kinds, edge codes, the UTC
datetimes it converts itself, and the Python conversions of anything else."""


class _Txn:
    """One transaction's view: typed accessors over the named databases."""

    def __init__(self, txn: Txn, dbs: Mapping[str, Any]) -> None:
        self.txn = txn
        self.dbs = dbs
        self._dim: tuple[int | None] | None = None
        """The dimension record, read once per transaction (every hydrated node checks against it)."""

    def get(self, db: str, key: bytes) -> bytes | None:
        value = self.txn.get(key, db=self.dbs[db])
        return None if value is None else bytes(value)

    def put(self, db: str, key: bytes, value: bytes) -> None:
        if db == "info":
            self._dim = None
        self.txn.put(key, value, db=self.dbs[db])

    def delete(self, db: str, key: bytes) -> None:
        if db == "info":
            self._dim = None
        self.txn.delete(key, db=self.dbs[db])

    def items(self, db: str) -> Iterator[tuple[bytes, bytes]]:
        """Every record of `db` (none for ``vectors`` in a store, opened read-only, that has not got it)."""
        if db not in self.dbs:
            return
        with self.txn.cursor(db=self.dbs[db]) as cur:
            for k, v in cur:
                yield bytes(k), bytes(v)

    def id_of(self, key: bytes) -> str:
        """The id a key stands for (long ids are looked up in ``longids``)."""
        raw = key if not key.startswith(_LONG) else self.get("longids", key)
        if raw is None:
            raise StorageError(f"no id recorded for hashed key {key.hex()}", operation="decode")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise StorageError(f"corrupt key {key.hex()}: the id is not UTF-8", operation="decode") from None

    def remember(self, item_id: str) -> bytes:
        """The key of `item_id`, recording the full id first when the key is a hash."""
        key = _key(item_id)
        if key.startswith(_LONG):
            self.put("longids", key, item_id.encode("utf-8"))
        return key

    def seq(self) -> int:
        raw = self.get("info", b"seq")
        return 0 if raw is None else _number(raw, ">Q", "change counter")

    def dim(self) -> int | None:
        if self._dim is None:
            raw = self.get("info", b"dim")
            self._dim = (None if raw is None else _number(raw, ">I", "dimension record"),)
        return self._dim[0]

    def node(self, node_id: str) -> Node | None:
        """The stored node with its links, read-only (`_Cache` hands the same node to every caller)."""
        key = _key(node_id)
        data = self.get("nodes", key)
        if data is None:
            return None
        emb = self.embedding_of(key, data)
        links = codec.decode_links(self.get("links", key))
        embedding = None if emb is None else codec.decode_embedding(emb, self.dim())
        return codec.decode_node(data, node_id, embedding, ReadOnlyLinks({e: frozenset(i) for e, i in links.items()}))

    def embedding_of(self, key: bytes, data: bytes) -> bytes | None:
        """The stored embedding of the node at `key` whose record is `data` (`vector_place`)."""
        place = vector_place(key, data)
        if place is None:
            return None
        if place[0] == "vectors":
            self.vectors_db()
        return self.get(*place)

    def vectors_db(self) -> Any:
        """The ``vectors`` database; `StorageError` for a handle opened read-only on a format-1 store
        before a writer made it (its nodes must not read as having no embedding)."""
        db = self.dbs.get("vectors")
        if db is None:
            raise StorageError(
                "the store was upgraded to storage format 2 after this read-only handle opened it: open it again",
                operation="read",
            )
        return db

    def meta(self, node_id: str) -> NodeMetadata | None:
        data = self.get("meta", _key(node_id))
        return None if data is None else codec.decode_meta(data)

    def links(self, node_id: str) -> dict[EdgeType, set[str]]:
        return codec.decode_links(self.get("links", _key(node_id)))


def vector_place(key: bytes, data: bytes) -> tuple[str, bytes] | None:
    """Where the embedding of the node at `key` whose record is `data` is stored, as (database, key):
    in ``vectors`` under the number the record names, or, for a record written before numbers, in
    ``emb`` under `key`; None for a node without one."""
    number = node_vector(data)
    return ("vectors", _vector_key(number)) if number > 0 else ("emb", key) if number < 0 else None


class _Writer:
    """One write transaction's graph changes, planned by the Rust core (`_core.GraphWrite`):
    records encoded and links merged in one pass, nothing written before `finish`, which puts
    the final value of every key, the links, the dimension, the bumped change counter and its
    change-log entry (both ends of every link added or removed among the ids it lists: a cached
    node carries its links)."""

    def __init__(self, t: _Txn) -> None:
        self.t = t
        self.plan = GraphWrite.in_lmdb(t.txn, [t.dbs[name] for name in layout._DBS])

    def exists(self, node_id: str) -> bool:
        return self.plan.exists(node_id)

    def put_changeset(self, cs: Changeset) -> None:
        """The additions, then the links, then the metadata of a checked changeset."""
        self.plan.put_changeset(cs.additions, cs.links, cs.metadata, MODEL)

    def delete_node(self, node_id: str) -> None:
        self.plan.delete_node(node_id)

    def delete_meta(self, node_id: str) -> None:
        self.plan.delete_meta(node_id)

    def is_orphan(self, node_id: str) -> bool:
        return self.plan.is_orphan(node_id, codec.ORPHAN_CODES)

    def put_metadata(self, metadata: Mapping[str, NodeMetadata]) -> None:
        self.plan.put_metadata(dict(metadata), MODEL)

    def finish(self, dim: int | None) -> None:
        t = self.t
        puts, deletes = self.plan.finish(t.dim(), dim, t.seq(), layout.LOG_KEEP)
        txn, dbs, names = t.txn, t.dbs, layout._DBS
        t._dim = None
        for code, key in deletes:
            txn.delete(key, db=dbs[names[code]])
        for code, items in puts:  # a database's puts in key order, in one call when several
            name = names[code]
            db = dbs[name]
            if name in _APPENDED:
                with txn.cursor(db=db) as cur:
                    at = _appended_from(cur, items)
                    if at:
                        cur.putmulti(items[:at])
                    if at < len(items):
                        cur.putmulti(items[at:], append=True)
            elif len(items) > 2:
                with txn.cursor(db=db) as cur:
                    cur.putmulti(items)
            else:
                for key, value in items:
                    txn.put(key, value, db=db)


_APPENDED = frozenset({"log", "vectors"})
"""The databases whose keys grow (the change log's counter, the embeddings' numbers): their puts
above the last key are appended, so a full last page starts a new one instead of being split in
half (two 384-d embeddings a page, not one)."""


def _appended_from(cur: Any, items: list[tuple[bytes, bytes]]) -> int:
    """Where the keys of `items` (in key order) pass every key the cursor's database holds: from there
    they go in with LMDB's append (a log entry deleted and written again in one write, or a
    damaged counter, keeps the rest an ordinary put)."""
    if not cur.last():
        return 0
    last = cur.key()
    at = len(items)
    while at and items[at - 1][0] > last:
        at -= 1
    return at
