"""Helpers shared by the LMDB process tests and the child processes they start."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

import hippograph as hg

DIM = 8


def mapped(arr: npt.NDArray[object]) -> bool:
    """Whether `arr` reads a saved column file through a copy-on-write mapping (the store holds a
    plain view of the `np.memmap`, whose own slicing runs Python code)."""
    base = arr if isinstance(arr, np.memmap) else arr.base
    return isinstance(base, np.memmap) and base.mode == "c"


def vector(seed: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def commit_args(source: str, writer: int, nodes: int = 3) -> tuple[hg.IngestionRecord, hg.Changeset]:
    """A record and changeset for `source`; node ids name the writer, so winners are identifiable."""
    ids = [f"{source}/w{writer}/n{i}" for i in range(nodes)]
    cs = hg.Changeset()
    for i, node_id in enumerate(ids):
        cs.add_node(hg.Semantic(id=node_id, proposition=f"{source} by {writer}", confidence=0.5, embedding=vector(i)))
    for a, b in itertools.pairwise(ids):
        cs.add_link(a, b, "sibling")
    digest = hashlib.sha256(source.encode()).digest()
    receipt = hg.IngestionReceipt(source_id=source, node_ids=tuple(ids), stored_at=datetime.now(UTC))
    return hg.IngestionRecord(source, digest, 1, receipt), cs
