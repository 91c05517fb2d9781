"""The vectors of one type's scoring columns, in the precision its scans read (`vector_dtype`).

``float32`` (the default) keeps each row as written, with the rows' half-precision shadow beside
it (`hippograph.engine.shadow`), which exact scans read first: 6 bytes a value in all, answers
equal to an f32 scan. ``float16`` keeps only each row's unit vector in half precision (the
shadow's encoding, now the stored value): 2 bytes a value, and scans score those rows directly.
Relevance is a cosine, so the unit vector is all a score needs; f16 keeps 11 significant bits, so
a relevance lies within about 1e-3 of the f32 one and rows closer than that may swap places.
Either way this is derived data: the store keeps every embedding in f32.
"""

from __future__ import annotations

from typing import Any, Literal, cast

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import ConfigError
from .checks import check_choice, vector_norm
from .shadow import Shadow

__all__ = ["VECTOR_DTYPES", "RowVectors", "VectorDtype", "check_vector_dtype", "saved_row_holds"]

VectorDtype = Literal["float32", "float16"]
VECTOR_DTYPES: tuple[VectorDtype, ...] = ("float32", "float16")

F32 = npt.NDArray[np.float32]


def check_vector_dtype(value: object) -> VectorDtype:
    """`value` as a vector dtype, or `ConfigError` naming the choices."""
    return cast(VectorDtype, check_choice(value, VECTOR_DTYPES, "vector_dtype", ConfigError))


def _encoded(embedding: F32) -> npt.NDArray[np.uint16]:
    """`embedding`'s unit vector in f16 bit patterns (a zero vector: zeros)."""
    half, _ = _core.shadow_rows(np.ascontiguousarray(embedding[None, :], np.float32))
    row: npt.NDArray[np.uint16] = half[0]
    return row


def saved_row_holds(arrays: dict[str, npt.NDArray[Any]], r: int, embedding: F32) -> bool:
    """Saved row `r` (`RowVectors.saved`'s arrays, either precision) holds `embedding`."""
    if arrays["matrix"].shape[1] == 0 and len(embedding):  # float16: the unit row is the stored value
        return bool(np.array_equal(arrays["half"][r], _encoded(embedding)))
    return bool(np.array_equal(arrays["matrix"][r], embedding))


_BULK_ROWS = 8
"""Rows from which `RowVectors.put_rows` writes them in one step rather than one `put` each."""


