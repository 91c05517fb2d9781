"""One version of a context store's vectors (`VectorSnapshot`), and the next version derived from
it by the changes logged since (`caught_up`) or found by comparing two (`changed`).

A version derived from another copies no matrix: its rows are the older version's base rows it
keeps, picked by index, and the rows written since, appended to a buffer the versions share. The
exact scan scores those in place; `matrix` gathers them only when asked. Once too many base rows
are dead or too many rows appended, the next version is gathered into a base of its own.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import numpy.typing as npt

from .. import _core
from .keys import COUNTERS, decode, subtree, u64
from .protocol import KvTxn
from .tree import VECTOR_LOG, VECTOR_LOG_KEPT, VECTORS

__all__ = ["Changes", "VectorSnapshot", "caught_up", "changed"]

F32 = npt.NDArray[np.float32]
_SHADOW_AFTER = 4
"""Exact scans of a root version's rows after which their shadow is computed (a pass over them)."""
_SLACK = 1024
"""Dead base rows, or appended rows, a version tolerates beyond a quarter of its rows before the
next version is gathered into a base of its own (the exact scan reads dead rows it skips)."""


class _Appended:
    """Rows appended since a base, in a buffer that doubles: a version reads its own first rows, and
    only the newest version's successor appends, so no row a version reads is ever overwritten."""

    def __init__(self, dim: int) -> None:
        self.buf: F32 = np.empty((64, dim), np.float32)
        self.size = 0

    def extended(self, held: int, rows: F32) -> _Appended:
        """This buffer (or a copy of its first `held` rows, when others were appended after them)
        with `rows` appended."""
        out = self
        if held != self.size:  # a fresh buffer, the first `held` rows copied with the new ones
            out = _Appended(self.buf.shape[1])
            rows = np.concatenate([self.buf[:held], rows])
        if out.size + len(rows) > len(out.buf):
            grown = np.empty((2 * (out.size + len(rows)), out.buf.shape[1]), np.float32)
            grown[: out.size] = out.buf[: out.size]
            out.buf = grown  # readers holding the old buffer still find their rows in it
        out.buf[out.size : out.size + len(rows)] = rows
        out.size += len(rows)
        return out


class _Base:
    """A root version's rows and norms, shared by the versions derived from it, with their
    half-precision shadow once a few exact scans have read them: the scan then reads 2 bytes a
    value and the f32 rows only of those that may reach the answer (`_core.top_relevance_shadowed`,
    the same answer)."""

    def __init__(self, rows: F32, norms: F32) -> None:
        self.rows, self.norms = rows, norms
        self.scans = 0
        self.shadow: tuple[npt.NDArray[np.uint16], F32] | None = None

    def top(
        self, query: F32, depth: int, lo: int, hi: int, allowed: npt.NDArray[np.uint32] | None = None
    ) -> npt.NDArray[np.uint32]:
        """The best `depth` rows of ``[lo, hi)`` (of `allowed` rows, when given) by positive
        cosine, and every row tied with the last, unordered; relative to `lo`."""
        self.scans += 1
        if self.shadow is None and self.scans > _SHADOW_AFTER:
            self.shadow = _core.shadow_rows(self.rows)  # a race computes it twice: harmless
        rows, norms, shadow = self.rows[lo:hi], self.norms[lo:hi], self.shadow
        if shadow is None:
            return _core.top_relevance(rows, norms, query, depth, allowed)[0]
        return _core.top_relevance_shadowed(rows, norms, shadow[0][lo:hi], shadow[1][lo:hi], query, depth, allowed)[0]


