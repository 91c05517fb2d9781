"""Child process of the crash matrix: runs a random operation stream until it is killed.

Usage: ``python rel_crash_child.py SPEC SEED FIRST_INDEX``, where SPEC names the
store as `rel_crash.open_store` takes it (``lmdb:<dir>`` or
``postgres:<dsn>#<schema>``; PostgreSQL connections carry the
``application_name`` `rel_crash.child_application_name` gives for this pid, so
the parent can wait for the server to end them). Prints ``READY``
once the store is open, then for every operation ``BEGIN <json descriptor>``
before calling it and ``ACK <json result>`` after it returned (each line
flushed; a random pause of up to 4 ms precedes the acknowledgement, like a caller's own
work would), so the parent knows which operations were acknowledged and which one
(at most) was in flight when it killed the process.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rel_crash import REPO, child_application_name, open_store
from rel_workload import REWARDS, T0, removed_by, run_op

import hippograph as hg
from hippograph.graph.model import NodeType

WEIGHTS = {"ingest": 30, "batch": 8, "delete": 10, "meta": 16, "reward": 16, "decay": 11, "consolidate": 11}


def main() -> None:
    spec, seed, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng, pause = random.Random(seed), random.Random(-seed)
    backend = open_store(spec, application_name=child_application_name(os.getpid()))
    repo = hg.open_repo(REPO, backend=backend, flush_interval=0)
    live = sorted(n.id for n in repo.backend.get_nodes_by_type(list(NodeType)))
    gone: list[str] = []
    next_index = first
    print("READY", flush=True)
    for seq in range(1_000_000):
        kind = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        if kind not in ("ingest", "batch") and not live:
            kind = "ingest"
        op: dict[str, Any] = {"op": kind}
        if kind == "ingest":
            if next_index and rng.random() < 0.15:
                op["i"] = rng.randrange(next_index)  # a replay, or a source an earlier run never finished
            else:
                op["i"], next_index = next_index, next_index + 1
        elif kind == "batch":  # new sources, sometimes with a replay among them
            size = rng.randint(2, 5)
            op["is"] = list(range(next_index, next_index + size))
            next_index += size
            if rng.random() < 0.3:
                op["is"].insert(rng.randrange(size + 1), rng.randrange(next_index))
        elif kind == "delete":
            op["ids"] = rng.sample(live, min(len(live), rng.randint(1, 3)))
        elif kind == "meta":
            pool = gone if gone and rng.random() < 0.1 else live
            op["id"], op["k"] = rng.choice(pool), seq
        elif kind == "reward":
            op["ids"], op["r"] = rng.sample(live, min(len(live), rng.randint(1, 4))), rng.choice(REWARDS)
        else:
            op["now"] = (T0 + timedelta(hours=1, seconds=seq)).isoformat()
        print("BEGIN " + json.dumps(op), flush=True)
        ack = run_op(repo, op)
        time.sleep(pause.uniform(0.0, 0.004))  # the caller's own work before it acknowledges: widens the window
        print("ACK " + json.dumps(ack), flush=True)
        if kind in ("ingest", "batch"):
            listed = [ack["receipt"]] if kind == "ingest" else ack["receipts"]
            named = [i for r in listed for i in r["node_ids"]]
            fresh = [i for i in named if i not in live and repo.backend.get_node(i) is not None]
            live = sorted({*live, *fresh})
        removed = removed_by(op, ack)
        if removed:
            live = [i for i in live if i not in removed]
            gone += sorted(removed)


if __name__ == "__main__":
    main()
