"""`InMemory`: the reference backend every other one is compared against.

Plain dicts behind a readers-writer lock; short on purpose, so that its
behaviour can be read off the code. Nothing survives the process. Nodes are
stored without links and assembled with them on first read; the assembled
node is kept until a write changes the node or its links.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..context.protocol import KvTxn
from ..engine.checks import check_id
from ..engine.derived import DerivedColumns
from ..engine.rows import VectorDtype, check_vector_dtype
from ..engine.vector_index import DEFAULT_ANN, AnnConfig, check_ann
from ..graph.changeset import Changeset, check_changeset, normalised_links
from ..graph.explain import Explaining, explaining_of
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
    as_node_types,
)
from ..graph.protocol import Ingestion, existing_receipt
from ..graph.recall import find_candidates, usage_of
from ..graph.value import ValueFunctionConfig
from ..store.protocol import EntryTxn
from ._base import (
    DerivedBackend,
    RWLock,
    check_ids,
    check_metadata_updates,
    check_record,
    commit_each_source_once,
    shared_node,
)
from ._context import MemoryContext
from ._entries import MemoryEntries

__all__ = ["InMemory"]

T = TypeVar("T")


class InMemory(DerivedBackend):
    """The full `GraphBackend`, `EntryBackend` and `ContextBackend` contracts in process memory (thread-safe)."""

    def __init__(self, *, ann: AnnConfig | None = DEFAULT_ANN, vector_dtype: VectorDtype = "float32") -> None:
        """`ann`: when a type outgrows `ann.min_nodes`, non-exact queries draw
        candidates from an HNSW index (see `hippograph.ann`); None disables it.
        `vector_dtype`: the precision scans read the vectors in (`hippograph.engine.rows`)."""
        dtype, ann = check_vector_dtype(vector_dtype), check_ann(ann)
        self._lock = RWLock()
        self._nodes: dict[str, Node] = {}
        self._links: dict[str, dict[EdgeType, set[str]]] = {}
        self._meta: dict[str, NodeMetadata] = {}
        self._assembled: dict[str, Node] = {}
        """Nodes read since their last change, with their links (read-only: every reader gets the same)."""
        self._records: dict[str, IngestionRecord] = {}
        self._derived: DerivedColumns[NodeType] = DerivedColumns(NodeType, ann, self._lock, vector_dtype=dtype)
        self._dim: int | None = None
        self._entries = MemoryEntries()
        self._context = MemoryContext()

    @property
    def dimension(self) -> int | None:
        return self._dim

    # -- writes ------------------------------------------------------------

    def _unlink_all(self, node_id: str) -> None:
        self._assembled.pop(node_id, None)
        for edge, others in self._links.pop(node_id, {}).items():
            for other in others:
                back = self._links.get(other, {}).get(edge)
                if back is not None:
                    back.discard(node_id)
                    self._assembled.pop(other, None)

    def _apply(self, cs: Changeset, dim: int | None) -> None:
        for node in cs.additions:
            if node.id in self._nodes:
                self._unlink_all(node.id)
            self._nodes[node.id] = node.with_links({})
            self._derived.put(node.id, node.node_type, node.embedding, usage_of(self._meta.get(node.id)))
        for a, b, edge in normalised_links(cs):
            if a != b and a in self._nodes and b in self._nodes:
                self._links.setdefault(a, {}).setdefault(edge, set()).add(b)
                self._links.setdefault(b, {}).setdefault(edge, set()).add(a)
                self._assembled.pop(a, None)
                self._assembled.pop(b, None)
        self._put_meta(cs.metadata)
        self._dim = dim

    def _put_meta(self, updates: Mapping[str, NodeMetadata]) -> None:
        for node_id, meta in updates.items():
            self._meta[node_id] = meta
            self._derived.set_usage(node_id, usage_of(meta))

    def _purge(self, ids: Iterable[str]) -> None:
        for node_id in ids:
            node = self._nodes.pop(node_id, None)
            if node is not None:
                self._unlink_all(node_id)
                self._derived.drop(node_id)
            self._meta.pop(node_id, None)

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Maintenance in one step: delete nodes with their metadata, apply `cs`, drop new orphans.

        Orphans are the tag and intent nodes among `orphan_candidates` left
        without links; they are deleted with their metadata and returned.
        """
        self._check_open("rewrite")
        doomed = check_ids(delete_ids)
        candidates = check_ids(orphan_candidates)
        with self._lock.write():
            dim = check_changeset(cs, self._dim)
            self._purge(doomed)
            self._apply(cs, dim)
            orphans = [
                c
                for c in sorted(set(candidates))
                if c in self._nodes
                and self._nodes[c].node_type in ORPHAN_TYPES
                and not any(self._links.get(c, {}).values())
            ]
            self._purge(orphans)
            return orphans

    def apply_changeset(self, cs: Changeset) -> None:
        self._check_open("apply_changeset")
        with self._lock.write():
            self._apply(cs, check_changeset(cs, self._dim))

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self._check_open("delete_nodes")
        wanted = check_ids(ids)
        with self._lock.write():
            for node_id in wanted:
                node = self._nodes.pop(node_id, None)
                if node is not None:
                    self._unlink_all(node_id)
                    self._derived.drop(node_id)

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        self._check_open("update_metadata")
        checked = check_metadata_updates(updates)
        with self._lock.write():
            self._put_meta(checked)

    def modify_metadata(
        self, ids: Iterable[str], fn: Callable[[str, NodeMetadata | None], NodeMetadata | None]
    ) -> None:
        """Read-modify-write the metadata of existing nodes under one lock (`Repo` uses it)."""
        self._check_open("modify_metadata")
        wanted = check_ids(ids)
        with self._lock.write():
            updates = {}
            for node_id in wanted:
                if node_id in self._nodes:
                    new = fn(node_id, self._meta.get(node_id))
                    if new is not None:
                        updates[node_id] = new
            self._put_meta(check_metadata_updates(updates))

    def delete_metadata(self, ids: Iterable[str]) -> None:
        self._check_open("delete_metadata")
        wanted = check_ids(ids)
        with self._lock.write():
            for node_id in wanted:
                if self._meta.pop(node_id, None) is not None:
                    self._derived.set_usage(node_id, None)

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        self._check_open("commit_ingestion")
        check_record(record, cs, None)
        with self._lock.write():
            stored = self._records.get(record.source_id)
            if stored is None:
                self._apply(cs, check_changeset(cs, self._dim))
                self._records[record.source_id] = record
                return Outcome.INSERTED, record.receipt
            return Outcome.EXISTING, existing_receipt(stored, record.payload_digest, record.fingerprint_version)

    def commit_ingestions(self, items: Sequence[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
        """`CommitsIngestions`: every outcome and dimension settled before the first change."""
        self._check_open("commit_ingestions")

        def commit(unique: list[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
            with self._lock.write():
                outcomes: list[tuple[Outcome, IngestionReceipt]] = []
                writes: list[tuple[Changeset, int | None]] = []
                dim = self._dim
                for record, cs in unique:
                    stored = self._records.get(record.source_id)
                    if stored is None:
                        dim = check_changeset(cs, dim)
                        writes.append((cs, dim))
                        outcomes.append((Outcome.INSERTED, record.receipt))
                    else:
                        receipt = existing_receipt(stored, record.payload_digest, record.fingerprint_version)
                        outcomes.append((Outcome.EXISTING, receipt))
                for cs, after in writes:
                    self._apply(cs, after)
                for (record, _), (outcome, _) in zip(unique, outcomes, strict=True):
                    if outcome is Outcome.INSERTED:
                        self._records[record.source_id] = record
                return outcomes

        return commit_each_source_once(items, commit)

    def delete_ingestion(self, source_id: str) -> bool:
        self._check_open("delete_ingestion")
        check_id(source_id, "source_id")
        with self._lock.write():
            return self._records.pop(source_id, None) is not None

    # -- reads -------------------------------------------------------------

    def _assemble(self, node_id: str, stored: Node) -> Node:
        node = self._assembled[node_id] = shared_node(stored, self._links.get(node_id, {}))
        return node

    def _node(self, node_id: str) -> Node | None:
        """The stored node with its links (assembled once until a write changes either)."""
        stored = self._nodes.get(node_id)
        if stored is None:
            return None
        return self._assembled.get(node_id) or self._assemble(node_id, stored)

    def _hydrate(self, ids: list[str], metadata: bool) -> dict[str, tuple[Node, NodeMetadata | None]]:
        """`_node` for each id, inlined: recall calls it on every query. An assembled node answers
        with one lookup (each of a large store's dicts costs cache misses per id)."""
        nodes, assembled = self._nodes, self._assembled
        out: dict[str, tuple[Node, NodeMetadata | None]] = {}
        for node_id in ids:
            node = assembled.get(node_id)
            if node is None:
                stored = nodes.get(node_id)
                if stored is None:
                    continue
                node = self._assemble(node_id, stored)
            out[node_id] = (node, None)
        if metadata:
            meta = self._meta
            return {node_id: (node, meta.get(node_id)) for node_id, (node, _) in out.items()}
        return out

    def close(self) -> None:
        self._derived.close()
        super().close()

    # -- entries of a scoped store ----------------------------------------------

    def entry_write(self, fn: Callable[[EntryTxn], T]) -> T:
        return self.entry_write_counted(fn)[0]

    def entry_write_counted(self, fn: Callable[[EntryTxn], T]) -> tuple[T, int, int]:
        """`store.protocol.CountsWrites`: `entry_write` and the counter before and after."""
        self._guard("entry_write")
        return self._entries.write(fn)

    def entry_read(self, fn: Callable[[EntryTxn], T]) -> T:
        self._guard("entry_read")
        return self._entries.read(fn)

    # -- spaces of a context store -------------------------------------------------

    def context_write(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_write`: writers run one at a time; what `fn` changed is undone if it raises."""
        self._guard("context_write")
        return self._context.write(fn)

    def context_read(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_read`: readers run side by side, never during a write."""
        self._guard("context_read")
        return self._context.read(fn)

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
        self._check_open("find_candidates")
        explaining = explaining_of(explain)
        with self._lock.read():
            return find_candidates(
                self._derived.columns,
                types,
                query,
                tags,
                value_function,
                now,
                self._dim,
                self._hydrate,
                exact=exact,
                explain=explaining,
            )

    def get_node(self, node_id: str) -> Node | None:
        self._check_open("get_node")
        check_id(node_id)
        with self._lock.read():
            return self._node(node_id)

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        self._check_open("get_linked_nodes")
        wanted = check_ids(ids)
        edge = None if edge_type is None else as_edge_type(edge_type)
        with self._lock.read():
            found: set[str] = set()
            for node_id in wanted:
                for e, others in self._links.get(node_id, {}).items():
                    if edge is None or e == edge:
                        found |= others
            return [n for n in map(self._node, sorted(found)) if n is not None]

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        self._check_open("get_nodes_by_type")
        wanted = as_node_types(types)
        with self._lock.read():
            out: list[Node] = []
            for node_type in dict.fromkeys(wanted):
                ids = sorted(self._derived.columns[node_type].ids)
                out += [n for n in map(self._node, ids) if n is not None]
            return out

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        self._check_open("get_metadata")
        wanted = check_ids(ids)
        with self._lock.read():
            return {i: self._meta[i] for i in wanted if i in self._meta}

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        self._check_open("get_ingestion")
        check_id(source_id, "source_id")
        with self._lock.read():
            return self._records.get(source_id)

    def stats(self) -> dict[str, Any]:
        """Counts for `Repo.stats`: nodes per type, links, records, dimension."""
        self._check_open("stats")
        with self._lock.read():
            links = sum(len(ids) for by_edge in self._links.values() for ids in by_edge.values()) // 2
            return {
                "nodes": {t.value: len(self._derived.columns[t]) for t in NodeType},
                "links": links,
                "ingestion_records": len(self._records),
                "metadata": len(self._meta),
                "dimension": self._dim,
                "disk_bytes": 0,
            }
