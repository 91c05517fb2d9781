"""The scoped store's conformance suite on the worked example, examples/sqlite_store_backend.py."""

from __future__ import annotations

import sys
from pathlib import Path

from hippograph.testing import PersistentStoreConformance

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from sqlite_store_backend import SQLiteStoreBackend  # noqa: E402


class TestSQLiteStoreBackend(PersistentStoreConformance):
    def make_backend(self, path: Path) -> SQLiteStoreBackend:
        return SQLiteStoreBackend(path / "store.db")
