"""This process's derived columns of an LMDB store, and the saved vector indexes they adopt.

`_Cache` is valid as of one change counter and catches up from the change log
(or rebuilds when the log no longer reaches back). Besides the columns it
keeps the nodes recall last hydrated, decoded as of that counter. It also
decides when a type's saved HNSW graph under ``<store>/ann/`` is tried, adopts
it (in the foreground or as a background build's first step) and saves built
graphs.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, TypeVar

from ...engine import column_files, vector_files
from ...engine.columns import TypeColumns
from ...engine.derived import DerivedColumns
from ...engine.rows import VectorDtype, saved_row_holds
from ...engine.vector_index import AnnConfig
from ...errors import HippographError
from ...graph import codec
from ...graph.model import Node, NodeMetadata, NodeType
from .._base import RWLock
from .layout import _key, _logged_ids, _seq_key
from .txn import _Txn, vector_place

T = TypeVar("T")


class _Reader(Protocol):
    """The backend's `_read`: `fn` in one read transaction, retried while the map grows."""

    def __call__(self, fn: Callable[[_Txn], T], operation: str = ...) -> T: ...


_ADOPT_TRIES = 5
"""Snapshots a background adoption tries before giving up on a cache that writers keep moving."""

_SAMPLE_ROWS = 256
"""Rows per type compared with the store before saved columns are adopted."""

NODES_KEPT = 4096
"""Decoded nodes a `_Cache` keeps, least recently hydrated dropped first: recall's usual hits, not the store."""


