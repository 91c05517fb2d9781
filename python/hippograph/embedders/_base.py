"""What every embedding-model adapter shares: batching, checking the model's output, normalising.

An adapter is called as ``embed(texts)`` with a list of str and returns a C-contiguous float32
array of shape ``(len(texts), dim)`` whose rows have unit length (or are zero where the model
returned a zero vector), the contract of `hippograph.embedding.HashingEmbedder` and of every
``embed=`` argument (`hippograph.store.store.Embedder`). It has ``dim`` and ``embed_one(text)``
as `HashingEmbedder` has. The texts go to the model ``batch_size`` at a time, in order.

Everything the model returns is checked before anything is returned: one vector per text, each
1-D, numeric, of the embedder's dimension and finite. Anything else is a `ConfigError` naming
the offending input by position (``texts[3]``) or the batch by slice (``texts[0:32]``), never
by content. A list that is not a list of str is a `ValidationError`, as for `HashingEmbedder`.
Errors the model itself raises (a network failure, a bad API key) propagate unchanged.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, ValidationError

__all__ = ["PROBE_TEXT", "BatchedEmbedder", "import_extra", "options", "positive_int", "texts_of"]

PROBE_TEXT = "hippograph"
"""What an adapter embeds to learn its dimension when neither the caller nor the model states it."""

_NUMERIC = frozenset("iuf")  # signed and unsigned ints, floats: never bool, complex, str or object


def import_extra(module: str, extra: str, who: str) -> types.ModuleType:
    """`module`, imported now; its absence is a `ConfigError` naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"{who} needs the {module!r} module, which could not be imported ({exc}); "
            f"install it with: pip install 'hippograph[{extra}]'"
        ) from exc


def positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{what} must be a positive int, got {value!r:.40}")
    return value


def options(value: Mapping[str, Any] | None, what: str, reserved: frozenset[str]) -> dict[str, Any]:
    """A copy of the keyword arguments passed through to the model's call, minus those the adapter sets."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{what} must be a mapping of keyword arguments, got {type(value).__name__}")
    taken = sorted(reserved.intersection(value))
    if taken:
        raise ConfigError(f"{what} must not set {', '.join(taken)}: the embedder sets them itself")
    return dict(value)


def texts_of(texts: object, who: str) -> list[str]:
    """`texts` as a list, refused (`ValidationError`) unless it is a sequence of str."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValidationError(f"{who} expects a list of str, got {type(texts).__name__}; wrap a single text in a list")
    items = list(texts)
    for row, text in enumerate(items):
        if not isinstance(text, str):
            raise ValidationError(f"texts[{row}] must be a str, got {type(text).__name__}")
    return items


