"""Small file helpers shared by the derived files kept beside a store (saved vector indexes and
saved columns): a directory's entries made durable, and a sidecar read without trusting its size."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["SIDECAR_MAX", "fsync_dir", "read_sidecar"]

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
