"""LangGraph store benchmark: hippograph's `HippographStore` beside LangGraph's own stores.

`InMemoryStore` and `SqliteStore` (with sqlite-vec), in one run, on store.py's synthetic workload.
Writes its section of benches/RESULTS.md.

Search: at each size, N items ``{"text": ...}`` (20–40 words, one 384-d float32 vector each, filed
under 100 namespaces ``("users", "u00")`` ...) are loaded into each store; ``search(("users",),
query=..., limit=10)`` then ranks all of them. The embedder of every store is one lookup of
precomputed vectors by text (a dict), so no embedding cost is measured. Recall@10 is against the
exact cosine top 10 computed in numpy. InMemoryStore takes seconds a search at 100k items, so it
answers at most 200,000 / N of the queries (at least 3), SqliteStore at most 2,000,000 / N (at least 5).

Writes: single `put`s, then `batch`es of 100 `PutOp`s, into a fresh store of each kind, the "text"
field embedded through the same lookup; HippographStore on LMDB with durability "fast" beside
SqliteStore on a file in WAL mode with ``synchronous=NORMAL`` (neither syncs a commit to disk), and
the durable pair, "sync" beside ``synchronous=FULL``.

    python benches/langgraph_store.py [--sizes 1000,10000,100000] [--queries 100] [--puts N] [--out benches/RESULTS.md]
    python benches/langgraph_store.py --sizes 1000 --queries 10 --out /tmp/langgraph.md   # quick (CI)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from langgraph.store.base import BaseStore, IndexConfig, PutOp, SearchItem
from langgraph.store.memory import InMemoryStore
from store import DIM, SCOPES, fmt, timed, workload, write_section  # benches/store.py, beside this script

from hippograph.integrations.langgraph import HippographStore

HEADING = "## LangGraph store (benches/langgraph_store.py)"
PREFIX = ("users",)
LIMIT = 10
LOAD_BATCH = 1000
BATCH = 100
HIPPO = "HippographStore"
MEMORY = "InMemoryStore"
SQLITE = "SqliteStore"

Vectors = npt.NDArray[np.float32]
Embed = Callable[[list[str]], list[list[float]]]


def lookup_embed(texts: Sequence[str], vectors: Vectors) -> Embed:
    """An embedder that looks each text's vector up (as a list of floats, as embedding APIs return)."""
    table = dict(zip(texts, vectors.tolist(), strict=True))

    def embed(batch: list[str]) -> list[list[float]]:
        return [table[t] for t in batch]

    return embed


def index_config(embed: Embed) -> IndexConfig:
    # LangGraph's SqliteStore reads the fields to embed from "text_fields" (it ignores IndexConfig's
    # "fields" and would embed the whole value as JSON); the other two stores read "fields".
    config: dict[str, Any] = {"dims": DIM, "embed": embed, "fields": ["text"], "text_fields": ["text"]}
    return config  # type: ignore[return-value]


def sqlite_store(path: Path, synchronous: Literal["NORMAL", "FULL"], index: IndexConfig) -> BaseStore | str:
    """LangGraph's SqliteStore on a file in WAL mode, its sqlite-vec search loaded into the SQLite of
    `pysqlite3-binary` (this Python's own `sqlite3` cannot load extensions); else why it cannot run."""
    try:
        import pysqlite3  # type: ignore[import-untyped]
        from langgraph.store.sqlite import SqliteStore  # imports sqlite-vec
    except ImportError as exc:
        return f"not measured: {exc.name} is not installed"
    conn = pysqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    lg = SqliteStore(conn, index=index)
    lg.setup()  # loads sqlite-vec
    return lg


def close(store: BaseStore) -> None:
    if isinstance(store, HippographStore):
        store.close()
    elif (conn := getattr(store, "conn", None)) is not None:  # SqliteStore
        conn.close()


def load(store: BaseStore, scopes: Sequence[tuple[str, ...]], texts: Sequence[str]) -> float:
    """Puts every item through `batch` (1,000 `PutOp`s each); seconds taken."""
    t0 = time.perf_counter()
    for start in range(0, len(texts), LOAD_BATCH):
        chunk = range(start, min(len(texts), start + LOAD_BATCH))
        store.batch([PutOp(scopes[i], f"e{i:07d}", {"text": texts[i]}) for i in chunk])
    return time.perf_counter() - t0


