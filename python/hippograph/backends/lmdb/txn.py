"""Typed views over one LMDB transaction.

`_Txn` reads and writes the named databases by id (long ids through ``longids``);
`_Writer` gathers one write transaction's link edits and the ids it touched,
then `finish` writes the links, the dimension, the bumped change counter and
its change-log entry, so every mutating call logs exactly what it changed
(both ends of every link it added or removed among them: a cached node
carries its links).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

import msgpack

from ...errors import StorageError
from ...graph import codec
from ...graph.model import ORPHAN_TYPES, EdgeType, Node, NodeMetadata
from .._base import ReadOnlyLinks
from . import layout
from .layout import _LONG, _key, _number, _seq_key

Txn = Any


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
        emb = self.get("emb", key)
        links = codec.decode_links(self.get("links", key))
        embedding = None if emb is None else codec.decode_embedding(emb, self.dim())
        return codec.decode_node(data, node_id, embedding, ReadOnlyLinks({e: frozenset(i) for e, i in links.items()}))

    def meta(self, node_id: str) -> NodeMetadata | None:
        data = self.get("meta", _key(node_id))
        return None if data is None else codec.decode_meta(data)

    def links(self, node_id: str) -> dict[EdgeType, set[str]]:
        return codec.decode_links(self.get("links", _key(node_id)))


class _Writer:
    """Accumulates one write transaction's link edits and change-log ids."""

    def __init__(self, t: _Txn) -> None:
        self.t = t
        self.touched: set[str] = set()
        self._links: dict[str, dict[EdgeType, set[str]]] = {}
        self._exists: dict[str, bool] = {}
        """Ids whose node this writer read, put or deleted: each link asks for both ends."""

    def links(self, node_id: str) -> dict[EdgeType, set[str]]:
        if node_id not in self._links:
            self._links[node_id] = self.t.links(node_id)
        return self._links[node_id]

    def exists(self, node_id: str) -> bool:
        known = self._exists.get(node_id)
        if known is None:
            known = self._exists[node_id] = self.t.get("nodes", _key(node_id)) is not None
        return known

    def unlink_all(self, node_id: str) -> None:
        for edge, others in self.links(node_id).items():
            for other in others:
                back = self.links(other).get(edge)
                if back is not None and node_id in back:
                    back.discard(node_id)
                    self.touched.add(other)
        self._links[node_id] = {}

    def put_node(self, node: Node) -> None:
        key = self.t.remember(node.id)
        if self.exists(node.id):
            self.unlink_all(node.id)
        self.t.put("nodes", key, codec.encode_node(node))
        self._exists[node.id] = True
        if node.embedding is None:
            self.t.delete("emb", key)
        else:
            self.t.put("emb", key, codec.encode_embedding(node.embedding))
        self._links[node.id] = {}
        self.touched.add(node.id)

    def link(self, a: str, b: str, edge: EdgeType) -> None:
        if a != b and self.exists(a) and self.exists(b):
            for one, other in ((a, b), (b, a)):
                ids = self.links(one).setdefault(edge, set())
                if other not in ids:
                    ids.add(other)
                    self.touched.add(one)

    def delete_node(self, node_id: str) -> None:
        if not self.exists(node_id):
            return
        self.unlink_all(node_id)
        key = _key(node_id)
        for db in ("nodes", "emb", "links"):
            self.t.delete(db, key)
        self._exists[node_id] = False
        self._links.pop(node_id, None)
        self.touched.add(node_id)

    def delete_meta(self, node_id: str) -> None:
        if self.t.get("meta", _key(node_id)) is not None:
            self.t.delete("meta", _key(node_id))
            self.touched.add(node_id)

    def is_orphan(self, node_id: str) -> bool:
        data = self.t.get("nodes", _key(node_id))
        if data is None or codec.node_type_of(data) not in ORPHAN_TYPES:
            return False
        return not any(self.links(node_id).values())

    def put_meta(self, encoded: Mapping[str, bytes]) -> None:
        for node_id, data in encoded.items():
            self.t.put("meta", self.t.remember(node_id), data)
            self.touched.add(node_id)

    def finish(self, dim: int | None) -> None:
        for node_id, links in self._links.items():
            if self.exists(node_id):
                self.t.put("links", _key(node_id), codec.encode_links(links))
        if dim is not None and self.t.dim() is None:
            self.t.put("info", b"dim", struct.pack(">I", dim))
        if self.touched:
            seq = self.t.seq() + 1
            self.t.put("info", b"seq", _seq_key(seq))
            self.t.put("log", _seq_key(seq), msgpack.packb(sorted(self.touched)))
            if seq > layout.LOG_KEEP:
                self.t.delete("log", _seq_key(seq - layout.LOG_KEEP))