class _Cache(DerivedColumns[NodeType]):
    """This process's derived columns, valid as of change `seq`, caught up from the change log.

    `ann_dir` (None: no persistence) holds the saved HNSW graphs; each type's
    is tried once (`load_saved`, or `adopt_in_background` for a background
    build) when a non-exact query first needs it. `read` is the backend's
    read-transaction runner: a background adoption takes its own snapshots.

    `hydrate` keeps the nodes it decodes (at most `NODES_KEPT`), each as
    stored at change `seq`: only a reader whose snapshot is at `seq` adds
    one (under the lock shared, which a refresh holds alone), and a refresh
    drops every id the log names (a write logs both ends of a link edit)
    or, when it rebuilds, all of them.
    """

    def __init__(
        self,
        ann: AnnConfig | None,
        ann_dir: Path | None,
        lock: RWLock,
        read: _Reader,
        columns_dir: Path | None = None,
        vector_dtype: VectorDtype = "float32",
    ) -> None:
        self._read = read
        super().__init__(NodeType, ann, lock, self.adopt_in_background, vector_dtype)
        self.seq = -1
        self.ann_dir = ann_dir if ann is not None else None
        self.columns_dir = columns_dir
        self.columns_seq: int | None = None
        """The store change the saved columns on disk reflect (None: none known to this process)."""
        self.columns_state = "none"
        """Whether this process's columns came from the saved set: "none" (rebuilt from the store),
        "mapped" (checks passed; hashes being verified), "verified", or "rejected" (a hash
        differed: the columns were rebuilt from the store)."""
        self._columns_tried = False
        self._verifier: threading.Thread | None = None
        self._closing = threading.Event()
        self.ann_tried: set[NodeType] = set()
        self._nodes: OrderedDict[str, Node] = OrderedDict()
        self._nodes_lock = threading.Lock()
        """Orders the readers' lookups and additions (refreshes, holding `lock` alone, need not take it)."""

    def hydrate(self, t: _Txn, seq: int, ids: list[str], metadata: bool) -> dict[str, tuple[Node, NodeMetadata | None]]:
        """The stored nodes among `ids` as of `t`, whose change counter is `seq` (call under `lock`, shared).

        Kept nodes answer only a snapshot at the cache's own `seq`; other
        snapshots decode every node. Metadata is always read from `t`.
        """
        out: dict[str, tuple[Node, NodeMetadata | None]] = {}
        keep = seq == self.seq
        missing = [] if keep else ids
        if keep:
            with self._nodes_lock:
                kept, touch = self._nodes.get, self._nodes.move_to_end
                for node_id in ids:
                    node = kept(node_id)
                    if node is None:
                        missing.append(node_id)
                    else:
                        touch(node_id)
                        out[node_id] = (node, None)
        decoded: dict[str, Node] = {}
        for node_id in missing:
            node = t.node(node_id)
            if node is not None:
                decoded[node_id] = node
                out[node_id] = (node, None)
        if decoded and keep:
            with self._nodes_lock:
                self._nodes.update(decoded)
                while len(self._nodes) > NODES_KEPT:
                    self._nodes.popitem(last=False)
        if metadata:
            return {i: (node, t.meta(i)) for i, (node, _) in out.items()}
        return out

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
        self._nodes.pop(node_id, None)
        key = _key(node_id)
        data = t.get("nodes", key)
        if data is None:
            self.drop(node_id)
            return
        emb, meta = t.embedding_of(key, data), t.get("meta", key)
        embedding = None if emb is None else codec.decode_embedding(emb, t.dim())
        self.put(node_id, codec.node_type_of(data), embedding, None if meta is None else codec.usage_of_meta(meta))

    def _rebuild(self, t: _Txn) -> None:
        self.ann_tried = set()
        self._nodes.clear()
        if not self._columns_tried and self.columns_dir is not None:
            self._columns_tried = True
            if self._map_saved(t):
                return
        stored = {"emb": dict(t.items("emb")), "vectors": dict(t.items("vectors"))}
        metas, dim = dict(t.items("meta")), t.dim()
        rows = []
        for key, data in t.items("nodes"):
            place = vector_place(key, data)
            emb = None if place is None else stored[place[0]].get(place[1])
            if emb is None and place is not None and place[0] == "vectors":
                emb = t.embedding_of(key, data)  # refused by name where this handle lacks ``vectors``
            meta = metas.get(key)
            rows.append(
                (
                    t.id_of(key),
                    codec.node_type_of(data),
                    None if emb is None else codec.decode_embedding(emb, dim),
                    None if meta is None else codec.usage_of_meta(meta),
                )
            )
        self.replace(rows)

    def _map_saved(self, t: _Txn) -> bool:
        """Adopts the saved columns when they pass every check but the hashes (`column_files.read`),
        agree with the store on a sample of rows, and the change log reaches back to their change;
        then replays the log and verifies the hashes in the background."""
        assert self.columns_dir is not None
        target, dim = t.seq(), t.dim()
        kinds = {nt.value for nt in NodeType}
        saved = column_files.read(self.columns_dir, target, dim or 0, kinds, self.vector_dtype)
        if saved is None or not saved.types:
            return False
        changed = set() if saved.seq == target else self._changed_since(t, saved.seq, target)
        if changed is None or not self._sample_agrees(t, saved, changed):
            return False
        columns = self._fresh()
        for name, rows in saved.types.items():
            columns[NodeType(name)].adopt(rows, dim or 0)
        self.install(columns)
        for node_id in changed:
            self._reload(t, node_id)
        self.columns_seq, self.columns_state = saved.seq, "mapped"
        self._verifier = threading.Thread(target=self._verify, args=(saved,), name="hippograph-columns-verify",
                                          daemon=True)  # fmt: skip
        self._verifier.start()
        return True

    @staticmethod
    def _sample_agrees(t: _Txn, saved: column_files.Saved, changed: set[str]) -> bool:
        """A sample of each type's saved rows (not changed since) holds the store's vector and type."""
        for name, rows in saved.types.items():
            step = max(1, len(rows.ids) // _SAMPLE_ROWS)
            for r in range(0, len(rows.ids), step):
                node_id = rows.ids[r]
                if node_id in changed:
                    continue
                key = _key(node_id)
                data = t.get("nodes", key)
                if data is None or codec.node_type_of(data).value != name:
                    return False
                emb = t.embedding_of(key, data)
                norm = float(rows.arrays["norms"][r])
                if emb is None:
                    if norm != 0.0:
                        return False
                elif not saved_row_holds(rows.arrays, r, codec.decode_embedding(emb, t.dim())):
                    return False
        return True

    def _verify(self, saved: column_files.Saved) -> None:
        """Hashes the mapped files; on a mismatch the columns are dropped so the next read rebuilds
        them from the store (and the set is not trusted again)."""
        if column_files.verify(saved, self._closing.is_set):
            if not self._closing.is_set():
                self.columns_state = "verified"
            return
        with self.lock.write():
            self.columns_state = "rejected"
            self.columns_seq = None
            self.seq = -1
        if self.columns_dir is not None:
            with contextlib.suppress(OSError):
                (self.columns_dir / column_files.SIDECAR).unlink()

    def save_columns(self) -> bool:
        """Saves the columns as of `seq` when the saved set is older and the store large enough to
        gain from it (call under the cache's read lock, fresh)."""
        if self.columns_dir is None or self.seq < 0 or self.columns_seq == self.seq:
            return False
        if self.columns_state == "mapped":  # not hashed yet: saving now could vouch for damaged rows
            return False
        total = sum(len(c) for c in self.columns.values())
        if total < column_files.SAVE_MIN_ROWS:
            return False
        dims = {c.dim for c in self.columns.values() if len(c) and c.dim}
        if len(dims) > 1:
            return False
        dim = dims.pop() if dims else 0
        types = {nt.value: c.saved(max(1024, len(c) // 8), dim) for nt, c in self.columns.items() if len(c)}
        column_files.save(types, self.columns_dir, self.seq, dim, self.vector_dtype)
        self.columns_seq = self.seq
        return True

    def close(self) -> None:
        self._closing.set()
        if self._verifier is not None:
            self._verifier.join()
        super().close()

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
            type_columns = self.columns[node_type]
            if node_type not in self.ann_tried and type_columns.ann is None and len(type_columns) > self.ann.min_nodes:
                wanted.append(node_type)
        return wanted

    def load_saved(self, t: _Txn, types: Iterable[NodeType]) -> None:
        """Adopts each type's saved HNSW graph if it passes every check (call with the cache fresh as of `t`)."""
        if self.ann_dir is None or self.ann is None or t.seq() != self.seq:
            return
        for node_type in types:
            type_columns = self.columns[node_type]
            if node_type in self.ann_tried or type_columns.ann is not None or len(type_columns) <= self.ann.min_nodes:
                continue
            self.ann_tried.add(node_type)
            type_columns.ann = vector_files.load(
                type_columns,
                self.ann,
                self.ann_dir,
                node_type.value,
                self.seq,
                lambda since: self._changed_since(t, since, self.seq),
            )
            if type_columns.ann is not None:
                type_columns.cancel_background_build()

    def save(self) -> list[str]:
        """Saves every built HNSW graph that differs from its files (call under the cache's read lock)."""
        if self.ann_dir is None:
            return []
        for type_columns in self.columns.values():
            type_columns.absorb_pending()  # the files must hold every vector the store held at `seq`
        return [
            nt.value
            for nt, type_columns in self.columns.items()
            if type_columns.ann is not None
            and vector_files.save(type_columns.ann, self.ann_dir, nt.value, self.seq, type_columns.regions)
        ]

    def adopt_in_background(self, owner: TypeColumns, cancel: threading.Event) -> bool:
        """A background build's first step: adopt `owner`'s saved HNSW graph if it passes every check.

        The files are hashed and read by hnswlib without any lock; only the
        catch-up from the change log holds the cache's lock (as a refresh does).
        Any failure here only means the build goes on from the rows. The first
        step shares the lock, so the files are read while the query that started
        this build still scans (only this owner's builder marks its type tried;
        `load_saved` and a replace hold the lock alone).
        """
        with self.lock.read():
            node_type = next((nt for nt, type_columns in self.columns.items() if type_columns is owner), None)
            if node_type is None or self.ann_dir is None or self.ann is None or node_type in self.ann_tried:
                return False
            self.ann_tried.add(node_type)
            config, directory = self.ann, self.ann_dir
        try:
            # Files saved at a change the store has not reached (a restored older store) are not even read.
            latest = self._read(lambda t: t.seq(), "load_vector_index")
            saved = vector_files.read_saved(directory, node_type.value, owner.dim, config, latest, cancel.is_set)
        except Exception:  # closed meanwhile, no temp file for the verified copy, ...: build instead
            return False
        if saved is None:
            return False

        def adopt(t: _Txn) -> bool | None:
            with self.lock.write():
                self.refresh(t)
                if self.columns[node_type] is not owner or owner.ann is not None or cancel.is_set():
                    return False
                if self.seq != t.seq():
                    return None  # another thread moved the cache past this snapshot: its log is not in `t`
                owner.ann = vector_files.adopt_saved(
                    owner, config, saved, self.seq, lambda since: self._changed_since(t, since, self.seq)
                )
                return owner.ann is not None

        adopted: bool | None = None
        try:
            for _ in range(_ADOPT_TRIES):
                adopted = self._read(adopt, "load_vector_index")
                if adopted is not None:
                    break
        except HippographError:  # closed or damaged meanwhile: the build (or its caller) sees it
            return False
        ann = owner.ann
        if adopted and ann is not None and not cancel.is_set():
            # What only writes need, built here rather than by the first write: the index's id maps,
            # and the columns' row map (sharing the lock: no write runs meanwhile).
            ann.build_maps()
            with self.lock.read(), contextlib.suppress(HippographError):  # a write reports a bad row map
                _ = owner.row
        return bool(adopted)
