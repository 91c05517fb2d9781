"""The vectors of a context store's documents as one matrix per process, and the exact search over
it (docs/context.md, vectors).

Derived data: rows sorted by URI key, so a scope is one slice; reloaded when the store's vector
counter moved (any process's write). A row is only ever a candidate: a hit is returned once the
node it names is read back in the same snapshot, present and enabled, so nothing the store no
longer holds is surfaced whatever the matrix still has.
"""

from __future__ import annotations

import bisect
import threading

import numpy as np
import numpy.typing as npt

from .. import _core
from .keys import counter, decode, subtree
from .protocol import KvTxn
from .tree import VECTOR_SEQ, VECTORS

__all__ = ["VectorCache", "VectorSnapshot"]


class VectorSnapshot:
    """One version of the vectors: `keys[i]` (URI keys, sorted) and `matrix[i]`, of the active
    dimension. Never changed once built, so a search ranks one version whatever reloads meanwhile."""

    def __init__(self, seq: int, dim: int | None, keys: list[bytes], rows: list[bytes]) -> None:
        self.seq, self.dim, self.keys = seq, dim, keys
        self.matrix = np.frombuffer(b"".join(rows), "<f4").astype(np.float32).reshape(len(rows), dim or 0)
        self.norms = _core.row_norms(self.matrix) if rows else np.zeros(0, np.float32)

    def slice_of(self, segments: tuple[str, ...]) -> tuple[int, int]:
        start, stop = subtree(segments)
        lo = bisect.bisect_left(self.keys, start)
        hi = len(self.keys) if stop is None else bisect.bisect_left(self.keys, stop)
        return lo, hi

    def ranked(
        self, query: npt.NDArray[np.float32], lo: int, hi: int, floor: float | None = None
    ) -> tuple[list[int], list[float]]:
        """Every row of ``[lo, hi)`` by cosine, best first (ties by key): nearest neighbours have no
        similarity floor, so a far row still fills `top_k`; with `floor`, only rows scoring above
        it. A zero vector, queried or stored, has cosine 0 with everything."""
        if hi <= lo:
            return [], []
        qn = np.float32(np.linalg.norm(query))
        with np.errstate(divide="ignore", invalid="ignore"):
            sims = (self.matrix[lo:hi] @ query) / (self.norms[lo:hi] * qn)
        # in float64, the scores' type: a float32 comparison would round the floor to float32 first
        scores = np.clip(np.nan_to_num(sims, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0).astype(np.float64)
        order = np.argsort(-scores, kind="stable")  # stable: ties stay in key order
        if floor is not None:
            order = order[scores[order] > floor]
        return (order + lo).tolist(), scores[order].tolist()


class VectorCache:
    """The latest `VectorSnapshot` this process built."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.snapshot = VectorSnapshot(-1, None, [], [])

    def current(self, t: KvTxn, dim: int | None) -> VectorSnapshot:
        """The version the snapshot `t` reads (rebuilt when any vector changed since)."""
        seq = counter(t, VECTOR_SEQ)
        with self.lock:
            got = self.snapshot
            if got.seq == seq and got.dim == dim:
                return got
            keys: list[bytes] = []
            rows: list[bytes] = []
            if dim is not None:
                for key, raw in t.range(VECTORS):
                    rec = decode(raw, "context vector")
                    if rec["d"] == dim:
                        keys.append(key)
                        rows.append(rec["v"])
            self.snapshot = got = VectorSnapshot(seq, dim, keys, rows)
            return got
