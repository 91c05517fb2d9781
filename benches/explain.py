"""What explaining costs, and that not asking costs nothing: `find_candidates` at 100k x 384.

Two child processes hold the same InMemory store (100k x 384 clustered semantic nodes with varied
usage metadata, plus 10k of other types): one on this checkout, one on an earlier hippograph
installed into a directory (`--before SITE`, e.g. `pip install --no-deps --target SITE <wheel>`).
The parent asks them for blocks of exact `find_candidates` calls in turn (query + 4 tags, and the
query alone), so both are measured in the same run under the same load; this checkout also answers
with `explain=True`. Each row: p50 and p90 over the blocks' per-call medians.

    python benches/explain.py --before /tmp/prevsite   # writes its section of benches/RESULTS.md
    python benches/explain.py --n 20000 --rounds 5     # quicker, this checkout alone
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HEADING = "## Explaining answers (`python benches/explain.py`)"
BLOCK = 25
"""Calls per block; a block's median is one sample."""


def child(n: int) -> None:
    """Builds the store, then answers commands from stdin: ``<kind> <explain>`` runs a block and
    prints its per-call median in microseconds; ``quit`` ends."""
    sys.path.insert(0, str(HERE))
    from _benchdata import NOW, SCANNED, build_memory, make_dataset

    import hippograph as hg

    ds = make_dataset(n)
    store = build_memory(ds)
    explains = "explain" in store.find_candidates.__code__.co_varnames
    print(json.dumps({"version": hg.__version__, "explains": explains, "where": hg.__file__}), flush=True)
    calls = {
        "tags": lambda **kw: store.find_candidates([SCANNED], ds.query, ds.tags, None, now=NOW, exact=True, **kw),
        "alone": lambda **kw: store.find_candidates([SCANNED], ds.query, (), None, now=NOW, exact=True, **kw),
    }
    for kind in calls:  # warm: the columns, the shadow, the CPU caches
        calls[kind]()
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        kind, explain = line.split()
        call, extra = calls[kind], ({"explain": True} if explain == "1" else {})
        took = []
        for _ in range(BLOCK):
            t0 = time.perf_counter()
            call(**extra)
            took.append(time.perf_counter() - t0)
        print(json.dumps(statistics.median(took) * 1e6), flush=True)


class Child:
    def __init__(self, n: int, site: str | None) -> None:
        env = dict(os.environ)
        if site is not None:
            env["PYTHONPATH"] = os.pathsep.join([site, str(HERE)])
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/" if site is not None else None,  # not this checkout's python/ on the path
        )
        self.info: dict[str, Any] = json.loads(self.readline())

    def readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a measuring process ended early")
        return line

    def block(self, kind: str, explain: bool) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{kind} {int(explain)}\n")
        self.proc.stdin.flush()
        got: float = json.loads(self.readline())
        return got

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--before", help="a directory holding an earlier hippograph (its site-packages)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    started = time.perf_counter()
    now = Child(args.n, None)
    before = Child(args.n, args.before) if args.before else None
    samples: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for kind in ("tags", "alone"):
            runs = [("now", now, False), ("explain", now, True)]
            if before is not None:
                runs.insert(0, ("before", before, False))
            runs = runs[r % len(runs) :] + runs[: r % len(runs)]  # each takes every place in turn
            for label, proc, explain in runs:
                samples.setdefault((kind, label), []).append(proc.block(kind, explain))
    for proc in (now, before):
        if proc is not None:
            proc.close()
    rows = []
    for kind, what in (("tags", "query + 4 tags"), ("alone", "query alone")):
        cur = samples[(kind, "now")]
        cells = [f"{statistics.median(cur):.0f} / {percentile(cur, 0.9):.0f} µs"]
        if before is not None:
            old = samples[(kind, "before")]
            ratio = statistics.median(cur) / statistics.median(old)
            cells.insert(0, f"{statistics.median(old):.0f} / {percentile(old, 0.9):.0f} µs")
            cells.insert(2, f"{ratio:.3f}×")
        exp = samples[(kind, "explain")]
        cells += [f"{statistics.median(exp):.0f} / {percentile(exp, 0.9):.0f} µs"]
        cells += [f"+{statistics.median(exp) - statistics.median(cur):.0f} µs"]
        rows.append(f"| {what} | " + " | ".join(cells) + " |")
    header = ["| `find_candidates`, exact |"]
    if before is not None:
        header.append(f" before ({before.info['version']}) p50 / p90 |")
    header.append(" without `explain` p50 / p90 |")
    if before is not None:
        header.append(" without / before |")
    header.append(" `explain=True` p50 / p90 | cost of explaining |")
    cols = "".join(header).count("|") - 1
    lines = [
        HEADING,
        "",
        f"{args.n:,} × 384 clustered semantic nodes with varied usage (benches/_benchdata.py), InMemory, "
        f"top_k 20, exact scan; {args.rounds} rounds of blocks of {BLOCK} calls, each block's median one "
        "sample, the processes asked in turn (each in every place of the order by turns). *Before*: the "
        "same script on an earlier hippograph installed beside this one (`--before`), which has no "
        "`explain`. Machine: "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. "
        f"Whole run: {time.perf_counter() - started:.0f} s.",
        "",
        "".join(header),
        "|---|" + "---:|" * (cols - 1),
        *rows,
    ]
    sys.path.insert(0, str(HERE))
    from store import write_section

    write_section(args.out, lines, HEADING)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
