"""The scoped store's data model: scopes, entries, hits and receipts, and the checks that refuse bad
input before anything is written (docs/store.md).

A scope is a tuple of whole segments; matching is *exact-or-descendant* by whole segments, so
``("users", "u4")`` never matches ``("users", "u42")``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from ..engine.checks import Embedding, as_embedding, check_text, finite_float
from ..errors import ValidationError

if TYPE_CHECKING:
    from .explained import SearchExplanation

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_BYTES",
    "STATUSES",
    "Entry",
    "Hit",
    "Scope",
    "ScopeReceipt",
    "Status",
    "check_json",
    "check_key",
    "check_scope",
    "check_value",
    "detached",
    "in_scope",
]

Scope = tuple[str, ...]
Status = Literal["active", "pending", "retracted"]
STATUSES: tuple[Status, ...] = ("active", "pending", "retracted")
MAX_SEGMENTS = 32
MAX_SEGMENT_BYTES = 255
MAX_KEY_BYTES = 512
_MAX_VALUE_DEPTH = 32


_CHECKED_SCOPES: dict[Scope, Scope] = {}
"""Scopes that passed `check_scope`, so the scope an agent writes to again costs one lookup."""


def check_scope(value: object, what: str = "scope") -> Scope:
    """A tuple (or list) of non-empty str segments without NUL; a bare str is refused (it would
    iterate into characters)."""
    if type(value) is tuple:
        try:
            known = _CHECKED_SCOPES.get(value)
        except TypeError:  # an unhashable segment: refused below
            known = None
        if known is not None:
            return known
    if isinstance(value, (str, bytes)):
        raise ValidationError(f"{what} must be a tuple of str segments, got a single {type(value).__name__}")
    if not isinstance(value, (tuple, list)):
        raise ValidationError(f"{what} must be a tuple of str segments, got {type(value).__name__}")
    if len(value) > MAX_SEGMENTS:
        raise ValidationError(f"{what} has {len(value)} segments; the limit is {MAX_SEGMENTS}")
    for i, seg in enumerate(value):
        if not isinstance(seg, str):
            raise ValidationError(f"{what} segment {i} must be a str, got {type(seg).__name__}")
        if not seg:
            raise ValidationError(f"{what} segment {i} is empty")
        if "\0" in seg:
            raise ValidationError(f"{what} segment {i} contains NUL")
        size = len(check_text(seg, f"{what} segment {i}").encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            raise ValidationError(f"{what} segment {i} is {size} UTF-8 bytes; the limit is {MAX_SEGMENT_BYTES}")
    checked = tuple(value)
    if len(_CHECKED_SCOPES) >= 4096:
        _CHECKED_SCOPES.clear()
    _CHECKED_SCOPES[checked] = checked
    return checked


def check_key(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"key must be a str, got {type(value).__name__}")
    if not value:
        raise ValidationError("key must not be empty")
    size = len(check_text(value, "key").encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise ValidationError(f"key {value[:40]!r}… is {size} UTF-8 bytes; the limit is {MAX_KEY_BYTES}")
    return value


def _check_json(value: object, path: str, depth: int) -> Any:
    """A JSON-compatible copy (tuples become lists) or a ValidationError naming the path."""
    if depth > _MAX_VALUE_DEPTH:
        raise ValidationError(f"value at {path} is nested deeper than {_MAX_VALUE_DEPTH}")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return check_text(value, f"value at {path}")
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValidationError(f"int at {path} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"float at {path} must be finite")
        return value
    if isinstance(value, (list, tuple)):
        return [_check_json(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValidationError(f"keys must be str, got {type(k).__name__} at {path}")
            check_text(k, f"key at {path}")
            out[k] = _check_json(v, f"{path}.{k}", depth + 1)
        return out
    raise ValidationError(
        f"value at {path} has type {type(value).__name__}; allowed: None, bool, int, float, str, list, dict"
    )


def check_json(value: object, what: str) -> Any:
    """A JSON-compatible copy of any value (a filter's operand), errors naming it as `what`."""
    return _check_json(value, what, 0)


def check_value(value: object) -> dict[str, Any]:
    """A JSON-compatible dict with str keys (None: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"value must be a dict, got {type(value).__name__}")
    return cast(dict[str, Any], _check_json(value, "value", 0))


def check_importance(value: object) -> float:
    out = finite_float(value, "importance")
    if not 0.0 <= out <= 1.0:
        raise ValidationError(f"importance must be in [0, 1], got {out}")
    return out


def check_kind(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"kind must be a non-empty str, got {type(value).__name__}")
    if len(check_text(value, "kind").encode("utf-8")) > MAX_SEGMENT_BYTES:
        raise ValidationError(f"kind is longer than {MAX_SEGMENT_BYTES} UTF-8 bytes")
    return value


def check_embedding(value: object, what: str = "embedding") -> Embedding | None:
    return None if value is None else as_embedding(value, what)


def in_scope(scope: Scope, within: Scope) -> bool:
    """`scope` is `within` or below it, by whole segments."""
    return scope[: len(within)] == within


@dataclass(frozen=True, eq=False)
class Entry:
    """One memory filed under `scope` at `key` (unique within its scope).

    `text` is what lexical search indexes and an embedder sees; `value` any JSON-compatible dict;
    `embedding` one float32 vector (one dimension per store) or None. Times are UTC; `expires_at`
    None means never.
    """

    scope: Scope
    key: str
    text: str
    value: dict[str, Any]
    kind: str
    importance: float
    embedding: Embedding | None
    status: Status
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime
    access_count: int
    expires_at: datetime | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        same_vectors = (self.embedding is None and other.embedding is None) or (
            self.embedding is not None
            and other.embedding is not None
            and np.array_equal(self.embedding, other.embedding)
        )
        return same_vectors and all(getattr(self, f) == getattr(other, f) for f in _FIELDS if f != "embedding")

    __hash__ = None  # type: ignore[assignment]

    @property
    def ref(self) -> tuple[Scope, str]:
        return self.scope, self.key

    def visible(self, now: datetime) -> bool:
        """What reads return: active and not expired."""
        return self.status == "active" and (self.expires_at is None or self.expires_at > now)


_FIELDS = tuple(Entry.__dataclass_fields__)


@dataclass(frozen=True)
class Hit:
    """A search result: the entry, its fused `score` and each route's own score (None: that route
    did not find it or did not run). Scores are similarities in [0, 1]; larger is better."""

    entry: Entry
    score: float
    text_score: float | None = None
    vector_score: float | None = None
    explanation: SearchExplanation | None = field(default=None, compare=False, repr=False)
    """What the score was made of (`search(..., explain=True)`), else None; equal hits compare equal either way."""


@dataclass(frozen=True)
class ScopeReceipt:
    """What a lifecycle call changed: the `keys` (scope, key), read in the same transaction as the
    change, sorted."""

    scope: Scope
    keys: tuple[tuple[Scope, str], ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.keys)


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copied(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) if isinstance(v, (dict, list)) else v for v in value]
    return value


def trusted_entry(fields: dict[str, Any]) -> Entry:
    """An `Entry` of fields already checked (a write's prepared item, a decoded record), built
    without the frozen dataclass's one `__setattr__` per field: every put and every read makes one.
    `fields` must name every field; it becomes the entry's own."""
    out = object.__new__(Entry)
    out.__dict__.update(fields)
    return out


def detached(e: Entry) -> Entry:
    """`e` with a value of its own: the caller may change it without changing what the index holds.
    Every other field is immutable and shared; nothing is validated again (`e` already was)."""
    if not e.value:
        return e
    out = object.__new__(Entry)
    out.__dict__.update(e.__dict__)
    out.__dict__["value"] = _copied(e.value)
    return out