class RowVectors:
    """Row `r`'s vector and norm, with room for `capacity` rows of `dim` values.

    In ``float16`` storage the norm of a row with a vector is 1.0 (its stored unit vector's) and
    0.0 without one, so every caller reading vectors with norms sees one consistent matrix.
    """

    def __init__(self, dtype: VectorDtype = "float32") -> None:
        self.dtype: VectorDtype = dtype
        self.half = dtype == "float16"
        self.dim = 0
        self._mat: F32 = np.zeros((0, 0), np.float32)
        self._norms: F32 = np.zeros(0, np.float32)
        self.shadow = Shadow()
        """The f16 unit rows: a shadow of the f32 rows, or (``float16``) the rows themselves."""

    @property
    def capacity(self) -> int:
        return int(self._norms.shape[0])

    def grow(self, capacity: int) -> None:
        """Room for `capacity` rows, keeping those held."""
        if not self.half:
            mat = np.zeros((capacity, self.dim), np.float32)
            mat[: self.capacity] = self._mat
            self._mat = mat
        self._norms = np.resize(self._norms, capacity)
        self.shadow.resize(capacity, self.dim)

    def set_dim(self, dim: int) -> None:
        """The first vector fixes the width (no row holds a vector yet)."""
        self.dim = dim
        if not self.half:
            self._mat = np.zeros((self.capacity, dim), np.float32)
        self.shadow.resize(self.capacity, dim)

    def put(self, r: int, embedding: F32, live: int, *, held: bool = False, norm: float | None = None) -> bool:
        """Row `r` holds `embedding` (of norm `norm`, computed when not given); `live`: the rows in
        use. `held`: the row held a vector or none before, and False is returned, with nothing
        written, when that was `embedding` already (as this storage keeps it)."""
        if self.half:
            encoded = _encoded(embedding)
            if held and self._norms[r] and np.array_equal(self.shadow.half[r], encoded):
                return False
            self.shadow.half[r], self.shadow.residual[r] = encoded, 0.0
            self._norms[r] = 1.0 if (vector_norm(embedding) if norm is None else norm) > 0 else 0.0
            return True
        if held and np.array_equal(self._mat[r], embedding):
            return False
        self._mat[r] = embedding
        self._norms[r] = vector_norm(embedding) if norm is None else norm
        self.shadow.mark(r)
        self.shadow.settle(self._mat[:live])
        return True

    def put_rows(self, rows: list[int], embeddings: list[F32], norms: list[float], live: int) -> None:
        """`put` of each `embeddings[i]` (of norm `norms[i]`) at `rows[i]`, in one step: a batch of
        writes indexed at once (later rows win where a row repeats, as one `put` after another)."""
        if len(rows) < _BULK_ROWS:  # a row or two: numpy's fancy indexing costs more than it saves
            for r, embedding, norm in zip(rows, embeddings, norms, strict=True):
                self.put(r, embedding, live, norm=norm)
            return
        at = np.asarray(rows, np.int64)
        matrix = np.stack(embeddings).astype(np.float32, copy=False)
        if self.half:
            self.shadow.half[at], _ = _core.shadow_rows(np.ascontiguousarray(matrix))
            self.shadow.residual[at] = 0.0
            self._norms[at] = np.where(np.asarray(norms) > 0, 1.0, 0.0)
            return
        self._mat[at] = matrix
        self._norms[at] = norms
        for r in rows:
            self.shadow.mark(r)
        self.shadow.settle(self._mat[:live])

    def clear(self, r: int) -> None:
        """Row `r` holds no vector: every scan scores it 0."""
        if not self.half:
            self._mat[r] = 0.0
        self._norms[r] = 0.0
        self.shadow.clear(r)

    def move(self, dst: int, src: int) -> None:
        if not self.half:
            self._mat[dst] = self._mat[src]
        self._norms[dst] = self._norms[src]
        self.shadow.move(dst, src)

    def norms(self, n: int) -> F32:
        return self._norms[:n]

    def empty(self, r: int) -> bool:
        """Row `r` holds no vector."""
        return not self._norms[r]

    def vectors(
        self, n: int, rows: npt.NDArray[np.int64] | list[int] | slice | None = None, *, copy: bool = False
    ) -> F32:
        """The first `n` rows (or those `rows` of them) as float32: the rows as written, or their
        decoded unit vectors (always a copy). `copy`: never a view of the live rows."""
        if self.half:
            half = self.shadow.half[:n] if rows is None else self.shadow.half[:n][rows]
            return np.ascontiguousarray(half).view(np.float16).astype(np.float32)
        got = self._mat[:n] if rows is None else self._mat[:n][rows]
        return got.copy() if copy and (rows is None or isinstance(rows, slice)) else got

    def scanned(self, n: int) -> tuple[npt.NDArray[Any], tuple[npt.NDArray[np.uint16], F32] | None]:
        """What the Rust scans take for the first `n` rows: the matrix (float32, or the f16 unit
        rows as uint16 bit patterns) and the shadow to read first (None in ``float16``)."""
        if self.half:
            return self.shadow.half[:n], None
        return self._mat[:n], self.shadow.arrays(n)

    def settle(self, n: int) -> None:
        """Encodes every stale shadow row now (before a save)."""
        if not self.half:
            self.shadow.settle(self._mat[:n], force=True)

    def saved(self, n: int, cap: int, dim: int) -> dict[str, npt.NDArray[Any]]:
        """The arrays `column_files` saves, with room for `cap` rows (``float16``: a matrix of width 0)."""
        self.settle(n)

        def padded(arr: npt.NDArray[Any], width: int | None = None) -> npt.NDArray[Any]:
            out = np.zeros((cap,) if width is None else (cap, width), arr.dtype)
            if width is None or arr.shape[1] == width:
                out[:n] = arr[:n]
            return out

        half, residual = self.shadow.arrays(n)
        return {
            "matrix": np.zeros((cap, 0), np.float32) if self.half else padded(self._mat, dim),
            "norms": padded(self._norms),
            "half": padded(half, dim),
            "residual": padded(residual),
        }

    def adopt(self, arrays: dict[str, npt.NDArray[Any]], dim: int) -> None:
        """Takes over saved arrays (of this storage's dtype), mapped or not."""
        self.dim = dim
        self._mat, self._norms = arrays["matrix"], arrays["norms"]
        self.shadow.adopt(arrays["half"], arrays["residual"])
