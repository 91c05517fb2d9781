"""Filters on an entry's `value`: checked once when a read is asked (an unknown operator is a
`ValidationError`, never an empty answer), then applied to each candidate.

``{"a.b": x}`` is equality on the value at that dotted path; ``{"a.b": {"$op": x}}`` with ``$eq``,
``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin``; ``{"$and": [...]}`` and
``{"$or": [...]}`` combine filters. A missing path matches only ``$ne`` and ``$nin``. Ordering
operators compare numbers with numbers and strings with strings; any other pair does not match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ValidationError
from .model import check_json

__all__ = ["Predicate", "compile_filter"]

Predicate = Callable[[Mapping[str, Any]], bool]
_MISSING = object()
_COMPARE = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}
_OPERATORS = ("$eq", "$ne", "$in", "$nin", *_COMPARE)


def _lookup(value: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    here: Any = value
    for part in path:
        if not isinstance(here, Mapping) or part not in here:
            return _MISSING
        here = here[part]
    return here


def _same(a: Any, b: Any) -> bool:
    """JSON equality: True is not 1, 1 equals 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def _ordered(a: Any, b: Any) -> bool:
    number = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return (isinstance(a, number) and isinstance(b, number)) or (isinstance(a, str) and isinstance(b, str))


def _condition(path: tuple[str, ...], op: str, operand: Any, where: str) -> Predicate:
    if op in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple)):
            raise ValidationError(f"filter {where}: {op} needs a list, got {type(operand).__name__}")
        options = check_json(list(operand), f"filter {where} {op} operand")

        def member(v: Mapping[str, Any]) -> bool:
            got = _lookup(v, path)
            return got is not _MISSING and any(_same(got, o) for o in options)

        return member if op == "$in" else (lambda v: not member(v))
    x = check_json(operand, f"filter {where} {op} operand")
    if op == "$eq":
        return lambda v: (got := _lookup(v, path)) is not _MISSING and _same(got, x)
    if op == "$ne":
        return lambda v: (got := _lookup(v, path)) is _MISSING or not _same(got, x)
    compare: Callable[[Any, Any], bool] = _COMPARE[op]

    def ordered(v: Mapping[str, Any]) -> bool:
        got = _lookup(v, path)
        return got is not _MISSING and _ordered(got, x) and bool(compare(got, x))

    return ordered


def _combined(subs: list[Predicate], how: Callable[[Iterable[bool]], bool]) -> Predicate:
    return lambda v: how(p(v) for p in subs)


def _path(name: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    if not all(parts):
        raise ValidationError(f"filter path {name!r:.80} has an empty part")
    return parts


def _compile(spec: object, where: str) -> Predicate:
    if not isinstance(spec, Mapping):
        raise ValidationError(f"filter {where} must be a dict, got {type(spec).__name__}")
    parts: list[Predicate] = []
    for name, cond in spec.items():
        if not isinstance(name, str):
            raise ValidationError(f"filter {where}: keys must be str, got {type(name).__name__}")
        if name in ("$and", "$or"):
            if not isinstance(cond, (list, tuple)):
                raise ValidationError(f"filter {where}.{name} needs a list of filters")
            subs = [_compile(c, f"{where}.{name}[{i}]") for i, c in enumerate(cond)]
            parts.append(_combined(subs, all if name == "$and" else any))
        elif name.startswith("$"):
            raise ValidationError(f"filter {where}: unknown operator {name!r:.40}")
        elif isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond):
            for op, operand in cond.items():
                if op not in _OPERATORS:
                    raise ValidationError(f"filter {where}.{name}: unknown operator {op!r:.40}")
                parts.append(_condition(_path(name), op, operand, f"{where}.{name}"))
        else:
            parts.append(_condition(_path(name), "$eq", cond, f"{where}.{name}"))
    return lambda v: all(p(v) for p in parts)


def compile_filter(spec: object) -> Predicate | None:
    """The predicate of a filter (None: no filter), or a `ValidationError` naming what is wrong."""
    if spec is None:
        return None
    return _compile(spec, "filter")