class VectorSnapshot:
    """One version of the vectors: `keys[i]` (URI keys, sorted) and its row `i`, of the active
    dimension. Never changed once built, so a search ranks one version whatever reloads meanwhile.

    Row `i` is `base[pick[i]]` when `pick[i] >= 0`, else appended row `-pick[i] - 1` (no `pick`:
    row `i` is `base[i]`)."""

    def __init__(
        self,
        seq: int,
        dim: int | None,
        keys: list[bytes],
        base: F32,
        norms: F32 | None = None,
        pick: npt.NDArray[np.int64] | None = None,
        appended: tuple[_Appended, int] | None = None,
        root: _Base | None = None,
    ) -> None:
        self.seq, self.dim, self.keys, self.base = seq, dim, keys, base
        self.norms = norms if norms is not None else _core.row_norms(base) if len(keys) else np.zeros(0, np.float32)
        self.pick, self.appended = pick, appended
        self.root = _Base(base, self.norms) if root is None else root
        """`base` with its norms (a root version's own), shared by the versions derived from it."""
        self._matrix = base if pick is None else None
        self._row_of_base: npt.NDArray[np.int64] | None = None

    @classmethod
    def of_rows(cls, seq: int, dim: int | None, keys: list[bytes], rows: list[bytes]) -> VectorSnapshot:
        """The snapshot of `keys` (sorted) and their stored little-endian float32 `rows`."""
        matrix = np.frombuffer(b"".join(rows), "<f4").astype(np.float32).reshape(len(rows), dim or 0)
        return cls(seq, dim, keys, matrix)

    @property
    def matrix(self) -> F32:
        """Every row in order, gathered on first use."""
        if self._matrix is None:
            self._matrix = self._gathered(np.arange(len(self.keys)))
        return self._matrix

    def rows(self, at: npt.NDArray[np.int64]) -> F32:
        """The rows `at`, as a new matrix."""
        return self.base[at] if self.pick is None else self._gathered(at)

    def _gathered(self, at: npt.NDArray[np.int64]) -> F32:
        assert self.pick is not None
        picked = self.pick[at]
        out = np.empty((len(at), self.base.shape[1]), np.float32)
        based = picked >= 0
        out[based] = self.base[picked[based]]
        if not based.all():
            assert self.appended is not None
            out[~based] = self.appended[0].buf[-picked[~based] - 1]
        return out

    def products(self, query: F32, lo: int, hi: int) -> F32:
        """`row @ query` for the rows ``[lo, hi)``: a derived version scores the stretch of base rows
        its slice picks from in one pass and its appended rows apart, copying no matrix."""
        if self.pick is None:
            return self.base[lo:hi] @ query
        picked = self.pick[lo:hi]
        out = np.empty(hi - lo, np.float32)
        based = picked >= 0
        if based.any():
            at = picked[based]
            first = int(at.min())
            out[based] = (self.base[first : int(at.max()) + 1] @ query)[at - first]
        if not based.all():
            assert self.appended is not None
            out[~based] = self.appended[0].buf[-picked[~based] - 1] @ query
        return out

    def slice_of(self, segments: tuple[str, ...]) -> tuple[int, int]:
        start, stop = subtree(segments)
        lo = bisect.bisect_left(self.keys, start)
        hi = len(self.keys) if stop is None else bisect.bisect_left(self.keys, stop)
        return lo, hi

    def row_of(self, key: bytes) -> int:
        """The row of `key`, which this version holds."""
        return bisect.bisect_left(self.keys, key)

    def ranked(
        self, query: F32, lo: int, hi: int, floor: float | None = None, depth: int | None = None
    ) -> tuple[list[int], list[float], bool]:
        """The rows of ``[lo, hi)`` by cosine, best first (ties by key), and whether that is every
        row that qualifies: nearest neighbours have no similarity floor, so a far row still fills
        `top_k`; with `floor`, only rows scoring above it. With `depth`, only the best `depth` (and
        those tied with the last of them). A zero vector, queried or stored, has cosine 0 with
        everything."""
        if hi <= lo:
            return [], [], True
        qn = np.float32(np.linalg.norm(query))
        if depth is None or depth >= hi - lo:
            scores = self._cosines(self.products(query, lo, hi), self.norms[lo:hi], qn)
            order = np.argsort(-scores, kind="stable")  # stable: ties stay in key order
            return self._cut(order + lo, scores[order], floor, True)
        at = self._best(query, lo, hi, depth)
        if at is None:  # every row scored
            at = np.arange(lo, hi)
            scores = self._cosines(self.products(query, lo, hi), self.norms[lo:hi], qn)
        else:
            scores = self._cosines(self.rows(at) @ query, self.norms[at], qn)
        last = -np.partition(-scores, depth - 1)[depth - 1]
        keep = scores >= last
        at, scores = at[keep], scores[keep]
        order = np.lexsort((at, -scores))  # ties by row: by key
        return self._cut(at[order], scores[order], floor, False)

    @staticmethod
    def _cut(
        rows: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], floor: float | None, whole: bool
    ) -> tuple[list[int], list[float], bool]:
        if floor is not None:
            cut = scores > floor
            whole = whole or not cut.all()
            rows, scores = rows[cut], scores[cut]
        return rows.tolist(), scores.tolist(), whole

    @staticmethod
    def _cosines(products: F32, norms: F32, qn: np.float32) -> npt.NDArray[np.float64]:
        with np.errstate(divide="ignore", invalid="ignore"):
            sims = products / (norms * qn)
        # in float64, the scores' type: a float32 comparison would round the floor to float32 first
        scores: npt.NDArray[np.float64] = np.clip(np.nan_to_num(sims, nan=0.0, posinf=0.0, neginf=0.0), -1.0, 1.0)
        return scores.astype(np.float64)

    def _best(self, query: F32, lo: int, hi: int, depth: int) -> npt.NDArray[np.int64] | None:
        """Rows of ``[lo, hi)`` among which lie the best `depth` by cosine and every row tied with
        the last of them, found by the Rust core's scan; None when fewer than `depth` score above 0
        (the scan ranks positive similarity only)."""
        q = np.ascontiguousarray(query[None, :], np.float32)
        if self.pick is None:
            found = self.root.top(q, depth, lo, hi)
            return None if len(found) < depth else found.astype(np.int64) + lo
        picked = self.pick[lo:hi]
        based = picked >= 0
        found = self.root.top(q, depth, 0, len(self.base), picked[based].astype(np.uint32))
        if self._row_of_base is None:
            row_of_base = np.full(len(self.base), -1, np.int64)
            row_of_base[self.pick[self.pick >= 0]] = np.flatnonzero(self.pick >= 0)
            self._row_of_base = row_of_base
        if len(found) < depth and len(found) < np.count_nonzero(based):
            return None  # base rows of cosine <= 0 may rank above appended ones
        return np.concatenate([self._row_of_base[found.astype(np.int64)], lo + np.flatnonzero(~based)])


