"""Trajectories: what an agent did towards a goal, the unit of ingestion (docs/architecture.md, fingerprint).

The dataclasses are frozen but accept any values at construction, so that a
malformed trajectory can still be represented and then refused by
:func:`validate_trajectory` with the precise ``IngestionError`` reason a caller
can act on. Validation order is part of the contract: when several things are
wrong, the first one in this order is reported.

1. ``invalid_source_id``: not a str, blank, or not encodable as UTF-8.
2. ``invalid_goal``: not a str, blank, or not encodable as UTF-8.
3. ``invalid_metadata``: not exactly a ``dict``, or holds a value outside the
   term mapping (see :mod:`hippograph.fingerprint`).
4. ``invalid_steps``: not a list, or empty.
5. ``invalid_step``: an element is not a :class:`Step`, or its observation or
   action is not a str (or not encodable as UTF-8).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import _core
from ..engine.checks import MAX_ID_BYTES
from ..errors import IngestionError, ValidationError

__all__ = ["Step", "Trajectory", "validate_trajectory"]


@dataclass(frozen=True)
class Step:
    """One observation the agent made and the action it took in response."""

    observation: str
    action: str


@dataclass(frozen=True)
class Trajectory:
    """A goal, the steps taken towards it and free-form metadata, from one source.

    ``source_id`` names where the trajectory came from (ingestion is idempotent
    per source); it is not part of the payload fingerprint.
    """

    source_id: str
    goal: str
    steps: list[Step]
    metadata: dict[Any, Any] = field(default_factory=dict)


def _text_problem(value: object) -> str | None:
    """Why ``value`` is not usable text, or None when it is."""
    if not isinstance(value, str):
        return f"must be a str, got {type(value).__name__}"
    if not value.strip():
        return "must not be blank"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not encodable as UTF-8 (lone surrogate)"
    return None


def _step_problem(value: object) -> str | None:
    """Why an observation or action is unusable; unlike goals they may be empty."""
    if not isinstance(value, str):
        return f"must be a str, got {type(value).__name__}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not encodable as UTF-8 (lone surrogate)"
    return None


def validate_trajectory(t: Trajectory) -> None:
    """Raise ``IngestionError`` for the first problem of ``t`` in the documented order."""
    if not isinstance(t, Trajectory):
        raise ValidationError(f"expected a Trajectory, got {type(t).__name__}")
    source_id: object = t.source_id
    problem = _text_problem(source_id)
    if problem is None and len(str(source_id).encode("utf-8")) > MAX_ID_BYTES:
        problem = f"is longer than {MAX_ID_BYTES} UTF-8 bytes"
    if problem:
        raise IngestionError("invalid_source_id", f"source_id {problem}", source_id=source_id)

    def fail(reason: str, message: str) -> IngestionError:
        return IngestionError(reason, message, source_id=source_id)

    problem = _text_problem(t.goal)
    if problem:
        raise fail("invalid_goal", f"goal {problem}")

    metadata: object = t.metadata
    if type(metadata) is not dict:
        raise fail("invalid_metadata", f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        # Encoding is the only complete check of the term mapping (nesting, sizes,
        # keys that collide once mapped), and fingerprinting the metadata under an
        # empty trajectory checks it exactly where the real fingerprint will put it.
        _core.fingerprint_v1("", [], metadata)
    except IngestionError as err:
        raise fail(err.reason, _message_of(err)) from err

    steps: object = t.steps
    if not isinstance(steps, list):
        raise fail("invalid_steps", f"steps must be a list, got {type(steps).__name__}")
    if not steps:
        raise fail("invalid_steps", "steps must not be empty")
    for i, step in enumerate(steps):
        if not isinstance(step, Step):
            raise fail("invalid_step", f"steps[{i}] must be a Step, got {type(step).__name__}")
        for name, value in (("observation", step.observation), ("action", step.action)):
            problem = _step_problem(value)
            if problem:
                raise fail("invalid_step", f"steps[{i}].{name} {problem}")


def _message_of(err: IngestionError) -> str:
    """The message of an ``IngestionError`` without its ``reason:`` prefix."""
    text = str(err)
    prefix = f"{err.reason}: "
    return text[len(prefix) :] if text.startswith(prefix) else text
