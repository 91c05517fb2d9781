"""Pieces every built-in backend shares: argument checks, closing, locking, the fork guard, and the
vector-index and column-copy methods over a backend's `DerivedColumns`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, ClassVar, NoReturn, Self

from .. import _core
from ..engine.checks import Progress, check_id, check_ids, check_progress
from ..engine.columns import ColumnsCopy
from ..engine.derived import DerivedColumns
from ..errors import StorageError, ValidationError
from ..graph.changeset import Changeset, check_changeset
from ..graph.model import (
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    as_node_type,
    as_node_types,
)
from ..graph.protocol import Ingestion, existing_receipt
from ..graph.recall import build_vector_indexes

__all__ = [
    "BackendBase",
    "DerivedBackend",
    "RWLock",
    "ReadOnlyLinks",
    "check_ids",
    "check_metadata_updates",
    "check_record",
    "shared_node",
]


def check_metadata_updates(updates: Mapping[str, NodeMetadata]) -> dict[str, NodeMetadata]:
    if not isinstance(updates, Mapping):
        raise ValidationError(f"metadata updates must be a mapping of id to NodeMetadata, got {type(updates).__name__}")
    for node_id, meta in updates.items():
        check_id(node_id, "metadata id")
        if not isinstance(meta, NodeMetadata):
            raise ValidationError(f"metadata of {node_id!r} must be NodeMetadata, got {type(meta).__name__}")
    return dict(updates)


def check_record(record: IngestionRecord, cs: Changeset, dim: int | None) -> int | None:
    if not isinstance(record, IngestionRecord):
        raise ValidationError(f"expected an IngestionRecord, got {type(record).__name__}")
    return check_changeset(cs, dim)


Commit = Callable[[list[Ingestion]], list[tuple[Outcome, IngestionReceipt]]]


def commit_each_source_once(items: object, commit: Commit) -> list[tuple[Outcome, IngestionReceipt]]:
    """`CommitsIngestions.commit_ingestions` around a backend's `commit` of distinct sources.

    Validates every item first (nothing is written when one is malformed),
    answers a repeated source from its first item (``source_conflict`` when
    the payload differs), and has `commit` write the first items in one
    transaction; the outcomes come back in input order.
    """
    if not isinstance(items, (list, tuple)):
        raise ValidationError(f"ingestions must be a list of (IngestionRecord, Changeset), got {type(items).__name__}")
    first: dict[str, int] = {}
    unique: list[Ingestion] = []
    slots: list[tuple[int, bool]] = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValidationError(f"an ingestion must be a (IngestionRecord, Changeset) pair, got {item!r:.80}")
        record, cs = item
        check_record(record, cs, None)
        at = first.get(record.source_id)
        if at is None:
            at = first[record.source_id] = len(unique)
            unique.append((record, cs))
            slots.append((at, False))
        else:
            existing_receipt(unique[at][0], record.payload_digest, record.fingerprint_version)
            slots.append((at, True))
    outcomes = commit(unique) if unique else []
    return [(Outcome.EXISTING, outcomes[at][1]) if again else outcomes[at] for at, again in slots]


class ReadOnlyLinks(dict[EdgeType, frozenset[str]]):
    """The links of a node a backend shares between calls (its caches hand out one instance).

    A dict that refuses changes, so no caller can alter what the next caller
    gets; it equals the plain dict of the same links and pickles (and copies)
    as one.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("the links of a stored node are read-only; build a new node to change them")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[dict[EdgeType, frozenset[str]]], tuple[dict[EdgeType, frozenset[str]]]]:
        return dict, (dict(self),)


def shared_node(node: Node, links: Mapping[EdgeType, Iterable[str]]) -> Node:
    """`node` with `links` (empty sets left out) as a node a cache may hand to every caller."""
    out = object.__new__(type(node))  # as `Node.with_links`: a shallow copy on the hydration path
    out.__dict__.update(node.__dict__)
    out.__dict__["links"] = ReadOnlyLinks({e: frozenset(ids) for e, ids in links.items() if ids})
    return out


