"""The scoped store's conformance suite on the bundled backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from hippograph.backends import LMDB, InMemory
from hippograph.testing import PersistentStoreConformance, StoreConformance


class TestInMemoryStore(StoreConformance):
    def make_backend(self, path: Path) -> InMemory:
        return InMemory()


class TestLMDBStore(PersistentStoreConformance):
    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store")


class TestLMDBFastStore(StoreConformance):
    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store", durability="fast")


class TestLMDBHalfStore(PersistentStoreConformance):
    """Scans over half-precision vectors: every contract holds."""

    store_options: ClassVar[dict[str, Any]] = {"vector_dtype": "float16"}

    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store")
