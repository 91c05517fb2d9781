"""The typed errors every hippograph call raises (docs/architecture.md, errors).

The hierarchy is declared here in Python, where the attributes callers match on
(``reason``, ``source_id``, ``operation``, ``resource``, ``id``) are plain and
typed; the Rust extension imports these classes and raises them, so the same
class objects surface from Rust and Python code paths alike.

Messages end up in agents' logs, so they name the offending id, field,
metadata key path and type, never stored content: no text, embedding values
or metadata values (tests/reliability/test_security.py holds every path to it).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HippographError",
    "IngestionError",
    "InvalidError",
    "NotFoundError",
    "StorageError",
    "ValidationError",
]


class HippographError(Exception):
    """Base class of every error hippograph raises on purpose."""


class InvalidError(HippographError):
    """The caller passed something the contract refuses; nothing was written."""


class ValidationError(InvalidError, ValueError):
    """A value (id, embedding, edge type, metadata, …) is malformed."""


class IngestionError(InvalidError):
    """An ingestion was refused; ``reason`` is a stable machine-readable code.

    Reasons: ``invalid_source_id``, ``invalid_goal``, ``invalid_metadata``,
    ``invalid_steps``, ``invalid_step``, ``source_conflict``.
    """

    def __init__(self, reason: str, message: str | None = None, *, source_id: object = None) -> None:
        self.reason = reason
        self.source_id = source_id
        text = message or reason
        if source_id is not None:
            text = f"{text} (source_id={source_id!r})"
        super().__init__(f"{reason}: {text}" if message else text)


class StorageError(HippographError):
    """The storage layer failed (I/O, corruption, full disk, foreign directory)."""

    def __init__(self, message: str, *, operation: str | None = None) -> None:
        self.operation = operation
        super().__init__(f"{operation}: {message}" if operation else message)


class NotFoundError(HippographError, LookupError):
    """A named resource does not exist (for example an unknown ingestion source)."""

    def __init__(self, resource: str, id: str, message: str | None = None) -> None:
        self.resource = resource
        self.id = id
        super().__init__(message or f"{resource} {id!r} not found")


class ConfigError(HippographError):
    """A configuration value (backend option, value-function params, …) is invalid."""
