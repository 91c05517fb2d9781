"""Open → first exact answer on a large LMDB store, with its saved scoring columns mapped and with
them rebuilt from the node records, and what a second process opening the same store adds to its
memory. Writes its section of benches/RESULTS.md.

Workload: the comparison's clustered store (benches/_benchdata.py) at N scanned nodes of D
dimensions (default 1M × 128, plus a tenth as many nodes of other types), loaded with
`durability="fast"`, read once and closed (which saves the columns). Each timing runs in a fresh
process, opened read-only (so that closing it saves nothing): open, one exact `find_candidates`
(query + 4 tags), close not timed. "warm": the files
are in the page cache; "cold": the page cache was dropped first (needs root; skipped otherwise).

    python benches/open.py [--n 1000000] [--dim 128] [--reps 3] [--out benches/RESULTS.md]
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import build_lmdb, make_dataset
from store import write_section

HEADING = "## Open: saved scoring columns (benches/open.py)"

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {benches!r})
import numpy as np
from hippograph.backends import LMDB
from _benchdata import NOW, SCANNED
data = np.load({queries!r})
def private_kib():
    fields = {{}}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
    return fields
before = private_kib()
t1 = time.perf_counter()
store = LMDB({path!r}, readonly=True)  # a reader: closing saves nothing
hits = store.find_candidates([SCANNED], data[0], list(data[1:]), None, now=NOW, exact=True)
t2 = time.perf_counter()
mem = private_kib()
print(json.dumps({{"open_to_answer_s": t2 - t1, "imports_s": t1 - t0, "hits": [n.id for n, _ in hits],
                  "state": store.stats()["saved_columns"]["state"], "mem": mem, "before": before}}), flush=True)
if {hold}:
    sys.stdin.readline()
store.close()
"""


def child(path: Path, queries: Path, hold: bool = False) -> subprocess.Popen[str]:
    code = _CHILD.format(benches=str(Path(__file__).resolve().parent), queries=str(queries), path=str(path), hold=hold)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def run_child(path: Path, queries: Path) -> dict[str, Any]:
    proc = child(path, queries)
    out, _ = proc.communicate(timeout=3600)
    if proc.returncode:
        raise SystemExit(f"child failed with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def fmt(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    import numpy as np

    started = time.perf_counter()
    ds = make_dataset(args.n, dim=args.dim)
    rows: list[tuple[str, list[float], str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        queries = Path(tmp) / "queries.npy"
        np.save(queries, np.vstack([ds.query[None, :], ds.tags]))
        t0 = time.perf_counter()
        store = build_lmdb(ds, path, "fast")  # loads, then reads once: its columns are built
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.close()  # saves the columns
        save_s = time.perf_counter() - t0
        columns_bytes = sum(f.stat().st_size for f in (path / "columns").rglob("*") if f.is_file())
        sidecar = path / "columns" / "columns.json"
        saved_sidecar = sidecar.read_bytes()
        want = run_child(path, queries)["hits"]

        def timed(label: str, note: str, cold: bool = False) -> None:
            runs = []
            for _ in range(args.reps):
                if cold and not drop_caches():
                    rows.append((label, [], "not measured: dropping the page cache needs root"))
                    return
                got = run_child(path, queries)
                if got["hits"] != want:
                    raise SystemExit(f"{label}: the first answer differs from the rebuilt columns' answer")
                runs.append(got["open_to_answer_s"])
            rows.append((label, runs, f"{note}; columns {got['state']}"))

        timed("saved columns mapped, warm page cache", "open, map, sample check, first exact scan")
        timed("saved columns mapped, cold page cache", "files read from disk", cold=True)
        sidecar.unlink()
        timed("columns rebuilt from the node records (no saved set), warm", "every node decoded")
        sidecar.write_bytes(saved_sidecar)
        first = child(path, queries, hold=True)
        assert first.stdout is not None
        first_mem = json.loads(first.stdout.readline())["mem"]
        second = run_child(path, queries)
        assert first.stdin is not None
        first.stdin.write("\n")
        first.stdin.flush()
        first.wait(timeout=600)
    vector_bytes = args.n * args.dim * 4

    def private(m: dict[str, int]) -> int:
        return (m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)) * 1024

    mem, before = second["mem"], second["before"]
    added = private(mem) - private(before)
    rss_added = (mem.get("Rss", 0) - before.get("Rss", 0)) * 1024
    head = [
        HEADING,
        "",
        f"{args.n:,} × {args.dim} scanned nodes (+{len(ds.extra):,} of other types), LMDB `fast`. Loading and the "
        f"first read took {fmt(load_s)}; `close()` saved {columns_bytes / 2**20:,.0f} MiB of columns in "
        f"{fmt(save_s)}. Each row: a fresh process opens the store and answers one exact `find_candidates` "
        f"(query + 4 tags), {args.reps} runs (identical answers checked). Machine: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| open → first exact answer | median | worst | note |",
        "|---|---:|---:|---|",
    ]
    body = [
        f"| {label} | {fmt(statistics.median(r)) if r else '–'} | {fmt(max(r)) if r else '–'} | {note} |"
        for label, r, note in rows
    ]
    tail = [
        "",
        f"A second process opening the store while a first holds it open, measured from after its imports to "
        f"its first answer: its private memory grows by {added / 2**20:,.0f} MiB ({added / vector_bytes:.0%} "
        f"of the {vector_bytes / 2**20:,.0f} MiB of vectors, target < 10%; the mapped columns and ids are "
        f"pages shared with the first process), its resident set by {rss_added / 2**20:,.0f} MiB "
        f"(shared pages it touched included); resident in all {mem.get('Rss', 0) / 1024:,.0f} MiB, the first "
        f"process {first_mem.get('Rss', 0) / 1024:,.0f} MiB. Whole run: {fmt(time.perf_counter() - started)}.",
        "",
    ]
    lines = head + body + tail
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
