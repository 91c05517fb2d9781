"""Every family's small calls beside SQLite (or the storage engine alone) doing the same work, in one
run, in one table: where hippograph is slower than the plain tool a user could reach for instead.

    python benches/parity.py [--calls 2000] [--commits 1000] [--no-100k] [--out benches/RESULTS.md]

Rows (ratios above 1: hippograph faster, except the scans, which are multiples of their floor):
- graph ingestion (writes.py's trajectory: 9 nodes with 384-d embeddings and metadata, 11 links, the
  record), `fast` against SQLite WAL `synchronous=NORMAL` inserting the same rows encoded before its
  clock starts; `sync` against raw py-lmdb committing the same puts, encoded beforehand, with a sync;
- the context store's write (`put_document` and its job, `fast` and `sync`), `get_node`, keyword search
  over 20 documents, claim + complete, against context.py's SQLite doing the same;
- the LangGraph adapter's `put` and `batch` of 100 against LangGraph's own `SqliteStore`, both
  durability classes (langgraph_store.py's writes);
- 8 threads committing `sync` ingestions against one, beside the most grouping gives the storage
  engine itself (writes.py's group commit);
- exact `find_candidates` (query + 4 tags, top 20, InMemory) at 1k and 100k × 384 over the one-vector
  floor (numpy `M @ q`), on one thread as compare.py measures them.
Pairs take turns 50 calls at a time (context.py's `paired`); the LangGraph stores and the thread rows
run one after the other on fresh stores.
"""

from __future__ import annotations

import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ[_var] = "1"  # the scans' rows are judged single-threaded, as compare.py judges them

import argparse  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import (  # noqa: E402
    F32,
    NOW,
    SCANNED,
    Ingestion,
    SqliteWriter,
    build_memory,
    make_dataset,
    make_ingestion,
    query_sets,
    vector_pool,
)
from context import _text, paired, seeded_pair  # noqa: E402
from langgraph_store import HIPPO, close, index_config, lookup_embed, sqlite_store, written  # noqa: E402
from store import fmt, workload, write_section  # noqa: E402
from writes import SINGLE, RawLmdb, ceiling_name, threaded  # noqa: E402

from hippograph.backends import LMDB, InMemory  # noqa: E402
from hippograph.context import ContextStore  # noqa: E402
from hippograph.integrations.langgraph import HippographStore  # noqa: E402

HEADING = "## Small calls beside SQLite, one table (`python benches/parity.py`)"
WARM = 50
"""Inputs kept for `paired`'s warm-up calls (negative indexes), never timed."""


@dataclass(frozen=True)
class Row:
    call: str
    ours: float
    ours_p95: float
    theirs: float
    theirs_p95: float
    against: str
    ratio: float
    target: float
    floor: bool = False
    """The ratio is a multiple of a floor (lower is better) rather than a speed (higher is better)."""

    @property
    def met(self) -> bool:
        return self.ratio <= self.target if self.floor else self.ratio >= self.target

    def cells(self) -> str:
        aim = f"≤ {self.target:.2f}×" if self.floor else f"≥ {self.target:.2f}×"
        return (
            f"| {self.call} | {fmt(self.ours)} | {fmt(self.ours_p95)} | {self.against} | {fmt(self.theirs)} | "
            f"{fmt(self.theirs_p95)} | {self.ratio:.2f}× | {aim} | {'met' if self.met else '**not met**'} |"
        )


def speed(call: str, against: str, ours: Callable[[int], object], theirs: Callable[[int], object], n: int,
          target: float = 1.0) -> Row:  # fmt: skip
    (mine, mine95, _), (other, other95, _) = paired(ours, theirs, n)
    return Row(call, mine, mine95, other, other95, against, other / mine, target)


