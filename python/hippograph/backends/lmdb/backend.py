"""The `LMDB` backend class: opening a store, one LMDB transaction per call, and the queries.

Each mutating call is one write transaction through a `_Writer`; each read is
one read transaction, and `find_candidates` hydrates from the same snapshot its
`_Cache` was caught up to (through the nodes the cache keeps as of it). The
format lives in `layout`, the refusals at open and the storage walk in
`checks`, the derived columns in `cache`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import lmdb

from ...context.protocol import KvTxn
from ...engine.checks import check_choice, check_flag, check_id
from ...engine.rows import VectorDtype, check_vector_dtype
from ...engine.vector_index import DEFAULT_ANN, AnnConfig, check_ann
from ...errors import HippographError, StorageError, ValidationError
from ...graph import codec
from ...graph.changeset import Changeset, check_changeset, resulting_dim
from ...graph.explain import Explaining, explaining_of
from ...graph.model import (
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
from ...graph.protocol import Ingestion, existing_receipt
from ...graph.recall import find_candidates
from ...graph.value import ValueFunctionConfig
from ...store.protocol import EntryTxn
from .._base import (
    DerivedBackend,
    RWLock,
    check_ids,
    check_metadata_updates,
    check_record,
    commit_each_source_once,
)
from .._context import MAX_KEY, check_space, storable
from . import checks, envs
from .cache import _Cache
from .checks import _private_dir
from .context import CONTEXT_DBS, LmdbKvTxn
from .entries import ENTRY_DBS, LmdbEntryTxn
from .group import Job
from .layout import _DBS, DEFAULT_MAP_SIZE, MAGIC, STORAGE_FORMAT, _key
from .txn import _Txn, _Writer

__all__ = ["LMDB"]

T = TypeVar("T")


class LMDB(DerivedBackend):
    """The embedded default backend; ``docs/lmdb.md`` describes its layout and rules."""

    _fork_label = "LMDB store"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Literal["sync", "fast"] = "sync",
        map_size: int = DEFAULT_MAP_SIZE,
        readonly: bool = False,
        ann: AnnConfig | None = DEFAULT_ANN,
        vector_dtype: VectorDtype = "float32",
    ) -> None:
        check_choice(durability, ("sync", "fast"), "durability")
        if isinstance(map_size, bool) or not isinstance(map_size, int) or not 1 << 16 <= map_size <= 1 << 46:
            raise ValidationError(f"map_size must be an int between 64 KiB and 64 TiB, got {map_size!r}")
        if not isinstance(path, (str, os.PathLike)) or "\0" in os.fspath(path):
            raise ValidationError(f"path must be a str or os.PathLike without NUL, got {path!r:.80}")
        self.path = Path(path)
        self.readonly = self._readonly = check_flag(readonly, "readonly")
        self.durability = durability
        self._pid = os.getpid()
        self._cache_lock = RWLock()
        dtype = check_vector_dtype(vector_dtype)
        self._cache = self._derived = _Cache(
            check_ann(ann), self.path / "ann", self._cache_lock, self._read, self.path / "columns", dtype
        )
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

        def opener() -> lmdb.Environment:
            return lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(_DBS) + len(ENTRY_DBS) + len(CONTEXT_DBS) + 1,
                sync=durability == "sync",
                metasync=durability == "sync",
                # No `writemap`, in either mode: commits write their pages with write() calls. A map
                # written in place made a `fast` commit cheaper but stalled one commit in about 200
                # for 10-30 ms (docs/lmdb.md, durability modes).
                writemap=False,
                readonly=readonly,
                mode=0o600,
                max_readers=256,
            )

        def check(env: lmdb.Environment) -> None:
            checks.refuse_truncated(env, self.path)
            checks.refuse_damaged(env, self.path)
            checks.refuse_foreign(env, self.path)

        try:
            self._shared = envs.acquire(self.path, readonly, durability == "sync", opener, check)
        except lmdb.Error as exc:
            raise StorageError(f"cannot open {str(self.path)!r} as an LMDB store: {exc}", operation="open") from None
        self._env, self._gate = self._shared.env, self._shared.gate
        try:
            self._open_dbs(readonly)
            if not existed:  # LMDB applies the umask to `mode`; files of an existing store keep the owner's choice
                for name in ("data.mdb", "lock.mdb"):
                    with contextlib.suppress(FileNotFoundError):
                        os.chmod(self.path / name, stat.S_IRUSR | stat.S_IWUSR)
            self._init_info(readonly)
        except BaseException:
            envs.release(self._shared)
            raise

    def _open_dbs(self, readonly: bool) -> None:
        try:
            self._dbs = {name: self._env.open_db(name.encode(), create=not readonly) for name in _DBS[:-1]}
            for name in (_DBS[-1], *ENTRY_DBS, *CONTEXT_DBS):  # a store older than these, opened read-only, lacks them
                with contextlib.suppress(lmdb.NotFoundError):
                    self._dbs[name] = self._env.open_db(name.encode(), create=not readonly)
            self._spaces = {name: self._dbs.get(name) for name in CONTEXT_DBS}
        except lmdb.Error as exc:
            raise StorageError(f"cannot open {str(self.path)!r} as an LMDB store: {exc}", operation="open") from None

    def _init_info(self, readonly: bool) -> None:
        if self._read(lambda t: checks.check_info(t, self.path)) == STORAGE_FORMAT or readonly:
            return  # format 1, opened read-only, is read as it is (`layout.STORAGE_FORMAT`)

        def init(t: _Txn) -> None:
            if t.get("info", b"magic") is None:
                t.put("info", b"magic", MAGIC)
            t.put("info", b"format", struct.pack(">I", STORAGE_FORMAT))

        self._write("open", init)

    # -- transactions --------------------------------------------------------

    def _grow(self, adopt_only: bool) -> None:
        with self._gate.write():
            size = self._env.info()["map_size"]
            self._env.set_mapsize(0 if adopt_only else size * 2)

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
            with self._gate.read(), self._env.begin() as txn:
                return fn(_Txn(txn, self._dbs))

        return self._retrying(operation, run)

    def _write(self, operation: str, fn: Callable[[_Txn], T], *, graph: bool = True) -> T:
        """`fn` in one write transaction (`sync`: in a group commit). `graph`: the write may change
        graph records, so this process's graph columns are brought up after it; a context or
        scoped-store write leaves them to the next graph read, which catches up with every
        process's writes anyway."""

        def run() -> T:
            # LMDB allows one write transaction per environment at a time; threads queue here.
            with self._gate.read(), self._write_lock, self._env.begin(write=True) as txn:
                return fn(_Txn(txn, self._dbs))

        self._guard(operation)
        if self._readonly:
            raise StorageError("the store was opened read-only", operation=operation)
        if self.durability == "sync":  # concurrent writers share one commit and its fsync (`group`)
            result = self._shared.group.submit(fn, lambda jobs: self._commit_group(operation, jobs))
        else:
            result = self._retrying(operation, run)
        if graph and self._cache.seq >= 0:  # the writer, not the next recall, brings this process's columns up
            with contextlib.suppress(Exception):  # the write stands; the next read refreshes and reports
                self._refresh(operation)
        return result

    def _commit_group(self, operation: str, jobs: list[Job[Any]]) -> None:
        """One write transaction for a group of `sync` writes, each in a nested transaction of its
        own (one write alone: run directly); durable before any of them is acknowledged. A write
        that raises is rolled back alone; a storage failure fails the group (a full map grows and
        the whole group runs again). In an environment another handle opened `fast` (its commits
        do not sync) an explicit sync follows the commit."""

        def attempt() -> list[tuple[Any, BaseException | None]]:
            with self._gate.read(), self._write_lock, self._env.begin(write=True) as parent:
                if len(jobs) == 1:
                    return [(jobs[0].fn(_Txn(parent, self._dbs)), None)]
                outcomes: list[tuple[Any, BaseException | None]] = []
                for job in jobs:
                    child = self._env.begin(write=True, parent=parent)
                    try:
                        value = job.fn(_Txn(child, self._dbs))
                    except lmdb.Error:
                        child.abort()
                        raise  # the group's: a full map (grown, then run again) or a storage failure
                    except Exception as exc:
                        child.abort()
                        outcomes.append((None, exc))
                        continue
                    child.commit()
                    outcomes.append((value, None))
                return outcomes

        outcomes = self._retrying(operation, attempt)  # raising: every write of the group gets the error
        if not self._shared.synced:
            self._retrying(operation, lambda: self._env.sync(True))
        for job, (value, error) in zip(jobs, outcomes, strict=True):
            job.finish(value, error)

    # -- entries of a scoped store ------------------------------------------------

    def entry_write(self, fn: Callable[[EntryTxn], T]) -> T:
        """`EntryBackend.entry_write`: one write transaction, its change-log record included."""
        return self.entry_write_counted(fn)[0]

    def entry_write_counted(self, fn: Callable[[EntryTxn], T]) -> tuple[T, int, int]:
        """`store.protocol.CountsWrites`: `entry_write` and the counter before and after."""

        def run(t: _Txn) -> tuple[T, int, int]:
            et = LmdbEntryTxn(t.txn, self._dbs, True)
            before = et.seq()
            result = fn(et)
            et.finish()
            return result, before, et.seq()

        return self._write("entry_write", run, graph=False)

    def entry_read(self, fn: Callable[[EntryTxn], T]) -> T:
        """`EntryBackend.entry_read`: one read transaction."""
        self._guard("entry_read")
        return self._read(lambda t: fn(LmdbEntryTxn(t.txn, self._dbs, False)), "entry_read")

    # -- spaces of a context store ---------------------------------------------------

    def context_write(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_write`: one write transaction of this backend, so the durability
        mode and group commit apply; LMDB runs one writer at a time across processes. `fn` runs
        again if the map is full (it grows, and the transaction starts over)."""

        def run(t: _Txn) -> T:
            kt = LmdbKvTxn(t.txn, self._spaces, True)
            try:
                return fn(kt)
            finally:
                kt.live = False

        return self._write("context_write", run, graph=False)

    def context_read(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_read`: one read transaction (one snapshot)."""
        self._guard("context_read")

        def run() -> T:  # `_read` without its `_Txn`: a small read's fixed cost is most of it
            with self._gate.read(), self._env.begin() as txn:
                kt = LmdbKvTxn(txn, self._spaces, False)
                try:
                    return fn(kt)
                finally:
                    kt.live = False

        return self._retrying("context_read", run)

    def context_get(self, space: str, key: bytes) -> bytes | None:
        """`context.protocol.GetsOne`: one record in a read transaction of its own, without the
        `LmdbKvTxn` and the closure a longer read takes (a `get_node` costs a few microseconds)."""
        self._guard("context_read")
        db = self._dbs.get(space if type(space) is str and space in CONTEXT_DBS else check_space(space))
        if db is None or not ((type(key) is bytes and 0 < len(key) <= MAX_KEY) or storable(key)):
            return None  # LMDB refuses to look up a key it could not hold

        try:
            with self._gate.read(), self._env.begin() as txn:
                return txn.get(key, db=db)  # bytes: the environment hands out no buffers
        except lmdb.Error:

            def run() -> bytes | None:
                with self._gate.read(), self._env.begin() as txn:
                    return txn.get(key, db=db)

            return self._retrying("context_read", run)

    # -- writes --------------------------------------------------------------

    @staticmethod
    def _apply(w: _Writer, cs: Changeset) -> int | None:
        """Additions, then links, then metadata; returns the store's dimension afterwards."""
        dim = resulting_dim(cs, w.t.dim())
        w.put_changeset(cs)
        return dim

    def _commit(self, t: _Txn, cs: Changeset) -> None:
        w = _Writer(t)
        w.finish(self._apply(w, cs))

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Maintenance in one write transaction: delete nodes with their metadata,
        apply `cs`, then delete the tag and intent nodes among `orphan_candidates`
        left without links (with their metadata). Returns the orphans deleted.
        """
        self._guard("rewrite")
        doomed = check_ids(delete_ids)
        candidates = sorted(set(check_ids(orphan_candidates)))
        check_changeset(cs, None)

        def run(t: _Txn) -> list[str]:
            w = _Writer(t)
            for node_id in doomed:
                w.delete_node(node_id)
                w.delete_meta(node_id)
            dim = self._apply(w, cs)
            orphans = [c for c in candidates if w.is_orphan(c)]
            for node_id in orphans:
                w.delete_node(node_id)
                w.delete_meta(node_id)
            w.finish(dim)
            return orphans

        return self._write("rewrite", run)

    def apply_changeset(self, cs: Changeset) -> None:
        self._guard("apply_changeset")
        check_changeset(cs, None)
        self._write("apply_changeset", lambda t: self._commit(t, cs))

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
        checked = check_metadata_updates(updates)

        def run(t: _Txn) -> None:
            w = _Writer(t)
            w.put_metadata(checked)
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
            w.put_metadata(check_metadata_updates(updates))
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
        step = self._ingestion_step(record, cs)
        return self._write("commit_ingestion", step)

    def commit_ingestions(self, items: Sequence[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
        """`CommitsIngestions`: one write transaction (one fsync in `sync` mode) for all of them."""
        self._guard("commit_ingestions")

        def commit(unique: list[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
            steps = [self._ingestion_step(record, cs) for record, cs in unique]
            return self._write("commit_ingestions", lambda t: [step(t) for step in steps])

        return commit_each_source_once(items, commit)

    def _ingestion_step(
        self, record: IngestionRecord, cs: Changeset
    ) -> Callable[[_Txn], tuple[Outcome, IngestionReceipt]]:
        """`commit_ingestion`'s compare-and-set inside a write transaction, its values encoded first."""
        encoded_record = codec.encode_record(record)
        key = _key(record.source_id)

        def step(t: _Txn) -> tuple[Outcome, IngestionReceipt]:
            raw = t.get("ingest", key)
            if raw is None:
                self._commit(t, cs)
                t.put("ingest", t.remember(record.source_id), encoded_record)
                return Outcome.INSERTED, record.receipt
            stored = codec.decode_record(record.source_id, raw)
            return Outcome.EXISTING, existing_receipt(stored, record.payload_digest, record.fingerprint_version)

        return step

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

    explains_answers = True
    """`find_candidates` takes ``explain=`` (`hippograph.graph.protocol.ExplainsAnswers`)."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: ValueFunctionConfig | Mapping[str, Any] | None,
        *,
        now: datetime | None = None,
        exact: bool = False,
        explain: bool | Explaining = False,
    ) -> list[tuple[Node, float]]:
        """`GraphBackend.find_candidates`; with `explain`, each hit is an `ExplainedHit`."""
        self._guard("find_candidates")
        explaining, exact = explaining_of(explain), check_flag(exact, "exact")

        def run(t: _Txn) -> list[tuple[Node, float]]:
            seq = t.seq()

            def hydrate(ids: list[str], metadata: bool) -> dict[str, tuple[Node, NodeMetadata | None]]:
                return self._cache.hydrate(t, seq, ids, metadata)

            if seq != self._cache.seq:
                with self._cache_lock.write():
                    self._cache.refresh(t)
            background = self._cache.ann is not None and self._cache.ann.background
            saved = [] if exact or background else self._cache.wants_saved(types)
            if saved:  # a process's first non-exact query of a large type: adopt its saved HNSW graph
                with self._cache_lock.write():
                    self._cache.refresh(t)
                    self._cache.load_saved(t, saved)
            with self._cache_lock.read():
                columns = self._cache.columns
                dim = t.dim()
                return find_candidates(
                    columns, types, query, tags, value_function, now, dim, hydrate, exact=exact, explain=explaining
                )

        return self._read(run, "find_candidates")

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
        if not any(index.ann is not None for index in self._cache.columns.values()):
            return []  # nothing built: no need to bring the cache up to date

        self._refresh("save_vector_index")
        with self._cache_lock.read():
            try:
                return self._cache.save()
            except (OSError, RuntimeError, ValueError) as exc:
                raise StorageError(f"cannot save the vector index: {exc}", operation="save_vector_index") from None

    def _save_columns(self) -> bool:
        """Saves the scoring columns for the next open to map (docs/lmdb.md, "Saved columns") when
        this process read them and the saved set is older; True when it wrote one."""
        if self._cache.seq < 0:
            return False

        self._refresh("save_columns")
        with self._cache_lock.read():
            try:
                return self._cache.save_columns()
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot save the scoring columns: {exc}", operation="save_columns") from None

    def _refresh(self, operation: str) -> None:
        def run(t: _Txn) -> None:
            if t.seq() != self._cache.seq:
                with self._cache_lock.write():
                    self._cache.refresh(t)

        self._read(run, operation)

    def _before_build(self, wanted: list[NodeType]) -> None:
        """Adopts each wanted type's saved HNSW graph that passes every check, instead of building it."""

        def adopt(t: _Txn) -> None:
            with self._cache_lock.write():
                self._cache.refresh(t)
                self._cache.load_saved(t, self._cache.wants_saved(wanted))

        self._read(adopt, "build_vector_index")

    def _after_build(self, built: list[str]) -> None:
        if built and not self._readonly:
            self._save_vector_index()

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
                "saved_columns": {"state": self._cache.columns_state, "seq": self._cache.columns_seq},
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
                checks.check_structure(self._env, self.path, "verify")

        self._retrying("verify", structure)
        return self._read(checks.storage_problems, "verify")

    def close(self) -> None:
        """Saves the built HNSW graphs (best effort: a failure only warns), then closes the environment."""
        if not self._closed:
            self._cache.close()
            if os.getpid() == self._pid and not self._readonly:
                try:
                    self._save_vector_index()
                except HippographError as exc:
                    warnings.warn(f"hippograph: vector index not saved: {exc}", RuntimeWarning, stacklevel=2)
                try:
                    self._save_columns()
                except HippographError as exc:
                    warnings.warn(f"hippograph: scoring columns not saved: {exc}", RuntimeWarning, stacklevel=2)
            self._closed = True
            if os.getpid() == self._pid:
                envs.release(self._shared)
