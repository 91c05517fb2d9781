"""Regions of a type's vector space: tighter relevance bounds for the certified walk.

The certified walk (`hippograph.engine.query`) must look at every row whose
usage factor could lift it past the k-th score given only the pool's bound on
relevance. When usage factors vary, that is a large share of the rows, most of
them far from the query. `Regions` partitions the rows around centres
(spherical k-means on a sample) and keeps each region's angular radius: no
row of a region is closer to a query than the query's angle to the centre
minus the radius, so the walk skips whole regions without reading a vector.

Regions are derived data with a simple rule: a row placed in a region lies
within its radius. A write that changes or moves a row takes it out of its
region (`NO_REGION`, then only the pool's bound applies); the upkeep thread
places absorbed vectors back when they fit an existing radius.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from .. import _core

__all__ = ["NO_REGION", "Regions", "partition"]

NO_REGION = np.uint32(0xFFFF_FFFF)
"""The region of a row in none: the walk bounds it by the pool alone."""

_SLACK = 1e-4
"""Added to every bound: float32 dot products in the core round differently from these float64 ones."""

_SAMPLE_PER_REGION = 64
_ITERATIONS = 5
_CHUNK = 16_384

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Regions:
    """Unit `centres`, each region's `cos_radius` (the least cosine of a member to its centre),
    and the region of each row at the time `of_row` was last written (`NO_REGION`: none)."""

    centres: F32
    cos_radius: F64
    of_row: npt.NDArray[np.uint32]

    @cached_property
    def _centres32(self) -> F32:
        return np.ascontiguousarray(self.centres, np.float32)

    @cached_property
    def _radius(self) -> F64:
        return np.asarray(np.arccos(np.clip(self.cos_radius, -1.0, 1.0)))

    def bounds(self, queries: F32) -> F64:
        """Per region, the largest relevance (cosine, clamped to [0, 1]) any member can have for
        any of `queries`.

        For a region of angular radius r, a member's cosine to a query whose cosine to the centre
        is c is at most cos(max(0, arccos(c) - r)), which grows with c: so the bound over all the
        queries is that of the largest c, their relevance to the centre (at least 0, which only
        loosens the bound of a region every query points away from). One call into the core.
        """
        return _core.region_bounds(self._centres32, self._radius, np.ascontiguousarray(queries, np.float32), _SLACK)

    def place(self, rows: npt.NDArray[np.int64], vectors: F32) -> None:
        """Puts each of `rows` (holding `vectors`) into its nearest region when it lies within that
        region's radius; the others stay in none."""
        inside = rows < len(self.of_row)
        rows, vectors = rows[inside], vectors[inside]
        norms = np.linalg.norm(vectors, axis=1)
        keep = norms > 0
        if not keep.any():
            return
        cos = (vectors[keep] / norms[keep, None]) @ self.centres.T
        best = cos.argmax(axis=1)
        fits = cos[np.arange(len(best)), best] >= self.cos_radius[best]
        self.of_row[rows[keep][fits]] = best[fits].astype(np.uint32)

    def forget(self, row: int) -> None:
        """Row `row` now holds another vector (or none): it leaves its region."""
        if row < len(self.of_row):
            self.of_row[row] = NO_REGION

    def moved(self, row: int, last: int) -> None:
        """A swap-remove moved the last row into `row`."""
        if row < len(self.of_row):
            self.of_row[row] = self.of_row[last] if last < len(self.of_row) else NO_REGION
        self.forget(last)


def partition(matrix: F32, norms: F32, seed: int = 0) -> Regions | None:
    """Regions over the embedded rows of `matrix` (about √n of them), or None when too few rows."""
    embedded = np.flatnonzero(norms > 0)
    count = int(np.clip(np.sqrt(len(embedded)), 0, 1024))
    if count < 2:
        return None
    rng = np.random.default_rng(seed)
    sample_rows = rng.choice(embedded, size=min(len(embedded), count * _SAMPLE_PER_REGION), replace=False)
    sample = matrix[sample_rows] / norms[sample_rows, None]
    centres = sample[rng.choice(len(sample), size=count, replace=False)].copy()
    for _ in range(_ITERATIONS):
        nearest = (sample @ centres.T).argmax(axis=1)
        sums = np.zeros_like(centres)
        np.add.at(sums, nearest, sample)
        lengths = np.linalg.norm(sums, axis=1)
        moved = lengths > 0
        centres[moved] = sums[moved] / lengths[moved, None]  # an empty region keeps its centre
    centres = np.ascontiguousarray(centres, np.float32)
    of_row = np.full(len(matrix), NO_REGION, np.uint32)
    cos_radius = np.ones(count)
    for start in range(0, len(embedded), _CHUNK):
        rows = embedded[start : start + _CHUNK]
        cos = (matrix[rows] / norms[rows, None]) @ centres.T
        best = cos.argmax(axis=1)
        np.minimum.at(cos_radius, best, cos[np.arange(len(best)), best].astype(np.float64) - _SLACK)
        of_row[rows] = best
    return Regions(centres, cos_radius, of_row)
