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
  data, is not one) reads its resident memory after opening the store and after its queries;
- capacity: the CPU time a query and a write cost the clients (their processes) and the server (every
  ``postgres`` process of this host, the writes' background settling included), from which the
  throughput of N client processes on C cores is predicted (`predicted`) and checked against the
  measured runs. With a server on another host the server's figures are left out.
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


def server_cpu() -> float | None:
    """CPU seconds every ``postgres`` process of this host has used, with the children they have reaped
    (a backend that exited counts in its postmaster's), or None when no server runs here."""
    total, found = 0.0, False
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if name == "postgres":
            found = True
            total += sum(int(f) for f in fields[11:15]) / tick  # utime, stime, cutime, cstime
    return total if found else None


def predicted(clients: int, cores: int, latency: float, cpu: float) -> float:
    """Operations per second of `clients` closed-loop client processes on `cores` cores: each client
    does one operation per `latency` (one client's measured time) until the cores, each giving
    `cpu` seconds (client and server CPU of one operation) per operation, are all busy."""
    return min(clients / latency, cores / cpu)


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
    client_cpu: float
    """Client CPU seconds per search (the client processes' own time)."""
    server_cpu: float | None
    """Server CPU seconds per search (None: the server is on another host)."""
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
    done, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        search(backend, queries[done % len(queries)], False)
        done += 1
    out.put((done, time.perf_counter() - t0, opened, rss_mb(), time.process_time() - c0))
    backend.close()


def throughput(dsn: str, repo: str, queries: list[np.ndarray], clients: int, seconds: float) -> Clients:
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_client, args=(dsn, repo, queries, seconds, start, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    time.sleep(2.0 + 0.5 * clients)  # every client opened and warmed
    before = server_cpu()
    start.set()
    results = [out.get(timeout=seconds + 600) for _ in procs]
    after = server_cpu()
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    return Clients(
        rate=done / max(r[1] for r in results),
        client_cpu=sum(r[4] for r in results) / done,
        server_cpu=None if before is None or after is None else (after - before) / done,
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
    server = ""
    if dsn:
        server = f"PostgreSQL at ${pg_server.VECTOR_DSN_ENV} ({shown(dsn)})"
    else:
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


SHOWN = ("fsync", "shared_buffers", "maintenance_work_mem", "max_parallel_workers_per_gather")


def shown(dsn: str) -> str:
    """The server settings the figures depend on most, as it reports them."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        values = [conn.execute(f"SHOW {name}").fetchone() for name in SHOWN]
    return ", ".join(f"{name} {row[0] if row else '?'}" for name, row in zip(SHOWN, values, strict=True))


def run(dsn: str, repo: str, args: argparse.Namespace, server: str) -> list[str]:
    import psycopg

    from hippograph.backends.postgres.vectors import repo_index_prefix

    ds = make_dataset(args.n, dim=args.dim)
    backend = open_server(dsn, repo)
    t0 = time.perf_counter()
    # A repo kept from an earlier run is reused (with the writes earlier runs added).
    reused = backend.stats()["nodes"][SCANNED.value] >= args.n
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
    run_id = uuid.uuid4().hex[:8]
    commits = []
    writes_cpu, writes_server = time.process_time(), server_cpu()
    for k in range(100):  # trajectory-sized writes into the indexed type: the HNSW inserts count
        cs = hg.Changeset()
        for j, vec in enumerate(ds.centers[rng.integers(0, len(ds.centers), 9)] + rng.standard_normal((9, args.dim))):
            node_id = f"commit-{run_id}-{k:04d}-{j}"  # new nodes on every run
            cs.add_node(hg.Semantic(id=node_id, embedding=vec.astype(np.float32), proposition="p", confidence=1.0))
            # Stamped at the data's time, as the queries are: rows written at the wall clock's now, 18 months
            # after the queries' `now`, would make every query after this phase one "as of" the past.
            cs.put_metadata(node_id, hg.NodeMetadata(created_at=NOW))
        t = time.perf_counter()
        client.apply_changeset(cs)
        commits.append(time.perf_counter() - t)
    write_client = (time.process_time() - writes_cpu) / len(commits)
    settled = wait_settled(dsn, repo)
    after_writes = server_cpu()
    write_server = (
        None if writes_server is None or after_writes is None else (after_writes - writes_server) / len(commits)
    )
    client.close()
    one = throughput(dsn, repo, workloads["query + 4 tags"], 1, args.seconds)
    many = throughput(dsn, repo, workloads["query + 4 tags"], args.clients, args.seconds)
    vector_mb = args.n * args.dim * 4 / 2**20
    cores = os.cpu_count() or 1
    query_cpu = one.client_cpu + (one.server_cpu or 0.0)
    write_cpu = write_client + (write_server or 0.0)
    latency = 1 / one.rate
    write_latency = statistics.mean(commits)
    capacity = (
        "Capacity (throughput of N client processes on C cores, predicted as min(N / latency, C / CPU per "
        "operation): each client does one operation per one client's latency until the cores are busy): "
        + (
            "the server runs on another host, so its CPU is not measured here."
            if one.server_cpu is None or write_server is None
            else f"a query with four tags costs {one.client_cpu * 1e3:.2f} ms of client CPU and "
            f"{one.server_cpu * 1e3:.2f} ms of server CPU ({query_cpu * 1e3:.2f} ms in all; one client's latency "
            f"{latency * 1e3:.2f} ms); a 9-node write {write_client * 1e3:.2f} ms of client CPU and "
            f"{write_server * 1e3:.2f} ms of server CPU, its background settling included ({write_cpu * 1e3:.2f} ms; "
            f"latency {write_latency * 1e3:.2f} ms mean, settled {settled:.1f} s after the last write). "
            f"Queries predicted: 1 client {predicted(1, cores, latency, query_cpu):,.0f}/s (measured "
            f"{one.rate:,.0f}/s), {args.clients} clients on {cores} cores "
            f"{predicted(args.clients, cores, latency, query_cpu):,.0f}/s (measured {many.rate:,.0f}/s, "
            f"{(many.rate / predicted(args.clients, cores, latency, query_cpu) - 1) * 100:+.0f}%); 8 clients on 8 "
            f"cores {predicted(8, 8, latency, query_cpu):,.0f}/s. Writes, sustained (settling keeps up): 1 client "
            f"{predicted(1, cores, write_latency, write_cpu):,.0f}/s, 8 clients on 8 cores "
            f"{predicted(8, 8, write_latency, write_cpu):,.0f}/s ({predicted(8, 8, write_latency, write_cpu) * 9:,.0f} "
            "nodes/s)."
        )
    )
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
        f"A 9-node write with metadata into the indexed type (`apply_changeset`, fsync on; vectors and usage in "
        f"the same statement, the HNSW inserts settled in the background): median "
        f"{statistics.median(commits) * 1e3:.2f} ms, p99 {pct(commits, 99) * 1e3:.2f} ms.",
        "",
        capacity,
    ]


def wait_settled(dsn: str, repo: str, most: float = 600.0) -> float:
    """Seconds until the repo holds no pending rows (the writes' HNSW inserts done)."""
    import psycopg

    from hippograph.backends.postgres import upkeep

    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while upkeep.pending(conn, "hippograph", repo) and time.perf_counter() - t0 < most:
            time.sleep(0.05)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