def _unit_rows(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Each finite row scaled to unit length (a zero row stays zero), without overflow on the way."""
    scale = np.max(np.abs(matrix), axis=1, keepdims=True)
    np.divide(matrix, scale, out=matrix, where=scale > 0)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return np.ascontiguousarray(matrix, dtype=np.float32)


class BatchedEmbedder:
    """The shared half of every adapter; a subclass says how one batch reaches its model (`_embed_batch`)."""

    def __init__(self, *, dim: int | None, batch_size: int) -> None:
        self._dim = None if dim is None else positive_int(dim, f"{self._name} dim")
        self._batch_size = positive_int(batch_size, f"{self._name} batch_size")

    @property
    def _name(self) -> str:
        return type(self).__name__

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns.

        Given, stated by the model, or learned from the first batch; read before any batch of a
        model that states none, it embeds `PROBE_TEXT` once to learn it."""
        if self._dim is None:
            self([PROBE_TEXT])
        assert self._dim is not None
        return self._dim

    @property
    def batch_size(self) -> int:
        """The most texts one call of the model receives."""
        return self._batch_size

    def __repr__(self) -> str:
        dim = "?" if self._dim is None else str(self._dim)
        return f"{self._name}(dim={dim}, batch_size={self._batch_size})"

    def _embed_batch(self, texts: list[str], start: int) -> object:
        """The model's vectors of `texts` (``texts[start:start + len(texts)]`` of the call): a 2-D
        array, or an iterable of 1-D vectors."""
        raise NotImplementedError

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        """The vector of one text, shape ``(dim,)``."""
        vector: npt.NDArray[np.float32] = self([text])[0]
        return vector

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        items = texts_of(texts, self._name)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        blocks = [
            self._checked(self._embed_batch(items[start : start + self._batch_size], start), start, len(items))
            for start in range(0, len(items), self._batch_size)
        ]
        return blocks[0] if len(blocks) == 1 else np.ascontiguousarray(np.concatenate(blocks))

    def _checked(self, raw: object, start: int, total: int) -> npt.NDArray[np.float32]:
        """The batch of texts ``[start, start + batch_size)`` checked and normalised (module docs)."""
        count = min(self._batch_size, total - start)
        span = f"texts[{start}:{start + count}]"
        if isinstance(raw, np.ndarray) and raw.ndim == 2:
            rows: npt.NDArray[Any] | list[object] = raw
        elif isinstance(raw, Iterable) and not isinstance(raw, (str, bytes, Mapping, np.ndarray)):
            rows = list(raw)
        else:
            raise ConfigError(
                f"{self._name}: the model did not return a sequence of vectors for {span}, got {type(raw).__name__}"
            )
        if len(rows) != count:
            raise self._count_error(len(rows), start, count)
        matrix = self._matrix(rows, start)
        bad = ~np.isfinite(matrix).all(axis=1)
        if bad.any():
            raise ConfigError(
                f"{self._name}: the model returned NaN or infinite values for texts[{start + int(np.argmax(bad))}]"
            )
        if self._dim is None:
            self._dim = matrix.shape[1]
        return _unit_rows(matrix)

    def _count_error(self, got: int, start: int, count: int) -> ConfigError:
        return ConfigError(
            f"{self._name}: the model returned {got} vectors for texts[{start}:{start + count}] ({count} texts)"
        )

    def _matrix(self, rows: npt.NDArray[Any] | list[object], start: int) -> npt.NDArray[np.float64]:
        """The rows as one float64 matrix, each checked to be a numeric vector of the right length."""
        if isinstance(rows, np.ndarray) and rows.dtype.kind in _NUMERIC:
            self._check_length(rows.shape[1], start, start)  # one row's length is every row's
            return np.array(rows, dtype=np.float64)
        vectors = [self._vector(row, start + i) for i, row in enumerate(rows)]
        want = self._dim if self._dim is not None else len(vectors[0])
        for i, vector in enumerate(vectors):
            self._check_length(len(vector), start + i, start, want)
        return np.array(vectors, dtype=np.float64)

    def _check_length(self, length: int, at: int, start: int, want: int | None = None) -> None:
        """A vector of `length` for texts[at] fits: the embedder's dimension, or when that is not
        known yet, `want` (the length of texts[start], the batch's first), and never empty."""
        if length == 0:
            raise ConfigError(f"{self._name}: the model returned an empty vector for texts[{at}]")
        expected = self._dim if self._dim is not None else want
        if expected is not None and length != expected:
            known = "" if self._dim is not None else f" (the dimension of texts[{start}])"
            raise ConfigError(
                f"{self._name}: the model returned a vector of dimension {length} for texts[{at}]; "
                f"expected {expected}{known}"
            )

    def _vector(self, row: object, at: int) -> npt.NDArray[Any]:
        try:
            vector = np.asarray(row)
        except (TypeError, ValueError):
            vector = None
        if vector is None or vector.dtype.kind not in _NUMERIC:
            raise ConfigError(f"{self._name}: the model returned a vector that is not numbers for texts[{at}]")
        if vector.ndim != 1:
            raise ConfigError(f"{self._name}: the model returned shape {vector.shape} for texts[{at}]; needs 1-D")
        return vector
