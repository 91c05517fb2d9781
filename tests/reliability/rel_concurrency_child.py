"""Worker process of the concurrency test: several threads share one `Repo` on one store.

Usage: ``python rel_concurrency_child.py STORE PROCESS THREADS OPS SEED``,
STORE being ``lmdb:<directory>`` or ``postgres:<repo>`` (on ``$HIPPOGRAPH_PG_DSN``).
Each thread runs `OPS` operations (ingest of its own, shared and contested
sources, recall, reward, delete) and prints one JSON line per operation once
it returned: the descriptor, what it returned, and monotonic start and end
times (CLOCK_MONOTONIC is system-wide, so times compare across processes).
An exception other than a documented ``source_conflict`` is printed as
``{"error": ...}`` and makes the process exit with status 1.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rel_workload import EMBED, T0, receipt_json, structure, trajectory

import hippograph as hg
from hippograph.backends import LMDB
from hippograph.engine.vector_index import AnnConfig

SHARED = range(0, 12)
"""Sources every worker ingests with the same payload."""
CONTESTED = range(50, 56)
"""Sources every worker ingests with a payload of its own: one wins, the rest conflict."""
OWN_BASE = 100_000
REWARDS = (0.5, -0.25, 1.0)
RECALL_PARAMS = {"params": {t: {"threshold": 0.0, "top_k": 5} for t in ("subgoal", "episodic")}}
_print_lock = threading.Lock()


def emit(line: dict[str, Any]) -> None:
    with _print_lock:
        print(json.dumps(line), flush=True)


def worker(repo: hg.Repo, w: int, ops: int, seed: int, failed: list[str]) -> None:
    rng = random.Random(seed * 1000 + w)
    mine: list[tuple[int, int, list[str]]] = []  # (index, variant, node ids) of ingestions this thread acked
    own = 0
    for seq in range(ops):
        roll = rng.random()
        if not mine or roll < 0.55:
            pick = rng.random()
            if pick < 0.5:
                i, variant, own = OWN_BASE + w * 1000 + own, 0, own + 1
            elif pick < 0.8:
                i, variant = rng.choice(SHARED), 0
            else:
                i, variant = rng.choice(CONTESTED), w + 1
            op: dict[str, Any] = {"op": "ingest", "i": i, "variant": variant}
        elif roll < 0.75:
            text = trajectory(rng.choice([*SHARED, *CONTESTED])).goal
            now = T0 + timedelta(hours=2, seconds=w * 1000 + seq)
            op = {"op": "recall", "text": text, "now": now.isoformat()}
        elif roll < 0.88:
            goals = [ids[0] for _, _, ids in rng.sample(mine, min(len(mine), 2))]
            op = {"op": "reward", "ids": goals, "r": rng.choice(REWARDS)}
        else:
            _, _, ids = rng.choice(mine)
            op = {"op": "delete", "ids": rng.sample(ids[1:], min(len(ids) - 1, rng.randint(1, 2)))}
        op["w"] = w
        started = time.monotonic()
        try:
            if op["op"] == "ingest":
                t = trajectory(op["i"], op["variant"])
                receipt = repo.ingest(t, structure)
                op["receipt"] = receipt_json(receipt)
                mine.append((op["i"], op["variant"], list(receipt.node_ids)))
            elif op["op"] == "recall":
                query = EMBED([op["text"]])[0]
                now = datetime.fromisoformat(op["now"])
                hits = repo.recall(query, types=["subgoal", "episodic"], value_function=RECALL_PARAMS, now=now)
                op["hits"] = [h.node.id for h in hits]
            elif op["op"] == "reward":
                repo.reward(op["ids"], op["r"])
            else:
                repo.backend.delete_nodes(op["ids"])
        except hg.IngestionError as exc:
            if exc.reason != "source_conflict":
                raise
            op["conflict"] = True
        except Exception:
            op["error"] = traceback.format_exc()
            failed.append(op["error"])
        op["t0"], op["t1"] = started, time.monotonic()
        emit(op)
        if "error" in op:
            return


def open_store(spec: str, **options: Any) -> Any:
    """The backend a ``lmdb:<directory>`` or ``postgres:<repo>`` spec names."""
    kind, _, where = spec.partition(":")
    if kind == "lmdb":
        return LMDB(where, **options)
    from hippograph.backends.postgres import Postgres

    return Postgres(os.environ["HIPPOGRAPH_PG_DSN"], repo=where, **options)


def main() -> None:
    store, process, threads, ops, seed = sys.argv[1], *map(int, sys.argv[2:6])
    failed: list[str] = []
    with hg.Repo(open_store(store, ann=AnnConfig(min_nodes=8, min_speedup=0)), flush_interval=0.05) as repo:
        pool = [
            threading.Thread(target=worker, args=(repo, process * threads + t, ops, seed, failed))
            for t in range(threads)
        ]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
