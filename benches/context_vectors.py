"""Context store vector search: `ContextStore.search_vector` with its vector index, the same store
without one (`ann=None`: the exact scan), and a plain numpy scan of the same vectors, in one run.
Writes its section of benches/RESULTS.md.

N documents (default 30,000) with 384-d float32 vectors around 64 centres (spread 0.6), under 50
directories; 200 queries near a centre (spread 0.3), top 10 over the whole store. Recall@10 of each
answer against the exact cosine top 10 (numpy, float64). Then 30 turns of one new document with
its vector followed by a search that must find it first (the work a write leaves to the next
search is in that figure: the process catches up from the store's change log).

    python benches/context_vectors.py [--n 30000] [--out benches/RESULTS.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
from store import fmt, write_section

import hippograph as hg
from hippograph.context import ContextStore, open_context
from hippograph.testing.context import EMBED, embed_pending

HEADING = "## Context store vector search (benches/context_vectors.py)"
DIM, TOP_K, QUERIES, TURNS, BLOCK = 384, 10, 200, 30, 25


def load(path: Path, ann: hg.AnnConfig | None, uris: list[str], vectors: npt.NDArray[np.float32]) -> ContextStore:
    ctx = open_context("bench", path=path, durability="fast", document_jobs=[EMBED], ann=ann)
    for start in range(0, len(uris), 2000):
        chunk = {}
        for i in range(start, min(len(uris), start + 2000)):
            ctx.put_document(uris[i], f"document {i}")
            chunk[uris[i]] = vectors[i]
        embed_pending(ctx, chunk)
    return ctx


def timed(fns: dict[str, Callable[[int], list[str]]], n: int) -> dict[str, tuple[list[float], list[list[str]]]]:
    """Each function over queries 0..n-1, taking turns `BLOCK` calls at a time."""
    out: dict[str, tuple[list[float], list[list[str]]]] = {k: ([], []) for k in fns}
    for start in range(0, n, BLOCK):
        for name, fn in fns.items():
            times, answers = out[name]
            for i in range(start, min(n, start + BLOCK)):
                t0 = time.perf_counter()
                answers.append(fn(i))
                times.append(time.perf_counter() - t0)
    return out


def run(n: int) -> list[str]:
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((64, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, 64, n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    queries = centres[rng.integers(0, 64, QUERIES)] + 0.3 * rng.standard_normal((QUERIES, DIM)).astype(np.float32)
    uris = [f"res/p{i % 50:02d}/d{i:06d}" for i in range(n)]
    unit = vectors.astype(np.float64) / np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    truth = [set(np.argsort(-(unit @ q.astype(np.float64)))[:TOP_K].tolist()) for q in queries]
    row_of = {u: i for i, u in enumerate(uris)}
    norms = np.linalg.norm(vectors, axis=1)
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hippograph-ctxvec-") as tmp:
        t0 = time.perf_counter()
        indexed = load(Path(tmp) / "index", hg.AnnConfig(), uris, vectors)
        load_s = time.perf_counter() - t0
        exact = load(Path(tmp) / "exact", None, uris, vectors)
        indexed.search_vector(queries[0], TOP_K)  # the snapshot and the columns loaded
        t0 = time.perf_counter()
        indexed.build_vector_index()
        build_s = time.perf_counter() - t0
        stats = indexed.vector_index_stats().get("index", {})
        exact.search_vector(queries[0], TOP_K)

        def numpy_scan(i: int) -> list[str]:
            q = queries[i]
            sims = (vectors @ q) / (norms * np.linalg.norm(q))
            top = np.argpartition(-sims, TOP_K)[:TOP_K]
            return [uris[j] for j in top[np.argsort(-sims[top])]]

        def searched(ctx: ContextStore) -> Callable[[int], list[str]]:
            return lambda i: [h.uri for h in ctx.search_vector(queries[i], TOP_K)]

        numpy_name = "numpy scan (`M @ q` / norms, `argpartition`)"
        got = timed({
            "hippograph `search_vector`, vector index (default)": searched(indexed),
            "hippograph `search_vector`, `ann=None` (exact scan)": searched(exact),
            numpy_name: numpy_scan,
        }, QUERIES)  # fmt: skip
        base = statistics.median(got[numpy_name][0])
        for name, (times, answers) in got.items():
            recalls = [len({row_of[u] for u in a} & t) / TOP_K for a, t in zip(answers, truth, strict=True)]
            times.sort()
            p95 = times[int(0.95 * (len(times) - 1))]
            med = statistics.median(times)
            recall = f"{np.mean(recalls):.3f} ({min(recalls):.2f})"
            rows.append(f"| {name} | {fmt(med)} | {fmt(p95)} | {base / med:.2f}× | {recall} |")
        after: dict[str, list[float]] = {}
        for label, ctx in (("vector index", indexed), ("exact scan", exact)):
            times = []
            for i in range(TURNS):
                uri = f"res/new/{label[0]}{i:03d}"
                ctx.put_document(uri, "new")
                embed_pending(ctx, {uri: queries[i]})
                t0 = time.perf_counter()
                hits = ctx.search_vector(queries[i], TOP_K)
                times.append(time.perf_counter() - t0)
                assert hits[0].uri == uri, (hits[0].uri, uri)
            after[label] = times
        indexed.close()
        exact.close()
    return [
        HEADING,
        "",
        f"{n:,} documents × {DIM} float32 around 64 centres, LMDB (`fast`); {QUERIES} queries near a centre, top "
        f"{TOP_K} over the whole store, the three taking turns {BLOCK} queries at a time; recall@{TOP_K} against the "
        f"exact cosine top {TOP_K} (float64), mean (worst query). Loading the documents with their vectors took "
        f"{load_s:.1f} s; `build_vector_index()` with its calibration {build_s:.1f} s (ef_search "
        f"{stats.get('ef_search')}, exact fallback {stats.get('exact_fallback')}). Machine: {platform.machine()}, "
        f"Python {platform.python_version()}.",
        "",
        "| search | p50 | p95 | speed-up over numpy | recall@10 mean (worst) |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"A search right after one new document and its vector ({TURNS} turns, the new document found first each "
        "time; the search brings the process's rows up to date from the store's change log, and the index's columns "
        "with them): p50 " + ", ".join(f"{label} {fmt(statistics.median(t))}" for label, t in after.items()) + ".",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    lines = run(args.n)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