_process = [os.getpid()]
"""This process's id, kept current by a fork hook: every call checks it, and `os.getpid` is a
system call."""
os.register_at_fork(after_in_child=lambda: _process.__setitem__(0, os.getpid()))


class RWLock:
    """Many readers or one writer; a waiting writer goes before new readers so it never starves.

    The gate is native (`_core.Gate`): a reader that need not wait enters and leaves without a
    Python frame, and every query and write takes one at least once. Any wait releases the GIL.
    """

    __slots__ = ("_gate", "_reader", "_writer")

    def __init__(self) -> None:
        self._gate = _core.Gate()
        self._reader = self._gate.reader()
        self._writer = self._gate.writer()

    def read(self) -> AbstractContextManager[None]:
        return self._reader

    def write(self) -> AbstractContextManager[None]:
        return self._writer


class BackendBase:
    """Context-manager protocol and the closed-state guard."""

    _closed = False

    def _check_open(self, operation: str) -> None:
        if self._closed:
            raise StorageError("the backend is closed", operation=operation)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class DerivedBackend(BackendBase):
    """A backend that answers queries from `_derived` (one `TypeColumns` per node type).

    Subclasses set `_derived` and, when the store can change behind this process,
    override `_refresh` to catch the columns up first. `_fork_label` names the
    backend in the error raised when it is used in a child of `fork()` (set `_pid`
    at open); None: it may be used there.
    """

    _derived: DerivedColumns[NodeType]
    _fork_label: ClassVar[str | None] = None
    _pid: int = 0

    def _guard(self, operation: str) -> None:
        if self._closed:
            raise StorageError("the backend is closed", operation=operation)
        if self._fork_label is not None and _process[0] != self._pid:
            raise StorageError(
                f"this {self._fork_label} was opened before fork(); open it again in the child process",
                operation=operation,
            )

    def _refresh(self, operation: str) -> None:
        """Brings `_derived` up to date with the store (nothing to do when every write goes through it)."""

    def _before_build(self, wanted: list[NodeType]) -> None:
        """Runs before `build_vector_index` builds (LMDB adopts saved indexes here)."""

    def _after_build(self, built: list[str]) -> None:
        """Runs after `build_vector_index` built `built` (LMDB saves them here)."""

    def copy_columns(self, node_type: NodeType | str) -> ColumnsCopy:
        """A copy of one type's ids, embeddings and usage columns, as of now (maintenance reads it)."""
        self._guard("copy_columns")
        wanted = as_node_type(node_type)
        self._refresh("copy_columns")
        with self._derived.lock.read():
            return self._derived.columns[wanted].copy()

    def vector_index_stats(self) -> dict[str, dict[str, Any]]:
        """Per type: available (built and measured), building, error, nodes, vectors, live, pending,
        reclaimable marks, loaded (read from saved files rather than built here) and the calibration's
        measurements."""
        self._guard("vector_index_stats")
        self._refresh("vector_index_stats")
        with self._derived.lock.read():
            return self._derived.stats()

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, progress: Progress | None = None
    ) -> list[str]:
        """Readies now, rather than at the first non-exact query, the vector index of each requested
        type (None: all) large enough to use one; returns the types built."""
        self._guard("build_vector_index")
        wanted = list(NodeType) if types is None else as_node_types(types)
        check_progress(progress)
        self._refresh("build_vector_index")
        self._before_build(wanted)
        with self._derived.lock.read():
            built = build_vector_indexes(self._derived.columns, wanted, progress)
        self._after_build(built)
        return built

    def reclaim_vector_index(self) -> list[str]:
        """Rebuilds the vector indexes that carry deletion marks; returns the types rebuilt."""
        self._guard("reclaim_vector_index")
        with self._derived.lock.write():
            return self._derived.reclaim()
