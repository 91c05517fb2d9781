"""Built-in backends: `InMemory` (the reference), `LMDB` (the embedded default) and
`Postgres` (shared by many processes and hosts; needs ``pip install 'hippograph[postgres]'``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lmdb import LMDB
from .memory import InMemory

if TYPE_CHECKING:
    from .postgres import Postgres

__all__ = ["LMDB", "InMemory", "Postgres"]


def __getattr__(name: str) -> Any:
    """`Postgres` is imported on first use, so psycopg stays an optional dependency."""
    if name == "Postgres":
        from .postgres import Postgres

        return Postgres
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
