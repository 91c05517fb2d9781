"""The vectors of a context store's documents as one matrix per process, and the exact search over
it (docs/context.md, vectors).

Derived data: rows sorted by URI key, so a scope is one slice; reloaded when the store's vector
counter moved (any process's write). A row is only ever a candidate: a hit is returned once the
node it names is read back in the same snapshot, present and enabled, so nothing the store no
longer holds is surfaced whatever the matrix still has.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..engine.columns import TypeColumns
from ..engine.locks import HeldLock
from ..engine.query import COSINE, calibrate, scan
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from .keys import COUNTERS, counter, decode, subtree, u64
from .protocol import KvTxn
from .tree import VECTOR_LOG, VECTOR_LOG_KEPT, VECTOR_SEQ, VECTORS

__all__ = ["VectorCache", "VectorSnapshot"]


class VectorSnapshot:
    """One version of the vectors: `keys[i]` (URI keys, sorted) and `matrix[i]`, of the active
    dimension. Never changed once built, so a search ranks one version whatever reloads meanwhile."""

    def __init__(
        self,
        seq: int,
        dim: int | None,
        keys: list[bytes],
        matrix: npt.NDArray[np.float32],
        norms: npt.NDArray[np.float32] | None = None,
    ) -> None:
        self.seq, self.dim, self.keys, self.matrix = seq, dim, keys, matrix
        self.norms = norms if norms is not None else _core.row_norms(matrix) if len(keys) else np.zeros(0, np.float32)
        self._row_of: dict[bytes, int] | None = None

    @classmethod
    def of_rows(cls, seq: int, dim: int | None, keys: list[bytes], rows: list[bytes]) -> VectorSnapshot:
        """The snapshot of `keys` (sorted) and their stored little-endian float32 `rows`."""
        matrix = np.frombuffer(b"".join(rows), "<f4").astype(np.float32).reshape(len(rows), dim or 0)
        return cls(seq, dim, keys, matrix)

    def slice_of(self, segments: tuple[str, ...]) -> tuple[int, int]:
        start, stop = subtree(segments)
        lo = bisect.bisect_left(self.keys, start)
        hi = len(self.keys) if stop is None else bisect.bisect_left(self.keys, stop)
        return lo, hi

    def row_of(self) -> dict[bytes, int]:
        """Each key's row (built on first use, once per snapshot)."""
        if self._row_of is None:
            self._row_of = dict(zip(self.keys, range(len(self.keys)), strict=True))
        return self._row_of

    def ranked(
        self, query: npt.NDArray[np.float32], lo: int, hi: int, floor: float | None = None, depth: int | None = None
    ) -> tuple[list[int], list[float], bool]:
        """The rows of ``[lo, hi)`` by cosine, best first (ties by key), and whether that is every
        row that qualifies: nearest neighbours have no similarity floor, so a far row still fills
        `top_k`; with `floor`, only rows scoring above it. With `depth`, only the best `depth` (and
        those tied with the last of them). A zero vector, queried or stored, has cosine 0 with
        everything."""
        if hi <= lo:
            return [], [], True
        qn = np.float32(np.linalg.norm(query))
        with np.errstate(divide="ignore", invalid="ignore"):
            sims = (self.matrix[lo:hi] @ query) / (self.norms[lo:hi] * qn)
        # in float64, the scores' type: a float32 comparison would round the floor to float32 first
        scores = np.clip(np.nan_to_num(sims, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0).astype(np.float64)
        whole = depth is None or depth >= len(scores)
        if whole:
            order = np.argsort(-scores, kind="stable")  # stable: ties stay in key order
        else:
            assert depth is not None
            last = -np.partition(-scores, depth - 1)[depth - 1]
            picked = np.flatnonzero(scores >= last)  # in key order: the stable sort keeps ties so
            order = picked[np.argsort(-scores[picked], kind="stable")]
        if floor is not None:
            cut = scores[order] > floor
            whole = whole or not cut.all()
            order = order[cut]
        return (order + lo).tolist(), scores[order].tolist(), whole


class VectorCache:
    """The latest `VectorSnapshot` this process built and, once it holds more than the index's
    `min_nodes` rows, the same rows in the engine's columns (`hippograph.engine`), whose HNSW index
    answers searches over most of the store (`nearest`)."""

    def __init__(self, ann: AnnConfig | None = DEFAULT_ANN) -> None:
        self.lock = threading.RLock()
        self.snapshot = VectorSnapshot.of_rows(-1, None, [], [])
        self.ann = ann
        self.columns = TypeColumns(ann, HeldLock(self.lock))
        self._synced: VectorSnapshot | None = None
        """The snapshot `columns` holds (None: they hold nothing)."""

    def current(self, t: KvTxn, dim: int | None) -> VectorSnapshot:
        """The version the snapshot `t` reads: the last one brought up to date with the changes
        logged since (`tree.VECTOR_LOG`), or every vector read again when the log falls short."""
        seq = counter(t, VECTOR_SEQ)
        with self.lock:
            got = self.snapshot
            if got.seq == seq and got.dim == dim:
                return got
            caught = _caught_up(t, got, seq) if got.dim == dim else None
            if caught is None:
                keys: list[bytes] = []
                rows: list[bytes] = []
                if dim is not None:
                    for key, raw in t.range(VECTORS):
                        rec = decode(raw, "context vector")
                        if rec["d"] == dim:
                            keys.append(key)
                            rows.append(rec["v"])
                self.snapshot = got = VectorSnapshot.of_rows(seq, dim, keys, rows)
                self._sync(got)
            else:
                self.snapshot = got = caught.snapshot
                self._sync(got, caught)
            return got

    def _sync(self, snap: VectorSnapshot, changes: Changes | None = None) -> None:
        """Brings `columns` to `snap`: only the rows that changed since the snapshot they hold
        (`changes`, when the caller knows them since that snapshot; else found by comparing)."""
        base = self._synced
        if base is not None and base.dim != snap.dim:
            self.close()
            self.columns = TypeColumns(self.ann, HeldLock(self.lock))
            base = self._synced = None
        if base is None and (self.ann is None or len(snap.keys) <= self.ann.min_nodes):
            return
        cols = self.columns
        if base is None:
            fresh, gone = np.ones(len(snap.keys), bool), list[bytes]()
        elif changes is not None and changes.since is base:
            fresh, gone = changes.fresh, changes.gone
        else:
            fresh, gone = _changed(base, snap)
        for key in gone:
            cols.remove(key.hex())
        for i in np.flatnonzero(fresh).tolist():
            cols.upsert(snap.keys[i].hex(), snap.matrix[i], None, norm=float(snap.norms[i]))
        self._synced = snap

    def nearest(
        self,
        snap: VectorSnapshot,
        query: npt.NDArray[np.float32],
        lo: int,
        hi: int,
        depth: int,
        floor: float | None = None,
    ) -> tuple[list[int], list[float], bool] | None:
        """The best `depth` rows of the whole snapshot by cosine (above 0 and `floor`), best first,
        from the HNSW index, as rows of `snap` kept where they lie in ``[lo, hi)``, and whether they
        are every row of the slice above a `floor` of at least 0. None when the index does not serve
        (too few rows, `snap` not the one it holds, a slice under half the rows). The rows are a
        prefix of the exact ranking (as far as the graph's recall goes): a caller that finds its
        answer in them needs nothing more; one that does not asks `ranked`."""
        n = len(snap.keys)
        with self.lock:
            cols = self.columns
            if self._synced is not snap or 2 * (hi - lo) < n or not cols.wants_vector_index():
                return None
            params = dataclasses.replace(COSINE, top_k=min(depth, n))
            found = scan(cols, np.ascontiguousarray(query[None, :], np.float32), params, time.time(), approximate=True)
        # Past the floor, or short of the depth (no other row scores above 0): nothing else qualifies.
        whole = (
            floor is not None and floor >= 0 and (len(found) < params.top_k or (bool(found) and found[-1][1] <= floor))
        )
        row_of = snap.row_of()
        rows, sims = [], []
        for rid, score in found:
            r, sim = row_of[bytes.fromhex(rid)], min(1.0, float(score))
            if lo <= r < hi and (floor is None or sim > floor):
                rows.append(r)
                sims.append(sim)
        return rows, sims, whole

    def build(self, snap: VectorSnapshot) -> bool:
        """Builds and measures the HNSW index of `snap`'s rows now; True when this call built it."""
        with self.lock:
            if self._synced is not snap:
                return False
            cols = self.columns
            built = cols.build_vector_index()
            ann = cols.ann
            if ann is not None and ann.needs_calibration():
                with cols.calibrating:
                    calibrate(cols, ann, dataclasses.replace(COSINE, top_k=10), time.time())
            return built

    def stats(self) -> dict[str, Any] | None:
        """The vector index's `vector_index_stats` while the columns hold the rows, else None."""
        with self.lock:
            return None if self._synced is None else self.columns.vector_index_stats()

    def close(self) -> None:
        """Stops the vector index's background threads (a build, its upkeep) and waits for them."""
        for thread in self.columns.close_background_builds():
            thread.join()


@dataclasses.dataclass(frozen=True)
class Changes:
    """How `snapshot` differs from `since`: its rows new or rewritten (`fresh`), the keys it lost."""

    since: VectorSnapshot
    snapshot: VectorSnapshot
    fresh: npt.NDArray[np.bool_]
    gone: list[bytes]


def _caught_up(t: KvTxn, base: VectorSnapshot, seq: int) -> Changes | None:
    """`base` brought to the vectors `t` reads at counter `seq` from the changes logged since: the
    touched keys read again, the others' rows copied; None when the log does not hold every change
    (too far behind, or a writer that logs nothing)."""
    behind = seq - base.seq
    if base.dim is None or not 0 < behind <= VECTOR_LOG_KEPT:
        return None
    since = t.range(COUNTERS, VECTOR_LOG + u64(base.seq + 1), VECTOR_LOG + u64(seq + 1))
    logged = [decode(raw, "context vector log") for _, raw in since]
    if len(logged) != behind:
        return None
    old, n = base.keys, len(base.keys)
    dropped = np.zeros(n, bool)
    touched: set[bytes] = set()
    for rec in logged:
        if "k" in rec:
            touched.add(rec["k"])
        elif "r" in rec:
            start, stop = rec["r"]
            dropped[bisect.bisect_left(old, start) : n if stop is None else bisect.bisect_left(old, stop)] = True
    added: list[bytes] = []
    vectors: list[bytes] = []
    for key in sorted(touched):
        i = bisect.bisect_left(old, key)
        if i < n and old[i] == key:
            dropped[i] = True
        raw = t.get(VECTORS, key)
        if raw is not None and (rec := decode(raw, "context vector"))["d"] == base.dim:
            added.append(key)
            vectors.append(rec["v"])
    if not added and not dropped.any():
        snap = VectorSnapshot(seq, base.dim, old, base.matrix, base.norms)
        return Changes(base, snap, np.zeros(n, bool), [])
    rows = np.frombuffer(b"".join(vectors), "<f4").astype(np.float32).reshape(len(added), base.dim)
    norms = _core.row_norms(rows) if added else np.zeros(0, np.float32)
    where = [bisect.bisect_left(old, key) for key in added]
    if int(dropped.sum()) == len(added) and all(i < n and old[i] == key for i, key in zip(where, added, strict=True)):
        matrix, new_norms = base.matrix.copy(), base.norms.copy()  # vectors rewritten in place
        matrix[where], new_norms[where] = rows, norms
        fresh = np.zeros(n, bool)
        fresh[where] = True
        return Changes(base, VectorSnapshot(seq, base.dim, old, matrix, new_norms), fresh, [])
    kept = np.flatnonzero(~dropped)
    keys = old if len(kept) == n else [old[i] for i in kept.tolist()]
    at = [bisect.bisect_left(keys, key) for key in added]
    gone = [old[i] for i in np.flatnonzero(dropped).tolist()]
    matrix = np.insert(base.matrix if len(kept) == n else base.matrix[kept], at, rows, axis=0)
    new_norms = np.insert(base.norms if len(kept) == n else base.norms[kept], at, norms)
    keys = list(keys)
    for a, key in zip(reversed(at), reversed(added), strict=True):
        keys.insert(a, key)
    fresh = np.zeros(len(keys), bool)
    fresh[[a + j for j, a in enumerate(at)]] = True
    still = set(added)
    snap = VectorSnapshot(seq, base.dim, keys, matrix, new_norms)
    return Changes(base, snap, fresh, [k for k in gone if k not in still])


def _changed(base: VectorSnapshot, snap: VectorSnapshot) -> tuple[npt.NDArray[np.bool_], list[bytes]]:
    """Which rows of `snap` are new or hold other bits than in `base`, and the keys `snap` lost.
    Both are sorted by key, so the rows they share run in a few aligned stretches (one per insert
    or delete between them), each compared in blocks of whole words."""
    new, old = snap.keys, base.keys
    fresh = np.zeros(len(new), bool)
    if new == old:
        added: list[int] = []
        removed: list[int] = []
    else:
        kept_new, kept_old = set(new), set(old)
        added = sorted(bisect.bisect_left(new, k) for k in kept_new - kept_old)
        removed = sorted(bisect.bisect_left(old, k) for k in kept_old - kept_new)
        fresh[added] = True
    a, b = snap.matrix.view(np.uint32), base.matrix.view(np.uint32)
    scratch = np.empty((min(_COMPARED, len(new)), a.shape[1]), bool)  # reused: stays in cache
    i = j = ai = ri = 0
    while i < len(new) and j < len(old):
        if ai < len(added) and added[ai] == i:
            i, ai = i + 1, ai + 1
        elif ri < len(removed) and removed[ri] == j:
            j, ri = j + 1, ri + 1
        else:  # a stretch of shared rows, up to the next insert or delete
            stretch = min(
                (added[ai] if ai < len(added) else len(new)) - i, (removed[ri] if ri < len(removed) else len(old)) - j
            )
            for at in range(0, stretch, _COMPARED):
                n = min(_COMPARED, stretch - at)
                np.not_equal(a[i + at : i + at + n], b[j + at : j + at + n], out=scratch[:n])
                scratch[:n].any(axis=1, out=fresh[i + at : i + at + n])
            i, j = i + stretch, j + stretch
    fresh[i:] = True
    return fresh, [old[r] for r in removed]


_COMPARED = 1024
"""Rows compared at once: the comparison's scratch stays in cache."""
