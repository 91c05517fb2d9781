"""Open -> index ready: a large LMDB store with a saved vector index, reopened by fresh processes.

The store is benches/compare.py's clustered 1M x 128 store (its generator, `build_lmdb`, then
`build_vector_index()` and `close()`, which saves the index beside it), built unless `--store`
names one already built that way. Each run is a new process, as an agent restarting would be, on
the settings of compare.py (one BLAS and one rayon thread): it opens the store and asks one query
+ 4 tags. *Exact*: `exact=True`, until the answer. *Index ready*: `exact=False`, which the exact
scan answers while the saved index is adopted (verified) in the background, until
`vector_index_stats()` says it is available. Warm page cache (a discarded run first).

    python benches/open_index.py                      # builds the store (about 10 minutes), 5 runs
    python benches/open_index.py --store DIR --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADING = "## Open -> index ready: saved vector index (`python benches/open_index.py`)"
N, DIM = 1_000_000, 128
PINNED = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}


def child(store: Path, exact: bool, queries: Path) -> None:
    """One reopen: prints the seconds to the answer (exact) or to the index being ready."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    from compare import answerer, index_stats

    from hippograph.backends import LMDB

    asked = np.load(queries)
    t0 = time.perf_counter()
    b = LMDB(store, map_size=1 << 31)
    answerer(b)(asked, exact)
    while not exact and not index_stats(b).get("available") and not index_stats(b).get("error"):
        time.sleep(0.005)
    took = time.perf_counter() - t0
    stats = index_stats(b)
    b.close()
    print(json.dumps({"s": took, "loaded": bool(stats.get("loaded")), "error": stats.get("error")}))


def build(store: Path) -> None:
    sys.path.insert(0, str(HERE))
    from compare import SCANNED, build_lmdb, make_dataset

    b = build_lmdb(make_dataset(N, dim=DIM), store, "fast")
    b.build_vector_index([SCANNED])
    b.close()


def reopen(store: Path, exact: bool, queries: Path) -> dict[str, object]:
    env = {**os.environ, **PINNED}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(store), "--exact", str(int(exact))]
    cmd += ["--queries", str(queries)]
    got: dict[str, object] = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="a store built as this script builds one (default: build)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--exact", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--queries", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, bool(args.exact), args.queries)
        return
    started = time.perf_counter()
    sys.path.insert(0, str(HERE))
    import numpy as np
    from compare import make_dataset, query_sets

    with tempfile.TemporaryDirectory(prefix="hippograph-open-index-") as tmp:
        store = args.store or Path(tmp) / "store"
        if args.store is None:
            build(store)
        queries = Path(tmp) / "queries.npy"
        np.save(queries, query_sets(make_dataset(N, dim=DIM), 1)[0])  # compare.py's first query set
        reopen(store, False, queries)  # the page cache warmed
        exact, ready, loaded = [], [], True
        for _ in range(args.runs):
            exact.append(float(reopen(store, True, queries)["s"]))  # type: ignore[arg-type]
            got = reopen(store, False, queries)
            ready.append(float(got["s"]))  # type: ignore[arg-type]
            loaded = loaded and bool(got["loaded"]) and got["error"] is None
    lines = [
        HEADING,
        "",
        f"{N:,} × {DIM} clustered scanned nodes (+{N // 10:,} of other types), benches/compare.py's store, "
        "LMDB `fast`, its saved index beside it. Each run a fresh process (one BLAS and one rayon "
        "thread, as compare.py) opens the store and asks one query + 4 tags; warm page cache. "
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average {os.getloadavg()[0]:.2f} at the end. Whole run: {time.perf_counter() - started:.0f} s.",
        "",
        "| open → | median | best | worst | runs |",
        "|---|---:|---:|---:|---:|",
        f"| first exact answer | {statistics.median(exact):.2f} s | {min(exact):.2f} s | {max(exact):.2f} s "
        f"| {len(exact)} |",
        f"| index ready (saved index adopted{'' if loaded else ', **not loaded: rebuilt**'}) "
        f"| {statistics.median(ready):.2f} s | {min(ready):.2f} s | {max(ready):.2f} s | {len(ready)} |",
    ]
    sys.path.insert(0, str(HERE))
    from store import write_section

    write_section(args.out, lines, HEADING)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
