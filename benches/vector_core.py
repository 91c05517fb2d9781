"""The vector core next to hnswlib and usearch, and hippograph's default path next to the exact scan.

Engines, on the same vectors in the same run: build time (2 threads), then single queries at each
search depth (p50 and recall@10 against the exact cosine top 10), and the private memory a second
process gains when it opens the saved index while a first process holds it open. The core's graph
reports code similarities (one-byte codes); hippograph rescores its candidates from the scoring
columns, so its recall in a store is the graph's plus that rescoring.

Default path: `find_candidates` (default value function, top 20) with `exact=False` against
`exact=True` on InMemory stores built from clustered, unclustered and aged-usage data; p50 of each
on its own, recall@20 of the default against exact.

    python benches/vector_core.py            # 100k x 384 engines, default path at 30k x 64 and 100k x 384
    python benches/vector_core.py --quick    # 20k x 64: proves it runs
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import hippograph as hg
from hippograph import _core
from hippograph.backends import InMemory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store import write_section

HEADING = "## The vector core next to hnswlib and usearch (`python benches/vector_core.py`)"
F32 = npt.NDArray[np.float32]
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def clustered(n: int, dim: int, rng: np.random.Generator) -> F32:
    centres = rng.standard_normal((max(n // 400, 8), dim)).astype(np.float32)
    return (centres[rng.integers(0, len(centres), n)] + 0.6 * rng.standard_normal((n, dim))).astype(np.float32)


def gaussian(n: int, dim: int, rng: np.random.Generator) -> F32:
    return rng.standard_normal((n, dim)).astype(np.float32)


def near(data: F32, count: int, rng: np.random.Generator) -> F32:
    picked = data[rng.integers(0, len(data), count)]
    unit = picked / np.linalg.norm(picked, axis=1, keepdims=True)
    moved = unit + 0.2 * rng.standard_normal(unit.shape) / np.sqrt(data.shape[1])
    return moved.astype(np.float32)


def truth(data: F32, queries: F32, k: int) -> npt.NDArray[np.int64]:
    unit = data / np.linalg.norm(data, axis=1, keepdims=True)
    qu = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return np.argsort(-(qu @ unit.T), axis=1)[:, :k]


def block_p50s_us(fns: list[Callable[[int], Any]], count: int, block: int = 25) -> list[float]:
    """Each function's p50 over `count` calls, the functions taking turns a block of calls at a time:
    machine drift reaches all of them alike, and each block runs warm on its own path's memory."""
    times: list[list[int]] = [[] for _ in fns]
    for start in range(0, count, block):
        for fn, kept in zip(fns, times, strict=True):
            for i in range(start, min(count, start + block)):
                t = time.perf_counter_ns()
                fn(i)
                kept.append(time.perf_counter_ns() - t)
    return [statistics.median(kept) / 1000 for kept in times]


def p50_us(fn: Callable[[int], Any], count: int) -> float:
    times = []
    for i in range(count):
        t = time.perf_counter_ns()
        fn(i)
        times.append(time.perf_counter_ns() - t)
    return statistics.median(times) / 1000


