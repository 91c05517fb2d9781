"""The public conformance suite against stores whose scans read half-precision vectors
(``vector_dtype="float16"``): every contract holds, answers within f16's rounding."""

from __future__ import annotations

from pathlib import Path

from hippograph.backends import LMDB, InMemory
from hippograph.testing import BackendConformance


class TestLMDBHalf(BackendConformance):
    score_tolerance = 1e-3
    reopen = True
    shared = True

    def make_backend(self, path: Path) -> LMDB:
        return LMDB(path / "store", vector_dtype="float16")


class TestInMemoryHalf(BackendConformance):
    score_tolerance = 1e-3

    def make_backend(self, path: Path) -> InMemory:
        return InMemory(vector_dtype="float16")
