"""The public conformance suite run against the LMDB backend (sync and fast durability)."""

from __future__ import annotations

from pathlib import Path

from hippograph.backends import LMDB
from hippograph.testing import BackendConformance


class TestLMDB(BackendConformance):
    reopen = True
    shared = True

    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store")


class TestLMDBFast(BackendConformance):
    reopen = True

    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store", durability="fast")
