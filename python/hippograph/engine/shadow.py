"""The half-precision shadow of a matrix of stored vectors, kept beside it row by row.

Exact scans read the shadow first and the f32 rows only where a row may reach the answer
(`hippograph._core.top_relevance_shadowed`, `_core.scan_default(..., shadow=...)`; the bound that
makes the answer the same is in docs/architecture.md). A write marks its row stale (residual +inf:
a scan then scores that row in f32) and stale rows are encoded together, a batch at a time, so a
write pays a few scalar stores rather than a Rust call. Derived data: rebuilt from the matrix.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import _core

__all__ = ["Shadow"]

_SETTLE_AT = 64
"""Stale rows encoded together once this many wait (fewer stay exact-scored meanwhile)."""


class Shadow:
    """`half[r]`: row r's unit vector in float16 bits; `residual[r]`: its bound (+inf: stale)."""

    def __init__(self) -> None:
        self.half: npt.NDArray[np.uint16] = np.zeros((0, 0), np.uint16)
        self.residual: npt.NDArray[np.float32] = np.zeros(0, np.float32)
        self._stale: list[int] = []

    def resize(self, capacity: int, dim: int) -> None:
        """Room for `capacity` rows of `dim` values, keeping the rows held (a new dimension: none)."""
        half = np.zeros((capacity, dim), np.uint16)
        residual = np.zeros(capacity, np.float32)
        if self.half.shape[1] == dim:
            keep = min(capacity, len(self.residual))
            half[:keep], residual[:keep] = self.half[:keep], self.residual[:keep]
        self.half, self.residual = half, residual

    def mark(self, row: int) -> None:
        """Row `row` of the matrix changed: scans score it in f32 until it is encoded again."""
        self.residual[row] = np.inf
        self._stale.append(row)

    def clear(self, row: int) -> None:
        """Row `row` holds no vector (a zero row of the matrix): relevance 0 on both sides."""
        self.half[row] = 0
        self.residual[row] = 0.0

    def move(self, dst: int, src: int) -> None:
        self.half[dst] = self.half[src]
        self.residual[dst] = self.residual[src]
        if not np.isfinite(self.residual[dst]):
            self._stale.append(dst)

    def settle(self, matrix: npt.NDArray[np.float32], force: bool = False) -> None:
        """Encodes the stale rows of `matrix` (its first rows are the live ones) once enough wait."""
        if not self._stale or (len(self._stale) < _SETTLE_AT and not force):
            return
        rows = np.unique(np.array(self._stale, np.int64))
        rows = rows[rows < len(matrix)]
        self._stale = []
        if len(rows):
            self.half[rows], self.residual[rows] = _core.shadow_rows(np.ascontiguousarray(matrix[rows]))

    def adopt(self, half: npt.NDArray[np.uint16], residual: npt.NDArray[np.float32]) -> None:
        """Takes over a saved shadow, every row current."""
        self.half, self.residual, self._stale = half, residual, []

    def encode_all(self, matrix: npt.NDArray[np.float32]) -> None:
        """Encodes the first `len(matrix)` rows at once (a rebuild)."""
        self._stale = []
        if len(matrix) and matrix.shape[1]:
            self.half[: len(matrix)], self.residual[: len(matrix)] = _core.shadow_rows(np.ascontiguousarray(matrix))

    def arrays(self, n: int) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]]:
        """The shadow of the first `n` rows, as the scans take it."""
        return self.half[:n], self.residual[:n]