def exact_top(vectors: Vectors, queries: Vectors) -> list[set[str]]:
    """The keys of the exact cosine top 10 of each query (float64)."""
    m = vectors.astype(np.float64)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    out = []
    for q in queries.astype(np.float64):
        sims = m @ (q / np.linalg.norm(q))
        top = np.argpartition(-sims, LIMIT - 1)[:LIMIT]
        out.append({f"e{int(i):07d}" for i in top})
    return out


@dataclass
class SearchRow:
    store: str
    n: int
    p50: float
    p95: float
    recall: float
    worst: float
    queries: int
    load_s: float
    note: str


def searched(
    name: str,
    store: BaseStore,
    n: int,
    qtexts: list[str],
    truth: list[set[str]],
    load_s: float,
    note: str,
    prefix: tuple[str, ...] = PREFIX,
) -> SearchRow:
    """Times ``search(prefix, query=..., limit=10)`` over `qtexts`; the recall of those answers."""
    answers: list[list[SearchItem]] = [[] for _ in qtexts]

    def ask(i: int) -> None:
        answers[i] = store.search(prefix, query=qtexts[i], limit=LIMIT)

    p50, p95 = timed(ask, len(qtexts))
    recalls = [len({it.key for it in found} & truth[i]) / LIMIT for i, found in enumerate(answers)]
    return SearchRow(name, n, p50, p95, float(np.mean(recalls)), min(recalls), len(qtexts), load_s, note)


