"""The vectors of a context store's documents held once per process (docs/context.md, vectors), and
the engine's vector index over them for a large store.

Derived data: rows sorted by URI key, so a scope is one slice; brought up to date when the store's
vector counter moved (any process's write), from the changes logged since or by reading them all.
A row is only ever a candidate: a hit is returned once the node it names is read back in the same
snapshot, present and enabled, so nothing the store no longer holds is surfaced whatever the rows
still have.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from ..engine.columns import TypeColumns
from ..engine.locks import HeldLock
from ..engine.query import COSINE, calibrate, scan
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from .keys import counter, decode
from .protocol import KvTxn
from .tree import VECTOR_SEQ, VECTORS
from .vector_snapshot import Changes, VectorSnapshot, caught_up, changed

__all__ = ["VectorCache"]

_RECENT = 8
"""Versions kept by counter value besides the newest (derived ones share their rows)."""


class VectorCache:
    """The latest `VectorSnapshot` this process built and, once it holds more than the index's
    `min_nodes` rows, the same rows in the engine's columns (`hippograph.engine`), whose HNSW index
    answers searches over most of the store (`nearest`)."""

    def __init__(self, ann: AnnConfig | None = DEFAULT_ANN) -> None:
        self.lock = threading.RLock()
        self.snapshot = VectorSnapshot.of_rows(-1, None, [], [])
        self.ann = ann
        self.columns = TypeColumns(ann, HeldLock(self.lock))
        self._synced: VectorSnapshot | None = None
        """The snapshot `columns` holds (None: they hold nothing)."""
        self._recent: OrderedDict[int, VectorSnapshot] = OrderedDict()
        """The last versions built, by counter value: readers of an older transaction find theirs."""

    def current(self, t: KvTxn, dim: int | None) -> VectorSnapshot:
        """The version the snapshot `t` reads: one this process holds, or the nearest older one it
        holds brought up to date with the changes logged since (`tree.VECTOR_LOG`), or every vector
        read again when the log falls short. A reader whose transaction began before the newest
        version finds its own among the last few, so readers at two versions never rebuild each
        other's."""
        seq = counter(t, VECTOR_SEQ)
        with self.lock:
            newest = self.snapshot
            if newest.seq == seq and newest.dim == dim:
                return newest
            held = [s for s in (newest, *self._recent.values()) if s.dim == dim]
            caught: Changes | None = None
            if (got := next((s for s in held if s.seq == seq), None)) is not None:
                if seq < newest.seq:
                    return got
            elif (base := max((s for s in held if s.seq < seq), key=lambda s: s.seq, default=None)) is not None and (
                caught := caught_up(t, base, seq)
            ) is not None:
                got = caught.snapshot
            else:
                keys: list[bytes] = []
                rows: list[bytes] = []
                if dim is not None:
                    for key, raw in t.range(VECTORS):
                        rec = decode(raw, "context vector")
                        if rec["d"] == dim:
                            keys.append(key)
                            rows.append(rec["v"])
                got = VectorSnapshot.of_rows(seq, dim, keys, rows)
            self._recent[seq] = got
            while len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            if seq > newest.seq or newest.dim != dim or caught is None:  # a newer version, or the store read anew
                self.snapshot = got
                self._sync(got, caught)
            return got

    def _sync(self, snap: VectorSnapshot, changes: Changes | None = None) -> None:
        """Brings `columns` to `snap`: only the rows that changed since the snapshot they hold
        (`changes`, when the caller knows them since that snapshot; else found by comparing)."""
        base = self._synced
        if base is not None and base.dim != snap.dim:
            self.close()
            self.columns = TypeColumns(self.ann, HeldLock(self.lock))
            base = self._synced = None
        if base is None and (self.ann is None or len(snap.keys) <= self.ann.min_nodes):
            return
        cols = self.columns
        if base is None:
            fresh, gone = np.ones(len(snap.keys), bool), list[bytes]()
        elif changes is not None and changes.since is base:
            fresh, gone = changes.fresh, changes.gone
        else:
            fresh, gone = changed(base, snap)
        for key in gone:
            cols.remove(key.hex())
        at = np.flatnonzero(fresh)
        for i, row in zip(at.tolist(), snap.rows(at), strict=True):
            cols.upsert(snap.keys[i].hex(), row, None, norm=float(snap.norms[i]))
        self._synced = snap

    def nearest(
        self,
        snap: VectorSnapshot,
        query: npt.NDArray[np.float32],
        lo: int,
        hi: int,
        depth: int,
        floor: float | None = None,
    ) -> tuple[list[int], list[float], bool] | None:
        """The best `depth` rows of the whole snapshot by cosine (above 0 and `floor`), best first,
        from the HNSW index, as rows of `snap` kept where they lie in ``[lo, hi)``, and whether they
        are every row of the slice above a `floor` of at least 0. None when the index does not serve
        (too few rows, `snap` not the one it holds, a slice under half the rows). The rows are a
        prefix of the exact ranking (as far as the graph's recall goes): a caller that finds its
        answer in them needs nothing more; one that does not asks `ranked`."""
        n = len(snap.keys)
        with self.lock:
            cols = self.columns
            if self._synced is not snap or 2 * (hi - lo) < n or not cols.wants_vector_index():
                return None
            params = dataclasses.replace(COSINE, top_k=min(depth, n))
            found = scan(cols, np.ascontiguousarray(query[None, :], np.float32), params, time.time(), approximate=True)
        # Past the floor, or short of the depth (no other row scores above 0): nothing else qualifies.
        whole = (
            floor is not None and floor >= 0 and (len(found) < params.top_k or (bool(found) and found[-1][1] <= floor))
        )
        rows, sims = [], []
        for rid, score in found:
            r, sim = snap.row_of(bytes.fromhex(rid)), min(1.0, float(score))
            if lo <= r < hi and (floor is None or sim > floor):
                rows.append(r)
                sims.append(sim)
        return rows, sims, whole

    def build(self, snap: VectorSnapshot) -> bool:
        """Builds and measures the HNSW index of `snap`'s rows now; True when this call built it."""
        with self.lock:
            if self._synced is not snap:
                return False
            cols = self.columns
            built = cols.build_vector_index()
            ann = cols.ann
            if ann is not None and ann.needs_calibration():
                with cols.calibrating:
                    calibrate(cols, ann, dataclasses.replace(COSINE, top_k=10), time.time())
            return built

    def stats(self) -> dict[str, Any] | None:
        """The vector index's `vector_index_stats` while the columns hold the rows, else None."""
        with self.lock:
            return None if self._synced is None else self.columns.vector_index_stats()

    def close(self) -> None:
        """Stops the vector index's background threads (a build, its upkeep) and waits for them."""
        for thread in self.columns.close_background_builds():
            thread.join()
