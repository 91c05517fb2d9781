"""Argument checks every memory family shares: ids, timestamps, numbers, vectors, progress callbacks.

Each raises `ValidationError` saying what was wrong (never quoting more user data than needed),
so a rejected call writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import HippographError, ValidationError

__all__ = [
    "MAX_ID_BYTES",
    "Embedding",
    "Progress",
    "as_datetime",
    "as_embedding",
    "check_choice",
    "check_collection",
    "check_flag",
    "check_id",
    "check_ids",
    "check_progress",
    "check_text",
    "finite_float",
    "utcnow",
    "vector_norm",
]

Progress = Callable[[str, int, int], None]
"""Called as ``progress(phase, done, total)`` during long operations (maintenance, vector index builds)."""

MAX_ID_BYTES = 512

Embedding = npt.NDArray[np.float32]


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_datetime(value: object, what: str = "timestamp") -> datetime:
    """An aware datetime converted to UTC; naive datetimes are refused as ambiguous."""
    if type(value) is datetime and value.tzinfo is UTC:  # the common case, already as wanted
        return value
    if not isinstance(value, datetime):
        raise ValidationError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(f"{what} must be timezone-aware (UTC), got a naive datetime")
    return value.astimezone(UTC)


def check_choice(
    value: object, choices: tuple[str, ...], what: str, error: type[HippographError] = ValidationError
) -> str:
    """`value` when it is one of `choices` (str), else `error` listing them. An array or other
    value that compares element by element is refused, not compared."""
    if isinstance(value, str) and value in choices:
        return value
    listed = " or ".join(repr(c) for c in choices)
    raise error(f"{what} must be {listed}, got {value!r:.40}")


def check_collection(value: object, what: str, of: str, error: type[HippographError] = ValidationError) -> list[Any]:
    """`value`'s members as a list: a collection, never a single str or bytes, nor a mapping (whose
    iteration would yield its keys); else `error` saying what `what` must hold (`of`)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise error(f"{what} must be a collection of {of}, got {type(value).__name__}")
    return list(value)


def check_flag(value: object, what: str) -> bool:
    """A yes/no argument: a bool (numpy's included), never a value whose truth would be guessed."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValidationError(f"{what} must be a bool, got {type(value).__name__}")


def check_id(value: object, what: str = "id") -> str:
    """Ids are non-empty str of at most 512 UTF-8 bytes."""
    if type(value) is str and value.isascii() and 0 < len(value) <= MAX_ID_BYTES:
        return value  # the common id, checked without encoding it: every link end passes here
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}: {value!r:.80}")
    if not value:
        raise ValidationError(f"{what} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{what} {value!r:.80} is not valid UTF-8 (lone surrogate)") from exc
    if size > MAX_ID_BYTES:
        raise ValidationError(f"{what} {value[:40]!r}… is {size} UTF-8 bytes; the limit is {MAX_ID_BYTES}")
    return value


def check_progress(progress: object) -> Progress | None:
    """`progress` if it is None or callable; checked before a long operation writes anything."""
    if progress is not None and not callable(progress):
        raise ValidationError(f"progress must be callable (phase, done, total) or None, got {type(progress).__name__}")
    return progress


def finite_float(value: object, what: str) -> float:
    """A finite float from an int or float; huge ints and NaN/inf are refused, not overflowed."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{what} must be a number, got {type(value).__name__}")
    try:
        out = float(value)
    except OverflowError:
        raise ValidationError(f"{what} is too large for a float") from None
    if not math.isfinite(out):
        raise ValidationError(f"{what} must be finite, got {value!r}")
    return out


def check_text(value: str, what: str) -> str:
    """Text must be encodable as UTF-8 (no lone surrogates), so every backend can store it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid UTF-8 (lone surrogate)") from None
    return value


def check_ids(ids: object, what: str = "id") -> list[str]:
    """A list of valid ids; a bare str is refused (it would iterate its characters)."""
    if isinstance(ids, (str, bytes)):
        raise ValidationError(f"expected a collection of {what}s, got a single {type(ids).__name__} {ids!r:.80}")
    if not isinstance(ids, Iterable):
        raise ValidationError(f"expected a collection of {what}s, got {type(ids).__name__}")
    return [check_id(i, what) for i in ids]


_NOT_REAL = (str, bytes, complex, bool, np.bool_, np.complexfloating)


def _not_real(value: object, raw: npt.NDArray[Any]) -> bool:
    """Elements numpy would convert to float32 but that are no real numbers (strings, bools, complex)."""
    if raw.dtype.kind in "bcSUVMm":
        return True
    # A list mixing bools and floats arrives as float64: look at the elements' types (a few distinct
    # types however long the vector, so an embedder's list of floats costs one pass in C).
    if raw.dtype.kind == "O":
        return any(issubclass(t, _NOT_REAL) for t in set(map(type, raw.flat)))
    return isinstance(value, (list, tuple)) and any(issubclass(t, _NOT_REAL) for t in set(map(type, value)))


def _converted(value: object, what: str) -> npt.NDArray[np.float32] | None:
    """`value` as a new float32 array, or None when it holds anything but real numbers."""
    if isinstance(value, (str, bytes)):
        raise ValidationError(f"{what} must be a sequence of numbers, got {type(value).__name__}")
    if type(value) in (list, tuple):  # an embedder's list of floats: read once, in Rust
        fast = _core.float_list_f32(value)
        if fast is not None:
            return fast
    try:
        raw = np.asarray(value)
        # numpy would parse numeric strings, drop imaginary parts and read bools as 0/1: all refused.
        if _not_real(value, raw):
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            return np.array(raw, dtype=np.float32, copy=True)
    except (TypeError, ValueError, OverflowError) as exc:
        # numpy's message quotes the element it choked on: user data, kept out of the error.
        raise ValidationError(f"{what} is not a numeric vector ({type(exc).__name__})") from None


def vector_norm(v: npt.NDArray[np.float32]) -> float:
    """The Euclidean norm, summed in float64 in Rust: every copy of a vector's norm is this one
    value, and `_core.row_norms` sums the same way."""
    return _core.vector_norm(v)


def as_embedding(value: object, what: str = "embedding") -> Embedding:
    """A finite, non-empty, 1-D float32 copy that nobody can mutate afterwards."""
    if type(value) is np.ndarray and value.dtype == np.float32:  # the common case: only the copy
        arr: npt.NDArray[np.float32] | None = value.copy()
    else:
        arr = _converted(value, what)
    if arr is None:
        raise ValidationError(f"{what} must hold real numbers, not strings, booleans or complex numbers")
    if arr.ndim != 1:
        raise ValidationError(f"{what} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValidationError(f"{what} must not be empty")
    if not math.isfinite(_core.vector_norm(arr)):  # float32 squares summed in float64 cannot overflow
        raise ValidationError(f"{what} holds NaN or infinite values (after float32 conversion)")
    arr.flags.writeable = False
    return arr.view()  # a view of a read-only base can never be made writeable again
