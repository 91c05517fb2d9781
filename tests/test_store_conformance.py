"""The scoped store's conformance suite on the bundled backends."""

from __future__ import annotations

from pathlib import Path

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
