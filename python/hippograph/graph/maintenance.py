"""Memory maintenance: decay, graph repair and consolidation.

All three work through the `GraphBackend` protocol, so they run on any
backend. Two optional capabilities make them fast and atomic where present
(both built-in backends have them): `CopiesColumns` (scoring columns from the
backend's derived cache instead of decoding every node) and `Rewrites` (each
step in one transaction). Without `Rewrites` the same steps run as separate
protocol calls, each leaving a consistent graph. Ingestion records are never touched: re-ingesting a source
whose nodes were decayed or merged returns its original receipt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..engine.checks import Embedding, Progress, as_datetime, as_embedding, check_progress, finite_float, utcnow
from ..engine.columns import ColumnsCopy, TypeColumns
from ..errors import ValidationError
from .changeset import Changeset
from .model import ORPHAN_TYPES, EdgeType, Node, NodeMetadata, NodeType, Semantic, as_node_types
from .protocol import CopiesColumns, GraphBackend, Rewrites, VerifiesStorage
from .recall import usage_of
from .value import ResolvedConfig

__all__ = [
    "ConsolidateSummary",
    "DecaySummary",
    "Merge",
    "Progress",
    "RepairSummary",
    "VerifyReport",
    "columns_of",
    "consolidate",
    "decay",
    "repair",
    "rewrite",
    "verify",
]


@dataclass(frozen=True)
class Merge:
    """What `decide` returns to merge two nodes: the survivor's new text and vector."""

    proposition: str
    embedding: Embedding | Sequence[float]


@dataclass(frozen=True)
class DecaySummary:
    checked: int
    deleted: int
    deleted_ids: tuple[str, ...]
    orphan_ids: tuple[str, ...]


@dataclass(frozen=True)
class RepairSummary:
    checked: int
    repaired_nodes: int
    dangling_refs: int
    orphans_deleted: int
    orphan_ids: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.repaired_nodes or self.orphans_deleted)


@dataclass(frozen=True)
class ConsolidateSummary:
    checked: int
    candidate_pairs: int
    merged: int
    kept: int
    merges: tuple[tuple[str, str], ...]
    """(survivor, removed) per merge."""
    orphan_ids: tuple[str, ...]


def columns_of(backend: GraphBackend, node_type: NodeType) -> ColumnsCopy:
    """One type's ids, embeddings and usage columns, from the backend's cache when it has one."""
    if isinstance(backend, CopiesColumns):
        return _by_id(backend.copy_columns(node_type))
    nodes = backend.get_nodes_by_type([node_type])
    metas = backend.get_metadata([n.id for n in nodes])
    columns = TypeColumns()
    for node in nodes:
        columns.upsert(node.id, node.embedding, usage_of(metas.get(node.id)))
    return _by_id(columns.copy())


def _by_id(snap: ColumnsCopy) -> ColumnsCopy:
    """Rows in id order, so pairing and deletion order never depend on storage order."""
    order = np.array(sorted(range(len(snap.ids)), key=snap.ids.__getitem__), dtype=np.intp)
    return ColumnsCopy(
        [snap.ids[i] for i in order],
        np.ascontiguousarray(snap.matrix[order]),
        np.ascontiguousarray(snap.norms[order]),
        {k: np.ascontiguousarray(c[order]) for k, c in snap.columns.items()},
    )


def rewrite(
    backend: GraphBackend, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]
) -> list[str]:
    """Delete nodes (and metadata), apply `cs`, delete new tag/intent orphans; atomic where supported."""
    doomed, candidates = list(delete_ids), sorted(set(orphan_candidates))
    if isinstance(backend, Rewrites):
        return backend.rewrite(cs, doomed, candidates)
    if not cs.is_empty():  # first: it validates before writing, so a refused cs deletes nothing
        backend.apply_changeset(cs)
    if doomed:
        backend.delete_nodes(doomed)
        backend.delete_metadata(doomed)
    found = [
        n.id
        for n in map(backend.get_node, candidates)
        if n is not None and n.node_type in ORPHAN_TYPES and not n.linked_ids()
    ]
    if found:
        backend.delete_nodes(found)
        backend.delete_metadata(found)
    return found


def usage_scores(snap: ColumnsCopy, config: ResolvedConfig, node_type: NodeType, now: datetime) -> npt.NDArray[Any]:
    """The value function without relevance (recency × frequency × reward); 0.0 without metadata."""
    cols = snap.columns
    usage = _core.UsageColumns(
        cols["has_meta"], cols["timestamp"], cols["access_count"], cols["reward_count"], cols["cumulative_reward"]
    )
    ones = np.ones(len(snap.ids), np.float32)
    scores = _core.default_values(ones, usage, now.timestamp(), config.params[node_type].core_params)
    scores[usage.has_meta == 0] = 0.0
    return scores


