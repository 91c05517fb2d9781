"""`Repo`: the thin high-level API an agent uses.

Everything here goes through the `GraphBackend` protocol, so a custom backend
gets every feature. The optional capabilities of `hippograph.graph.protocol`
(`ModifiesMetadata`, so access counts and rewards from several processes add
up; `HasStats`, `VectorIndexed`, and maintenance's) are used when present and
replaced by plain protocol calls otherwise.

Access bookkeeping is off the hot path: `recall` only notes which nodes it
returned; the counts are written in batches (every `flush_interval` seconds,
every `flush_count` accesses, before the repo's next write, on `flush()` and
on `close()`). A crash can therefore lose the access counts of the last
interval, never graph data or ingestion records.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self

from ..engine.checks import as_datetime, check_id, check_ids, check_progress, utcnow
from ..engine.paths import DEFAULT_ROOT, check_repo_name, store_path
from ..errors import IngestionError, NotFoundError, StorageError, ValidationError
from . import maintenance
from .changeset import Changeset
from .explain import Explaining, explaining_of, why_not
from .fingerprint import FINGERPRINT_VERSION, fingerprint
from .hits import ExplainedHit, Hit, WhyNot
from .model import (
    ORPHAN_TYPES,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Semantic,
    as_node_types,
)
from .protocol import (
    CommitsIngestions,
    ExplainsAnswers,
    GraphBackend,
    HasStats,
    MetadataFn,
    ModifiesMetadata,
    VectorIndexed,
    existing_receipt,
)
from .recall import score_nodes
from .trajectory import Trajectory
from .value import ValueFunctionConfig, resolve_config

__all__ = [
    "DEFAULT_RECALL_TYPES",
    "DEFAULT_ROOT",
    "ForgetSummary",
    "Hit",
    "Repo",
    "RepoStats",
    "check_repo_name",
    "open_repo",
    "store_path",
]

DEFAULT_RECALL_TYPES: tuple[NodeType, ...] = (NodeType.SEMANTIC, NodeType.PROCEDURAL, NodeType.EPISODIC)


@dataclass(frozen=True)
class ForgetSummary:
    """What `Repo.forget` removed: the ingestion's own nodes, and tag/intent nodes left without links.

    `kept_ids` are tag and intent nodes the ingestion created that nodes outside it still link
    to (another ingestion's memories share them): they stay, with those links.
    """

    source_id: str
    deleted_ids: tuple[str, ...]
    orphan_ids: tuple[str, ...]
    kept_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepoStats:
    nodes: dict[str, int]
    links: int | None
    ingestion_records: int | None
    metadata: int | None
    dimension: int | None
    disk_bytes: int | None
    pending_accesses: int = 0

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes.values())


def modify_metadata(backend: GraphBackend, ids: Iterable[str], fn: MetadataFn) -> None:
    """Read-modify-write metadata of existing nodes, atomically where the backend can."""
    wanted = list(dict.fromkeys(ids))
    if isinstance(backend, ModifiesMetadata):
        backend.modify_metadata(wanted, fn)
        return
    current = backend.get_metadata(wanted)
    updates: dict[str, NodeMetadata] = {}
    for node_id in wanted:
        if backend.get_node(node_id) is None:
            continue
        new = fn(node_id, current.get(node_id))
        if new is not None:
            updates[node_id] = new
    if updates:
        backend.update_metadata(updates)


@dataclass
class _Accesses:
    """Accesses noted by `recall` and not yet written."""

    counts: dict[str, int] = field(default_factory=dict)
    last: dict[str, datetime] = field(default_factory=dict)

    def note(self, ids: Iterable[str], when: datetime) -> int:
        for node_id in ids:
            self.counts[node_id] = self.counts.get(node_id, 0) + 1
            prev = self.last.get(node_id)
            self.last[node_id] = when if prev is None or when > prev else prev
        return sum(self.counts.values())

    def apply(self, node_id: str, meta: NodeMetadata | None) -> NodeMetadata:
        base = meta or NodeMetadata(created_at=self.last[node_id])
        when = self.last[node_id]
        if base.last_accessed_at is not None and base.last_accessed_at > when:
            when = base.last_accessed_at
        return NodeMetadata(
            created_at=base.created_at,
            access_count=base.access_count + self.counts[node_id],
            last_accessed_at=when,
            cumulative_reward=base.cumulative_reward,
            reward_count=base.reward_count,
            custom=base.custom,
        )


_MAX_FLUSH = {"flush_interval": 86_400.0 * 365, "flush_count": float(2**62)}
"""Bounds of the flush settings: `Event.wait` overflows on an infinite interval, killing the flusher."""


class Repo:
    """Ingest trajectories exactly once, recall what matters, reward and forget."""

    def __init__(
        self,
        backend: GraphBackend,
        *,
        value_function: ValueFunctionConfig | Mapping[str, Any] | None = None,
        flush_interval: float = 1.0,
        flush_count: int = 1024,
    ) -> None:
        resolve_config(value_function)
        if not isinstance(backend, GraphBackend):
            raise ValidationError(f"backend {backend!r:.60} does not implement the GraphBackend protocol")
        for name, value in (("flush_interval", flush_interval), ("flush_count", flush_count)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < _MAX_FLUSH[name]:
                raise ValidationError(f"{name} must be a number from 0 up to {_MAX_FLUSH[name]:g}, got {value!r}")
        self._readonly = bool(getattr(backend, "readonly", False))
        self.backend = backend
        self.value_function = value_function
        self._flush_count = flush_count
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending = _Accesses()
        self._inflight: dict[str, tuple[bytes, Future[IngestionReceipt]]] = {}
        self._closed = False
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if flush_interval > 0:
            self._timer = threading.Thread(
                target=self._flush_loop, args=(flush_interval,), name="hippograph-flush", daemon=True
            )
            self._timer.start()

    # -- lifecycle -----------------------------------------------------------

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StorageError("the repo is closed", operation=operation)

    def _flush_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if self._pending.counts:
                try:
                    self.flush()
                except Exception:
                    continue

    def flush(self) -> None:
        """Write the access counts noted by `recall` so far."""
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, _Accesses()
            if pending.counts:
                try:
                    modify_metadata(self.backend, pending.counts, pending.apply)
                except BaseException:
                    with self._lock:
                        for node_id, n in pending.counts.items():
                            self._pending.counts[node_id] = self._pending.counts.get(node_id, 0) + n
                            self._pending.last.setdefault(node_id, pending.last[node_id])
                    raise

    def close(self) -> None:
        """Flush pending accesses and close the backend; idempotent."""
        if self._closed:
            return
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        try:
            self.flush()
        finally:
            self._closed = True
            self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- ingestion -----------------------------------------------------------

    def ingest(self, trajectory: Trajectory, structure: Callable[[Trajectory], Changeset]) -> IngestionReceipt:
        """Store a trajectory exactly once and return the authoritative receipt.

        An equal payload already stored returns the stored receipt without
        calling `structure`; a different one raises
        `IngestionError(reason="source_conflict")`. Concurrent calls for one
        source in this process share one `structure` call.
        """
        self._check_open("ingest")
        if not callable(structure):
            raise ValidationError(
                f"structure must be a callable Trajectory -> Changeset, got {type(structure).__name__}"
            )
        digest = fingerprint(trajectory)
        source_id = trajectory.source_id
        stored = self.backend.get_ingestion(source_id)
        if stored is not None:
            return existing_receipt(stored, digest, FINGERPRINT_VERSION)
        with self._lock:
            running = self._inflight.get(source_id)
            if running is None:
                future: Future[IngestionReceipt] = Future()
                self._inflight[source_id] = (digest, future)
        if running is not None:
            if running[0] != digest:
                raise IngestionError(
                    "source_conflict",
                    "a different payload for this source is being ingested",
                    source_id=source_id,
                )
            return running[1].result()
        try:
            receipt = self._ingest_new(trajectory, structure, digest)
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(receipt)
            return receipt
        finally:
            with self._lock:
                self._inflight.pop(source_id, None)

    def _ingest_new(
        self, trajectory: Trajectory, structure: Callable[[Trajectory], Changeset], digest: bytes
    ) -> IngestionReceipt:
        # A call that finished between our first lookup and our registration has stored it by now.
        stored = self.backend.get_ingestion(trajectory.source_id)
        if stored is not None:
            return existing_receipt(stored, digest, FINGERPRINT_VERSION)
        cs = structure(trajectory)
        if not isinstance(cs, Changeset):
            raise ValidationError(f"structure() must return a Changeset, got {type(cs).__name__}")
        receipt = IngestionReceipt(source_id=trajectory.source_id, node_ids=cs.node_ids, stored_at=utcnow())
        record = IngestionRecord(trajectory.source_id, digest, FINGERPRINT_VERSION, receipt)
        self.flush()
        _, authoritative = self.backend.commit_ingestion(record, cs)
        return authoritative

    def ingest_many(
        self, trajectories: Iterable[Trajectory], structure: Callable[[Trajectory], Changeset]
    ) -> list[IngestionReceipt]:
        """`ingest` for many trajectories, committed together: the receipts in input order.

        Sources already stored answer their stored receipt without a `structure`
        call; a source listed twice is structured and stored once. The new ones
        are written in one transaction where the backend offers
        `CommitsIngestions` (every built-in backend: one commit, one fsync in
        LMDB's `sync` mode), so either all of them are stored or none is. A
        ``source_conflict`` (with a stored record or within the batch), a
        malformed trajectory or a failing `structure` raises before anything is
        written. A backend without the capability commits them one by one.
        """
        self._check_open("ingest_many")
        if not callable(structure):
            raise ValidationError(
                f"structure must be a callable Trajectory -> Changeset, got {type(structure).__name__}"
            )
        if isinstance(trajectories, (str, bytes, Trajectory)) or not isinstance(trajectories, Iterable):
            raise ValidationError(f"trajectories must be an iterable of Trajectory, got {type(trajectories).__name__}")
        batch = list(trajectories)
        digests = [fingerprint(t) for t in batch]  # validates each trajectory
        receipts: dict[str, IngestionReceipt] = {}
        first: dict[str, bytes] = {}
        new: list[tuple[IngestionRecord, Changeset]] = []
        for trajectory, digest in zip(batch, digests, strict=True):
            source_id = trajectory.source_id
            if source_id in first:
                if first[source_id] != digest:
                    raise IngestionError(
                        "source_conflict", "the batch holds two different payloads for this source", source_id=source_id
                    )
                continue
            first[source_id] = digest
            stored = self.backend.get_ingestion(source_id)
            if stored is not None:
                receipts[source_id] = existing_receipt(stored, digest, FINGERPRINT_VERSION)
                continue
            cs = structure(trajectory)
            if not isinstance(cs, Changeset):
                raise ValidationError(f"structure() must return a Changeset, got {type(cs).__name__}")
            receipt = IngestionReceipt(source_id=source_id, node_ids=cs.node_ids, stored_at=utcnow())
            new.append((IngestionRecord(source_id, digest, FINGERPRINT_VERSION, receipt), cs))
        if new:
            self.flush()
            if isinstance(self.backend, CommitsIngestions):
                outcomes = self.backend.commit_ingestions(new)
            else:
                outcomes = [self.backend.commit_ingestion(record, cs) for record, cs in new]
            for (record, _), (_, receipt) in zip(new, outcomes, strict=True):
                receipts[record.source_id] = receipt
        return [receipts[t.source_id] for t in batch]

    # -- recall, reward, forget ----------------------------------------------

    def recall(
        self,
        query: object,
        tags: Iterable[object] = (),
        types: Sequence[NodeType | str] = DEFAULT_RECALL_TYPES,
        value_function: ValueFunctionConfig | Mapping[str, Any] | None = None,
        now: datetime | None = None,
        *,
        exact: bool = False,
        explain: bool = False,
    ) -> list[Hit]:
        """The memories that matter for `query` (and tag vectors), best first per type.

        Records an access on every returned node (written in the background).
        Each type's ``gate`` says what its threshold is compared with: the
        score (semantic, episodic, source), or the relevance alone (procedural,
        subgoal, tag and intent, whose thresholds of 0.7–0.9 are similarity
        gates: a never-used node scores at most 0.3 × relevance). The score
        orders the hits either way. Per-type params override both.
        With `explain`, each hit's `explanation` says what its score was made of
        (the hits themselves are the same).
        """
        self._check_open("recall")
        when = utcnow() if now is None else as_datetime(now, "now")
        config = value_function if value_function is not None else self.value_function
        hits = self._find(types, query, tags, config, when, exact, explaining_of(explain))
        if hits and not self._readonly:  # a read-only store has nowhere to keep access counts
            with self._lock:
                noted = self._pending.note((n.id for n, _ in hits), when)
            if noted >= self._flush_count:
                self.flush()
        return [h if isinstance(h, ExplainedHit) else Hit(*h) for h in hits]

    def why_not(
        self,
        node_id: str,
        query: object,
        tags: Iterable[object] = (),
        types: Sequence[NodeType | str] = DEFAULT_RECALL_TYPES,
        value_function: ValueFunctionConfig | Mapping[str, Any] | None = None,
        now: datetime | None = None,
        *,
        exact: bool = False,
    ) -> WhyNot:
        """Why `node_id` is (not) among `recall`'s hits for these arguments: the rule that left it out
        (below the threshold, gated out, outranked: by how much and by which hits), with its score's
        parts. Answers for the store as it is now, and records no access; an unknown id is a
        `NotFoundError`."""
        self._check_open("why_not")
        check_id(node_id)
        when = utcnow() if now is None else as_datetime(now, "now")
        config = value_function if value_function is not None else self.value_function
        self.flush()  # the accesses recorded so far count, as they will for the next recall
        explaining = Explaining(node_id)
        self._find(types, query, tags, config, when, exact, explaining)
        node = self.backend.get_node(node_id)
        if node is None or (explaining.subject is None and node.node_type in as_node_types(types)):
            raise NotFoundError("node", node_id)
        return why_not(node, as_node_types(types), explaining, resolve_config(config), exact)

    def _find(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        config: ValueFunctionConfig | Mapping[str, Any] | None,
        when: datetime,
        exact: bool,
        explaining: Explaining | None,
    ) -> list[tuple[Node, float]]:
        """The backend's answer; explained by the backend when it explains its own answers, else by
        scoring the nodes of the requested types exactly as `score_nodes` does."""
        backend = self.backend
        if explaining is None:
            return backend.find_candidates(types, query, tags, config, now=when, exact=exact)
        if isinstance(backend, ExplainsAnswers):
            return backend.find_candidates(types, query, tags, config, now=when, exact=exact, explain=explaining)

        def load(node_type: NodeType) -> list[tuple[Node, NodeMetadata | None]]:
            nodes = backend.get_nodes_by_type([node_type])
            meta = backend.get_metadata([n.id for n in nodes])
            return [(n, meta.get(n.id)) for n in nodes]

        dim = getattr(backend, "dimension", None)
        return score_nodes(load, types, query, tags, config, now=when, dimension=dim, explain=explaining)

    def reward(self, node_ids: Iterable[str], reward: float) -> None:
        """Add `reward` to each existing node's running reward."""
        self._check_open("reward")
        ids = [check_id(node_ids)] if isinstance(node_ids, str) else check_ids(node_ids)
        NodeMetadata().update_reward(reward)
        self.flush()

        def apply(node_id: str, meta: NodeMetadata | None) -> NodeMetadata:
            return (meta or NodeMetadata()).update_reward(reward)

        modify_metadata(self.backend, ids, apply)

    def forget(self, source_id: str) -> ForgetSummary:
        """The privacy verb: remove an ingestion's nodes, their metadata, orphans, and the record.

        Tag and intent nodes of the ingestion that nodes outside it still link to are kept
        (`ForgetSummary.kept_ids`): another ingestion's memories use them, and no surviving
        node loses a link to another surviving node. The record goes last, so a forget
        interrupted by a crash can be rerun.
        """
        self._check_open("forget")
        record = self.backend.get_ingestion(check_id(source_id, "source_id"))
        if record is None:
            raise NotFoundError("ingestion", source_id)
        self.flush()
        own = [n for n in map(self.backend.get_node, dict.fromkeys(record.receipt.node_ids)) if n is not None]
        own_ids = {n.id for n in own}
        kept = [n.id for n in own if n.node_type in ORPHAN_TYPES and n.linked_ids() - own_ids]
        ids = [n.id for n in own if n.id not in kept]
        neighbours = [n.id for n in self.backend.get_linked_nodes(ids) if n.node_type in ORPHAN_TYPES]
        orphans = maintenance.rewrite(self.backend, Changeset(), ids, [n for n in neighbours if n not in own_ids])
        self.backend.delete_ingestion(source_id)
        return ForgetSummary(source_id, tuple(ids), tuple(orphans), tuple(kept))

    # -- maintenance ---------------------------------------------------------

    def decay(
        self,
        threshold: float = 0.1,
        types: Iterable[NodeType | str] = (NodeType.SEMANTIC, NodeType.PROCEDURAL),
        now: datetime | None = None,
        *,
        progress: maintenance.Progress | None = None,
    ) -> maintenance.DecaySummary:
        """Delete nodes whose usage (recency × frequency × reward) fell below `threshold`.

        Uses the repo's per-type value-function params; a node without
        metadata scores 0.0. Orphaned tag and intent nodes go too.
        """
        self._check_open("decay")
        self.flush()
        config = resolve_config(self.value_function)
        return maintenance.decay(self.backend, config, threshold=threshold, types=types, now=now, progress=progress)

    def repair(self, *, progress: maintenance.Progress | None = None) -> maintenance.RepairSummary:
        """Remove links to missing nodes and tag/intent nodes left without links."""
        self._check_open("repair")
        self.flush()
        return maintenance.repair(self.backend, progress=progress)

    def consolidate(
        self,
        decide: Callable[[Semantic, Semantic], maintenance.Merge | None],
        threshold: float = 0.7,
        now: datetime | None = None,
        *,
        progress: maintenance.Progress | None = None,
    ) -> maintenance.ConsolidateSummary:
        """Merge near-duplicate semantic nodes sharing a membership tag, as `decide` rules."""
        self._check_open("consolidate")
        self.flush()
        config = resolve_config(self.value_function)
        return maintenance.consolidate(self.backend, config, decide, threshold=threshold, now=now, progress=progress)

    def vector_index_stats(self) -> dict[str, dict[str, Any]]:
        """Per node type: available (built and measured), building, vectors, live, pending, nodes,
        reclaimable, and the calibration's measurements (recall_estimate, index_recall, ef_search,
        min_similarity, exact_fallback and why; docs/architecture.md) ({} when the backend has no index)."""
        self._check_open("vector_index_stats")
        if not isinstance(self.backend, VectorIndexed):
            return {}
        return {kind: dict(stats) for kind, stats in self.backend.vector_index_stats().items()}

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, *, progress: maintenance.Progress | None = None
    ) -> list[str]:
        """Readies vector indexes now instead of at the first non-exact recall (a large type's first
        build takes seconds); reports ``progress("vector index <type>", rows, total)``. Returns the
        types built ([] when the backend has no index)."""
        self._check_open("build_vector_index")
        check_progress(progress)
        if not isinstance(self.backend, VectorIndexed):
            return []
        return list(self.backend.build_vector_index(types, progress))

    def reclaim_vector_index(self) -> list[str]:
        """Compacts vector indexes that carry deletion marks; returns the types rebuilt."""
        self._check_open("reclaim_vector_index")
        return list(self.backend.reclaim_vector_index()) if isinstance(self.backend, VectorIndexed) else []

    def verify(self, *, progress: maintenance.Progress | None = None) -> maintenance.VerifyReport:
        """Check the store's invariants (links, dimensions, records); changes nothing. Reports
        ``progress("verify links", nodes, total)``."""
        check_progress(progress)
        self._check_open("verify")
        self.flush()
        return maintenance.verify(self.backend, progress=progress)

    def stats(self) -> RepoStats:
        """Node counts per type, links, ingestion records, dimension, bytes on disk."""
        self._check_open("stats")
        pending = sum(self._pending.counts.values())
        if isinstance(self.backend, HasStats):
            s = self.backend.stats()
            return RepoStats(
                nodes=dict(s["nodes"]),
                links=s.get("links"),
                ingestion_records=s.get("ingestion_records"),
                metadata=s.get("metadata"),
                dimension=s.get("dimension"),
                disk_bytes=s.get("disk_bytes"),
                pending_accesses=pending,
            )
        counts = {t.value: len(self.backend.get_nodes_by_type([t])) for t in NodeType}
        return RepoStats(counts, None, None, None, None, None, pending)


def open_repo(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: GraphBackend | None = None,
    value_function: ValueFunctionConfig | Mapping[str, Any] | None = None,
    durability: Literal["sync", "fast"] = "sync",
    flush_interval: float = 1.0,
) -> Repo:
    """Open (creating if needed) the repo `name`.

    Default backend: LMDB in `path`, or `./.hippograph/<name>` when no path is
    given. Pass `backend` to use any object implementing `GraphBackend`.
    """
    check_repo_name(name)
    if backend is not None and path is not None:
        raise ValidationError("pass either path or backend, not both")
    if backend is None:
        from ..backends.lmdb import LMDB

        backend = LMDB(store_path(name, path), durability=durability)
    return Repo(backend, value_function=value_function, flush_interval=flush_interval)
