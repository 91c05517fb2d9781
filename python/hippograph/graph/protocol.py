"""The backend contract (DESIGN §3): the reference text for backend authors.

A backend stores nodes, undirected typed links, per-node metadata and
ingestion records, and answers candidate queries. Every method raises the typed
errors of `hippograph.errors`; a call that raises has written nothing. The
public conformance suite (`hippograph.testing`) holds every backend to this text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from .changeset import Changeset
from .model import EdgeType, IngestionReceipt, IngestionRecord, Node, NodeMetadata, NodeType, Outcome
from .value import ValueFunctionConfig

__all__ = ["GraphBackend"]


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
