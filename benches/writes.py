"""Write throughput: single commits next to raw py-lmdb and SQLite, and group commit under threads.

One ingestion is the trajectory-sized changeset of `compare.py` (9 nodes with
384-d embeddings and metadata, 11 links, the ingestion record). Single
commits are interleaved round-robin per durability class; the threaded rows
run one after the other, each on a fresh store, next to raw py-lmdb committing
as many pre-encoded ingestions per transaction as there are threads (the most
a group commit can give on this disk). Writes the section below into
`benches/RESULTS.md` and leaves the others alone.

    python benches/writes.py [--commits 1000] [--threads 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import Ingestion, SqliteWriter, make_ingestion, meta_json, vector_pool
from store import write_section

import hippograph as hg
from hippograph.backends import LMDB

HEADING = "## Writes: single commits and group commit (benches/writes.py)"
SINGLE = "hippograph LMDB `sync`"
"""The store of `threaded`'s rows: one ingestion per commit, fsync each."""


class RawLmdb:
    """py-lmdb with no library around it: the least a store of the same data must do per ingestion.

    One write transaction: the ingestion key checked (compare-and-set), one
    put per node (msgpack of its fields, metadata and embedding bytes), one
    per link direction, one for the record."""

    def __init__(self, path: Path, sync: bool) -> None:
        self.env = lmdb.open(str(path), map_size=1 << 32, max_dbs=4, sync=sync, metasync=sync)
        self.nodes = self.env.open_db(b"nodes")
        self.links = self.env.open_db(b"links")
        self.records = self.env.open_db(b"records")
        self.lock = threading.Lock()

    def encode(self, ing: Ingestion) -> tuple[bytes, list[tuple[bytes, bytes, object]]]:
        """The ingestion's key and puts, encoded before the clock starts: the raw row measures the
        storage engine alone."""
        rec, cs = ing.record, ing.changeset
        puts: list[tuple[bytes, bytes, object]] = []
        for node in cs.additions:
            value = {
                "type": node.node_type.value,
                "fields": node.fields_dict(),
                "meta": meta_json(cs.metadata.get(node.id)),
                "embedding": None if node.embedding is None else node.embedding.tobytes(),
            }
            puts.append((node.id.encode(), msgpack.packb(value, default=str), self.nodes))
        for a, b, edge in cs.links:
            puts.append((f"{a}\0{edge}\0{b}".encode(), b"", self.links))
            puts.append((f"{b}\0~{edge}\0{a}".encode(), b"", self.links))
        key = rec.source_id.encode()
        puts.append(
            (
                key,
                msgpack.packb([rec.payload_digest, rec.fingerprint_version, list(rec.receipt.node_ids)]),
                self.records,
            )
        )
        return key, puts

    def commit(self, encoded: tuple[bytes, list[tuple[bytes, bytes, object]]]) -> bool:
        return self.commit_many([encoded]) == 1

    def commit_many(self, items: list[tuple[bytes, list[tuple[bytes, bytes, object]]]]) -> int:
        """All of `items` in one transaction (one fsync with `sync`): what a group commit of that
        many writes costs the storage engine alone. Returns how many were new."""
        written = 0
        with self.lock, self.env.begin(write=True) as txn:
            for key, puts in items:
                if txn.get(key, db=self.records) is not None:
                    continue
                for k, v, db in puts:
                    txn.put(k, v, db=db)
                written += 1
        return written

    def commits(self) -> int:
        return int(self.env.info()["last_txnid"])

    def close(self) -> None:
        self.env.close()


def _same(ing: Ingestion) -> Ingestion:
    return ing


