"""Bytes each small write hands the kernel per commit on LMDB: what decides a small write's speed once
its own work is native (every dirty page is copied into the page cache, and synced in `sync` mode).

    python benches/commit_bytes.py [--calls 500] [--out benches/RESULTS.md]

Counted from the process's own write accounting (`wchar` in /proc/self/io: bytes passed to write
system calls, so no tracer slows the run), over `--calls` calls after a warm-up that leaves a store
of realistic depth: 3,000 waiting jobs behind the context store's calls, 1,000 ingestions before the
graph's, 3,000 entries before the scoped store's. LMDB `fast` (no fsync: the same pages are written
either way). Linux only.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import make_ingestion, vector_pool
from context import _text
from store import workload, write_section

from hippograph.backends import LMDB
from hippograph.context import ContextStore
from hippograph.store import Store

HEADING = "## Bytes written per commit (`python benches/commit_bytes.py`)"
PAGE = 4096


def written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def per_call(fn: Callable[[int], object], calls: int) -> float:
    before = written()
    for i in range(calls):
        fn(i)
    return (written() - before) / calls


def context_rows(root: Path, calls: int) -> list[tuple[str, float]]:
    ctx = ContextStore(LMDB(root / "context", durability="fast"), document_jobs=("embed",), owns_backend=True)
    for i in range(3000):
        ctx.put_document(f"proj/old/n{i}", _text(i))
    put = per_call(lambda i: ctx.put_document(f"proj/new/n{i}", _text(i)), calls)
    claimed: list[int] = []

    def claim(i: int) -> None:
        job = ctx.dequeue_job(["embed"])
        assert job is not None
        claimed.append(job.id)

    claim_bytes = per_call(claim, calls)
    complete = per_call(lambda i: ctx.complete_job(claimed[i]), calls)
    ctx.close()
    return [
        ("context `put_document` + its job", put),
        ("context claim (`dequeue_job`)", claim_bytes),
        ("context `complete_job`", complete),
    ]


def graph_row(root: Path, calls: int) -> tuple[str, float]:
    pool = vector_pool()
    made = [make_ingestion("b", i, pool) for i in range(1000 + calls)]
    store = LMDB(root / "graph", durability="fast")
    for ing in made[:1000]:
        store.commit_ingestion(ing.record, ing.changeset)
    got = per_call(lambda i: store.commit_ingestion(made[1000 + i].record, made[1000 + i].changeset), calls)
    store.close()
    return "graph ingestion (9 nodes with 384-d vectors, 11 links, metadata)", got


def store_row(root: Path, calls: int) -> tuple[str, float]:
    w = workload(3000 + calls, 1, seed=11)
    store = Store(LMDB(root / "store", durability="fast"), owns_backend=True)
    texts, scopes, vectors = w["texts"], w["scopes"], w["vectors"]
    for i in range(3000):
        store.put(scopes[i], f"k{i}", texts[i], {"text": texts[i]}, embedding=vectors[i])
    got = per_call(
        lambda i: store.put(scopes[3000 + i], f"k{3000 + i}", texts[3000 + i], embedding=vectors[3000 + i]), calls
    )
    store.close()
    return "scoped store `put` (a 384-d vector and its text)", got


def run(calls: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="hippograph-commit-bytes-") as tmp:
        root = Path(tmp)
        rows = [*context_rows(root, calls), graph_row(root, calls), store_row(root, calls)]
    return [
        HEADING,
        "",
        f"Bytes handed to the kernel per call, the mean of {calls:,} calls after a warm-up (3,000 waiting jobs; "
        "1,000 ingestions; 3,000 entries), LMDB `fast`, counted by the process's own write accounting "
        "(`/proc/self/io`). LMDB writes whole 4 KB pages plus its meta page, so the page column is "
        f"the bytes over 4,096. Machine: {platform.machine()}, Python {platform.python_version()}.",
        "",
        "| call | bytes per commit | pages |",
        "|---|---:|---:|",
        *(f"| {name} | {got:,.0f} | {got / PAGE:.1f} |" for name, got in rows),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    if not Path("/proc/self/io").exists():
        sys.exit("commit_bytes.py reads /proc/self/io: Linux only")
    lines = run(args.calls)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
