"""`LMDB`: the durable, multi-process embedded default backend.

Layout: one LMDB environment per repo directory, with named databases

- ``info``: ``magic``, ``format`` (storage format version), ``dim``, ``seq``;
- ``nodes``, ``emb``, ``links``, ``meta``: keyed by node id (UTF-8), encoded
  by `hippograph.codec`; embeddings are raw little-endian float32;
- ``ingest``: ingestion records keyed by source id;
- ``log``: the change log, ``seq`` (8-byte big-endian) → the ids a write
  transaction touched. Only the newest `LOG_KEEP` entries are kept.

Every mutating call is exactly one write transaction, and LMDB admits one
writer at a time across processes, so `commit_ingestion`'s compare-and-set is
correct between processes. Each write bumps ``seq`` and logs what it touched;
a process's derived scoring cache (`TypeColumns` per type) catches up from the
log on its next read, or rebuilds when it fell further behind than the log
reaches. Candidates are hydrated from the same read transaction the cache was
checked against, so a node deleted by anyone is never returned.

Vector index: with `ann` (default `AnnConfig()`), a node type holding more
than `ann.min_nodes` nodes answers non-exact queries from an in-process HNSW
graph built on first use and kept in step with the change log; it is derived
data like the rest of the cache. `close()` (and `save_vector_index()`) saves
each built graph under ``<store>/ann/`` (see `hippograph.ann` for the files and
the checks); a process's first non-exact query of a type loads the saved graph
instead of building it, only when every check passes: same format, dim,
parameters and hnswlib version, both SHA-256 sums, and a saved change ``seq``
equal to the store's or still covered by the change log (the logged ids are
then replayed). Corrupt, truncated, foreign or stale files are never loaded;
the graph is built afresh. ``vector_index_stats()`` reports ``loaded`` per type.

Durability: ``"sync"`` (default) returns only after the commit is fsynced;
``"fast"`` skips fsync: a process crash loses nothing, but an OS crash or power
loss can lose the latest commits (never corrupt older ones).

LMDB rules this class follows: an environment is not used across ``fork()``
(a call in a forked child raises `StorageError`; open the store again there);
read transactions last one call; the map grows (doubling) when full, with no
transaction of this process open while it does; network file systems are not
supported.

Damaged files: LMDB checksums nothing and trusts every page it reads, so bytes
damaged inside ``data.mdb`` could crash the process (SIGSEGV, assertion abort).
Before LMDB reads any tree, opening walks every page of the current snapshot
with `hippograph._core.lmdb_check` (bounds-checked, over a read-only ``mmap``
of the file, inside a read transaction so no writer reuses the snapshot's
pages meanwhile) and refuses a damaged store with ``StorageError`` naming the
page; `verify_storage` walks it again. Damage inside a record's value surfaces
when it is decoded, as ``StorageError(operation="decode")``. The walk costs
about 30 ms per 450 MiB of cached file.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import stat
import struct
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import lmdb
import msgpack
import numpy as np

from .. import _core
from ..engine import vector_files
from ..engine.checks import Progress, check_id
from ..engine.columns import (
    ColumnsCopy,
    TypeColumns,
    retire,
    stop_background_builds,
)
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from ..errors import HippographError, IngestionError, StorageError, ValidationError
from ..graph import codec
from ..graph.changeset import Changeset, check_changeset, normalised_links, resulting_dim
from ..graph.model import (
    ORPHAN_TYPES,
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    as_edge_type,
    as_node_type,
    as_node_types,
)
from ..graph.recall import build_vector_indexes, find_candidates, usage_of
from ..graph.value import ValueFunctionConfig
from ._base import BackendBase, RWLock, check_ids, check_metadata_updates, check_record

__all__ = ["LMDB"]

T = TypeVar("T")
Txn = Any

MAGIC = b"hippograph-lmdb"
STORAGE_FORMAT = 1
LOG_KEEP = 50_000
DEFAULT_MAP_SIZE = 1 << 30
_DBS = ("info", "nodes", "emb", "links", "meta", "ingest", "log", "longids")
# LMDB keys hold at most 511 bytes, ids up to 512: longer ids are keyed by a
# hash behind a 0xFF byte (never the first byte of UTF-8) and their full text
# is kept in ``longids``.
MAX_PLAIN_KEY = 480
_LONG = b"\xff"
# Snapshots to try when writers keep committing past the one being checked.
_CHECK_ATTEMPTS = 10


def _key(node_id: str) -> bytes:
    raw = node_id.encode("utf-8")
    return raw if len(raw) <= MAX_PLAIN_KEY else _LONG + hashlib.sha256(raw).digest()


def _seq_key(seq: int) -> bytes:
    return struct.pack(">Q", seq)


def _number(raw: bytes, fmt: str, what: str) -> int:
    """A fixed-size big-endian integer (an ``info`` value or a change-log key)."""
    if len(raw) != struct.calcsize(fmt):
        raise StorageError(f"corrupt {what}: {len(raw)} bytes", operation="decode")
    return int(struct.unpack(fmt, raw)[0])


def _logged_ids(raw: bytes) -> list[str]:
    """The ids one change-log entry lists."""
    try:
        ids = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise StorageError(f"corrupt change log entry: {exc}", operation="decode") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise StorageError("corrupt change log entry: not a list of ids", operation="decode")
    return ids


def _check_data_file(path: Path, txnid: int) -> dict[str, Any] | None:
    """`_core.lmdb_check` over a read-only mapping of `path` (not LMDB's map, which trusts every page)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return _core.lmdb_check(b"", txnid)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _core.lmdb_check(view, txnid)


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
        key = _key(node_id)
        data = self.get("nodes", key)
        if data is None:
            return None
        emb = self.get("emb", key)
        links = codec.decode_links(self.get("links", key))
        embedding = None if emb is None else codec.decode_embedding(emb, self.dim())
        return codec.decode_node(data, node_id, embedding, {e: frozenset(i) for e, i in links.items()})

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

    def links(self, node_id: str) -> dict[EdgeType, set[str]]:
        if node_id not in self._links:
            self._links[node_id] = self.t.links(node_id)
        return self._links[node_id]

    def exists(self, node_id: str) -> bool:
        return self.t.get("nodes", _key(node_id)) is not None

    def unlink_all(self, node_id: str) -> None:
        for edge, others in self.links(node_id).items():
            for other in others:
                self.links(other).get(edge, set()).discard(node_id)
        self._links[node_id] = {}

    def put_node(self, node: Node) -> None:
        key = self.t.remember(node.id)
        if self.exists(node.id):
            self.unlink_all(node.id)
        self.t.put("nodes", key, codec.encode_node(node))
        if node.embedding is None:
            self.t.delete("emb", key)
        else:
            self.t.put("emb", key, codec.encode_embedding(node.embedding))
        self._links[node.id] = {}
        self.touched.add(node.id)

    def link(self, a: str, b: str, edge: EdgeType) -> None:
        if a != b and self.exists(a) and self.exists(b):
            self.links(a).setdefault(edge, set()).add(b)
            self.links(b).setdefault(edge, set()).add(a)

    def delete_node(self, node_id: str) -> None:
        if not self.exists(node_id):
            return
        self.unlink_all(node_id)
        key = _key(node_id)
        for db in ("nodes", "emb", "links"):
            self.t.delete(db, key)
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
            if seq > LOG_KEEP:
                self.t.delete("log", _seq_key(seq - LOG_KEEP))


_ADOPT_TRIES = 5
"""Snapshots a background adoption tries before giving up on a cache that writers keep moving."""


class _Cache:
    """This process's derived scoring state, valid as of change `seq`.

    `ann_dir` (None: no persistence) holds the saved HNSW graphs; each type's
    is tried once (`load_saved`) when a non-exact query first needs it.
    """

    def __init__(
        self,
        ann: AnnConfig | None,
        ann_dir: Path | None,
        lock: RWLock,
        load_saved: Callable[[TypeColumns, threading.Event], bool] | None = None,
    ) -> None:
        self.seq = -1
        self.ann = ann
        self.ann_dir = ann_dir if ann is not None else None
        self.ann_tried: set[NodeType] = set()
        self.lock = lock
        self.load_saved_in_background = load_saved
        self.index: dict[NodeType, TypeColumns] = self._new_indexes()
        self.retired: list[threading.Thread] = []
        """Builder threads of type indexes a rebuild replaced, joined on close."""
        self.type_of: dict[str, NodeType] = {}

    def _new_indexes(self) -> dict[NodeType, TypeColumns]:
        return {nt: TypeColumns(self.ann, self.lock, self.load_saved_in_background) for nt in NodeType}

    def refresh(self, t: _Txn) -> None:
        target = t.seq()
        if target <= self.seq:
            return
        changed = self._changed_since(t, self.seq, target) if self.seq >= 0 else None
        if changed is None:
            self._rebuild(t)
        else:
            for node_id in changed:
                self._reload(t, node_id)
        self.seq = target

    @staticmethod
    def _changed_since(t: _Txn, since: int, target: int) -> set[str] | None:
        """Ids the changes `since`+1 … `target` touched, or None when the log no longer reaches back."""
        if since < 0:
            return None
        changed: set[str] = set()
        for seq in range(since + 1, target + 1):
            raw = t.get("log", _seq_key(seq))
            if raw is None:
                return None
            changed.update(_logged_ids(raw))
        return changed

    def _reload(self, t: _Txn, node_id: str) -> None:
        key = _key(node_id)
        data = t.get("nodes", key)
        node_type = None if data is None else codec.node_type_of(data)
        emb = t.get("emb", key)
        embedding = None if emb is None or data is None else codec.decode_embedding(emb, t.dim())
        meta = t.get("meta", key)
        decoded_meta = None if meta is None else codec.decode_meta(meta)
        old = self.type_of.get(node_id)
        if old is not None and old == node_type and self._same_vector(self.index[old], node_id, embedding):
            # Metadata only (most log entries: recall's access counts): no HNSW delete-and-re-add churn.
            self.index[old].set_usage(node_id, usage_of(decoded_meta))
            return
        if old is not None:
            del self.type_of[node_id]
            self.index[old].remove(node_id)
        if node_type is None:
            return
        self.index[node_type].upsert(node_id, embedding, usage_of(decoded_meta))
        self.type_of[node_id] = node_type

    @staticmethod
    def _same_vector(index: TypeColumns, node_id: str, embedding: Any) -> bool:
        row = index.row.get(node_id)
        if row is None:
            return False
        held = index.matrix()[row]
        return not held.any() if embedding is None else bool(np.array_equal(held, embedding))

    def _rebuild(self, t: _Txn) -> None:
        self.retired = retire(self.index.values(), self.retired)
        self.index = self._new_indexes()
        self.type_of = {}
        self.ann_tried = set()
        for key, data in t.items("nodes"):
            node_id = t.id_of(key)
            self.type_of[node_id] = codec.node_type_of(data)
        embeddings = dict(t.items("emb"))
        metas = dict(t.items("meta"))
        dim = t.dim()
        for node_id, node_type in self.type_of.items():
            key = _key(node_id)
            emb = embeddings.get(key)
            meta = metas.get(key)
            self.index[node_type].upsert(
                node_id,
                None if emb is None else codec.decode_embedding(emb, dim),
                None if meta is None else usage_of(codec.decode_meta(meta)),
            )

    def wants_saved(self, types: object) -> list[NodeType]:
        """The requested types whose saved HNSW graph has not been tried yet and would be used now."""
        if self.ann_dir is None or self.ann is None:
            return []
        wanted: list[NodeType] = []
        for item in [types] if isinstance(types, str) else types if isinstance(types, Iterable) else []:
            try:
                node_type = NodeType(item)
            except ValueError:
                continue  # find_candidates reports it
            index = self.index[node_type]
            if node_type not in self.ann_tried and index.ann is None and len(index) > self.ann.min_nodes:
                wanted.append(node_type)
        return wanted

    def load_saved(self, t: _Txn, types: Iterable[NodeType]) -> None:
        """Adopts each type's saved HNSW graph if it passes every check (call with the cache fresh as of `t`)."""
        if self.ann_dir is None or self.ann is None or t.seq() != self.seq:
            return
        for node_type in types:
            index = self.index[node_type]
            if node_type in self.ann_tried or index.ann is not None or len(index) <= self.ann.min_nodes:
                continue
            self.ann_tried.add(node_type)
            index.ann = vector_files.load(
                index,
                self.ann,
                self.ann_dir,
                node_type.value,
                self.seq,
                lambda since: self._changed_since(t, since, self.seq),
            )
            if index.ann is not None:
                index.cancel_background_build()

    def save(self) -> list[str]:
        """Saves every built HNSW graph that differs from its files (call under the cache's read lock)."""
        if self.ann_dir is None:
            return []
        return [
            nt.value
            for nt, index in self.index.items()
            if index.ann is not None and vector_files.save(index.ann, self.ann_dir, nt.value, self.seq)
        ]


def _private_dir(path: Path) -> None:
    """Creates the store directory and any missing parent 0700 (a parent such as `.hippograph/`
    lists repo names); an existing empty directory becomes a store, so it is tightened too."""
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    try:
        for directory in reversed(missing):
            directory.mkdir(mode=0o700, exist_ok=True)
        if not path.is_dir():
            raise StorageError(f"{str(path)!r} is not a directory", operation="open")
        if path.stat().st_uid == os.geteuid():
            path.chmod(0o700)
    except OSError as exc:
        raise StorageError(f"cannot create store directory {str(path)!r}: {exc}", operation="open") from None


class LMDB(BackendBase):
    """The embedded default backend; see the module docstring for the layout."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Literal["sync", "fast"] = "sync",
        map_size: int = DEFAULT_MAP_SIZE,
        readonly: bool = False,
        ann: AnnConfig | None = DEFAULT_ANN,
    ) -> None:
        if durability not in ("sync", "fast"):
            raise ValidationError(f"durability must be 'sync' or 'fast', got {durability!r}")
        if isinstance(map_size, bool) or not isinstance(map_size, int) or not 1 << 16 <= map_size <= 1 << 46:
            raise ValidationError(f"map_size must be an int between 64 KiB and 64 TiB, got {map_size!r}")
        if not isinstance(path, (str, os.PathLike)) or "\0" in os.fspath(path):
            raise ValidationError(f"path must be a str or os.PathLike without NUL, got {path!r:.80}")
        self.path = Path(path)
        self.readonly = readonly
        self.durability = durability
        self._readonly = readonly
        self._pid = os.getpid()
        self._gate = RWLock()
        self._cache_lock = RWLock()
        self._cache = _Cache(ann, self.path / "ann", self._cache_lock, self._adopt_saved_in_background)
        self._write_lock = threading.Lock()
        # lock.mdb alone is what a kill during the very first open leaves behind: a new store.
        try:
            entries = {p.name for p in self.path.iterdir()} if self.path.is_dir() else set()
        except OSError as exc:
            raise StorageError(f"cannot read store directory {str(self.path)!r}: {exc}", operation="open") from None
        existed = bool(entries - {"lock.mdb"}) if self.path.is_dir() else self.path.exists()
        if existed and not (self.path / "data.mdb").is_file():
            raise StorageError(f"{str(self.path)!r} exists and is not a hippograph store", operation="open")
        if not existed:
            _private_dir(self.path)
        try:
            self._env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(_DBS) + 1,
                sync=durability == "sync",
                metasync=durability == "sync",
                readonly=readonly,
                mode=0o600,
                max_readers=256,
            )
            self._refuse_truncated()
            self._refuse_damaged()
            self._refuse_foreign()
            self._dbs = {name: self._env.open_db(name.encode(), create=not readonly) for name in _DBS}
        except lmdb.Error as exc:
            raise StorageError(f"cannot open {str(self.path)!r} as an LMDB store: {exc}", operation="open") from None
        if not existed:  # LMDB applies the umask to `mode`; files of an existing store keep the owner's choice
            for name in ("data.mdb", "lock.mdb"):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(self.path / name, stat.S_IRUSR | stat.S_IWUSR)
        self._init_info(readonly)

    def _refuse_truncated(self) -> None:
        """A data file shorter than its last committed page would crash the process (SIGBUS) on read."""
        need = (self._env.info()["last_pgno"] + 1) * self._env.stat()["psize"]
        have = (self.path / "data.mdb").stat().st_size
        if have < need:
            self._env.close()
            raise StorageError(f"{str(self.path)!r}: data.mdb is truncated ({have} of {need} bytes)", operation="open")

    def _refuse_damaged(self) -> None:
        """Checks every page before LMDB reads a tree: a damaged page would crash the process."""
        try:
            self._check_structure("open")
        except StorageError:
            self._env.close()
            raise

    def _check_structure(self, operation: str) -> dict[str, Any]:
        """Walks every B-tree page of the store's current snapshot with `_core.lmdb_check`.

        LMDB checksums nothing and trusts the pages it reads. The read
        transaction held during the walk registers a reader, so writers in other
        processes cannot reuse the snapshot's pages meanwhile; its id names the
        meta page to check.
        """
        where = f"{str(self.path)!r}: data.mdb"
        for _ in range(_CHECK_ATTEMPTS):
            with self._env.begin() as txn:
                try:
                    report = _check_data_file(self.path / "data.mdb", txn.id())
                except StorageError as exc:
                    raise StorageError(f"{where} is corrupt: {exc}", operation=operation) from None
                except OSError as exc:
                    raise StorageError(f"{where} cannot be read: {exc}", operation=operation) from None
            if report is not None:
                return report
        raise StorageError(
            f"{where} is corrupt: no meta page holds the current transaction "
            f"(or writers committed faster than {_CHECK_ATTEMPTS} checks could start)",
            operation=operation,
        )

    def _refuse_foreign(self) -> None:
        """An LMDB environment whose main database names anything but ours is someone else's."""
        with self._env.begin() as txn, txn.cursor() as cur:
            names = {bytes(k) for k in cur.iternext(keys=True, values=False)}
        foreign = names - {n.encode() for n in _DBS}
        if foreign:
            self._env.close()
            raise StorageError(
                f"{str(self.path)!r} is an LMDB environment of another application "
                f"(holds {sorted(foreign)[:3]!r}…), not a hippograph store",
                operation="open",
            )

    def _init_info(self, readonly: bool) -> None:
        def check(t: _Txn) -> bool:
            magic = t.get("info", b"magic")
            if magic is None:
                return False
            if magic != MAGIC:
                raise StorageError(f"{str(self.path)!r} is an LMDB file but not a hippograph store", operation="open")
            raw = t.get("info", b"format")
            version = -1 if raw is None else _number(raw, ">I", "format record")
            if version > STORAGE_FORMAT:
                raise StorageError(
                    f"store {str(self.path)!r} has storage format {version}; this hippograph reads up to "
                    f"{STORAGE_FORMAT} (upgrade hippograph)",
                    operation="open",
                )
            if version < 1:
                raise StorageError(f"store {str(self.path)!r} has a corrupt format record", operation="open")
            return True

        if self._read(check) or readonly:
            return

        def init(t: _Txn) -> None:
            if t.get("info", b"magic") is None:
                t.put("info", b"magic", MAGIC)
                t.put("info", b"format", struct.pack(">I", STORAGE_FORMAT))

        self._write("open", init)

    # -- transactions --------------------------------------------------------

    def _guard(self, operation: str) -> None:
        self._check_open(operation)
        if os.getpid() != self._pid:
            raise StorageError(
                "this LMDB store was opened before fork(); open it again in the child process",
                operation=operation,
            )

    def _grow(self, adopt_only: bool) -> None:
        with self._gate.write():
            size = self._env.info()["map_size"]
            self._env.set_mapsize(0 if adopt_only else size * 2)

    @contextmanager
    def _txn(self, write: bool) -> Iterator[_Txn]:
        with self._gate.read():
            if not write:
                with self._env.begin() as txn:
                    yield _Txn(txn, self._dbs)
                return
            # LMDB allows one write transaction per environment at a time; threads queue here.
            with self._write_lock, self._env.begin(write=True) as txn:
                yield _Txn(txn, self._dbs)

    def _retrying(self, operation: str, fn: Callable[[], T]) -> T:
        while True:
            try:
                return fn()
            except lmdb.MapFullError:
                self._grow(adopt_only=False)
            except lmdb.MapResizedError:
                self._grow(adopt_only=True)
            except lmdb.Error as exc:
                raise StorageError(f"{type(exc).__name__}: {exc}", operation=operation) from None

    def _read(self, fn: Callable[[_Txn], T], operation: str = "read") -> T:
        def run() -> T:
            with self._txn(write=False) as t:
                return fn(t)

        return self._retrying(operation, run)

    def _write(self, operation: str, fn: Callable[[_Txn], T]) -> T:
        def run() -> T:
            with self._txn(write=True) as t:
                return fn(t)

        self._guard(operation)
        return self._retrying(operation, run)

    # -- writes --------------------------------------------------------------

    @staticmethod
    def _apply(w: _Writer, cs: Changeset, encoded_meta: Mapping[str, bytes]) -> int | None:
        """Additions, then links, then metadata; returns the store's dimension afterwards."""
        dim = resulting_dim(cs, w.t.dim())
        for node in cs.additions:
            w.put_node(node)
        for a, b, edge in normalised_links(cs):
            w.link(a, b, edge)
        w.put_meta(encoded_meta)
        return dim

    def _commit(self, t: _Txn, cs: Changeset, encoded_meta: Mapping[str, bytes]) -> None:
        w = _Writer(t)
        w.finish(self._apply(w, cs, encoded_meta))

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Maintenance in one write transaction: delete nodes with their metadata,
        apply `cs`, then delete the tag and intent nodes among `orphan_candidates`
        left without links (with their metadata). Returns the orphans deleted.
        """
        self._guard("rewrite")
        doomed = check_ids(delete_ids)
        candidates = sorted(set(check_ids(orphan_candidates)))
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)

        def run(t: _Txn) -> list[str]:
            w = _Writer(t)
            for node_id in doomed:
                w.delete_node(node_id)
                w.delete_meta(node_id)
            dim = self._apply(w, cs, encoded)
            orphans = [c for c in candidates if w.is_orphan(c)]
            for node_id in orphans:
                w.delete_node(node_id)
                w.delete_meta(node_id)
            w.finish(dim)
            return orphans

        return self._write("rewrite", run)

    def snapshot(self, node_type: NodeType | str) -> ColumnsCopy:
        """A copy of one type's ids, embeddings and usage columns, as of now (maintenance reads it)."""
        self._guard("snapshot")
        wanted = as_node_type(node_type)

        def run(t: _Txn) -> ColumnsCopy:
            with self._cache_lock.write():
                self._cache.refresh(t)
                return self._cache.index[wanted].copy()

        return self._read(run, "snapshot")

    @staticmethod
    def _encode_meta(updates: Mapping[str, NodeMetadata]) -> dict[str, bytes]:
        return {node_id: codec.encode_meta(meta) for node_id, meta in updates.items()}

    def apply_changeset(self, cs: Changeset) -> None:
        self._guard("apply_changeset")
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)
        self._write("apply_changeset", lambda t: self._commit(t, cs, encoded))

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self._guard("delete_nodes")
        wanted = check_ids(ids)

        def run(t: _Txn) -> None:
            w = _Writer(t)
            for node_id in wanted:
                w.delete_node(node_id)
            w.finish(None)

        self._write("delete_nodes", run)

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        self._guard("update_metadata")
        encoded = self._encode_meta(check_metadata_updates(updates))

        def run(t: _Txn) -> None:
            w = _Writer(t)
            w.put_meta(encoded)
            w.finish(None)

        self._write("update_metadata", run)

    def modify_metadata(
        self, ids: Iterable[str], fn: Callable[[str, NodeMetadata | None], NodeMetadata | None]
    ) -> None:
        """Read-modify-write the metadata of existing nodes in one write transaction.

        `Repo` uses it for access counts and rewards, so increments from
        several processes add up instead of overwriting each other.
        """
        self._guard("modify_metadata")
        wanted = check_ids(ids)

        def run(t: _Txn) -> None:
            w = _Writer(t)
            updates = {}
            for node_id in wanted:
                if w.exists(node_id):
                    new = fn(node_id, t.meta(node_id))
                    if new is not None:
                        updates[node_id] = new
            w.put_meta(self._encode_meta(check_metadata_updates(updates)))
            w.finish(None)

        self._write("modify_metadata", run)

    def delete_metadata(self, ids: Iterable[str]) -> None:
        self._guard("delete_metadata")
        wanted = check_ids(ids)

        def run(t: _Txn) -> None:
            w = _Writer(t)
            for node_id in wanted:
                w.delete_meta(node_id)
            w.finish(None)

        self._write("delete_metadata", run)

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        self._guard("commit_ingestion")
        check_record(record, cs, None)
        encoded_meta = self._encode_meta(cs.metadata)
        encoded_record = codec.encode_record(record)
        key = _key(record.source_id)

        def run(t: _Txn) -> tuple[Outcome, IngestionReceipt]:
            raw = t.get("ingest", key)
            if raw is None:
                self._commit(t, cs, encoded_meta)
                t.put("ingest", t.remember(record.source_id), encoded_record)
                return Outcome.INSERTED, record.receipt
            stored = codec.decode_record(record.source_id, raw)
            if (
                stored.payload_digest == record.payload_digest
                and stored.fingerprint_version == record.fingerprint_version
            ):
                return Outcome.EXISTING, stored.receipt
            raise IngestionError(
                "source_conflict",
                "a different payload (digest or fingerprint version) is already recorded",
                source_id=record.source_id,
            )

        return self._write("commit_ingestion", run)

    def delete_ingestion(self, source_id: str) -> bool:
        self._guard("delete_ingestion")
        key = _key(check_id(source_id, "source_id"))

        def run(t: _Txn) -> bool:
            if t.get("ingest", key) is None:
                return False
            t.delete("ingest", key)
            return True

        return self._write("delete_ingestion", run)

    # -- reads ---------------------------------------------------------------

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
        self._guard("find_candidates")

        def run(t: _Txn) -> list[tuple[Node, float]]:
            def hydrate(ids: list[str]) -> dict[str, tuple[Node, NodeMetadata | None]]:
                out: dict[str, tuple[Node, NodeMetadata | None]] = {}
                for node_id in ids:
                    node = t.node(node_id)
                    if node is not None:
                        out[node_id] = (node, t.meta(node_id))
                return out

            if t.seq() != self._cache.seq:
                with self._cache_lock.write():
                    self._cache.refresh(t)
            background = self._cache.ann is not None and self._cache.ann.background
            saved = [] if exact or background else self._cache.wants_saved(types)
            if saved:  # a process's first non-exact query of a large type: adopt its saved HNSW graph
                with self._cache_lock.write():
                    self._cache.refresh(t)
                    self._cache.load_saved(t, saved)
            with self._cache_lock.read():
                return find_candidates(
                    self._cache.index, types, query, tags, value_function, now, t.dim(), hydrate, exact=exact
                )

        return self._read(run, "find_candidates")

    def _adopt_saved_in_background(self, owner: TypeColumns, cancel: threading.Event) -> bool:
        """A background build's first step: adopt `owner`'s saved HNSW graph if it passes every check.

        The files are hashed and read by hnswlib without any lock; only the
        catch-up from the change log holds the cache's lock (as a refresh does).
        Any failure here only means the build goes on from the rows.
        """
        cache = self._cache
        with self._cache_lock.write():
            node_type = next((nt for nt, index in cache.index.items() if index is owner), None)
            if node_type is None or cache.ann_dir is None or cache.ann is None or node_type in cache.ann_tried:
                return False
            cache.ann_tried.add(node_type)
            config, directory = cache.ann, cache.ann_dir
        try:
            # Files saved at a change the store has not reached (a restored older store) are not even read.
            latest = self._read(lambda t: t.seq(), "load_vector_index")
            saved = vector_files.read_saved(directory, node_type.value, owner.dim, config, latest, cancel.is_set)
        except Exception:  # closed meanwhile, no temp file for the verified copy, ...: build instead
            return False
        if saved is None:
            return False

        def adopt(t: _Txn) -> bool | None:
            with self._cache_lock.write():
                cache.refresh(t)
                if cache.index[node_type] is not owner or owner.ann is not None or cancel.is_set():
                    return False
                if cache.seq != t.seq():
                    return None  # another thread moved the cache past this snapshot: its log is not in `t`
                owner.ann = vector_files.adopt_saved(
                    owner, config, saved, cache.seq, lambda since: cache._changed_since(t, since, cache.seq)
                )
                return owner.ann is not None

        try:
            for _ in range(_ADOPT_TRIES):
                adopted = self._read(adopt, "load_vector_index")
                if adopted is not None:
                    return adopted
        except HippographError:  # closed or damaged meanwhile: the build (or its caller) sees it
            pass
        return False

    def vector_index_stats(self) -> dict[str, dict[str, Any]]:
        """Per type: whether an HNSW index is built, vectors held, live nodes, reclaimable marks,
        and ``loaded``: whether this process read it from the saved files instead of building it."""
        self._guard("vector_index_stats")

        def run(t: _Txn) -> dict[str, dict[str, Any]]:
            with self._cache_lock.write():
                self._cache.refresh(t)
                out = {}
                for nt in NodeType:
                    index = self._cache.index[nt]
                    out[nt.value] = {**index.vector_index_stats(), "loaded": index.ann is not None and index.ann.loaded}
                return out

        return self._read(run, "vector_index_stats")

    def save_vector_index(self) -> list[str]:
        """Saves each built HNSW graph under ``<store>/ann/`` (as `close()` does); returns the types written.

        A graph whose files already hold it is not written again (at most its
        sidecar's change counter moves forward).
        """
        self._guard("save_vector_index")
        if self._readonly:
            raise StorageError("the store was opened read-only", operation="save_vector_index")
        return self._save_vector_index()

    def _save_vector_index(self) -> list[str]:
        if not any(index.ann is not None for index in self._cache.index.values()):
            return []  # nothing built: no need to bring the cache up to date

        def fresh(t: _Txn) -> None:
            with self._cache_lock.write():
                self._cache.refresh(t)

        self._read(fresh, "save_vector_index")
        with self._cache_lock.read():
            try:
                return self._cache.save()
            except (OSError, RuntimeError, ValueError) as exc:
                raise StorageError(f"cannot save the vector index: {exc}", operation="save_vector_index") from None

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, progress: Progress | None = None
    ) -> list[str]:
        """Readies now, rather than at the first non-exact query, the HNSW index of each requested
        type (None: all) large enough to use one: the saved graph when it passes every check, else
        built afresh and (writable stores) saved. Returns the types built."""
        self._guard("build_vector_index")
        wanted = list(NodeType) if types is None else as_node_types(types)

        def adopt(t: _Txn) -> None:
            with self._cache_lock.write():
                self._cache.refresh(t)
                self._cache.load_saved(t, self._cache.wants_saved(wanted))

        self._read(adopt, "build_vector_index")
        with self._cache_lock.read():
            built = build_vector_indexes(self._cache.index, wanted, progress)
        if built and not self._readonly:
            self._save_vector_index()
        return built

    def reclaim_vector_index(self) -> list[str]:
        """Rebuilds HNSW indexes that carry deletion marks; returns the types rebuilt."""
        self._guard("reclaim_vector_index")
        with self._cache_lock.write():
            return [nt.value for nt in NodeType if self._cache.index[nt].reclaim_vector_index()]

    def get_node(self, node_id: str) -> Node | None:
        self._guard("get_node")
        check_id(node_id)
        return self._read(lambda t: t.node(node_id), "get_node")

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        self._guard("get_linked_nodes")
        wanted = check_ids(ids)
        edge = None if edge_type is None else as_edge_type(edge_type)

        def run(t: _Txn) -> list[Node]:
            found: set[str] = set()
            for node_id in wanted:
                for e, others in t.links(node_id).items():
                    if edge is None or e == edge:
                        found |= others
            return [n for n in map(t.node, sorted(found)) if n is not None]

        return self._read(run, "get_linked_nodes")

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        self._guard("get_nodes_by_type")
        wanted = list(dict.fromkeys(as_node_types(types)))

        def run(t: _Txn) -> list[Node]:
            by_type: dict[NodeType, list[str]] = {nt: [] for nt in wanted}
            for key, data in t.items("nodes"):
                node_type = codec.node_type_of(data)
                if node_type in by_type:
                    by_type[node_type].append(t.id_of(key))
            return [n for nt in wanted for n in map(t.node, by_type[nt]) if n is not None]

        return self._read(run, "get_nodes_by_type")

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        self._guard("get_metadata")
        wanted = check_ids(ids)

        def run(t: _Txn) -> dict[str, NodeMetadata]:
            out = {i: t.meta(i) for i in wanted}
            return {i: m for i, m in out.items() if m is not None}

        return self._read(run, "get_metadata")

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        self._guard("get_ingestion")
        key = _key(check_id(source_id, "source_id"))

        def run(t: _Txn) -> IngestionRecord | None:
            raw = t.get("ingest", key)
            return None if raw is None else codec.decode_record(source_id, raw)

        return self._read(run, "get_ingestion")

    @property
    def dimension(self) -> int | None:
        self._guard("dimension")
        return self._read(lambda t: t.dim())

    def stats(self) -> dict[str, Any]:
        """Counts for `Repo.stats`: nodes per type, links, records, dimension, bytes on disk."""
        self._guard("stats")

        def run(t: _Txn) -> dict[str, Any]:
            counts = {nt.value: 0 for nt in NodeType}
            for _, data in t.items("nodes"):
                counts[codec.node_type_of(data).value] += 1
            links = sum(len(ids) for _, raw in t.items("links") for ids in codec.decode_links(raw).values())
            return {
                "nodes": counts,
                "links": links // 2,
                "ingestion_records": t.txn.stat(self._dbs["ingest"])["entries"],
                "metadata": t.txn.stat(self._dbs["meta"])["entries"],
                "dimension": t.dim(),
                "disk_bytes": sum(f.stat().st_blocks * 512 for f in self.path.iterdir() if f.name.endswith(".mdb")),
            }

        return self._read(run, "stats")

    def verify_storage(self) -> tuple[list[str], int]:
        """Storage-level checks for `Repo.verify`: every B-tree page is sound (as
        at open; damage raises `StorageError`, since reading on would crash the
        process), every record decodes, embeddings have the recorded dimension,
        no embedding, links or log entry is left behind by a node that is gone.
        Returns (problems, ingestion records checked).
        """
        self._guard("verify")

        def structure() -> None:
            with self._gate.read():
                self._check_structure("verify")

        self._retrying("verify", structure)

        def run(t: _Txn) -> tuple[list[str], int]:
            problems: list[str] = []
            dim = t.dim()
            nodes = set()
            for key, data in t.items("nodes"):
                nodes.add(key)
                try:
                    node_id = t.id_of(key)
                    codec.decode_node(data, node_id, None, {})
                except StorageError as exc:
                    problems.append(f"node {key.decode('utf-8', 'replace')!r}: {exc}")
            for key, data in t.items("emb"):
                if key not in nodes:
                    problems.append(f"embedding without node: {key.decode('utf-8', 'replace')!r}")
                elif dim is None or len(data) != 4 * dim:
                    problems.append(f"embedding of {key.decode('utf-8', 'replace')!r} has {len(data)} bytes, dim {dim}")
            for key, data in t.items("links"):
                if key not in nodes:
                    problems.append(f"links without node: {key.decode('utf-8', 'replace')!r}")
                try:
                    codec.decode_links(data)
                except StorageError as exc:
                    problems.append(f"links of {key.decode('utf-8', 'replace')!r}: {exc}")
            for key, data in t.items("meta"):
                try:
                    codec.decode_meta(data)
                except StorageError as exc:
                    problems.append(f"metadata of {key.decode('utf-8', 'replace')!r}: {exc}")
            records = 0
            for key, data in t.items("ingest"):
                records += 1
                try:
                    codec.decode_record(t.id_of(key), data)
                except StorageError as exc:
                    problems.append(f"ingestion record {key.decode('utf-8', 'replace')!r}: {exc}")
            seq = t.seq()
            logged = []
            for key, data in t.items("log"):
                try:
                    logged.append(_number(key, ">Q", "change log key"))
                    _logged_ids(data)
                except StorageError as exc:
                    problems.append(f"change log entry {key.hex()}: {exc}")
            newest = max(logged, default=seq)
            if newest != seq:
                problems.append(f"change log ends at {newest} but the change counter is {seq}")
            return problems, records

        return self._read(run, "verify")

    def close(self) -> None:
        """Saves the built HNSW graphs (best effort: a failure only warns), then closes the environment."""
        if not self._closed:
            stop_background_builds(self._cache.index.values(), self._cache.retired)
            if os.getpid() == self._pid and not self._readonly:
                try:
                    self._save_vector_index()
                except HippographError as exc:
                    warnings.warn(f"hippograph: vector index not saved: {exc}", RuntimeWarning, stacklevel=2)
            self._closed = True
            if os.getpid() == self._pid:
                with self._gate.write():
                    self._env.close()