def search_rows(n: int, queries: int, tmp: Path) -> list[SearchRow]:
    w = workload(n, queries)
    texts, vectors, scopes = w["texts"], w["vectors"], w["scopes"]
    qtexts = [f"query {i}: {words}" for i, words in enumerate(w["q_words"])]
    embed = lookup_embed([*texts, *qtexts], np.vstack([vectors, w["q_vectors"]]))
    index = index_config(embed)
    truth = exact_top(vectors, w["q_vectors"])
    rows = []

    hs = HippographStore(path=tmp / f"hippograph-{n}", index=index, durability="fast")
    load_s = load(hs, scopes, texts)
    t0 = time.perf_counter()
    hs.store.refresh()  # the derived words and vectors, which the first read would build
    refresh_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    hs.store.build_vector_index()
    ann_s = time.perf_counter() - t0
    for i in range(128):  # as store.py: the searches the index asks to be measured on, then awaited
        hs.store.search_vector(w["q_vectors"][i % queries])
    while hs.store.vector_index_stats().get("measuring"):
        time.sleep(0.05)
    hs.search(PREFIX, query=qtexts[0], limit=LIMIT)
    stats = hs.store.vector_index_stats()
    route = (
        f"HNSW: recall estimate {stats.get('recall_estimate')}, exact fallback {stats.get('exact_fallback')}"
        if stats.get("available")
        else "exact scan (no vector index below 20,000 vectors)"
    )
    note = (
        f"{route} (the prefix holds every item: searched as the whole store); LMDB, then derived index "
        f"{refresh_s:.1f} s, vector index {ann_s:.1f} s"
    )
    rows.append(searched(HIPPO, hs, n, qtexts, truth, load_s, note))
    rows.append(searched(f"{HIPPO}, prefix `()`", hs, n, qtexts, truth, float("nan"), route, prefix=()))
    close(hs)

    lite = sqlite_store(tmp / f"sqlite-{n}.db", "NORMAL", index)
    if isinstance(lite, str):
        rows.append(SearchRow(SQLITE, n, *(float("nan"),) * 4, 0, float("nan"), lite))
    else:
        load_s = load(lite, scopes, texts)
        lite.search(PREFIX, query=qtexts[0], limit=LIMIT)
        count = max(5, min(queries, 2_000_000 // n))
        rows.append(searched(SQLITE, lite, n, qtexts[:count], truth, load_s, "sqlite-vec, file in WAL mode"))
        close(lite)

    mem = InMemoryStore(index=index)
    load_s = load(mem, scopes, texts)
    count = max(3, min(queries, 200_000 // n))
    rows.append(searched(MEMORY, mem, n, qtexts[:count], truth, load_s, "numpy over the vectors as lists"))
    del mem
    gc.collect()
    return rows


@dataclass
class WriteRow:
    store: str
    mode: str
    """"fast", "normal", "sync", "full" or "memory"."""
    durability: str
    puts: int
    put_rate: float
    """Items per second over the single puts."""
    put_p50: float
    put_p95: float
    batches: int
    batch_rate: float
    batch_p50: float
    catch_up: float
    """Seconds per item the next read spends indexing what the writes left (HippographStore only)."""


def catch_up(store: BaseStore) -> float:
    """Seconds HippographStore's next read would spend bringing its derived index (words, vectors)
    up to date with the writes; the LangGraph stores index as they write."""
    if not isinstance(store, HippographStore):
        return 0.0
    t0 = time.perf_counter()
    store.store.refresh()
    return time.perf_counter() - t0


def written(
    name: str, mode: str, durability: str, store: BaseStore, w: dict[str, Any], puts: int, batches: int
) -> WriteRow:
    """`puts` single puts, then `batches` batches of 100 puts, each item new."""
    texts, scopes = w["texts"], w["scopes"]
    t0 = time.perf_counter()
    p50, p95 = timed(lambda i: store.put(scopes[i], f"p{i:07d}", {"text": texts[i]}), puts)
    put_s = time.perf_counter() - t0
    behind = catch_up(store)
    ops = [
        [PutOp(scopes[j], f"b{j:07d}", {"text": texts[j]}) for j in range(puts + b * BATCH, puts + (b + 1) * BATCH)]
        for b in range(batches)
    ]
    t0 = time.perf_counter()
    b50, _ = timed(lambda b: store.batch(ops[b]), batches)
    batch_s = time.perf_counter() - t0
    behind += catch_up(store)
    total = puts + batches * BATCH
    return WriteRow(
        name, mode, durability, puts, puts / put_s, p50, p95, batches, batches * BATCH / batch_s, b50, behind / total
    )


def write_rows(puts: int, tmp: Path) -> list[WriteRow]:
    batches = max(2, puts // BATCH)
    w = workload(puts + batches * BATCH, 1, seed=11)
    index = index_config(lookup_embed(w["texts"], w["vectors"]))
    stores: list[tuple[str, str, str, Callable[[], BaseStore | str]]] = [
        (
            HIPPO,
            "fast",
            "LMDB `fast` (no fsync)",
            lambda: HippographStore(path=tmp / "fast", index=index, durability="fast"),
        ),
        (
            SQLITE,
            "normal",
            "WAL, `synchronous=NORMAL` (no fsync at commit)",
            lambda: sqlite_store(tmp / "normal.db", "NORMAL", index),
        ),
        (
            HIPPO,
            "sync",
            "LMDB `sync` (fsync per commit)",
            lambda: HippographStore(path=tmp / "sync", index=index, durability="sync"),
        ),
        (
            SQLITE,
            "full",
            "WAL, `synchronous=FULL` (fsync per commit)",
            lambda: sqlite_store(tmp / "full.db", "FULL", index),
        ),
        (MEMORY, "memory", "none (process memory)", lambda: InMemoryStore(index=index)),
    ]
    rows = []
    for name, mode, durability, make in stores:
        store = make()
        if isinstance(store, str):
            nan = float("nan")
            rows.append(WriteRow(name, mode, f"{durability}: {store}", 0, nan, nan, nan, 0, nan, nan, nan))
            continue
        rows.append(written(name, mode, durability, store, w, puts, batches))
        close(store)
    return rows


def cell(seconds: float) -> str:
    return "—" if np.isnan(seconds) else fmt(seconds)


def rate(items_per_s: float) -> str:
    return "—" if np.isnan(items_per_s) else f"{items_per_s:,.0f}"


def search_table(rows: list[SearchRow]) -> list[str]:
    hippo = {r.n: r.p50 for r in rows if r.store == HIPPO}
    out = [
        "| store | items | search p50 | p95 | recall@10 (worst) | queries | p50 / HippographStore's | load | note |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        ratio = "" if r.store == HIPPO or np.isnan(r.p50) else f"{r.p50 / hippo[r.n]:,.1f}×"
        recall = "—" if np.isnan(r.recall) else f"{r.recall:.3f} ({r.worst:.2f})"
        load_s = "" if np.isnan(r.load_s) else f"{r.load_s:.1f} s"
        out.append(
            f"| {r.store} | {r.n:,} | {cell(r.p50)} | {cell(r.p95)} | {recall} | {r.queries} | {ratio} | {load_s} "
            f"| {r.note} |"
        )
    return out


def write_table(rows: list[WriteRow]) -> list[str]:
    out = [
        "| store | durability | `put` items/s | `put` p50 | `put` p95 | `batch` of 100: items/s | `batch` p50 "
        "| index catch-up per item (next read) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        behind = cell(r.catch_up) if r.store == HIPPO else ""
        out.append(
            f"| {r.store} | {r.durability} | {rate(r.put_rate)} | {cell(r.put_p50)} | {cell(r.put_p95)} "
            f"| {rate(r.batch_rate)} | {cell(r.batch_p50)} | {behind} |"
        )
    return out


def ratios(search: list[SearchRow], writes: list[WriteRow]) -> list[str]:
    n = max(r.n for r in search)
    at = {r.store: r for r in search if r.n == n}
    hippo = at[HIPPO]
    out = [
        f"- At {n:,} items, `HippographStore.search` p50 {fmt(hippo.p50)}: "
        f"{at[MEMORY].p50 / hippo.p50:,.0f}× faster than `InMemoryStore` (target ≥ 100×), "
        + (
            "`SqliteStore` not measured."
            if np.isnan(at[SQLITE].p50)
            else f"{at[SQLITE].p50 / hippo.p50:,.1f}× faster than `SqliteStore` with sqlite-vec (target ≥ 1×)."
        ),
        f"- recall@10 of `HippographStore`'s default search: {min(r.recall for r in search if r.store == HIPPO):.3f} "
        "at worst over the sizes (target ≥ 0.95).",
    ]
    by = {wr.mode: wr for wr in writes}
    for label, h, s in (
        ("without fsync (LMDB `fast` vs WAL `NORMAL`)", by["fast"], by["normal"]),
        ("with an fsync per commit (LMDB `sync` vs WAL `FULL`)", by["sync"], by["full"]),
    ):
        if np.isnan(s.put_rate):
            continue
        with_index = 1 / (1 / h.put_rate + h.catch_up)
        out.append(
            f"- Writes {label}: `put` {h.put_rate / s.put_rate:.2f}× SqliteStore's items/s "
            f"({with_index / s.put_rate:.2f}× counting the index catch-up), `batch` of 100 "
            f"{h.batch_rate / s.batch_rate:.2f}×."
        )
    return out


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in ("langgraph", "langgraph-checkpoint-sqlite", "sqlite-vec"):
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{dist} {version(dist)}")
    return ", ".join(found)


def run(sizes: list[int], queries: int, puts: int) -> list[str]:
    search: list[SearchRow] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            search += search_rows(n, queries, Path(tmp))
            gc.collect()
        writes = write_rows(puts, Path(tmp))
    head = [
        HEADING,
        "",
        f'Items `{{"text": ...}}` of 20–40 words with one {DIM}-d float32 vector each (around 64 centres), '
        f'under {SCOPES} namespaces `("users", "u00")` …; `search(("users",), query=..., limit={LIMIT})`, '
        "so every item is a candidate; queries near a stored vector. Every store embeds through the same "
        "lookup of precomputed vectors by text (lists of floats, as embedding APIs return them), so no "
        "embedding is measured. Recall@10 against the exact cosine top 10 (numpy, float64). Each store is "
        f"loaded with `batch`es of {LOAD_BATCH:,} `PutOp`s (load); HippographStore on LMDB (`fast`), its "
        "derived index and vector index then built and the vector index's calibration awaited, as in "
        "store.py; SqliteStore on a file in WAL mode (`synchronous=NORMAL`), sqlite-vec's brute-force "
        "`vec_distance_cosine`; `InMemoryStore` with fewer queries where a search takes seconds. "
        "HippographStore and SqliteStore answer one untimed query first. "
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {versions()}.",
        "",
        *search_table(search),
        "",
        f"Writes into a fresh store of each kind: {writes[0].puts:,} `put`s of a new item each, then "
        f'{writes[0].batches} `batch`es of {BATCH} `PutOp`s; the "text" field embedded through the lookup. '
        "Durability: LMDB `fast` and SQLite WAL with `synchronous=NORMAL` do not fsync a commit (a process "
        "crash loses nothing; an OS crash or power loss can lose the latest commits, never corrupting older "
        "ones); LMDB `sync` and WAL with `synchronous=FULL` fsync every commit. HippographStore indexes its "
        "own writes (words and vectors, in memory) as it commits them; the last column is what was left for "
        "the next read to index (`Store.refresh()` after the writes), per item.",
        "",
        *write_table(writes),
    ]
    return [*head, "", *ratios(search, writes), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="items per search run, comma-separated")
    parser.add_argument(
        "--queries",
        type=int,
        default=100,
        help="search queries per store and size (SqliteStore asks at most 2,000,000 / size of them, at least 5; "
        "InMemoryStore at most 200,000 / size, at least 3)",
    )
    parser.add_argument(
        "--puts",
        type=int,
        default=None,
        help="single puts per store (default: 20 per query, at most 2,000); as many items again go in batches of 100",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    puts = args.puts if args.puts is not None else min(2000, 20 * args.queries)
    lines = run(sizes, args.queries, puts)
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
