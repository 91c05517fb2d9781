"""Maintenance at scale: decay and consolidation candidate search over N semantic nodes.

    python benches/maintenance.py [--n 100000] [--dim 384] [--backend memory|lmdb]

Prints one Markdown table row per measurement (time per node included), for
benches/RESULTS.md. Consolidation is measured up to the `decide` calls: the
candidate-pair search in Rust over membership groups (one tag per 100 nodes),
with a `decide` that always declines, so the graph is left unchanged.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta

import numpy as np

import hippograph as hg
from hippograph import _core
from hippograph.backends import LMDB, InMemory
from hippograph.graph import maintenance

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def build(backend: hg.GraphBackend, n: int, dim: int, seed: int = 7) -> None:
    """Clustered semantic nodes with varied age and usage; a tag per 100 nodes."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(n // 100, 1), dim)).astype(np.float32)
    batch = 10_000
    for start in range(0, n, batch):
        cs = hg.Changeset()
        for i in range(start, min(n, start + batch)):
            group = i // 100
            vec = centres[group] + 0.05 * rng.standard_normal(dim).astype(np.float32)
            node_id = f"s{i:07d}"
            cs.add_node(hg.Semantic(id=node_id, proposition=f"fact {i}", confidence=0.8, embedding=vec))
            age = timedelta(hours=float(rng.uniform(0, 2000)))
            cs.put_metadata(
                node_id,
                hg.NodeMetadata(created_at=NOW - age, access_count=int(rng.integers(0, 30))),
            )
            if i % 100 == 0:
                cs.add_node(hg.Tag(id=f"t{group:06d}", label=f"group {group}"))
            cs.add_link(f"t{group:06d}", node_id, "membership")
        backend.apply_changeset(cs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--backend", choices=["memory", "lmdb"], default="lmdb")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backend: hg.GraphBackend = (
            InMemory() if args.backend == "memory" else LMDB(os.path.join(tmp, "s"), durability="fast")
        )
        build(backend, args.n, args.dim)
        repo = hg.Repo(backend, flush_interval=0)
        repo.decay(threshold=0.0, now=NOW)  # warm the derived cache: measure the pass, not the cache build
        t0 = time.perf_counter()
        summary = repo.decay(threshold=0.0, now=NOW)
        decay_s = time.perf_counter() - t0
        snap = maintenance.columns_of(backend, hg.NodeType.SEMANTIC)
        members, offsets = maintenance._membership_groups(backend, {i: r for r, i in enumerate(snap.ids)})
        t0 = time.perf_counter()
        found = _core.consolidation_pairs(snap.matrix, snap.norms, members, offsets, 0.9)
        search_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        consolidated = repo.consolidate(lambda a, b: None, threshold=0.9, now=NOW)
        pairs_s = time.perf_counter() - t0
        print("| operation | N | backend | time | per node |\n|---|---:|---|---:|---:|")
        print(
            f"| decay scoring pass (nothing below threshold) | {summary.checked:,} | {args.backend} "
            f"| {decay_s * 1e3:.1f} ms | {decay_s / summary.checked * 1e6:.2f} µs |"
        )
        print(
            f"| consolidation: Rust pair search + {consolidated.candidate_pairs:,} pairs loaded and offered to decide "
            f"| {consolidated.checked:,} | {args.backend} | {pairs_s * 1e3:.1f} ms "
            f"| {pairs_s / consolidated.checked * 1e6:.2f} µs |"
        )
        print(
            f"| consolidation candidate search alone (Rust, {len(found[0]):,} pairs) | {len(snap.ids):,} "
            f"| {args.backend} | {search_s * 1e3:.1f} ms | {search_s / len(snap.ids) * 1e6:.2f} µs |"
        )
        repo.close()


if __name__ == "__main__":
    main()
