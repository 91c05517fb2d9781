"""Built-in backends: `InMemory` (the reference) and `LMDB` (the embedded default)."""

from __future__ import annotations

from .lmdb import LMDB
from .memory import InMemory

__all__ = ["LMDB", "InMemory"]
