"""PostgreSQL next to LMDB on the same data: commit throughput and warm find_candidates.

    HIPPOGRAPH_PG_DSN=postgresql://... python benches/postgres.py [--n 20000] [--commits 300]

Without a DSN it starts a throwaway local cluster as the tests do
(tests/pg_server.py), but with PostgreSQL's crash-safe defaults (fsync,
synchronous_commit and full_page_writes on), the settings LMDB's "sync" is
compared with. Prints Markdown tables for benches/RESULTS.md. Both stores get
the same ingestions (one subgoal + 4 episodic + 4 source nodes with
embeddings, links and metadata), then the same exact queries.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg

import hippograph as hg
from hippograph.backends import LMDB

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import write_section

DIM = 384
HEADING = "## PostgreSQL next to LMDB (`python benches/postgres.py --n 20000 --commits 300`)"


def ingestion(rng: np.random.Generator, k: int) -> tuple[hg.IngestionRecord, hg.Changeset]:
    source = f"bench-{k:07d}"
    cs = hg.Changeset()
    vectors = rng.standard_normal((9, DIM)).astype(np.float32)
    cs.add_node(hg.Subgoal(id=f"{source}:goal", description="goal", embedding=vectors[0]))
    for i in range(4):
        ep, src = f"{source}:step:{i}", f"{source}:source:{i}"
        cs.add_node(
            hg.Episodic(
                id=ep,
                observation="o",
                action="a",
                state="",
                subgoal="goal",
                reward=0.0,
                trajectory_id=source,
                embedding=vectors[1 + i],
            )
        )
        cs.add_node(hg.Source(id=src, episode_id=source, step_index=i, embedding=vectors[5 + i]))
        cs.add_link(ep, f"{source}:goal", "hierarchical").add_link(ep, src, "provenance")
        if i:
            cs.add_link(ep, f"{source}:step:{i - 1}", "sibling")
    for node in cs.additions:
        cs.put_metadata(node.id, hg.NodeMetadata())
    receipt = hg.IngestionReceipt(source_id=source, node_ids=cs.node_ids, stored_at=hg.engine.checks.utcnow())
    return hg.IngestionRecord(source, os.urandom(32), 1, receipt), cs


def bulk(backend: hg.GraphBackend, n: int, rng: np.random.Generator) -> None:
    """n episodic nodes with metadata, loaded in large changesets."""
    for start in range(0, n, 5000):
        cs = hg.Changeset()
        vectors = rng.standard_normal((min(5000, n - start), DIM)).astype(np.float32)
        for j, vec in enumerate(vectors):
            node_id = f"bulk-{start + j:07d}"
            cs.add_node(
                hg.Episodic(
                    id=node_id,
                    observation="o",
                    action="a",
                    state="",
                    subgoal="g",
                    reward=0.0,
                    trajectory_id="bulk",
                    embedding=vec,
                )
            )
            cs.put_metadata(node_id, hg.NodeMetadata(access_count=j % 20))
        backend.apply_changeset(cs)


def settle(backend: hg.GraphBackend) -> None:
    """After the bulk load, PostgreSQL's own upkeep (the checkpoint and autovacuum a big load sets
    off) done before the clock starts, so commits are timed in a steady state."""
    from hippograph.backends.postgres import Postgres

    if isinstance(backend, Postgres):
        with backend._runner.pool.connection() as conn:
            conn.execute(
                f'VACUUM (ANALYZE) "{backend.schema}".nodes, "{backend.schema}".embeddings, '
                f'"{backend.schema}".links, "{backend.schema}".metadata'
            )
            with contextlib.suppress(psycopg.Error):  # needs superuser or pg_checkpoint
                conn.execute("CHECKPOINT")


def measure(name: str, backend: hg.GraphBackend, args: argparse.Namespace, dsn: str | None) -> tuple[str, float]:
    rng = np.random.default_rng(11)
    bulk(backend, args.n, rng)
    settle(backend)
    commits = []
    for k in range(args.commits):
        record, cs = ingestion(rng, k)
        t0 = time.perf_counter()
        backend.commit_ingestion(record, cs)
        commits.append(time.perf_counter() - t0)
    queries = rng.standard_normal((args.queries, 5, DIM)).astype(np.float32)
    backend.find_candidates(["episodic"], queries[0][0], list(queries[0][1:]), None, exact=True)  # warm
    scans = []
    for q in queries:
        t0 = time.perf_counter()
        backend.find_candidates(["episodic"], q[0], list(q[1:]), None, exact=True)
        scans.append(time.perf_counter() - t0)
    gets = []
    for k in range(1000):
        t0 = time.perf_counter()
        backend.get_node(f"bulk-{k * 37 % args.n:07d}")
        gets.append(time.perf_counter() - t0)
    trip = "" if dsn is None else f"{round_trip(dsn) * 1e6:.0f} µs"
    commit = statistics.median(commits)
    row = (
        f"| {name} | {len(commits) / sum(commits):,.0f} /s | {commit * 1e3:.2f} ms "
        f"| {statistics.median(scans) * 1e3:.2f} ms | {statistics.median(gets) * 1e6:.0f} µs | {trip} |"
    )
    return row, commit


def round_trip(dsn: str) -> float:
    """Median of 1,000 bare ``SELECT 1`` through libpq on one connection: the floor of any statement."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        times = []
        for _ in range(1000):
            t0 = time.perf_counter()
            conn.pgconn.exec_(b"SELECT 1")
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="episodic nodes scanned")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="write the section into this RESULTS.md")
    args = parser.parse_args()
    import pg_server  # tests/pg_server.py: finds or starts a throwaway server
    from hippograph.backends.postgres import Postgres

    server_dsn = os.environ.get("HIPPOGRAPH_PG_DSN")
    cluster = None
    if server_dsn:
        servers = {"PostgreSQL (HIPPOGRAPH_PG_DSN, its own settings)": server_dsn}
    else:
        found = pg_server.bindir()
        if found is None:
            raise SystemExit("no PostgreSQL binaries: set HIPPOGRAPH_PG_DSN or install PostgreSQL")
        cluster = pg_server.ThrowawayCluster(found)
        tcp = cluster.start(durable=True)
        servers = {
            "PostgreSQL, TCP on 127.0.0.1": tcp,
            "PostgreSQL, Unix-domain socket": cluster.socket_dsn(),
        }

    rows = [
        "| backend | commit_ingestion throughput | commit median | warm find_candidates (exact) | get_node "
        "| round trip (`SELECT 1`) |"
    ]
    rows.append("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp, LMDB(Path(tmp) / "s") as lmdb_backend:
        row, lmdb_commit = measure("LMDB (sync)", lmdb_backend, args, None)
        rows.append(row)
    ratios = []
    try:
        for label, dsn in servers.items():
            with Postgres(dsn, repo=f"bench_{uuid.uuid4().hex[:8]}") as pg:
                row, commit = measure(label, pg, args, dsn)
                rows.append(row)
                ratios.append(f"{label}: {commit / lmdb_commit:.2f}×")
        with psycopg.connect(next(iter(servers.values())), autocommit=True) as conn:
            version = conn.execute("SELECT version()").fetchone()
        server_version = "PostgreSQL" if version is None else str(version[0]).split(" on ")[0]
    finally:
        if cluster is not None:
            cluster.stop()
    rows += ["", f"- Commit median against LMDB `sync`'s in this run: {'; '.join(ratios)}."]
    lines = [
        HEADING,
        "",
        "Same machine and run, LMDB `sync` vs a local PostgreSQL (a throwaway cluster with its defaults: "
        "fsync, synchronous_commit and full_page_writes on, so both are durable at commit), reached over TCP "
        "on 127.0.0.1 and over its Unix-domain socket, each with a repo of its own. PostgreSQL pays a "
        "round trip per statement; its cache keeps warm scans on the Rust core. `get_node` is one "
        "prepared statement run through libpq, and the commit is one statement (`write_graph`). "
        "After each bulk load the PostgreSQL tables are vacuumed and analyzed and a checkpoint is taken, "
        "so the commits are timed in a steady state. The last column is the server's bare round trip, "
        "the floor of every statement. Targets: `get_node` ≤ 150 µs, a commit ≤ 2 ms.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {server_version}.",
        "",
        f"N = {args.n:,} episodic nodes × {DIM} + {args.commits} ingestions of 9 nodes; 5 query vectors",
        "",
        *rows,
    ]
    print("\n".join(lines))
    if args.out is not None:
        write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
