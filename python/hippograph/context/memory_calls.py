"""`ContextStore`'s memory calls: assertions with history over their documents (docs/context.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import numpy as np

from .. import _core
from ..engine.checks import check_choice, finite_float
from ..errors import ValidationError
from . import memories, tree
from .base import (
    MEMORY_STATUSES,
    ContextBase,
    JobSpec,
    job_id_of,
    now_us,
    scope_of,
    str_set,
)
from .keys import decode, node_key, subtree
from .model import (
    ConflictPair,
    EmbeddingsUnavailableError,
    MemoryRow,
    check_limit,
    check_name,
    check_text,
    check_unit,
    check_uri,
)
from .protocol import KvTxn

__all__ = ["MemoryCalls"]


class MemoryCalls(ContextBase):
    """Memory assertions: record, recall, promote, reject, conflicts, counts."""

    # -- memories -------------------------------------------------------------------------------

    def put_memory(
        self,
        uri: str,
        value: str,
        confidence: float,
        source: str | None = None,
        *,
        importance: float | None = None,
        status: Literal["active", "candidate"] = "active",
        jobs: Iterable[JobSpec] | None = None,
    ) -> None:
        """Records an assertion at `uri` with its document and jobs in one step. An active
        re-record of the active value is a no-op; a candidate does not overwrite an existing document."""
        segments = check_uri(uri)
        text = check_text(value, "value")
        assert text is not None
        conf = check_unit(confidence, "confidence")
        imp = None if importance is None else check_unit(importance, "importance")
        src = None if source is None else check_name(source, "source")
        check_choice(status, ("active", "candidate"), "status")
        work = self._jobs(jobs)

        def run(t: KvTxn) -> None:
            now = now_us()
            if memories.put(t, segments, text, conf, src, imp, status, now) is None:
                return
            held = tree.node(t, segments)
            if status == "active" or held is None or held["k"] == "dir":  # a candidate keeps a document
                self._document(t, segments, text, None, None, work, now)

        self._write(run)

    def recall_memories(
        self,
        prefix: str = "",
        source: str | None = None,
        statuses: Iterable[str] = ("active",),
        *,
        top_k: int = 500,
    ) -> list[MemoryRow]:
        """Assertions at `prefix` or below with one of `statuses`, most confident first, at most
        `top_k` (1..500); every row says whether more matched (`truncated`)."""
        segments = scope_of(prefix, "prefix")
        src = None if source is None else check_name(source, "source")
        wanted = str_set(statuses, "statuses")
        if not wanted or wanted - MEMORY_STATUSES:
            raise ValidationError(f"statuses must be a non-empty subset of {sorted(MEMORY_STATUSES)}")
        check_limit(top_k, "top_k", 500)
        return self._read(lambda t: memories.recall(t, subtree(segments), src, wanted, top_k))

    def promote_memory(self, uri: str) -> None:
        """The latest candidate at `uri` becomes the active assertion (the prior one superseded) and
        the document's content (`NoCandidateError` when none waits)."""
        segments = check_uri(uri)

        def run(t: KvTxn) -> None:
            now = now_us()
            value = memories.promote(t, segments, now)
            self._document(t, segments, value, None, None, self._jobs(None), now)

        self._write(run)

    def reject_memory_candidate(self, uri: str) -> None:
        segments = check_uri(uri)
        self._write(lambda t: memories.reject(t, segments))

    def memory_recorded(self, uri: str) -> bool:
        segments = check_uri(uri)
        return self._read(lambda t: memories.recorded(t, segments))

    def mark_memories_surfaced(self, ids: Iterable[int]) -> None:
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise ValidationError("ids must be a collection of int")
        checked = [job_id_of(i, "memory id") for i in ids]
        self._write(lambda t: memories.mark_surfaced(t, checked, now_us()))

    def memory_conflict_pairs(self, prefix: str = "", threshold: float = 0.9) -> list[ConflictPair]:
        """Pairs of active memories at distinct URIs under `prefix` whose stored vectors have a
        cosine above `threshold`, most similar first, then in URI order (`EmbeddingsUnavailableError`
        when none of them has a vector). Reuses stored vectors; the pair search runs in Rust."""
        segments = scope_of(prefix, "prefix")
        floor = finite_float(threshold, "threshold")

        def run(t: KvTxn) -> tuple[list[str], list[bytes]]:
            uris = memories.active_under(t, subtree(segments))
            dim = self._active_dim(t)
            got, rows = [], []
            for u in uris:
                raw = t.get(tree.VECTORS, node_key(tuple(u.split("/"))))
                if raw is not None:
                    rec = decode(raw, "context vector")
                    if rec["d"] == dim:
                        got.append(u)
                        rows.append(bytes(rec["v"]))
            if uris and not got:
                raise EmbeddingsUnavailableError(f"no active memory under {prefix!r} has a stored vector")
            return got, rows

        uris, rows = self._read(run)
        if len(uris) < 2:
            return []
        m = np.frombuffer(b"".join(rows), "<f4").astype(np.float32).reshape(len(rows), -1)
        a, b, sims = _core.similar_pairs(m, _core.row_norms(m), floor)
        pairs = [
            ConflictPair(uris[i], uris[j], min(1.0, s))
            for i, j, s in zip(a.tolist(), b.tolist(), sims.tolist(), strict=True)
        ]
        return pairs

    def memory_stats(self) -> dict[str, Any]:
        return self._read(memories.stats)
