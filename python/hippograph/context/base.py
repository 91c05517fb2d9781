"""The plumbing every group of `ContextStore` calls shares: the backend, its transactions, the
argument helpers, and a document written with its background work (docs/context.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self, TypeVar

from ..engine.checks import check_collection, check_flag, finite_float
from ..engine.codec import packb
from ..engine.vector_index import DEFAULT_ANN, AnnConfig, check_ann
from ..errors import ConfigError, ValidationError
from . import jobs, tree
from .keys import counter
from .model import (
    check_limit,
    check_name,
    check_payload,
    check_uri,
)
from .protocol import ContextBackend, GetsOne, KvTxn
from .vectors import VectorCache

__all__ = [
    "DIM",
    "JOB_STATUSES",
    "MAX_LIMIT",
    "MAX_TOP_K",
    "MEMORY_STATUSES",
    "ContextBase",
    "JobSpec",
    "delay_of",
    "fields_of",
    "job_id_of",
    "now_us",
    "scope_of",
    "str_set",
]

T = TypeVar("T")
JobSpec = tuple[str, Mapping[str, Any] | None]
DIM = b"dim"
MAX_TOP_K = 1000
MAX_LIMIT = 10_000
FIELDS = frozenset({"uri", "content", "abstract", "overview", "score"})
MEMORY_STATUSES = frozenset({"active", "superseded", "candidate"})
JOB_STATUSES = frozenset(jobs.STATUSES)


def now_us() -> int:
    return time.time_ns() // 1000


def str_set(value: object, what: str) -> frozenset[str]:
    """A collection of str as a set; a single str, anything not a collection, or a member that is
    not a str is refused."""
    given = check_collection(value, what, "str")
    for i, v in enumerate(given):
        if not isinstance(v, str):
            raise ValidationError(f"{what}[{i}] must be a str, got {type(v).__name__}")
    return frozenset(given)


def fields_of(value: object) -> frozenset[str]:
    if value is None:
        return tree.ALL_FIELDS
    got = str_set(value, "fields")
    unknown = got - FIELDS
    if unknown:
        raise ValidationError(f"unknown field {sorted(map(str, unknown))[0]!r:.40}")
    return got | {"uri"}


def scope_of(value: object, what: str = "scope") -> tuple[str, ...]:
    return () if value is None else check_uri(value, what, root=True)


def job_id_of(value: object, what: str = "job id") -> int:
    """A job's (or memory's) id: a positive int an unsigned 64-bit key can hold."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 64:
        raise ValidationError(f"{what} must be a positive int below 2**64, got {value!r:.40}")
    return value


def delay_of(value: object) -> int:
    seconds = finite_float(value, "delay_s")
    if not 0 <= seconds <= 366 * 86400:
        raise ValidationError(f"delay_s must be in [0, one year], got {seconds}")
    return int(seconds * 1_000_000)


class ContextBase:
    """`ContextStore` without its calls: what each group of calls builds on."""

    def __init__(
        self,
        backend: ContextBackend,
        *,
        document_jobs: Sequence[str] = (),
        dim: int | None = None,
        max_attempts: int = 5,
        owns_backend: bool = False,
        ann: AnnConfig | None = DEFAULT_ANN,
    ) -> None:
        for name in ("context_write", "context_read"):
            if not callable(getattr(backend, name, None)):
                raise ConfigError(f"{type(backend).__name__} does not hold a context store (no {name})")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0):
            raise ConfigError(f"dim must be a positive int, got {dim!r}")
        self.backend = backend
        self._context_get = backend.context_get if isinstance(backend, GetsOne) else None
        kinds = check_collection(document_jobs, "document_jobs", "job kinds", ConfigError)
        self.document_jobs = tuple(check_name(k, "document_jobs kind") for k in kinds)
        self.max_attempts = check_limit(max_attempts, "max_attempts", 1000)
        self._dim = dim
        self._vectors = VectorCache(check_ann(ann))
        self._owns = check_flag(owns_backend, "owns_backend")
        self._upgrade()

    def _upgrade(self) -> None:
        """Moves a store's job indexes into the layout this version writes (`jobs.upgrade`), in
        transactions of a bounded size; a read-only backend is read as it is."""
        if getattr(self.backend, "readonly", False) is True or not self._read(jobs.legacy_held):
            return
        while self._write(jobs.upgrade):
            pass

    # -- plumbing -------------------------------------------------------------------------------

    def close(self) -> None:
        self._vectors.close()
        if self._owns:
            close = getattr(self.backend, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_write(fn)

    def _read(self, fn: Callable[[KvTxn], T]) -> T:
        return self.backend.context_read(fn)

    def _get_one(self, space: str, key: bytes) -> bytes | None:
        """One record in a read of its own: the backend's `context_get` where it has one."""
        if self._context_get is not None:
            return self._context_get(space, key)
        return self._read(lambda t: t.get(space, key))

    def _jobs(self, value: object) -> list[tuple[str, dict[str, Any]]]:
        if value is None:
            return [(k, {}) for k in self.document_jobs]
        if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):
            raise ValidationError("jobs must be a list of (kind, payload) pairs")
        out = []
        for item in value:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValidationError("jobs must be a list of (kind, payload) pairs")
            out.append((check_name(item[0], "job kind"), check_payload(item[1])))
        return out

    def _document(
        self,
        t: KvTxn,
        segments: tuple[str, ...],
        content: str,
        abstract: str | None,
        overview: str | None,
        work: list[tuple[str, dict[str, Any]]],
        now: int,
    ) -> None:
        """A document and its background work: one outcome (the caller's transaction)."""
        uri = "/".join(segments)
        native = getattr(t, "put_document", None)  # `WritesDocuments` (a Protocol check costs more)
        if native is not None:
            packed = [(kind, packb({"uri": uri, **payload})) for kind, payload in work]
            if native(segments, content, abstract, overview, packed, now, self.max_attempts) is not None:
                return
        revision = tree.put_document(t, segments, content, abstract, overview)
        for kind, payload in work:
            jobs.enqueue(t, kind, {"uri": uri, **payload}, now, uri=segments, revision=revision,
                         max_attempts=self.max_attempts)  # fmt: skip

    def _active_dim(self, t: KvTxn) -> int | None:
        return self._dim or counter(t, DIM) or None