def fmt(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def single_commits(root: Path, commits: int) -> list[str]:
    pool = vector_pool()
    made = iter(range(1 << 30))

    def feed(tag: str) -> Iterator[Ingestion]:
        for i in made:
            yield make_ingestion(tag, i, pool)

    # name -> (commit, close, prepare): `prepare` runs before the clock starts.
    stores: dict[str, tuple[Callable[[Any], object], Callable[[], None], Callable[[Ingestion], Any]]] = {}
    for durability in ("fast", "sync"):
        backend = LMDB(root / f"hg-{durability}", durability=durability)
        stores[f"hippograph LMDB `{durability}`"] = (
            lambda ing, b=backend: b.commit_ingestion(ing.record, ing.changeset),
            backend.close,
            _same,
        )
        raw = RawLmdb(root / f"raw-{durability}", sync=durability == "sync")
        stores[f"raw py-lmdb, {'sync' if durability == 'sync' else 'no sync'}"] = (raw.commit, raw.close, raw.encode)
    for mode in ("NORMAL", "FULL"):
        sql = SqliteWriter(root / f"{mode}.sqlite", mode)
        stores[f"sqlite3 WAL `synchronous={mode}`"] = (sql.commit, sql.close, _same)
    feeds = {name: feed(name[:6]) for name in stores}
    inputs = {name: [stores[name][2](next(feeds[name])) for _ in range(commits + 5)] for name in stores}
    groups = [[n for n in stores if "fast" in n or "no sync" in n or "NORMAL" in n]]
    groups.append([n for n in stores if n not in groups[0]])
    times: dict[str, list[float]] = {name: [] for name in stores}
    for group in groups:
        for i in range(commits + 5):
            for name in group:
                commit = stores[name][0]
                t0 = time.perf_counter_ns()
                commit(inputs[name][i])
                if i >= 5:  # the first commits create files and tables
                    times[name].append((time.perf_counter_ns() - t0) / 1000)
    for _, close, _ in stores.values():
        close()
    med = {name: statistics.median(ts) for name, ts in times.items()}
    rate = {name: 1e6 / statistics.fmean(ts) for name, ts in times.items()}
    rows = [
        "| store | fsync per commit | median | p95 | p99 | mean | ingestions/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, ts in times.items():
        fsync = "no" if name in groups[0] else "yes"
        q = statistics.quantiles(ts, n=100)
        rows.append(
            f"| {name} | {fsync} | {fmt(med[name])} | {fmt(q[94])} | {fmt(q[98])} | {fmt(statistics.fmean(ts))} "
            f"| {rate[name]:,.0f} |"
        )
    fast, sync = "hippograph LMDB `fast`", "hippograph LMDB `sync`"
    normal, full = "sqlite3 WAL `synchronous=NORMAL`", "sqlite3 WAL `synchronous=FULL`"
    rows += [
        "",
        f"- `fast` vs SQLite WAL NORMAL: {rate[fast] / rate[normal]:.2f}× its throughput (target ≥ 2×; "
        f"by median latency {med[normal] / med[fast]:.2f}×); vs raw py-lmdb without sync: "
        f"{rate[fast] / rate['raw py-lmdb, no sync']:.2f}×.",
        f"- `sync` vs raw py-lmdb sync: {rate[sync] / rate['raw py-lmdb, sync']:.2f}× its throughput (target ≥ 0.9×; "
        f"by median latency {med['raw py-lmdb, sync'] / med[sync]:.2f}×); vs SQLite WAL FULL: "
        f"{rate[sync] / rate[full]:.2f}×.",
    ]
    return rows


def threaded(root: Path, per_thread: int, threads: int) -> tuple[list[str], dict[tuple[str, int], float]]:
    """Each of `threads` threads commits `per_thread` ingestions back to back; wall time for all. The
    table's rows, and ingestions per second by (store, threads)."""
    pool = vector_pool()
    rows = [
        "| store | threads | ingestions | ingestions/s | commits (fsyncs) | ingestions per commit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    rates: dict[tuple[str, int], float] = {}
    for name in (SINGLE, "raw py-lmdb, sync"):
        for count in (1, threads):
            path = root / f"threads-{name[:4]}-{count}"
            total = per_thread * threads
            made = [make_ingestion(f"t{k}", i, pool) for k in range(count) for i in range(total // count)]
            if name.startswith("hippograph"):
                backend = LMDB(path, durability="sync")
                commit: Callable[[Any], object] = lambda ing, b=backend: b.commit_ingestion(  # noqa: E731
                    ing.record, ing.changeset
                )
                inputs: list[Any] = made
                txnid: Callable[[], int] = lambda b=backend: int(b._env.info()["last_txnid"])  # noqa: E731
                close = backend.close
            else:
                raw = RawLmdb(path, sync=True)
                commit, txnid, close = raw.commit, raw.commits, raw.close
                inputs = [raw.encode(ing) for ing in made]
            share = total // count
            before = txnid()

            def work(
                k: int, commit: Callable[[Any], object] = commit, share: int = share, todo: list[Any] = inputs
            ) -> None:
                for ing in todo[k * share : (k + 1) * share]:
                    commit(ing)

            workers = [threading.Thread(target=work, args=(k,)) for k in range(count)]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - t0
            used = txnid() - before
            close()
            rates[(name, count)] = total / elapsed
            rows.append(f"| {name} | {count} | {total} | {total / elapsed:,.0f} | {used} | {total / used:.1f} |")
    total = per_thread * threads
    raw = RawLmdb(root / "raw-grouped", sync=True)
    encoded = [raw.encode(make_ingestion("g", i, pool)) for i in range(total)]
    before = raw.commits()
    t0 = time.perf_counter()
    for at in range(0, total, threads):
        raw.commit_many(encoded[at : at + threads])
    elapsed = time.perf_counter() - t0
    used = raw.commits() - before
    raw.close()
    ideal = ceiling_name(threads)
    rates[(ideal, 1)] = total / elapsed
    rows.append(f"| {ideal} | 1 | {total} | {total / elapsed:,.0f} | {used} | {total / used:.1f} |")
    for size in (10, 100):
        backend = LMDB(root / f"batches-{size}", durability="sync")
        made = [make_ingestion(f"b{size}", i, pool) for i in range(total)]
        before = int(backend._env.info()["last_txnid"])
        t0 = time.perf_counter()
        for at in range(0, total, size):
            backend.commit_ingestions([(ing.record, ing.changeset) for ing in made[at : at + size]])
        elapsed = time.perf_counter() - t0
        used = int(backend._env.info()["last_txnid"]) - before
        backend.close()
        name = f"hippograph LMDB `sync`, `commit_ingestions` of {size} (`Repo.ingest_many`)"
        rates[(name, 1)] = total / elapsed
        rows.append(f"| {name} | 1 | {total} | {total / elapsed:,.0f} | {used} | {total / used:.1f} |")
    hg_ratio = rates[(SINGLE, threads)] / rates[(SINGLE, 1)]
    raw_ratio = rates[("raw py-lmdb, sync", threads)] / rates[("raw py-lmdb, sync", 1)]
    rows += [
        "",
        f"- hippograph `sync`, {threads} threads against 1: {hg_ratio:.2f}× the throughput (target ≥ 5×); "
        f"raw py-lmdb (one transaction and fsync per commit): {raw_ratio:.2f}×. Batches of 100 from one "
        f"thread: {rates[(name, 1)] / rates[(SINGLE, 1)]:.2f}× single commits.",
        f"- The most grouping can give on this disk: raw py-lmdb committing {threads} pre-encoded ingestions per "
        f"transaction, no library work and no waiting, {rates[(ideal, 1)] / rates[('raw py-lmdb, sync', 1)]:.2f}× "
        "its single commits (each commit writes and fsyncs the copied B-tree pages of every write it holds, so "
        "a commit of more writes takes longer).",
    ]
    return rows, rates


def ceiling_name(threads: int) -> str:
    """The row of `threaded`'s rates that groups `threads` pre-encoded ingestions per commit at no cost."""
    return f"raw py-lmdb, sync, {threads} pre-encoded ingestions per transaction (a group of {threads} at no cost)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--per-thread", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hippograph-writes-") as tmp:
        root = Path(tmp)
        single = single_commits(root, args.commits)
        grouped, _ = threaded(root, args.per_thread, args.threads)
    lines = [
        HEADING,
        "",
        f"The trajectory-sized ingestion of the table above (9 nodes with 384-d embeddings and metadata, "
        f"11 links, the record), {args.commits} commits per store after 5 warm-up commits, stores without "
        "fsync interleaved with each other, then those with. Every store checks the ingestion key first. "
        "Throughput is ingestions per second over the whole run (1 / mean), so a store's periodic work "
        "(SQLite's WAL checkpoints, LMDB's map growth) counts; the median shows a typical commit. "
        f"hippograph {hg.__version__}, Python {platform.python_version()}, lmdb {lmdb.__version__}, "
        f"{os.cpu_count()} CPUs; the file system under `{tempfile.gettempdir()}`.",
        "",
        *single,
        "",
        f"Group commit: {args.per_thread * args.threads} ingestions by 1 thread, then by {args.threads} threads "
        "at once, each on a fresh store; `commits` counts LMDB transactions, each one fsync.",
        "",
        *grouped,
        "",
    ]
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