@dataclasses.dataclass(frozen=True)
class Changes:
    """How `snapshot` differs from `since`: its rows new or rewritten (`fresh`), the keys it lost."""

    since: VectorSnapshot
    snapshot: VectorSnapshot
    fresh: npt.NDArray[np.bool_]
    gone: list[bytes]


def caught_up(t: KvTxn, base: VectorSnapshot, seq: int) -> Changes | None:
    """`base` brought to the vectors `t` reads at counter `seq` from the changes logged since: the
    touched keys read again, the other rows kept where they are; None when the log does not hold
    every change (too far behind, or a writer that logs nothing)."""
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
        snap = VectorSnapshot(seq, base.dim, old, base.base, base.norms, base.pick, base.appended, base.root)
        return Changes(base, snap, np.zeros(n, bool), [])
    rows = np.frombuffer(b"".join(vectors), "<f4").astype(np.float32).reshape(len(added), base.dim)
    norms = _core.row_norms(rows) if added else np.zeros(0, np.float32)
    buffer, held = base.appended or (_Appended(base.dim), 0)
    appended = (buffer.extended(held, rows), held + len(added)) if added else (buffer, held)
    ids = -np.arange(held, held + len(added), dtype=np.int64) - 1
    pick = np.arange(n, dtype=np.int64) if base.pick is None else base.pick
    kept = np.flatnonzero(~dropped)
    keys = old if len(kept) == n else [old[i] for i in kept.tolist()]
    at = [bisect.bisect_left(keys, key) for key in added]
    gone = [old[i] for i in np.flatnonzero(dropped).tolist()]
    new_pick = np.insert(pick if len(kept) == n else pick[kept], at, ids)
    new_norms = np.insert(base.norms if len(kept) == n else base.norms[kept], at, norms)
    keys = list(keys)
    for a, key in zip(reversed(at), reversed(added), strict=True):
        keys.insert(a, key)
    fresh = np.zeros(len(keys), bool)
    fresh[[a + j for j, a in enumerate(at)]] = True
    snap = VectorSnapshot(seq, base.dim, keys, base.base, new_norms, new_pick, appended, base.root)
    dead = len(base.base) - int(np.count_nonzero(new_pick >= 0))
    if max(dead, appended[1]) > _SLACK + len(keys) // 4:  # gathered into a base of its own
        snap = VectorSnapshot(seq, base.dim, keys, snap.matrix, new_norms)
    still = set(added)
    return Changes(base, snap, fresh, [k for k in gone if k not in still])


def changed(base: VectorSnapshot, snap: VectorSnapshot) -> tuple[npt.NDArray[np.bool_], list[bytes]]:
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
