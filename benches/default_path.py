"""The default path (`exact=False`) against `exact=True` with the library's own thread settings.

    python benches/default_path.py [--n 100000] [--dim 384] [--no-shapes] [--out benches/RESULTS.md]

compare.py judges its targets single-threaded; a user runs with the defaults, where the exact scan
uses every core. Here both paths run as installed, on the clustered data of benches/_benchdata.py
(usage as its generator draws it, and aged as a real memory ages), LMDB `fast`: the store is
loaded, `build_vector_index()` runs, 128 query sets are asked as an agent would and the index's
new measurement is awaited; then the 50 query sets (the query vector alone, and with its four
tags) are answered by both paths taking turns, 10 at a time, 5 rounds. Recall@20 of each default
answer against the exact one for the same query. Then the same on data shaped unlike the
benchmarks' own (`_benchdata.OTHER_SHAPES`), unless `--no-shapes`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from hippograph.backends import LMDB

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _benchdata import (
    NOW,
    OTHER_SHAPES,
    SCANNED,
    Dataset,
    build_lmdb,
    make_aged_dataset,
    make_dataset,
    make_shaped,
    query_only,
    query_sets,
)
from store import fmt, write_section

HEADING = "## The default path against the exact scan, default threads (`python benches/default_path.py`)"
ROUNDS, BLOCK, TOP_K = 5, 10, 20
F32 = npt.NDArray[np.float32]


def measured(store: LMDB, label: str, kind: str, qs: list[F32], build_s: float) -> str:
    """One table row: `qs` asked as an agent would (128 queries), the index's new measurement awaited,
    then both paths taking turns."""

    def answer(q: F32, exact: bool) -> list[str]:
        hits = store.find_candidates([SCANNED], q[0], q[1:], None, now=NOW, exact=exact)
        return [node.id for node, _ in hits]

    for q in (qs * 3)[:128]:
        answer(q, False)
    waited = time.perf_counter()
    while store.vector_index_stats()[SCANNED].get("measuring") and time.perf_counter() - waited < 600:
        time.sleep(0.05)
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(ROUNDS):
        for start in range(0, len(qs), BLOCK):
            for exact in (True, False):
                for q in qs[start : start + BLOCK]:
                    t = time.perf_counter()
                    answer(q, exact)
                    times[exact].append(time.perf_counter() - t)
    recalls = [len(set(answer(q, False)) & set(answer(q, True))) / TOP_K for q in qs]
    stats = store.vector_index_stats()[SCANNED]
    exact_p50, default_p50 = statistics.median(times[True]), statistics.median(times[False])
    p95 = sorted(times[False])[int(0.95 * (len(times[False]) - 1))]
    path = "exact scan (index not kept)" if stats.get("exact_fallback") else str(stats.get("value_weighted_search"))
    return (
        f"| {label} | {kind} | {fmt(exact_p50)} | {fmt(default_p50)} | {fmt(p95)} | "
        f"{exact_p50 / default_p50:.1f}× | {statistics.mean(recalls):.3f} ({min(recalls):.2f}) | "
        f"{stats.get('ef_search')} | {path} | {build_s:.1f} s |"
    )


def rows_of(ds: Dataset, label: str, sets: list[F32]) -> list[str]:
    """The rows of one data set: query sets with their tags, then their queries alone."""
    with tempfile.TemporaryDirectory() as tmp:
        store = build_lmdb(ds, Path(tmp) / "s", "fast")
        t0 = time.perf_counter()
        store.build_vector_index()
        build_s = time.perf_counter() - t0
        rows = [
            measured(store, label, kind, qs, build_s)
            for kind, qs in (("query + 4 tags", sets), ("query only", query_only(sets)))
        ]
        store.close()
    return rows


def run(n: int, dim: int, shapes: bool) -> list[str]:
    rows = []
    for label, make in (("clustered", make_dataset), ("clustered, aged usage", make_aged_dataset)):
        ds = make(n, dim=dim)
        rows += rows_of(ds, f"{label}, {n:,} × {dim}", query_sets(ds, 50))
    for shape in OTHER_SHAPES if shapes else ():
        ds, sets = make_shaped(shape)
        rows += rows_of(ds, f"{shape.label}, {shape.n:,} × {shape.dim}", sets)
    return [
        HEADING,
        "",
        f"Semantic nodes (the clustered data with a tenth as many of other types besides), LMDB `fast`, the "
        f"library's default threads ({os.cpu_count()} CPUs; the exact scan uses them all); `find_candidates` of "
        f"the semantic type, default value function, top {TOP_K}; 50 query sets, the two paths taking turns "
        f"{BLOCK} queries at a time, {ROUNDS} rounds, after 128 queries asked as an agent would and the index's "
        "new measurement. The rows after the first four are data the other benchmarks do not use "
        "(`_benchdata.OTHER_SHAPES`: queries near vectors drawn like the stored ones but not stored, tags near "
        "others); where the index cannot beat the exact scan at the recall target it is not kept and the "
        "default path is the exact scan (the value-weighted search column says so). Machine: "
        f"{platform.machine()}, Python {platform.python_version()}.",
        "",
        "| data | queries | exact p50 | default p50 | default p95 | speed-up | recall@20 mean (worst) | "
        "`ef_search` | value-weighted search | index build |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
        *rows,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--no-shapes", action="store_true", help="only the clustered data, not OTHER_SHAPES")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    lines = run(args.n, args.dim, not args.no_shapes)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