def ingestions(root: Path, commits: int) -> list[Row]:
    pool = vector_pool()
    rows = []
    for durability, n in (("fast", commits), ("sync", max(200, commits // 5))):
        made = [make_ingestion(f"p{durability}", i, pool) for i in range(n + WARM)]
        store = LMDB(root / f"graph-{durability}", durability=durability)
        if durability == "fast":
            other: SqliteWriter | RawLmdb = SqliteWriter(root / "graph.sqlite", "NORMAL")
            against, encoded = "SQLite WAL `NORMAL`, rows encoded beforehand", [other.encode(i) for i in made]
            commit: Callable[[object], bool] = other.commit_rows  # type: ignore[assignment]
        else:
            other = RawLmdb(root / "graph-raw", sync=True)
            against, encoded = "raw py-lmdb, sync, puts encoded beforehand", [other.encode(i) for i in made]
            commit = other.commit  # type: ignore[assignment]

        def ours(i: int, store: LMDB = store, made: list[Ingestion] = made) -> object:
            return store.commit_ingestion(made[i].record, made[i].changeset)

        target = 1.0 if durability == "fast" else 0.85
        theirs = lambda i, e=encoded, c=commit: c(e[i])  # noqa: E731
        rows.append(speed(f"graph ingestion, `{durability}`", against, ours, theirs, n, target))
        store.close()
        other.close()
    return rows


def context_calls(root: Path, calls: int) -> list[Row]:
    rows = []
    for durability, synchronous in (("fast", "NORMAL"), ("sync", "FULL")):
        ctx, sql = seeded_pair(root, durability, synchronous)
        writes = calls if durability == "fast" else max(200, calls // 10)
        rows.append(speed(f"context `put_document` + its job, `{durability}`", f"SQLite WAL `{synchronous}`",
                          lambda i, c=ctx: c.put_document(f"proj/new/n{i}", _text(i)),
                          lambda i, s=sql: s.put_document(f"proj/new/n{i}", _text(i)), writes))  # fmt: skip
        if durability == "fast":
            rows.append(speed("context `get_node`", "SQLite, one SELECT",
                              lambda i, c=ctx: c.get_node(f"proj/docs/d{i % 20:02d}"),
                              lambda i, s=sql: s.get_node(f"proj/docs/d{i % 20:02d}"), calls))  # fmt: skip
            rows.append(speed("context keyword search over 20 documents", "SQLite, `instr` over the columns",
                              lambda i, c=ctx: c.search_keyword("Coffee", "proj/docs", 10),
                              lambda i, s=sql: s.search_keyword("Coffee", "proj/docs"), calls))  # fmt: skip

            def claim(i: int, c: ContextStore = ctx) -> None:
                job = c.dequeue_job(["embed"])
                if job is not None:
                    c.complete_job(job.id)

            rows.append(speed("context claim + complete a job", "SQLite, the same two transactions", claim,
                              lambda i, s=sql: s.claim_and_complete(), calls))  # fmt: skip
        ctx.close()
        ctx.backend.close()  # type: ignore[attr-defined]
        sql.db.close()
    return rows


def langgraph_calls(root: Path, puts: int) -> list[Row]:
    batches = max(2, puts // 100)
    w = workload(puts + batches * 100, 1, seed=11)
    index = index_config(lookup_embed(w["texts"], w["vectors"]))
    rows = []
    for mode, synchronous in (("fast", "NORMAL"), ("sync", "FULL")):
        theirs = sqlite_store(root / f"lg-{mode}.db", synchronous, index)
        if isinstance(theirs, str):
            print(f"LangGraph rows {theirs}", file=sys.stderr)
            continue
        ours = HippographStore(path=root / f"lg-{mode}", index=index, durability=mode)
        mine = written(HIPPO, mode, mode, ours, w, puts, batches)
        other = written("SqliteStore", synchronous, synchronous, theirs, w, puts, batches)
        close(ours)
        close(theirs)
        against = f"LangGraph `SqliteStore`, WAL `{synchronous}`"
        rows.append(Row(f"LangGraph adapter `put`, `{mode}`", mine.put_p50, mine.put_p95, other.put_p50,
                        other.put_p95, against, other.put_p50 / mine.put_p50, 1.0))  # fmt: skip
        rows.append(Row(f"LangGraph adapter `batch` of 100, `{mode}`", mine.batch_p50, mine.batch_p50,
                        other.batch_p50, other.batch_p50, against, other.batch_p50 / mine.batch_p50, 1.0))  # fmt: skip
    return rows


def grouped(root: Path, threads: int) -> tuple[Row, str]:
    _, rates = threaded(root, 50, threads)
    ours = rates[(SINGLE, threads)] / rates[(SINGLE, 1)]
    ceiling = rates[(ceiling_name(threads), 1)] / rates[("raw py-lmdb, sync", 1)]
    each, best = 1 / rates[(SINGLE, threads)], 1 / rates[(ceiling_name(threads), 1)]
    call = f"{threads} threads committing `sync` ingestions, throughput over one thread's"
    row = Row(call, each, each, best, best, f"raw py-lmdb, {threads} per sync commit", ours / ceiling, 0.8)
    note = (
        f"- {threads} threads: {ours:.2f}× one thread's throughput against the storage engine's own "
        f"{ceiling:.2f}× ({threads} pre-encoded ingestions per sync commit against one): the ratio column is "
        "the first over the second; the time columns are the mean time per ingestion of each."
    )
    return row, note


def scans(sizes: list[int]) -> list[Row]:
    rows = []
    for n in sizes:
        ds = make_dataset(n)
        sets = query_sets(ds, 50)
        store, matrix = build_memory(ds), ds.matrix

        def ours(i: int, store: InMemory = store, sets: list[F32] = sets) -> object:
            q = sets[i % len(sets)]
            return store.find_candidates([SCANNED], q[0], q[1:], None, now=NOW, exact=True)

        def floor(i: int, matrix: F32 = matrix, sets: list[F32] = sets) -> object:
            return matrix @ sets[i % len(sets)][0]

        (mine, mine95, _), (other, other95, _) = paired(ours, floor, 400 if n <= 10_000 else 100)
        rows.append(Row(f"exact `find_candidates`, {n:,} × 384, query + 4 tags", mine, mine95, other, other95,
                        "numpy `M @ q`, one vector (the floor)", mine / other, 3.0 if n <= 10_000 else 1.25,
                        floor=True))  # fmt: skip
    return rows


def run(calls: int, commits: int, big: bool) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="hippograph-parity-") as tmp:
        root = Path(tmp)
        rows = ingestions(root, commits)
        rows += context_calls(root, calls)
        rows += langgraph_calls(root, calls)
        group, note = grouped(root, 8)
        rows.append(group)
    rows += scans([1000, 100_000] if big else [1000])
    met = sum(r.met for r in rows)
    return [
        HEADING,
        "",
        "Each small call of every family beside SQLite (or the storage engine alone) doing the same logical work, "
        "in one run: SQLite in WAL mode with prepared statements, `synchronous=NORMAL` against `fast`, `FULL` "
        f"against `sync`; pairs take turns 50 calls at a time, medians of {calls:,} calls ({commits:,} graph "
        "ingestions; fewer for `sync` writes), p95 beside them. Ratio: the other's median over hippograph's "
        "(above 1: hippograph faster), for the scans hippograph's over the floor's. The scans run on one thread "
        f"(RAYON and BLAS threads 1). Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, the file system under `{tempfile.gettempdir()}`. {met} of {len(rows)} "
        "targets met.",
        "",
        "| call | hippograph p50 | p95 | against | its p50 | p95 | ratio | target | |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
        *(r.cells() for r in rows),
        "",
        note,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--no-100k", action="store_true", help="skip the 100k exact scan (a minute to load)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    lines = run(args.calls, args.commits, not args.no_100k)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
