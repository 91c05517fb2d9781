"""Similarity search side by side: hippograph on PostgreSQL (``search="server"``), hippograph on
LMDB (in-process HNSW), LangGraph's PostgresStore (pgvector HNSW) and a numpy scan, one run.

    python benches/pgvector_peers.py [--n 100000] [--dim 128] [--queries 200] [--out benches/RESULTS.md]

The same clustered vectors (benches/_benchdata.py) without usage metadata, so every method ranks
by cosine similarity alone and each answer is compared with the numpy scan's top 20. The
PostgreSQL server is a throwaway cluster from the dev extra's wheel (fsync on), shared by
hippograph and LangGraph (each in its own schema); LangGraph's embedding function looks the
stored vectors up, so no model runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import hippograph as hg
from hippograph.backends import LMDB

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import NOW, SCANNED, make_dataset, query_only, query_sets
from store import write_section

HEADING = "## Similarity search next to LangGraph's PostgresStore (`python benches/pgvector_peers.py`)"
TOP = 20
SETTINGS = "-c shared_buffers=2GB -c maintenance_work_mem=2GB -c max_parallel_maintenance_workers=1"


def changesets(ids: list[str], matrix: np.ndarray, chunk: int = 5000) -> list[hg.Changeset]:
    out = []
    for start in range(0, len(ids), chunk):
        cs = hg.Changeset()
        for i in range(start, min(start + chunk, len(ids))):
            cs.add_node(hg.Semantic(id=ids[i], embedding=matrix[i], proposition="p", confidence=1.0))
        out.append(cs)
    return out


def timed(
    fn: Callable[[np.ndarray], list[str]], queries: list[np.ndarray], truth: list[set[str]]
) -> tuple[float, float, float]:
    """(p50 seconds, p99 seconds, mean recall@TOP) over `queries` after a warm-up pass."""
    for q in queries[:5]:
        fn(q)
    times, recalls = [], []
    for q, want in zip(queries, truth, strict=True):
        t0 = time.perf_counter()
        got = fn(q)
        times.append(time.perf_counter() - t0)
        recalls.append(len(set(got) & want) / len(want))
    return statistics.median(times), float(np.percentile(times, 99)), float(np.mean(recalls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import pg_server

    found = pg_server.wheel_bindir()
    if found is None:
        raise SystemExit("no PostgreSQL with pgvector: pip install '.[dev]'")
    cluster = pg_server.ThrowawayCluster(found)
    dsn = cluster.start(durable=True, settings=SETTINGS)
    try:
        lines = run(dsn, args)
    finally:
        cluster.stop()
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, lines, HEADING)


def run(dsn: str, args: argparse.Namespace) -> list[str]:
    from langgraph.store.base import PutOp
    from langgraph.store.postgres import PostgresStore

    from hippograph.backends.postgres import Postgres

    ds = make_dataset(args.n, dim=args.dim)
    ids, matrix = ds.ids, ds.matrix
    queries = [q[0] for q in query_only(query_sets(ds, args.queries))]
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def scan(q: np.ndarray) -> list[str]:
        sims = unit @ (q / np.linalg.norm(q))
        top = np.argpartition(-sims, TOP)[:TOP]
        return [ids[i] for i in top[np.argsort(-sims[top])]]

    truth = [set(scan(q)) for q in queries]
    rows: list[str] = []

    def row(name: str, build: float, got: tuple[float, float, float]) -> None:
        p50, p99, recall = got
        rows.append(f"| {name} | {build:.0f} s | {p50 * 1e3:.2f} ms | {p99 * 1e3:.2f} ms | {recall:.3f} |")
        print(rows[-1], flush=True)

    row("numpy scan (exact)", 0.0, timed(scan, queries, truth))

    def recall_of(backend: hg.GraphBackend) -> Callable[[np.ndarray], list[str]]:
        return lambda q: [n.id for n, _ in backend.find_candidates([SCANNED], q, [], None, now=NOW)]

    t0 = time.perf_counter()
    pg = Postgres(dsn, repo="peers", search="server", ann=hg.AnnConfig(background=False))
    for cs in changesets(ids, matrix):
        pg.apply_changeset(cs)
    pg.build_vector_index([SCANNED])
    row('hippograph, PostgreSQL `search="server"`', time.perf_counter() - t0, timed(recall_of(pg), queries, truth))
    depth = pg.vector_index_stats()[SCANNED.value]
    pg.close()

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        lmdb = LMDB(Path(tmp) / "s", ann=hg.AnnConfig(background=False))
        for cs in changesets(ids, matrix):
            lmdb.apply_changeset(cs)
        lmdb.build_vector_index([SCANNED])
        row("hippograph, LMDB (in-process HNSW)", time.perf_counter() - t0, timed(recall_of(lmdb), queries, truth))
        lmdb.close()

    vectors = {f"k{i}": matrix[i] for i in range(len(ids))} | {f"q{i}": q for i, q in enumerate(queries)}
    index = {"dims": args.dim, "embed": lambda texts: [vectors[t].tolist() for t in texts], "fields": ["text"]}
    with PostgresStore.from_conn_string(dsn, index=index) as store:  # type: ignore[arg-type]
        store.setup()
        t0 = time.perf_counter()
        for start in range(0, len(ids), 2000):
            stop = min(start + 2000, len(ids))
            store.batch([PutOp(("bench",), f"k{i}", {"text": f"k{i}", "id": ids[i]}) for i in range(start, stop)])
        build = time.perf_counter() - t0
        by_query = {id(q): f"q{i}" for i, q in enumerate(queries)}

        def langgraph(q: np.ndarray) -> list[str]:
            return [item.value["id"] for item in store.search(("bench",), query=by_query[id(q)], limit=TOP)]

        row("LangGraph `PostgresStore` (pgvector HNSW)", build, timed(langgraph, queries, truth))
    return [
        HEADING,
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; one throwaway "
        f"PostgreSQL from the dev extra's wheel (pgvector), fsync on, `{SETTINGS}`, shared by both PostgreSQL stores.",
        "",
        f"{args.n:,} vectors × {args.dim} (clustered), no usage metadata: every method ranks by cosine alone. "
        f"{args.queries} single-vector queries near cluster centres, top {TOP}; recall against the numpy scan. "
        "Build: loading plus index building, through each library's own write API. hippograph's server-side "
        f"pool depth after calibration: {depth.get('depth')} (measured recall {depth.get('recall')}); "
        "LangGraph uses pgvector's defaults (m 16, ef_construction 64, ef_search 40).",
        "",
        "| method | build | p50 | p99 | recall@20 |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]


if __name__ == "__main__":
    main()
