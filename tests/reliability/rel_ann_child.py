"""Worker of the vector-index crash test: checks the store it opens, then writes and saves until killed.

Usage: ``python rel_ann_child.py STORE RUN KILL_AT ROUNDS``.

On open it prints one JSON line: whether the saved index was adopted
(``loaded``) or rebuilt, and every query's approximate and exact answers
(they must be equal: the index may be stale or half-saved, never wrong).
Then it runs `ROUNDS` rounds of writes (new nodes, re-embedded nodes,
deletes), an approximate query (so the index follows the writes) and
``save_vector_index()``. With ``KILL_AT`` > 0 it SIGKILLs itself at that
step of saving, counting every hash-and-fsync, private write and rename
the saver performs, so each step of a save is the last one some run did.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import UTC, datetime
from typing import Any

import numpy as np

import hippograph as hg
from hippograph.backends import LMDB
from hippograph.engine import vector_files as ann_module
from hippograph.engine.vector_index import AnnConfig

DIM = 16
NOW = datetime(2025, 6, 1, tzinfo=UTC)
CONFIG = AnnConfig(min_nodes=50, ef_search=512, ef_construction=200, background=False, min_speedup=0)
PARAMS = {"params": {"semantic": {"threshold": 0.0, "top_k": 10}}}
QUERIES = np.random.default_rng(0).standard_normal((6, DIM)).astype(np.float32)


def semantic(node_id: str, rng: np.random.Generator) -> hg.Semantic:
    return hg.Semantic(id=node_id, proposition=node_id, confidence=0.5, embedding=rng.standard_normal(DIM))


def answers(b: LMDB, exact: bool) -> list[list[str]]:
    found = [b.find_candidates(["semantic"], q, [], PARAMS, now=NOW, exact=exact) for q in QUERIES]
    return [[n.id for n, _ in hits] for hits in found]


def kill_at_step(step: int) -> None:
    """Wraps the saver's file steps so that the `step`-th one (counted across rounds) never finishes."""
    done = [0]

    def counted(real: Any) -> Any:
        def step_then_maybe_die(*args: Any) -> Any:
            done[0] += 1
            if done[0] == step:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args)

        return step_then_maybe_die

    ann_module._fsync_and_hash = counted(ann_module._fsync_and_hash)  # type: ignore[assignment]
    ann_module._write_private = counted(ann_module._write_private)  # type: ignore[assignment]
    os.replace = counted(os.replace)  # the saver renames through the os module


def main() -> None:
    store, run, kill_at, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(run)
    with LMDB(store, ann=CONFIG) as b:
        if not b.get_nodes_by_type(["semantic"]):
            b.apply_changeset(hg.Changeset().add_nodes([semantic(f"n{i:04d}", rng) for i in range(300)]))
        approximate = answers(b, exact=False)
        index = b._derived.columns[hg.NodeType.SEMANTIC].ann
        hits = {i for ids in approximate for i in ids}
        print(
            json.dumps(
                {
                    "loaded": bool(index is not None and index.loaded),
                    "approximate": approximate,
                    "exact": answers(b, exact=True),
                    "missing": sorted(i for i in hits if b.get_node(i) is None),
                    "verify": list(hg.Repo(b, flush_interval=0).verify().problems),
                }
            ),
            flush=True,
        )
        if kill_at:
            kill_at_step(kill_at)
        ids = [n.id for n in b.get_nodes_by_type(["semantic"])]
        for r in range(rounds):
            fresh = [semantic(f"r{run}-{r}-{j}", rng) for j in range(4)]
            moved = [semantic(str(i), rng) for i in rng.choice(ids, 2, replace=False)]
            b.apply_changeset(hg.Changeset().add_nodes(fresh + moved))
            gone = str(rng.choice(ids))
            b.delete_nodes([gone])
            ids = [i for i in ids if i != gone] + [n.id for n in fresh]
            answers(b, exact=False)
            b.save_vector_index()


if __name__ == "__main__":
    main()
