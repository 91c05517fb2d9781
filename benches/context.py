"""Context store benchmark: hippograph's `ContextStore` on LMDB beside SQLite doing the same
operations, in one run, next to the figures the context-store contract's reference implementation
publishes (Apple M1). Writes its section of benches/RESULTS.md.

Operations, each timed over `--repeat` calls after a warm-up, median and p95:
- read: `get_node` of a stored document (SQLite: one SELECT by primary key);
- keyword search: `search_keyword` of a word over a tree of 20 documents, limit 10 (SQLite:
  case-insensitive `instr` over content, abstract and overview, ordered by URI, LIMIT 10);
- write: `put_document` of a new document with one embedding job, durable (`sync`; SQLite WAL
  `synchronous=FULL`, the document and the job in one transaction), and the same without fsync
  (`fast`; SQLite `synchronous=NORMAL`);
- claim and complete a job (`dequeue_job` then `complete_job`; SQLite: the same two transactions).

    python benches/context.py [--repeat 2000] [--out benches/RESULTS.md]
"""

from __future__ import annotations

import argparse
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from store import fmt, write_section

from hippograph.backends import LMDB
from hippograph.context import ContextStore

HEADING = "## Context store (benches/context.py)"
SEED = {"read": 2.5e-6, "keyword": 125e-6, "write": 537e-6}
"""The reference implementation's published figures (Apple M1, its own storage)."""


BLOCK = 50
"""Calls each store makes in a row before the other takes its turn."""


def paired(ours: Callable[[int], object], theirs: Callable[[int], object], n: int) -> list[tuple[float, float, float]]:
    """Median, p95 and mean seconds of `n` calls of each function, after a warm-up of up to 50 calls
    each (negative indexes: keys never timed). The two take turns `BLOCK` calls at a time, so a
    burst of other work on the machine reaches both; the mean counts a store's periodic work (SQLite's
    WAL checkpoints, LMDB's map growth) that the median leaves out."""
    for fn in (ours, theirs):
        for i in range(min(50, n)):
            fn(-1 - i)
    times: list[list[float]] = [[], []]
    for start in range(0, n, BLOCK):
        for fn, kept in zip((ours, theirs), times, strict=True):
            for i in range(start, min(n, start + BLOCK)):
                t0 = time.perf_counter()
                fn(i)
                kept.append(time.perf_counter() - t0)
    out = []
    for kept in times:
        kept.sort()
        out.append((statistics.median(kept), kept[min(len(kept) - 1, int(0.95 * len(kept)))], statistics.fmean(kept)))
    return out


def _text(i: int) -> str:
    return f"Notes {i}: the build uses cargo and maturin.\nSecond line mentions tea and coffee {i % 7}.\n"