def _neighbours(backend: GraphBackend, ids: Sequence[str]) -> list[str]:
    return [n.id for n in backend.get_linked_nodes(ids) if n.node_type in ORPHAN_TYPES] if ids else []


def decay(
    backend: GraphBackend,
    config: ResolvedConfig,
    *,
    threshold: float = 0.1,
    types: Iterable[NodeType | str] = (NodeType.SEMANTIC, NodeType.PROCEDURAL),
    now: datetime | None = None,
    progress: Progress | None = None,
) -> DecaySummary:
    """Delete nodes whose usage score is below `threshold`, then their orphaned tags/intents."""
    when = utcnow() if now is None else as_datetime(now, "now")
    threshold = finite_float(threshold, "decay threshold")
    progress = check_progress(progress)
    wanted = list(dict.fromkeys(as_node_types(types)))
    checked = 0
    doomed: list[str] = []
    for i, node_type in enumerate(wanted):
        snap = columns_of(backend, node_type)
        checked += len(snap.ids)
        scores = usage_scores(snap, config, node_type, when)
        doomed += [snap.ids[r] for r in np.flatnonzero(scores < threshold).tolist()]
        if progress is not None:
            progress("score", i + 1, len(wanted))
    orphans = rewrite(backend, Changeset(), doomed, _neighbours(backend, doomed)) if doomed else []
    if progress is not None:
        progress("delete", 1, 1)
    return DecaySummary(checked, len(doomed), tuple(doomed), tuple(orphans))


def repair(backend: GraphBackend, *, progress: Progress | None = None) -> RepairSummary:
    """Strip links to missing nodes and delete tag/intent nodes without links."""
    progress = check_progress(progress)
    nodes = backend.get_nodes_by_type(list(NodeType))
    present = {n.id for n in nodes}
    fixed: list[Node] = []
    dangling = 0
    for i, node in enumerate(nodes):
        clean = {e: ids & present for e, ids in node.links.items()}
        lost = sum(len(ids) for ids in node.links.values()) - sum(len(ids) for ids in clean.values())
        if lost:
            dangling += lost
            fixed.append(node.with_links(clean))
        if progress is not None and (i + 1) % 10_000 == 0:
            progress("scan", i + 1, len(nodes))
    lonely = [n.id for n in nodes if n.node_type in ORPHAN_TYPES and not (n.linked_ids() & present)]
    orphans = rewrite(backend, Changeset(additions=fixed), [], lonely) if fixed or lonely else []
    if progress is not None:
        progress("repair", 1, 1)
    return RepairSummary(len(nodes), len(fixed), dangling, len(orphans), tuple(orphans))