class Engine:
    name = ""

    def build(self, data: F32) -> None: ...
    def knn(self, q: F32, k: int) -> npt.NDArray[Any]: ...
    def set_ef(self, ef: int) -> None: ...
    def save(self, path: Path) -> None: ...

    def to_data(self, labels: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """`knn`'s labels as row numbers of the data it was built from."""
        return labels

    imports = ""
    opener = ""
    """Code a second process runs (after `imports`) to open the saved index at `path` and answer one query `q`."""


class Core(Engine):
    imports = ""
    opener = "g = _core.Hnsw.open(path); g.set_ef(64); g.knn_query(q, 10)"

    def __init__(self, codes: str = "f16") -> None:
        self.codes = codes
        self.name = f"hippograph core ({codes} codes)"

    def build(self, data: F32) -> None:
        self.g = _core.Hnsw(data.shape[1], 16, 100, data[:16384], codes=self.codes)
        self.g.set_num_threads(2)
        self.g.add_items(data, np.arange(len(data)))

    def knn(self, q: F32, k: int) -> npt.NDArray[Any]:
        return self.g.knn_query(q, k)[0][0]

    def set_ef(self, ef: int) -> None:
        self.g.set_ef(ef)

    def save(self, path: Path) -> None:
        self.g.save_index(path)


class StoreGraph(Core):
    """The default path's own graph (the store's vector index), searched bare: the same graph the
    default path walks, so no build-to-build difference in graph quality enters the comparison."""

    name = "hippograph core, the store's own graph (f16 codes)"

    def __init__(self, b: InMemory) -> None:
        columns = b._derived.columns[hg.NodeType.SEMANTIC]
        ann = columns.ann
        assert ann is not None
        self.g = ann.index
        # Labels to the data's row numbers (node "n0000042" holds data[42]), for recall only.
        self.data_of = np.array([int(columns.ids[r][1:]) if r >= 0 else -1 for r in ann.row_of_label.tolist()])

    def build(self, data: F32) -> None:
        pass  # built by the store

    def to_data(self, labels: npt.NDArray[Any]) -> npt.NDArray[Any]:
        return self.data_of[labels.astype(np.int64)]


class Hnswlib(Engine):
    name = "hnswlib 0.8 (f32)"
    imports = "import hnswlib"
    opener = (
        "g = hnswlib.Index(space='cosine', dim=q.shape[1]); g.load_index(str(path)); g.set_ef(64); g.knn_query(q, 10)"
    )

    def build(self, data: F32) -> None:
        import hnswlib

        self.g = hnswlib.Index(space="cosine", dim=data.shape[1])
        self.g.init_index(max_elements=len(data), M=16, ef_construction=100)
        self.g.set_num_threads(2)
        self.g.add_items(data, np.arange(len(data)))

    def knn(self, q: F32, k: int) -> npt.NDArray[Any]:
        return self.g.knn_query(q, k)[0][0]

    def set_ef(self, ef: int) -> None:
        self.g.set_ef(ef)

    def save(self, path: Path) -> None:
        self.g.save_index(str(path))


class Usearch(Engine):
    name = "usearch (f32, view)"
    imports = "from usearch.index import Index"
    opener = "g = Index.restore(str(path), view=True); g.search(q[0], 10)"

    def build(self, data: F32) -> None:
        from usearch.index import Index

        self.g = Index(ndim=data.shape[1], metric="cos", dtype="f32", connectivity=16, expansion_add=100)
        self.g.add(np.arange(len(data)), data, threads=2)

    def knn(self, q: F32, k: int) -> npt.NDArray[Any]:
        return np.asarray(self.g.search(q[0], k, threads=1).keys)

    def set_ef(self, ef: int) -> None:
        self.g.expansion_search = ef

    def save(self, path: Path) -> None:
        self.g.save(str(path))


def private_kib() -> int:
    fields = Path("/proc/self/smaps_rollup").read_text().split("\n")
    return sum(int(line.split()[1]) for line in fields if line.startswith(("Private_Clean", "Private_Dirty")))


SECOND = textwrap.dedent(
    """
    import sys, numpy as np
    from pathlib import Path
    from hippograph import _core
    path = Path(sys.argv[1]); q = np.load(sys.argv[2])
    {imports}
    def private_kib():
        lines = Path("/proc/self/smaps_rollup").read_text().split("\\n")
        return sum(int(l.split()[1]) for l in lines if l.startswith(("Private_Clean", "Private_Dirty")))
    before = private_kib()
    {opener}
    print(private_kib() - before)
    """
)


def second_process_kib(engine: Engine, path: Path, q: F32, tmp: Path) -> int:
    qpath = tmp / "q.npy"
    np.save(qpath, q)
    code = SECOND.replace("{imports}", engine.imports).replace("{opener}", engine.opener)
    run = subprocess.run([sys.executable, "-c", code, str(path), str(qpath)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stderr)
    return int(run.stdout.strip().splitlines()[-1])


def best_builds(engines: list[Engine], data: F32) -> list[tuple[Engine, float]]:
    """The engines that can be built here, each with the faster of two builds: the engines build in
    turn, then again in reverse order, so that a burst of other work on the machine (seconds long,
    where one build takes several) does not decide which engine builds faster."""
    times: dict[int, list[float]] = {}
    built: list[Engine] = []
    for engine in engines:
        try:
            t = time.perf_counter()
            engine.build(data)
        except ImportError:
            continue
        times[id(engine)] = [time.perf_counter() - t]
        built.append(engine)
    for engine in reversed(built):
        t = time.perf_counter()
        engine.build(data)
        times[id(engine)].append(time.perf_counter() - t)
    return [(engine, min(times[id(engine)])) for engine in built]


def engines_rows(n: int, dim: int, queries: int, tmp: Path) -> list[str]:
    rng = np.random.default_rng(5)
    rows = []
    for label, make, ask in (
        ("clustered", clustered, near),
        ("unclustered", gaussian, lambda d, c, r: gaussian(c, d.shape[1], r)),
    ):
        data = make(n, dim, rng)
        qs = ask(data, queries, rng)
        want = truth(data, qs, 10)
        for engine, built in best_builds([Core("f16"), Core("i8"), Hnswlib(), Usearch()], data):
            cells = []
            for ef in (16, 32, 64, 128):
                engine.set_ef(ef)
                found = [engine.knn(qs[i : i + 1], 10) for i in range(queries)]
                recall = np.mean([len(set(found[i].tolist()) & set(want[i].tolist())) / 10 for i in range(queries)])
                p50 = p50_us(lambda i, e=engine, q=qs: e.knn(q[i : i + 1], 10), queries)
                cells.append(f"{p50:.0f} µs / {recall:.3f}")
            path = tmp / f"{label}.{len(rows)}.index"
            engine.save(path)
            held = None
            if isinstance(engine, Core):  # the first process holds the saved file mapped, as a store does
                held = _core.Hnsw.open(path)
                held.set_ef(64)
                held.knn_query(qs[:1], 10)
                held.knn_query(qs, 10)
            grown = second_process_kib(engine, path, qs[:1], tmp) / 1024
            del held
            vec_mib = n * dim * 4 / 2**20
            rows.append(
                f"| {label} | {engine.name} | {built:.1f} s | {' | '.join(cells)} | "
                f"{grown:.0f} MiB ({grown / vec_mib:.2f}× the {vec_mib:.0f} MiB of vectors) |"
            )
            del engine
    return [
        f"{n // 1000}k × {dim}, M = 16, ef_construction = 100, 2 build threads, *build* the faster of two builds "
        f"(the engines in turn, then in reverse order); {queries} single queries, k = 10, "
        "each cell p50 / recall@10 against the exact cosine top 10 (the core's graph ranks by its codes; "
        "hippograph rescores candidates exactly from its columns). *Second process*: private memory "
        "(Private_Clean + Private_Dirty) a fresh process gains opening the saved index and answering one "
        "query, while this process holds it open (the core maps its file; hnswlib reads it; usearch views it).",
        "",
        "| data | engine | build | ef 16 | ef 32 | ef 64 | ef 128 | second process |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


def metadata(n: int, aged: bool, rng: np.random.Generator) -> list[hg.NodeMetadata]:
    out = []
    for _ in range(n):
        if not aged:
            out.append(hg.NodeMetadata(created_at=NOW - timedelta(hours=1)))
            continue
        hours = float(rng.uniform(0, 300))
        count = int(rng.integers(0, 7))
        at = NOW - timedelta(hours=hours)
        out.append(hg.NodeMetadata(created_at=at, access_count=count, last_accessed_at=at if count else None))
    return out


def store(data: F32, aged: bool, rng: np.random.Generator) -> InMemory:
    b = InMemory(ann=hg.AnnConfig(background=False))
    meta = metadata(len(data), aged, rng)
    for start in range(0, len(data), 10_000):
        cs = hg.Changeset()
        for i in range(start, min(start + 10_000, len(data))):
            cs.add_node(hg.Semantic(id=f"n{i:07d}", embedding=data[i], proposition="", confidence=1.0))
            cs.put_metadata(f"n{i:07d}", meta[i])
        b.apply_changeset(cs)
    return b


def default_rows(shapes: list[tuple[str, int, int]], queries: int) -> list[str]:
    rng = np.random.default_rng(9)
    vf = None  # the default value function
    rows: list[str] = []
    bare: list[str] = []
    bare_shape = ""
    for label, n, dim in shapes:
        data = (gaussian if label == "unclustered" else clustered)(n, dim, rng)
        b = store(data, label == "aged usage", rng)
        t = time.perf_counter()
        b.build_vector_index()
        built = time.perf_counter() - t
        qs = near(data, queries, rng) if label != "unclustered" else gaussian(queries, dim, rng)

        def ask(i: int, exact: bool, b: InMemory = b, qs: F32 = qs) -> list[str]:
            got = b.find_candidates([hg.NodeType.SEMANTIC], qs[i], [], vf, now=NOW, exact=exact)
            return [node.id for node, _ in got]

        for i in range(min(queries, 128)):  # asked as an agent asks, then any new measurement awaited
            ask(i, False)
        settle(b)
        recall = [len(set(ask(i, False)) & set(ask(i, True))) / max(len(ask(i, True)), 1) for i in range(queries)]
        exact, default = block_p50s_us([lambda i: ask(i, True), lambda i: ask(i, False)], queries)
        if label == "clustered" and not bare:
            bare_shape = f"{n // 1000}k × {dim}"
            bare += equal_recall_rows(data, qs, lambda i, ask=ask: ask(i, False), float(np.mean(recall)), b)
        stats = b.vector_index_stats()["semantic"]
        fallback = "yes: " + str(stats.get("fallback_reason")) if stats.get("exact_fallback") else "no"
        rows.append(
            f"| {label} {n // 1000}k × {dim} | {built:.1f} s | {exact:.0f} µs | {default:.0f} µs | "
            f"{exact / default:.2f}× | {np.mean(recall):.3f} ({min(recall):.2f}) | {fallback} |"
        )
        b.close()
    return [
        "",
        "Default path (`exact=False`, `AnnConfig()` defaults: the core's engine) against `exact=True`, "
        "InMemory, default value function, query alone, top 20; build includes calibration; the two paths "
        "take turns 25 queries at a time, so machine drift reaches both alike. "
        "*aged usage*: clustered vectors, each node last used 0–300 h before now, 0–6 accesses.",
        "",
        "| data | index build | exact p50 | default p50 | exact / default | recall@20 mean (worst) | exact fallback |",
        "|---|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        "The default path next to each bare engine's own k-NN search on the same vectors, asked the same "
        f"question (top 20 of the first clustered store above, {bare_shape}, query alone, uniform usage, so the value "
        f"ranking is the cosine ranking): each engine at the smallest depth of {DEPTHS[0]}, {DEPTHS[1]}, "
        f"{DEPTHS[2]}, ... {DEPTHS[-1]} (each an eighth above the last) whose recall@20 against the exact "
        "cosine top 20 reaches the default path's, the two taking turns 25 queries at a time. The bare "
        "engines return labels; the default path returns hydrated nodes with their exact scores. The first "
        "row searches the very graph the default path walks (the store's index), the others a graph built "
        "apart from the same vectors, whose quality (and so the depth it needs) moves from build to build.",
        "",
        "| engine | depth | its recall@20 | default recall@20 | engine p50 | default p50 | default / engine |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *bare,
    ]


DEPTHS = sorted({round(20 * 1.125**i) for i in range(22)})
"""Depths the bare engines are tried at, 20 to about 260, each an eighth above the last: a coarser
grid would charge an engine for the depth past the one it needed."""


def settle(b: InMemory) -> None:
    """Waits (up to two minutes) for a measurement the queries asked so far started: timed queries
    never share the cores with it."""
    settled = time.time() + 120
    while b.vector_index_stats()["semantic"].get("measuring") and time.time() < settled:
        time.sleep(0.2)


def equal_recall_rows(data: F32, qs: F32, default: Callable[[int], Any], recall: float, b: InMemory) -> list[str]:
    """Each bare engine at the depth where its own top 20 matches the default path's recall@20, and the
    two p50s measured in turns (how far the default path is from what the engine alone does)."""
    want = truth(data, qs, 20)
    rows = []
    for engine in (StoreGraph(b), Core("f16"), Hnswlib()):
        try:
            engine.build(data)
        except ImportError:
            continue
        got_ef, got_recall = 0, 0.0
        for ef in DEPTHS:
            engine.set_ef(ef)
            hits = [
                set(engine.to_data(engine.knn(qs[i : i + 1], 20)).tolist()) & set(want[i].tolist())
                for i in range(len(qs))
            ]
            got_recall = float(np.mean([len(h) / 20 for h in hits]))
            got_ef = ef
            if got_recall >= recall:
                break
        settle(b)
        own, mine = block_p50s_us([lambda i, e=engine: e.knn(qs[i : i + 1], 20), default], len(qs))
        rows.append(
            f"| {engine.name} | {got_ef} | {got_recall:.3f} | {recall:.3f} | {own:.0f} µs | {mine:.0f} µs | "
            f"{mine / own:.2f}× |"
        )
        del engine
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "RESULTS.md")
    args = parser.parse_args()
    n, dim, queries = (20_000, 64, 50) if args.quick else (100_000, 384, 200)
    shapes = (
        [("clustered", 20_000, 64), ("unclustered", 20_000, 64)]
        if args.quick
        else [
            ("clustered", 100_000, 384),
            ("aged usage", 100_000, 384),
            ("unclustered", 30_000, 64),
            ("unclustered", 100_000, 384),
        ]
    )
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        lines = engines_rows(n, dim, queries, Path(tmp))
    lines += default_rows(shapes, queries)
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    lines = [HEADING, "", *lines, "", f"Machine: {machine}. Whole run: {time.time() - started:.0f} s."]
    print("\n".join(lines))
    write_section(args.out, lines, HEADING)


if __name__ == "__main__":
    main()
