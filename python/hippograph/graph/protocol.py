"""The backend contract of graph memory: the reference text for backend authors.

A backend stores nodes, undirected typed links, per-node metadata and
ingestion records, and answers candidate queries. Every method raises the typed
errors of `hippograph.errors`; a call that raises has written nothing. The
public conformance suite (`hippograph.testing`) holds every backend to this text.
Beyond `GraphBackend`, a backend may offer the optional capabilities below
(`Rewrites`, `CopiesColumns`, ...): `Repo` and maintenance use them when present
and plain protocol calls otherwise (docs/custom-backends.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from ..engine.checks import Progress
from ..engine.columns import ColumnsCopy
from ..errors import IngestionError
from .changeset import Changeset
from .explain import Explaining
from .model import EdgeType, IngestionReceipt, IngestionRecord, Node, NodeMetadata, NodeType, Outcome
from .value import ValueFunctionConfig

__all__ = [
    "CommitsIngestions",
    "CopiesColumns",
    "GraphBackend",
    "HasStats",
    "ModifiesMetadata",
    "Rewrites",
    "VectorIndexed",
    "VerifiesStorage",
    "existing_receipt",
]


def existing_receipt(stored: IngestionRecord, payload_digest: bytes, fingerprint_version: int) -> IngestionReceipt:
    """What committing a source that `stored` already records answers: the stored receipt, exactly,
    when the payload is the same (digest and fingerprint version); else ``IngestionError(source_conflict)``.

    The one rule every `commit_ingestion` and `Repo.ingest` apply (call it inside the transaction that read
    `stored`).
    """
    if stored.payload_digest == payload_digest and stored.fingerprint_version == fingerprint_version:
        return stored.receipt
    raise IngestionError(
        "source_conflict",
        "a different payload (digest or fingerprint version) is already recorded",
        source_id=stored.source_id,
    )


@runtime_checkable
class GraphBackend(Protocol):
    """What `Repo` needs from storage; nothing else is assumed."""

    def apply_changeset(self, cs: Changeset) -> None:
        """Atomically put every addition, then apply links in order, then store `cs.metadata`.

        A same-id node is replaced whole: its old links are dropped on both
        ends and the links it carries are applied like the changeset's own.
        A link to a missing id (or from a node to itself) is a silent no-op.
        The first embedding fixes the store's dimension; another dimension,
        an unknown edge type or a malformed id is a `ValidationError`.
        """
        ...

    def delete_nodes(self, ids: Iterable[str]) -> None:
        """Remove nodes and every link to them from surviving nodes, atomically.

        Missing ids are ignored. Metadata and ingestion records stay.
        """
        ...

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
        """Best nodes of each type for the query, as `(node, score)`.

        Per type, in the order given: relevance = max(0, cos(query, e),
        max over tags cos(t, e)) (0.0 without an embedding or for a zero
        vector); score = the value function; keep score >= threshold; order by
        score descending then id ascending; keep top_k. Types are concatenated
        and a node already returned is dropped. A query or tag of the wrong
        dimension or with NaN/inf is a `ValidationError`.
        """
        ...

    def get_node(self, node_id: str) -> Node | None:
        """The node with its current links, or None."""
        ...

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        """Nodes linked to any of `ids` by `edge_type` (any when None), unique, by id."""
        ...

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        """Every node of the given types: type by type in the order given, by id within a type."""
        ...

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        """Metadata of those ids that have one."""
        ...

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        """Replace each id's metadata whole, atomically."""
        ...

    def delete_metadata(self, ids: Iterable[str]) -> None:
        """Remove metadata of the ids; missing ids are ignored."""
        ...

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        """The stored ingestion record of a source, or None."""
        ...

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        """The authoritative compare-and-set behind exactly-once ingestion.

        Absent source: apply `cs` and store `record` as one atomic step, then
        return `(INSERTED, record.receipt)`. Stored digest and version equal:
        change nothing, return `(EXISTING, stored receipt)` exactly. Either
        differs: change nothing, raise `IngestionError(reason="source_conflict")`.
        The check runs inside the backend's own transaction or uniqueness
        constraint so that it holds across threads, processes and hosts.
        """
        ...

    def delete_ingestion(self, source_id: str) -> bool:
        """Remove an ingestion record; only `Repo.forget` calls this. True if one existed."""
        ...

    def close(self) -> None:
        """Release resources; later calls raise `StorageError`."""
        ...

    def __enter__(self) -> GraphBackend: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


MetadataFn = Callable[[str, NodeMetadata | None], NodeMetadata | None]


@runtime_checkable
class ExplainsAnswers(Protocol):
    """A backend that explains its own answers: `find_candidates` takes ``explain=`` (a bool, or the
    `Explaining` that `Repo.why_not` hands it) and then returns `ExplainedHit`s. Repo explains the
    answers of other backends by scoring the requested types' nodes itself."""

    explains_answers: bool

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
    ) -> list[tuple[Node, float]]: ...


@runtime_checkable
class ModifiesMetadata(Protocol):
    """Read-modify-write of metadata in one transaction, so updates from several processes add up."""

    def modify_metadata(self, ids: Iterable[str], fn: MetadataFn) -> None:
        """For each existing node: ``fn(id, current metadata or None)``; a returned record replaces it."""
        ...


Ingestion = tuple[IngestionRecord, Changeset]


@runtime_checkable
class CommitsIngestions(Protocol):
    """Many ingestions in one transaction: one commit (and, where durable, one flush to disk)."""

    def commit_ingestions(self, items: Sequence[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
        """`commit_ingestion` of each `(record, changeset)` in order, as one atomic step; the
        outcomes in input order. A source listed twice is committed once: its later items answer
        `EXISTING` with the first one's receipt when their payload is the same. Any
        ``source_conflict`` (with a stored record or an earlier item) raises and writes nothing."""
        ...


@runtime_checkable
class Rewrites(Protocol):
    """Maintenance in one transaction."""

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Delete nodes with their metadata, apply `cs`, then delete (with their metadata) the tag and
        intent nodes among `orphan_candidates` left without links; returns those orphans' ids."""
        ...


@runtime_checkable
class CopiesColumns(Protocol):
    """Scoring columns read from a derived cache rather than by decoding every node."""

    def copy_columns(self, node_type: NodeType | str) -> ColumnsCopy:
        """One type's ids, embeddings and usage columns, as of now."""
        ...


@runtime_checkable
class HasStats(Protocol):
    def stats(self) -> Mapping[str, Any]:
        """``nodes`` (per type), and when known ``links``, ``ingestion_records``, ``metadata``,
        ``dimension``, ``disk_bytes``."""
        ...


@runtime_checkable
class VerifiesStorage(Protocol):
    def verify_storage(self) -> tuple[list[str], int]:
        """Storage-level checks `Repo.verify` runs first: (problems found, ingestion records checked)."""
        ...


@runtime_checkable
class VectorIndexed(Protocol):
    """Approximate candidates from vector indexes (HNSW), certified exact by rescoring."""

    def vector_index_stats(self) -> Mapping[str, Mapping[str, Any]]:
        """Per type: the vector index's state."""
        ...

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, progress: Progress | None = None
    ) -> list[str]:
        """Readies the vector index of each requested type now; the types built."""
        ...

    def reclaim_vector_index(self) -> list[str]:
        """Compacts vector indexes that carry deletion marks; the types rebuilt."""
        ...
