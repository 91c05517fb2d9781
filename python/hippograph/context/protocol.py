"""What a backend implements to hold a context store (`ContextBackend`): ordered key-value spaces
changed in transactions.

Every rule of the context store (the URI tree, memories, sessions, commits, the job queue, which
groups change together) lives once, in `hippograph.context.ContextStore`, over this small contract;
a backend only has to make a transaction atomic, isolated and durable. `hippograph.testing.
ContextConformance` holds a backend to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal, Protocol, TypeVar, runtime_checkable

__all__ = ["SPACES", "ContextBackend", "KvTxn"]

T = TypeVar("T")

SPACES = (
    "ctx_nodes",
    "ctx_vectors",
    "ctx_memories",
    "ctx_memory_uris",
    "ctx_sessions",
    "ctx_messages",
    "ctx_commits",
    "ctx_jobs",
    "ctx_job_queue",
    "ctx_job_due",
    "ctx_job_uris",
    "ctx_job_state",
    "ctx_counters",
)
"""Every space a context store uses; a backend may create them all up front. ``ctx_job_due`` and
``ctx_job_uris`` hold only what a store written before the two-range job queue kept there: they are
read until a writable open moves it into ``ctx_job_queue`` (`jobs.upgrade`)."""


class KvTxn(Protocol):
    """One transaction over the spaces: a consistent snapshot; the writes of a write transaction
    become visible to others all at once, or not at all if the function given to
    `ContextBackend.context_write` raises. Keys and values are bytes; keys order bytewise."""

    def get(self, space: str, key: bytes) -> bytes | None:
        """The value at `key`, or None."""
        ...

    def put(self, space: str, key: bytes, value: bytes) -> None:
        """Inserts or replaces the value at `key`."""
        ...

    def delete(self, space: str, key: bytes) -> bool:
        """Removes `key`; False when it was not there."""
        ...

    def range(
        self, space: str, start: bytes = b"", stop: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """The pairs with ``start <= key < stop`` (no `stop`: to the end), by key ascending, or
        descending with `reverse`. Lazy: a caller that stops early reads no further. The caller
        does not write to `space` while it iterates."""
        ...


@runtime_checkable
class ContextBackend(Protocol):
    """A backend that holds a context store (InMemory, LMDB and PostgreSQL do)."""

    def context_write(self, fn: Callable[[KvTxn], T]) -> T:
        """Runs `fn` in one write transaction, durable before this returns (in the durable mode);
        nothing is written if `fn` raises. Write transactions are serialised, across processes
        where the backend is shared by several."""
        ...

    def context_read(self, fn: Callable[[KvTxn], T]) -> T:
        """Runs `fn` on a read-only snapshot (`put` and `delete` raise `StorageError`)."""
        ...


@runtime_checkable
class GetsOne(Protocol):
    """A `ContextBackend` that reads one record in a snapshot of its own without the transaction
    object `context_read` hands a longer read (LMDB): the whole cost of a small read such as
    `get_node` is a few microseconds, and that object was a fifth of it."""

    def context_get(self, space: str, key: bytes) -> bytes | None:
        """The value at `key` of `space` (one of `SPACES`), or None: `context_read` of one `get`."""
        ...


@runtime_checkable
class WritesDocuments(Protocol):
    """A `KvTxn` that writes a document with its jobs in one native step (LMDB): the records
    read and written are those `tree.put_document` and `jobs.enqueue` read and write, byte for
    byte, without a Python frame per record."""

    def put_document(
        self,
        segments: tuple[str, ...],
        content: str,
        abstract: str | None,
        overview: str | None,
        jobs: list[tuple[str, bytes]],
        now: int,
        max_attempts: int,
    ) -> int | None:
        """The revision written, or None when the step does not cover this write (a directory
        becoming a document, a stored vector to retire, a record it does not take apart, a parent
        that is a document): nothing is written then, and the caller writes it record by record.
        `jobs`: (kind, the msgpack of the payload the job record holds)."""
        ...


@runtime_checkable
class MovesJobs(Protocol):
    """A `KvTxn` that claims or completes a job in one native step (LMDB): the records read and
    written are those `jobs.claim` and `jobs.complete` read and write, byte for byte."""

    def move_job(self, job_id: int, step: Literal["claim", "complete"], now: int) -> bytes | None:
        """The job's record afterwards (a completion of a job done already writes nothing), or
        None when the step does not cover the move (no such job, a record it does not take apart,
        a claim of a job that is not pending): nothing written then, the caller decides."""
        ...

    def claim_job(self, kinds: list[str], now: int) -> tuple[int, bytes | None] | None:
        """`jobs.claim` of the runnable job of one of `kinds` due first (then lowest id): (its id,
        its record afterwards), (0, None) when none is due, or None when the step does not cover
        it (nothing written then, the caller decides)."""
        ...
