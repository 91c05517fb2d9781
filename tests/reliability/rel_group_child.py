"""Child of the group-commit crash test: threads ingesting at once into one LMDB `sync` store.

Usage: ``python rel_group_child.py DIR FIRST THREADS``. Prints ``READY`` once
the store is open, then ``ACK <json>`` (source id and receipt) after each
`Repo.ingest` returned, one line at a time; thread ``k`` ingests sources
``FIRST + k``, ``FIRST + k + THREADS``, ... until the parent kills the process.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from rel_workload import receipt_json, source_id, structure, trajectory

import hippograph as hg
from hippograph.backends.lmdb import LMDB


def main() -> None:
    path, first, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    repo = hg.Repo(LMDB(path, durability="sync"), flush_interval=0)
    out = threading.Lock()
    start = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        start.wait()
        i = first + k
        while True:
            receipt = repo.ingest(trajectory(i), structure)
            with out:
                print("ACK " + json.dumps({"source": source_id(i), "receipt": receipt_json(receipt)}), flush=True)
            i += threads

    for k in range(threads):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    print("READY", flush=True)
    start.wait()
    threading.Event().wait()


if __name__ == "__main__":
    main()