def _membership_groups(backend: GraphBackend, row_of: dict[str, int]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    members: list[int] = []
    offsets = [0]
    for tag in backend.get_nodes_by_type([NodeType.TAG]):
        rows = sorted(row_of[i] for i in tag.links.get(EdgeType.MEMBERSHIP, ()) if i in row_of)
        if len(rows) > 1:
            members += rows
            offsets.append(len(members))
    return np.array(members, np.uint32), np.array(offsets, np.uint64)


def _merged_metadata(keep: NodeMetadata | None, gone: NodeMetadata | None) -> NodeMetadata | None:
    if keep is None or gone is None:
        return keep or gone
    lasts = [t for t in (keep.last_accessed_at, gone.last_accessed_at) if t is not None]
    return NodeMetadata(
        created_at=min(keep.created_at, gone.created_at),
        access_count=keep.access_count + gone.access_count,
        last_accessed_at=max(lasts) if lasts else None,
        cumulative_reward=keep.cumulative_reward + gone.cumulative_reward,
        reward_count=keep.reward_count + gone.reward_count,
        custom={**gone.custom, **keep.custom},
    )


def _merged_links(backend: GraphBackend, keep: str, gone: str, survivor: dict[str, str]) -> dict[EdgeType, set[str]]:
    """The survivor's links: both nodes' links as stored now (earlier merges of the pass have
    written theirs), each end that this pass merges away replaced by its survivor."""
    links: dict[EdgeType, set[str]] = {e: set() for e in EdgeType}
    for node in (backend.get_node(keep), backend.get_node(gone)):
        for edge, ids in (node.links if node is not None else {}).items():
            links[edge] |= {survivor.get(i, i) for i in ids}
    return {e: ids - {keep, gone} for e, ids in links.items() if ids - {keep, gone}}


def consolidate(
    backend: GraphBackend,
    config: ResolvedConfig,
    decide: Callable[[Semantic, Semantic], Merge | None],
    *,
    threshold: float = 0.7,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> ConsolidateSummary:
    """Merge near-duplicate semantic nodes that share a membership tag, as `decide` says.

    Pairs come from the Rust core (cosine > threshold, greedy best partner,
    so no node is in two pairs). Every pair is decided and its merged node
    validated before the first write: a `decide` that raises or answers
    something invalid leaves the store as it was. Then each merge is one
    `rewrite` and leaves a consistent graph on its own.
    """
    threshold = finite_float(threshold, "consolidation threshold")
    progress = check_progress(progress)
    if not callable(decide):
        raise ValidationError(f"decide must be callable (a, b) -> Merge | None, got {type(decide).__name__}")
    when = utcnow() if now is None else as_datetime(now, "now")
    snap = columns_of(backend, NodeType.SEMANTIC)
    row_of = {node_id: r for r, node_id in enumerate(snap.ids)}
    members, offsets = _membership_groups(backend, row_of)
    a_rows, b_rows, _ = _core.consolidation_pairs(snap.matrix, snap.norms, members, offsets, float(threshold))
    usage = usage_scores(snap, config, NodeType.SEMANTIC, when)
    pairs = [tuple(sorted((snap.ids[a], snap.ids[b]))) for a, b in zip(a_rows.tolist(), b_rows.tolist(), strict=True)]
    decided: list[tuple[Semantic, Semantic, Semantic]] = []
    for i, (first, second) in enumerate(pairs):
        a, b = backend.get_node(first), backend.get_node(second)
        if not (isinstance(a, Semantic) and isinstance(b, Semantic)):
            continue
        decision = decide(a, b)
        if progress is not None:
            progress("decide", i + 1, len(pairs))
        if decision is None:
            continue
        if not isinstance(decision, Merge):
            raise ValidationError(f"decide() must return Merge or None, got {type(decision).__name__}")
        keep, gone = (a, b) if usage[row_of[first]] >= usage[row_of[second]] else (b, a)
        merged = Semantic(
            id=keep.id,
            proposition=decision.proposition,
            confidence=keep.confidence,
            embedding=as_embedding(decision.embedding, f"merged embedding of {keep.id!r}"),
            created_at=keep.created_at,
        )
        dim = snap.matrix.shape[1]
        if merged.embedding is not None and dim and merged.embedding.shape[0] != dim:
            raise ValidationError(
                f"merged embedding of {keep.id!r} has dimension {merged.embedding.shape[0]}, the store holds {dim}"
            )
        decided.append((keep, gone, merged))
    survivor = {gone.id: keep.id for keep, gone, _ in decided}
    merges: list[tuple[str, str]] = []
    orphans: list[str] = []
    for keep, gone, merged in decided:
        metas = backend.get_metadata([keep.id, gone.id])
        cs = Changeset(additions=[merged.with_links(_merged_links(backend, keep.id, gone.id, survivor))])
        meta = _merged_metadata(metas.get(keep.id), metas.get(gone.id))
        if meta is not None:
            cs.put_metadata(keep.id, meta)
        orphans += rewrite(backend, cs, [gone.id], _neighbours(backend, [gone.id]))
        merges.append((keep.id, gone.id))
    return ConsolidateSummary(
        len(snap.ids), len(pairs), len(merges), len(pairs) - len(merges), tuple(merges), tuple(orphans)
    )


@dataclass(frozen=True)
class VerifyReport:
    """What `verify` found; `ok` when the store keeps every invariant."""

    checked_nodes: int
    checked_records: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


_VERIFY_STEP = 4096
"""Nodes between two progress reports of `verify`."""


def verify(backend: GraphBackend, *, limit: int = 100, progress: Progress | None = None) -> VerifyReport:
    """Check the graph invariants through the protocol (and the backend's own checks).

    Invariants: every link ends at an existing node and is recorded on both
    ends; every embedding has the store's one dimension; every ingestion
    record's receipt names its own source. A backend with storage-level checks
    (`VerifiesStorage`; LMDB and PostgreSQL) runs them first, so it can refuse a
    damaged store before anything else reads it.
    """
    problems: list[str] = []
    records = 0
    if isinstance(backend, VerifiesStorage):
        problems, records = backend.verify_storage()
    nodes = {n.id: n for n in backend.get_nodes_by_type(list(NodeType))}
    dims = sorted({n.embedding.shape[0] for n in nodes.values() if n.embedding is not None})
    if len(dims) > 1:
        problems.append(f"embeddings have several dimensions: {dims}")
    for done, node in enumerate(nodes.values(), start=1):
        if progress is not None and (done % _VERIFY_STEP == 0 or done == len(nodes)):
            progress("verify links", done, len(nodes))
        for edge, ids in node.links.items():
            for other in sorted(ids):
                peer = nodes.get(other)
                if peer is None:
                    problems.append(f"node {node.id!r} has a {edge.value} link to missing node {other!r}")
                elif node.id not in peer.links.get(edge, ()):
                    problems.append(f"{edge.value} link {node.id!r} -> {other!r} is not recorded on {other!r}")
    return VerifyReport(len(nodes), records, tuple(problems[:limit]))