class SqliteContext:
    """The same operations on SQLite (WAL): nodes and jobs tables, one transaction per call."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS nodes (uri TEXT PRIMARY KEY, parent TEXT, kind TEXT, content TEXT,"
            " abstract TEXT, overview TEXT, enabled INTEGER DEFAULT 1)"
        )
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, kind TEXT, uri TEXT, status TEXT,"
            " attempts INTEGER DEFAULT 0, run_at REAL)"
        )
        self.db.execute("CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(kind, status, run_at, id)")

    def put_document(self, uri: str, content: str) -> None:
        parts = uri.split("/")
        with self.db:
            self.db.execute("BEGIN")
            for d in range(1, len(parts)):
                self.db.execute("INSERT OR IGNORE INTO nodes(uri, parent, kind) VALUES (?, ?, 'dir')",
                                ("/".join(parts[:d]), "/".join(parts[: d - 1]) or None))  # fmt: skip
            self.db.execute(
                "INSERT INTO nodes(uri, parent, kind, content) VALUES (?, ?, 'doc', ?) ON CONFLICT(uri) DO "
                "UPDATE SET content = excluded.content", (uri, "/".join(parts[:-1]), content)
            )  # fmt: skip
            self.db.execute("INSERT INTO jobs(kind, uri, status, run_at) VALUES ('embed', ?, 'pending', ?)",
                            (uri, time.time()))  # fmt: skip

    def get_node(self, uri: str) -> object:
        return self.db.execute("SELECT uri, parent, kind, content, abstract, overview FROM nodes WHERE uri = ?",
                               (uri,)).fetchone()  # fmt: skip

    def search_keyword(self, word: str, prefix: str) -> list[object]:
        w = word.lower()
        return self.db.execute(
            "SELECT uri, content, abstract, overview FROM nodes WHERE kind = 'doc' AND enabled = 1 AND "
            "(uri = ? OR substr(uri, 1, ?) = ?) AND (instr(lower(content), ?) > 0 OR instr(lower(abstract), ?) > 0"
            " OR instr(lower(overview), ?) > 0) ORDER BY uri LIMIT 10",
            (prefix, len(prefix) + 1, prefix + "/", w, w, w),
        ).fetchall()

    def claim_and_complete(self) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute(
                "SELECT id FROM jobs WHERE kind = 'embed' AND status = 'pending' AND run_at <= ? "
                "ORDER BY run_at, id LIMIT 1", (time.time(),)
            ).fetchone()  # fmt: skip
            if row is not None:
                self.db.execute("UPDATE jobs SET status = 'running', attempts = attempts + 1 WHERE id = ?", row)
        if row is not None:
            with self.db:
                self.db.execute("BEGIN IMMEDIATE")
                self.db.execute("UPDATE jobs SET status = 'done' WHERE id = ?", row)


def seeded_pair(
    root: Path, durability: Literal["sync", "fast"], synchronous: str
) -> tuple[ContextStore, SqliteContext]:
    """A hippograph context store and its SQLite twin under `root`, each holding the same 20 documents
    under ``proj/docs``."""
    ctx = ContextStore(LMDB(root / f"hg-{durability}", durability=durability), document_jobs=("embed",))
    sql = SqliteContext(root / f"sqlite-{durability}.db", synchronous)
    for i in range(20):
        ctx.put_document(f"proj/docs/d{i:02d}", _text(i))
        sql.put_document(f"proj/docs/d{i:02d}", _text(i))
    return ctx, sql


def run(repeat: int) -> list[str]:
    rows: list[tuple[str, str, float, float, float, float | None]] = []
    with tempfile.TemporaryDirectory(prefix="hippograph-context-") as tmp:
        root = Path(tmp)
        for durability, synchronous in (("sync", "FULL"), ("fast", "NORMAL")):
            ctx, sql = seeded_pair(root, durability, synchronous)
            writes = repeat if durability == "fast" else max(200, repeat // 10)
            label = f"`{durability}`" if durability == "fast" else "`sync` (fsync per write)"
            sql_name = f"SQLite WAL `synchronous={synchronous}`"

            def both(
                op: str,
                seed: float | None,
                ours: Callable[[int], object],
                theirs: Callable[[int], object],
                n: int,
                theirs_name: str = "SQLite",
            ) -> None:
                mine, other = paired(ours, theirs, n)
                rows.append((op, "hippograph LMDB", *mine, seed))
                rows.append((op, theirs_name, *other, seed))

            both(f"write: `put_document` + its job, {label}", SEED["write"],
                 lambda i, c=ctx: c.put_document(f"proj/new/n{i}", _text(i)),
                 lambda i, s=sql: s.put_document(f"proj/new/n{i}", _text(i)), writes, sql_name)  # fmt: skip
            if durability == "fast":
                both("read: `get_node`", SEED["read"], lambda i, c=ctx: c.get_node(f"proj/docs/d{i % 20:02d}"),
                     lambda i, s=sql: s.get_node(f"proj/docs/d{i % 20:02d}"), repeat)  # fmt: skip
                both("keyword search over 20 documents", SEED["keyword"],
                     lambda i, c=ctx: c.search_keyword("Coffee", "proj/docs", 10),
                     lambda i, s=sql: s.search_keyword("Coffee", "proj/docs"), repeat)  # fmt: skip

                def claim(i: int, c: ContextStore = ctx) -> None:
                    job = c.dequeue_job(["embed"])
                    if job is not None:
                        c.complete_job(job.id)

                both("claim + complete a job (two transactions)", None, claim,
                     lambda i, s=sql: s.claim_and_complete(), repeat)  # fmt: skip
            ctx.close()
            ctx.backend.close()  # type: ignore[attr-defined]
            sql.db.close()
    lines = [
        HEADING,
        "",
        f"hippograph `ContextStore` on LMDB and SQLite (WAL, same operations, one transaction per call) in one run, "
        f"the two taking turns {BLOCK} calls at a time; median, p95 and mean of {repeat:,} calls "
        f"({max(200, repeat // 10):,} for `sync` writes) after a warm-up (the mean counts periodic work such as "
        "SQLite's WAL checkpoints, which the median leaves out); the "
        "reference implementation's published figures (Apple M1) beside them. Machine: "
        f"{platform.machine()}, Python {platform.python_version()}, the file system under `/tmp`.",
        "",
        "| operation | store | median | p95 | mean | reference (M1) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for op, store, med, p95, mean, seed in rows:
        ref = "" if seed is None else fmt(seed)
        lines.append(f"| {op} | {store} | {fmt(med)} | {fmt(p95)} | {fmt(mean)} | {ref} |")
    by = {(op, store.split()[0]): (med, mean) for op, store, med, _, mean, _ in rows}
    lines += [""]
    for op in dict.fromkeys(op for op, *_ in rows):
        (med, mean), (their_med, their_mean) = by[(op, "hippograph")], by[(op, "SQLite")]
        lines.append(
            f"- {op}: hippograph {their_med / med:.2f}× SQLite's speed by median latency, "
            f"{their_mean / mean:.2f}× by throughput (1 / mean; above 1: faster)."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    lines = run(args.repeat)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
