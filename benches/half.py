"""Exact scans over half-precision vectors (``vector_dtype="float16"``) next to float32, one run.

    python benches/half.py [--n 100000] [--queries 100] [--out benches/RESULTS.md]

The clustered 384-d workload of compare.py (usage metadata on every node), in two stores that
differ only in `vector_dtype`; each query set is asked of both, interleaved. Four timings per
workload: `find_candidates(exact=True)` on each store, and the Rust scan alone (`_core.scan_default`
without a shadow) over each store's rows: the plain f32 kernel reading 4 bytes a value, and the
f16 kernel reading 2. Top-k agreement: the f16 answer's
ids against the f32 one's, a difference counted as a tie when the f32 scores of the ids that differ
lie within 1e-3 of the f32 answer's k-th score.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import NOW, SCANNED, TOP_K, graph_changesets, make_dataset, query_only, query_sets
from store import write_section

from hippograph import _core
from hippograph.backends import InMemory
from hippograph.graph.value import resolve_config

HEADING = "## Half-precision scans (`python benches/half.py`)"
TIE = 1e-3


def load(ds: object, dtype: str) -> InMemory:
    store = InMemory(ann=None, vector_dtype=dtype)  # type: ignore[arg-type]
    for cs in graph_changesets(ds):  # type: ignore[arg-type]
        store.apply_changeset(cs)
    return store


def ask(store: InMemory, q: np.ndarray, top: int) -> list[tuple[str, float]]:
    config = {"params": {SCANNED: {"top_k": top}}}
    got = store.find_candidates([SCANNED], q[0], list(q[1:]), config, now=NOW, exact=True)
    return [(n.id, s) for n, s in got]


def kernel(store: InMemory, q: np.ndarray) -> None:
    """The Rust scan alone over the store's rows without a shadow: the plain f32 kernel over a
    float32 store's rows, the f16 kernel over a float16 store's."""
    columns = store._derived.columns[SCANNED]
    params = resolve_config({"params": {SCANNED: {"top_k": TOP_K}}}).params[SCANNED]
    rows, _ = columns.scanned()
    _core.scan_default(
        rows,
        columns.norms(),
        np.ascontiguousarray(q, np.float32),
        columns.usage(),
        columns.rank(),
        NOW.timestamp(),
        params.core_params,
        params.core_selection,
        None,
    )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3


def run(n: int, count: int) -> list[str]:
    ds = make_dataset(n)
    t0 = time.perf_counter()
    full, half = load(ds, "float32"), load(ds, "float16")
    print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    sets = query_sets(ds, count)
    workloads = {"query + 4 tags": sets, "query only": [s[:1] for s in query_only(sets)]}
    rows: list[str] = []
    notes: list[str] = []
    for name, queries in workloads.items():
        for q in queries[:3]:  # warm: columns, usage order, page cache
            ask(full, q, TOP_K), ask(half, q, TOP_K), kernel(full, q)
        times: dict[str, list[float]] = {"f32": [], "f16": [], "kernel": [], "kernel16": []}
        same = ties = differ = 0
        for q in queries:
            t = time.perf_counter()
            want = ask(full, q, TOP_K)
            times["f32"].append(time.perf_counter() - t)
            t = time.perf_counter()
            got = ask(half, q, TOP_K)
            times["f16"].append(time.perf_counter() - t)
            t = time.perf_counter()
            kernel(full, q)
            times["kernel"].append(time.perf_counter() - t)
            t = time.perf_counter()
            kernel(half, q)
            times["kernel16"].append(time.perf_counter() - t)
            if [i for i, _ in got] == [i for i, _ in want]:
                same += 1
                continue
            reference = dict(ask(full, q, n))
            kth = want[-1][1]
            swapped = {i for i, _ in got} ^ {i for i, _ in want}
            if all(abs(reference[i] - kth) <= TIE for i in swapped):
                ties += 1
            else:
                differ += 1
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        for label, key in (("f32 kernel alone (no shadow)", "kernel"), ("f16 kernel alone", "kernel16"),
                           ("float32 store", "f32"), ("float16 store", "f16")):  # fmt: skip
            rows.append(
                f"| {name} | {label} | {med[key]:.2f} ms | {pct(times[key], 95):.2f} ms | {pct(times[key], 99):.2f} ms "
                f"| {max(times[key]) * 1e3:.2f} ms |"
            )
        ratio = med["kernel16"] / med["kernel"]
        notes.append(
            f"- {name}: the f16 kernel at {ratio:.2f}× the f32 kernel's median (target ≤ 0.6×: "
            f"{'met' if ratio <= 0.6 else '**not met**'}); the float16 store's `find_candidates` at "
            f"{med['f16'] / med['kernel']:.2f}× the f32 kernel and {med['f16'] / med['f32']:.2f}× the float32 "
            f"store's; top {TOP_K} in the same order for {same} of "
            f"{len(queries)} query sets, the same ids up to ties within {TIE:g} for {ties}, otherwise {differ}."
        )
    f32_cols, f16_cols = full._derived.columns[SCANNED], half._derived.columns[SCANNED]

    def held(columns: object) -> int:
        v = columns._vectors  # type: ignore[attr-defined]
        return int(v._mat.nbytes + v.shadow.half.nbytes + v.shadow.residual.nbytes + v._norms.nbytes)

    threads = os.environ.get("RAYON_NUM_THREADS", "default")
    return [
        HEADING,
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"Rayon threads: {threads}. {n:,} clustered semantic nodes × 384 with usage metadata (plus "
        f"{len(ds.extra):,} nodes of other types), {count} query sets, top {TOP_K}, exact scans, InMemory stores "
        "built the same way but for `vector_dtype`. The float32 store reads each type through its f16 shadow "
        "first (the same answer as the f32 kernel); the float16 store reads only the f16 unit rows.",
        "",
        "| workload | scan | p50 | p95 | p99 | worst |",
        "|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        *notes,
        f"- Vector bytes held for the scanned type (rows, shadow, norms; with room to grow): float32 "
        f"{held(f32_cols) / 2**20:,.0f} MiB, float16 {held(f16_cols) / 2**20:,.0f} MiB.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = run(args.n, args.queries)
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
