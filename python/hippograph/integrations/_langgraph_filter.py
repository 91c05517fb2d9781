"""LangGraph's search filters, with the meaning `langgraph.store.memory.InMemoryStore` gives them,
plus hippograph's ``$in``, ``$nin``, ``$and`` and ``$or`` (docs/langgraph.md, filters).

A filter is checked once, when the search is asked (an unknown operator or an operand that cannot be
compared is a `ValidationError`, before anything runs), then applied to each candidate's value:

- ``{"field": x}``: the value's top-level ``field`` (a key, not a dotted path: ``"a.b"`` is the key
  ``"a.b"``; a missing key reads as None) equals ``x`` by Python equality (``1 == 1.0 == True``); a
  dict ``x`` matches a dict holding at least its keys, each matching recursively; a list ``x``
  matches a list of the same length whose elements match pairwise;
- ``{"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$in" | "$nin": x, ...}}``:
  ``$eq``/``$ne`` compare with Python equality; the ordering operators compare ``float(value)`` with
  ``float(x)`` as LangGraph does (numbers, booleans, numeric strings); a value ``float`` cannot read
  (a missing field, a word, a list) does not match, where `InMemoryStore` would raise from the middle
  of a search (SqliteStore and PostgresStore do not match either); ``$in``/``$nin``: equal to one
  (to none) of a list;
- ``{"$and": [filter, ...]}``, ``{"$or": [filter, ...]}``: combinations, at the top level or
  inside one another.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ValidationError

__all__ = ["Predicate", "compile_filter"]

Predicate = Callable[[Mapping[str, Any]], bool]
Matcher = Callable[[Any], bool]

_ORDER: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
_OPERATORS = ("$eq", "$ne", "$in", "$nin", *_ORDER)


def _number(value: Any) -> float | None:
    """`float(value)` as LangGraph's `_apply_operator` reads it, or None where that raises."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _ordered(op: str, operand: Any, where: str) -> Matcher:
    bound = _number(operand)
    if bound is None:
        raise ValidationError(f"filter {where}: {op} needs a number, got {type(operand).__name__}")
    compare = _ORDER[op]

    def match(value: Any) -> bool:
        got = _number(value)
        return got is not None and not math.isnan(got) and compare(got, bound)

    return match


def _operator(op: object, operand: Any, where: str) -> Matcher:
    if op == "$eq":
        return lambda v: bool(v == operand)
    if op == "$ne":
        return lambda v: bool(v != operand)
    if op in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple)):
            raise ValidationError(f"filter {where}: {op} needs a list, got {type(operand).__name__}")
        options = list(operand)
        if op == "$in":
            return lambda v: any(bool(v == o) for o in options)
        return lambda v: not any(bool(v == o) for o in options)
    if isinstance(op, str) and op in _ORDER:
        return _ordered(op, operand, where)
    raise ValidationError(f"filter {where}: unknown operator {op!r:.40} (known: {', '.join(_OPERATORS)})")


def _matcher(expected: Any, where: str) -> Matcher:
    """LangGraph's `_compare_values(item_value, expected)` as a function of the item's value."""
    if isinstance(expected, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in expected):
            for k in expected:
                if not (isinstance(k, str) and k.startswith("$")):
                    raise ValidationError(f"filter {where}: {k!r:.40} mixed with operators; nest it instead")
            conditions = [_operator(op, x, f"{where}.{op}") for op, x in expected.items()]
            return lambda v: all(c(v) for c in conditions)
        fields: list[tuple[str, Matcher]] = []
        for k, x in expected.items():
            if not isinstance(k, str):
                raise ValidationError(f"filter {where}: keys must be str, got {type(k).__name__}")
            fields.append((k, _matcher(x, f"{where}.{k}")))
        return lambda v: isinstance(v, dict) and all(m(v.get(k)) for k, m in fields)
    if isinstance(expected, (list, tuple)):
        items = [_matcher(x, f"{where}[{i}]") for i, x in enumerate(expected)]
        return lambda v: (
            isinstance(v, (list, tuple)) and len(v) == len(items) and all(m(x) for m, x in zip(items, v, strict=True))
        )
    return lambda v: bool(v == expected)


def _combined(subs: list[Predicate], *, every: bool) -> Predicate:
    if every:
        return lambda v: all(p(v) for p in subs)
    return lambda v: any(p(v) for p in subs)


def _field(name: str, match: Matcher) -> Predicate:
    return lambda v: match(v.get(name))


def _compile(spec: object, where: str) -> Predicate:
    if not isinstance(spec, Mapping):
        raise ValidationError(f"filter {where} must be a dict, got {type(spec).__name__}")
    parts: list[Predicate] = []
    for name, condition in spec.items():
        if not isinstance(name, str):
            raise ValidationError(f"filter {where}: keys must be str, got {type(name).__name__}")
        if name in ("$and", "$or"):
            if not isinstance(condition, (list, tuple)):
                raise ValidationError(f"filter {where}.{name} needs a list of filters")
            subs = [_compile(c, f"{where}.{name}[{i}]") for i, c in enumerate(condition)]
            parts.append(_combined(subs, every=name == "$and"))
        elif name.startswith("$"):
            raise ValidationError(f"filter {where}: unknown operator {name!r:.40} (known here: $and, $or)")
        else:
            parts.append(_field(name, _matcher(condition, f"{where}.{name}")))
    return lambda v: all(p(v) for p in parts)


def compile_filter(spec: object) -> Predicate | None:
    """The predicate of a LangGraph filter (None: no filter, as for ``{}``), or a `ValidationError`."""
    if spec is None or (isinstance(spec, Mapping) and not spec):
        return None
    return _compile(spec, "filter")
