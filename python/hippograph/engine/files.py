"""Small file helpers shared by the derived files kept beside a store (saved vector indexes and
saved columns): a directory's entries made durable, a sidecar read without trusting its size, and
the SHA-256 hash tree a saved vector index is verified with."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["SIDECAR_MAX", "TREE_CHUNK", "TreeHash", "fsync_dir", "read_sidecar"]

SIDECAR_MAX = 1 << 16
"""Bytes a sidecar may hold; a larger one is not read."""


def fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(SIDECAR_MAX + 1)
        if len(raw) > SIDECAR_MAX:
            return None
        doc = json.loads(raw)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


TREE_CHUNK = 1 << 22
"""Bytes per leaf of `TreeHash` (the Rust core's `digest::TREE_CHUNK`)."""
_TREE_TAG = b"hippograph sha256 tree 1\0"


class TreeHash:
    """The root of a byte stream's SHA-256 hash tree, fed in pieces as `hashlib` objects are: the
    SHA-256 of each `TREE_CHUNK` leaf, then SHA-256 over a tag, the length, the leaf size and every
    leaf digest. The core computes the same root over a mapped file with its leaves hashed in
    parallel (`_core.Hnsw.open`); this sequential twin serves the writers and hnswlib's copies."""

    def __init__(self) -> None:
        self._leaves: list[bytes] = []
        self._leaf = hashlib.sha256()
        self._filled = 0
        self._size = 0

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self._size += len(view)
        while len(view):
            take = min(len(view), TREE_CHUNK - self._filled)
            self._leaf.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == TREE_CHUNK:
                self._leaves.append(self._leaf.digest())
                self._leaf, self._filled = hashlib.sha256(), 0

    def hexdigest(self) -> str:
        leaves = self._leaves + ([self._leaf.digest()] if self._filled else [])
        header = _TREE_TAG + self._size.to_bytes(8, "little") + TREE_CHUNK.to_bytes(8, "little")
        return hashlib.sha256(header + b"".join(leaves)).hexdigest()
