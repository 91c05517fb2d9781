"""The checks of `Store` calls' arguments: each refuses with a `ValidationError` naming the argument,
before the call touches the backend."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..engine.checks import check_flag, check_text, finite_float
from ..errors import HippographError, ValidationError
from .model import check_embedding, check_importance, check_key, check_kind, check_scope, check_value

__all__ = ["MAX_LIMIT", "ORDERS", "PUT_FIELDS", "UPDATE_FIELDS", "checked", "count", "kinds_of", "ttl_of", "weights_of"]

PUT_FIELDS = frozenset({"scope", "key", "text", "value", "embedding", "kind", "importance", "pending", "ttl"})
UPDATE_FIELDS = frozenset({"text", "value", "embedding", "kind", "importance", "ttl"})
ORDERS = ("newest", "oldest", "key")
MAX_LIMIT = 1 << 20


def count(value: object, what: str, most: int = MAX_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ValidationError(f"{what} must be an int in [0, {most}], got {value!r:.40}")
    return value


def ttl_of(value: object) -> float | None:
    if value is None:
        return None
    out = finite_float(value, "ttl")
    if out <= 0:
        raise ValidationError(f"ttl must be a positive number of seconds, got {out}")
    return out


def checked(
    where: str,
    scope: object,
    key: object,
    text: object = "",
    value: object = None,
    embedding: object = None,
    kind: object = "semantic",
    importance: object = 0.5,
    pending: object = False,
    ttl: object = None,
) -> dict[str, Any]:
    """One item of a put, checked: `put`'s arguments, or a mapping of them in `put_many`."""
    if not isinstance(text, str):
        raise ValidationError(f"{where}: text must be a str, got {type(text).__name__}")
    check_flag(pending, f"{where}: pending")
    return {
        "scope": check_scope(scope), "key": check_key(key), "text": check_text(text, f"{where}: text"),
        "value": check_value(value), "embedding": check_embedding(embedding), "kind": check_kind(kind),
        "importance": check_importance(importance), "pending": pending, "ttl": ttl_of(ttl),
    }  # fmt: skip


def kinds_of(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ValidationError("kinds must be a collection of str, got a single str")
    if not isinstance(value, Iterable):
        raise ValidationError(f"kinds must be a collection of str, got {type(value).__name__}")
    return frozenset(check_kind(k) for k in value)


def weights_of(
    value: object, what: str = "weights", error: type[HippographError] = ValidationError
) -> tuple[float, float]:
    """A (text weight, vector weight) pair: finite, non-negative, with a positive sum; else `error`."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise error(f"{what} must be a pair (text weight, vector weight)")
    try:
        w = (finite_float(value[0], f"{what}[0]"), finite_float(value[1], f"{what}[1]"))
    except ValidationError as exc:
        raise error(str(exc)) from None
    if min(w) < 0 or sum(w) <= 0:
        raise error(f"{what} must be non-negative with a positive sum, got {w}")
    return w
