"""hippograph side by side with the alternatives an agent author would reach for.

Usage::

    python benches/compare.py                 # full run, writes benches/RESULTS.md + benches/latency_vs_n.png
    python benches/compare.py --quick         # < 3 min, writes benches/RESULTS-quick.md + latency_vs_n-quick.png
    python benches/compare.py --quick --out /tmp/r.md   # what CI runs (plot goes next to --out)

Why this shape: a single process, one synthetic dataset per size, and every
method timed round-robin within each repetition (the starting method rotates),
so machine drift and noisy neighbours hit every method alike. BLAS, OpenMP and
rayon are pinned to one thread *before* numpy or hippograph are imported, so
the main tables compare algorithms, not core counts; a separate section
re-runs hippograph and numpy in a subprocess with the libraries' default
thread counts.

What is measured (see `benches/RESULTS.md` for the numbers):

* scan: hippograph ``find_candidates`` (exact, default value function,
  metadata on every node, query + 4 tag vectors) on InMemory and warm LMDB;
  the same computation in numpy (one ``M @ Q.T``, the value function
  vectorised, ``argpartition``); numpy's single ``M @ q`` as the memory
  bandwidth floor; a pure-Python transliteration of the reference algorithm
  (1k and 10k only: minutes per call at 100k); LangGraph
  ``InMemoryStore.search`` and raw hnswlib k-NN, which both rank by cosine to
  the query alone (no tags, no value function) and so do less work;
* ``get_node`` on LMDB vs InMemory, and what ``Repo.recall`` adds over the
  backend's ``find_candidates`` (LMDB, sync durability);
* approximate recall (``exact=False``, the HNSW vector index, built with
  ``build_vector_index()``): recall@top_k against the exact path over 50
  queries, p50/p95 latency of both, how often the exact scan answered, and the
  index's own calibration estimates, on several workloads: the clustered data
  (LMDB, 100k × 384 and 1M × 128, query + 4 tags and query only; also index
  build time and the time from opening the store to the first answer with the
  saved index), unclustered Gaussian data (InMemory, 30k × 64 and 100k × 384,
  i.i.d. queries and queries near stored vectors) and clustered data with aged
  usage metadata (LMDB, 100k × 384); and an agent's turn loop (a write of 8
  nodes, then a query) on the clustered 100k × 384 store, with its index built
  and while a background build runs. The script exits non-zero (after writing
  the report) when a workload's mean recall is below 0.95 or below the
  index's ``recall_estimate`` by more than 0.03;
* writes: one trajectory-sized ingestion per call through hippograph
  ``commit_ingestion`` (LMDB sync/fast, InMemory), LangGraph ``SqliteStore``
  and plain ``sqlite3`` in WAL mode with ``synchronous=FULL`` / ``NORMAL``.
"""

from __future__ import annotations

import os
import sys

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")
MT_WORKER = "--mt-worker" in sys.argv
if not MT_WORKER:
    for _var in THREAD_VARS:
        os.environ[_var] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchdata import (  # noqa: E402
    AGED_HOURS,
    AGED_MAX_ACCESS,
    DIM,
    NOW,
    SCANNED,
    TOP_K,
    Dataset,
    Ingestion,
    SqliteWriter,
    build_lmdb,
    build_memory,
    gaussian_queries,
    make_aged_dataset,
    make_dataset,
    make_gaussian,
    make_ingestion,
    meta_json,
    near_queries,
    query_only,
    query_sets,
    size_label,
    turn_inputs,
    vector_pool,
)

import hippograph as hg  # noqa: E402
from hippograph.backends import LMDB, InMemory  # noqa: E402
from hippograph.graph.value import DEFAULT_PARAMS  # noqa: E402

HERE = Path(__file__).resolve().parent
PARAMS = DEFAULT_PARAMS[SCANNED]
QUERY_KEY = "__query__"

# Method names, used as table rows and plot labels.
HG_MEM = "hippograph find_candidates (InMemory, exact)"
HG_LMDB = "hippograph find_candidates (LMDB warm, exact)"
HG_MEM_ONE = "hippograph find_candidates (InMemory, exact, query only)"
HG_LMDB_ONE = "hippograph find_candidates (LMDB warm, exact, query only)"
HG_MEM_DEFAULT = "hippograph find_candidates (InMemory, exact=False)"
OWN_BLOCK = ", own block"
HG_LMDB_DEFAULT = "hippograph find_candidates (LMDB warm, exact=False)"
ALONE = ", not interleaved with numpy"
NP_PATH = "numpy path (M @ Q.T + value fn + argpartition)"
NP_FLOOR = "numpy floor (M @ q, one vector)"
PY_REF = "pure Python reference"
LG_SEARCH = "LangGraph InMemoryStore.search"
HNSW = "hnswlib knn_query (ef=50, M=16)"


# -- timing --------------------------------------------------------------------------


@dataclass
class Method:
    """A timed callable; ``every`` > 1 runs it only in every ``every``-th repetition (slow baselines)."""

    name: str
    fn: Callable[[], object]
    every: int = 1
    samples: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Stats:
    median_us: float
    p95_us: float
    mean_us: float
    count: int
    min_us: float
    """The fastest repetition: what the method costs when nothing else interferes (a noise-robust cross-check)."""

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> Stats:
        arr = np.asarray(samples_ns, dtype=np.float64) / 1e3
        return cls(float(np.median(arr)), float(np.percentile(arr, 95)), float(arr.mean()), len(arr), float(arr.min()))

    def as_dict(self) -> dict[str, float]:
        return {
            "median_us": self.median_us,
            "p95_us": self.p95_us,
            "mean_us": self.mean_us,
            "count": self.count,
            "min_us": self.min_us,
        }


def round_robin(methods: Sequence[Method], reps: int) -> dict[str, Stats]:
    """Times every method once per repetition, rotating which goes first."""
    for m in methods:
        m.fn()  # warm-up: first-call caches, page faults, thread pools
    for r in range(reps):
        k = r % len(methods)
        for m in [*methods[k:], *methods[:k]]:
            if r % m.every:
                continue
            t0 = time.perf_counter_ns()
            m.fn()
            m.samples.append(time.perf_counter_ns() - t0)
    return {m.name: Stats.of(m.samples) for m in methods}


def settle() -> None:
    """Collect garbage and freeze what survives, so GC pauses do not scan the datasets."""
    gc.collect()
    gc.freeze()


# -- baselines: scan ------------------------------------------------------------------


class NumpyScan:
    """The find_candidates query with the default value function, vectorised in numpy."""

    def __init__(self, ds: Dataset) -> None:
        self.matrix = ds.matrix
        self.norms = np.linalg.norm(ds.matrix, axis=1).astype(np.float32)
        self.timestamp = np.array([m.reference_time.timestamp() for m in ds.meta])
        self.access = np.array([float(m.access_count) for m in ds.meta])
        self.reward_count = np.array([float(m.reward_count) for m in ds.meta])
        self.cumulative = np.array([m.cumulative_reward for m in ds.meta])
        self.now = NOW.timestamp()

    def top(self, queries: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
        qn = np.linalg.norm(queries, axis=1, keepdims=True)
        unit = np.divide(queries, qn, out=np.zeros_like(queries), where=qn > 0)
        dots = self.matrix @ unit.T
        rel = np.divide(dots.max(axis=1), self.norms, out=np.zeros(len(self.norms), np.float32), where=self.norms > 0)
        rel = np.clip(rel, 0.0, 1.0).astype(np.float64)
        hours = np.maximum(0.0, (self.now - self.timestamp) / 3600.0)
        denom = self.access + PARAMS["k"]
        freq = np.maximum(
            PARAMS["base_floor"], np.divide(self.access, denom, out=np.zeros_like(denom), where=denom > 0)
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            avg = np.where(self.reward_count > 0, self.cumulative / self.reward_count, 0.0)
        reward = np.where(self.reward_count > 0, 1.0 / (1.0 + np.exp(-PARAMS["beta"] * avg)), 1.0)
        score = rel * np.exp(-PARAMS["lambda"] * hours) * freq * reward
        keep = np.flatnonzero(score >= PARAMS["threshold"])
        k = int(PARAMS["top_k"])
        if len(keep) > k:
            keep = keep[np.argpartition(-score[keep], k - 1)[:k]]
        return keep[np.lexsort((keep, -score[keep]))]  # ids are zero-padded, so row order is id order

    def floor(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        return self.matrix @ query


class PythonReference:
    """The reference algorithm transliterated to plain Python: per-node cosine, value function, sort."""

    def __init__(self, ds: Dataset) -> None:
        self.rows = ds.matrix.tolist()
        self.ids = ds.ids
        self.meta = ds.meta
        self.now = NOW

    def top(self, queries: list[list[float]]) -> list[str]:
        lam, k, floor, beta = PARAMS["lambda"], PARAMS["k"], PARAMS["base_floor"], PARAMS["beta"]
        qnorms = [math.sqrt(sum(x * x for x in q)) for q in queries]
        scored: list[tuple[float, str]] = []
        for node_id, row, meta in zip(self.ids, self.rows, self.meta, strict=True):
            norm = math.sqrt(sum(x * x for x in row))
            rel = 0.0
            if norm > 0:
                for q, qn in zip(queries, qnorms, strict=True):
                    if qn > 0:
                        rel = max(rel, sum(a * b for a, b in zip(q, row, strict=True)) / (qn * norm))
            rel = min(rel, 1.0)
            hours = max(0.0, (self.now - meta.reference_time).total_seconds() / 3600.0)
            n = meta.access_count
            freq = max(floor, n / (n + k) if n + k > 0 else 0.0)
            reward = 1.0 if meta.reward_count == 0 else 1.0 / (1.0 + math.exp(-beta * meta.avg_reward))
            score = rel * math.exp(-lam * hours) * freq * reward
            if score >= PARAMS["threshold"]:
                scored.append((-score, node_id))
        scored.sort()
        return [node_id for _, node_id in scored[: PARAMS["top_k"]]]


def langgraph_memory_store(ds: Dataset) -> Any:
    """A LangGraph InMemoryStore holding the scanned vectors.

    LangGraph's put API cannot take a precomputed vector: it calls the index's
    ``embed`` function on the text fields. A deterministic lookup stands in for
    the embedding model (text key → precomputed vector, returned as
    ``list[float]`` as its ``EmbeddingsFunc`` contract says), so the store holds
    exactly our vectors and no model time is measured.
    """
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore

    lookup = {node_id: ds.matrix[i] for i, node_id in enumerate(ds.ids)}
    lookup[QUERY_KEY] = ds.query

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [lookup[t].tolist() for t in texts]

    store = InMemoryStore(index={"dims": DIM, "embed": embed, "fields": ["text"]})
    ops = [PutOp((SCANNED.value,), node_id, {"text": node_id}) for node_id in ds.ids]
    for start in range(0, len(ops), 5000):
        store.batch(ops[start : start + 5000])
    return store


def hnsw_index(ds: Dataset) -> Any:
    """hnswlib over the scanned vectors (cosine, M=16, ef_construction=100); build time not measured."""
    import hnswlib

    index = hnswlib.Index(space="cosine", dim=DIM)
    index.init_index(max_elements=ds.n, M=16, ef_construction=100, random_seed=7)
    index.add_items(ds.matrix, np.arange(ds.n), num_threads=os.cpu_count() or 1)
    index.set_ef(50)
    index.set_num_threads(1)
    return index


def has_module(name: str) -> bool:
    """Optional baselines are skipped (and the report says so) when their package is missing."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def ann_min_nodes() -> int | None:
    """Above how many nodes hippograph's default (``exact=False``) query may use its vector index, if it has one."""
    try:
        from hippograph.engine.vector_index import DEFAULT_ANN
    except ImportError:
        return None
    return None if DEFAULT_ANN is None else int(DEFAULT_ANN.min_nodes)


def exact_cosine_top(ds: Dataset, query: npt.NDArray[np.float32], k: int = TOP_K) -> set[int]:
    sims = (ds.matrix @ query) / (np.linalg.norm(ds.matrix, axis=1) * np.linalg.norm(query))
    return set(np.argpartition(-sims, k - 1)[:k].tolist())


def recall_queries(ds: Dataset, count: int = 50) -> npt.NDArray[np.float32]:
    """The benchmark query plus noisy cluster centres, for averaging recall@k."""
    rng = np.random.default_rng(99)
    picks = rng.integers(0, len(ds.centers), count - 1)
    noisy = ds.centers[picks] + np.float32(0.3) * rng.standard_normal((count - 1, DIM), dtype=np.float32)
    return np.vstack([ds.query[None, :], noisy]).astype(np.float32)


# -- sections ------------------------------------------------------------------------


@dataclass
class Plan:
    sizes: list[int]
    reps: dict[int, int]
    slow_reps: dict[int, int]
    lookup_reps: int
    recall_reps: dict[int, int]
    stub_reps: int
    write_reps: int
    quick: bool
    ann: list[tuple[int, int]] = field(default_factory=list)
    """(N, d) clustered LMDB stores for the approximate-recall section."""
    ann_reps: int = 30
    """Repetitions of each latency block there."""
    ann_gauss: list[tuple[int, int]] = field(default_factory=list)
    """(N, d) unclustered Gaussian InMemory stores."""
    ann_aged: list[tuple[int, int]] = field(default_factory=list)
    """(N, d) clustered LMDB stores with aged usage metadata."""
    turn_loop: tuple[int, int] | None = None
    """The clustered store (one of ``ann``) the turn loops run on."""
    turns: int = 0
    """Turns per loop that find the index available (0: no turn loops)."""
    background_s: float = 0.0
    """Time limit of the background-build turn loop (0: not run)."""


def full_plan() -> Plan:
    return Plan(
        sizes=[1_000, 10_000, 100_000],
        reps={1_000: 400, 10_000: 200, 100_000: 60},
        slow_reps={1_000: 20, 10_000: 5, 100_000: 5},
        lookup_reps=2000,
        recall_reps={1_000: 600, 10_000: 300, 100_000: 100},
        stub_reps=3000,
        write_reps=300,
        quick=False,
        ann=[(100_000, DIM), (1_000_000, 128)],
        ann_reps=50,
        ann_gauss=[(30_000, 64), (100_000, DIM)],
        ann_aged=[(100_000, DIM)],
        turn_loop=(100_000, DIM),
        turns=400,
        background_s=240.0,
    )


def quick_plan() -> Plan:
    return Plan(
        sizes=[1_000, 10_000],
        reps={1_000: 60, 10_000: 30},
        slow_reps={1_000: 5, 10_000: 3},
        lookup_reps=300,
        recall_reps={1_000: 100, 10_000: 50},
        stub_reps=500,
        write_reps=25,
        quick=True,
        # Above the index's 20k-node threshold, and at d = 384 large enough that the index beats the scan
        # 3× (at 25k × 64 every index is in exact fallback and the certified path would not run).
        ann=[(40_000, DIM)],
        ann_reps=10,
        ann_gauss=[(25_000, 64)],
        ann_aged=[(40_000, DIM)],
        turn_loop=(40_000, DIM),
        turns=40,
        background_s=60.0,
    )


@dataclass(frozen=True)
class RecallOverhead:
    """`Repo.recall` against the backend call it wraps, two ways.

    ``paired``: per-repetition difference recall − find_candidates on the real
    store (the two calls run back to back, so slow drift cancels). ``own``: the
    same difference with a backend whose find_candidates returns a fixed hit
    list, which removes the scan and its noise and leaves exactly what `Repo`
    adds (including its batched, fsynced access writes to the real store).
    """

    find_candidates: Stats
    recall: Stats
    paired: Stats
    own: Stats


class FixedHits:
    """Stands in for a backend: find_candidates answers with precomputed hits, everything else is the real store's."""

    def __init__(self, inner: LMDB, hits: list[tuple[hg.Node, float]]) -> None:
        self.inner = inner
        self.hits = hits

    def find_candidates(self, *args: object, **kwargs: object) -> list[tuple[hg.Node, float]]:
        return list(self.hits)

    def close(self) -> None:
        """The real store outlives this stand-in."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class SizeResult:
    n: int
    scan: dict[str, Stats]
    agreement: dict[str, str]
    recall_at_k: dict[str, float]
    lookup: dict[str, Stats]
    recall_overhead: RecallOverhead


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_size(n: int, plan: Plan, tmp: Path) -> SizeResult:
    log(f"N={size_label(n)}: building dataset and stores")
    ds = make_dataset(n)
    mem = build_memory(ds)
    lmdb = build_lmdb(ds, tmp / f"read-{n}", "sync")
    nps = NumpyScan(ds)
    q, tags, queries = ds.query, ds.tags, ds.queries
    types = [SCANNED]

    methods = [
        Method(HG_MEM, lambda: mem.find_candidates(types, q, tags, None, now=NOW, exact=True)),
        Method(HG_LMDB, lambda: lmdb.find_candidates(types, q, tags, None, now=NOW, exact=True)),
        Method(HG_MEM_ONE, lambda: mem.find_candidates(types, q, (), None, now=NOW, exact=True)),
        Method(HG_LMDB_ONE, lambda: lmdb.find_candidates(types, q, (), None, now=NOW, exact=True)),
        Method(NP_PATH, lambda: nps.top(queries)),
        Method(NP_FLOOR, lambda: nps.floor(q)),
    ]
    reps = plan.reps[n]
    every = max(1, reps // plan.slow_reps[n])
    agreement: dict[str, str] = {}
    want = [ds.ids[i] for i in nps.top(queries)]
    for name, store, exact in ((HG_MEM, mem, True), (HG_LMDB, lmdb, True)):
        agreement[name] = _agree(
            [node.id for node, _ in store.find_candidates(types, q, tags, None, now=NOW, exact=exact)], want
        )
    min_ann = ann_min_nodes()
    if min_ann is not None and n > min_ann:
        log(f"N={size_label(n)}: building the library's vector index (build_vector_index)")
        for name, store in ((HG_MEM_DEFAULT, mem), (HG_LMDB_DEFAULT, lmdb)):
            t0 = time.perf_counter()
            store.build_vector_index(types)
            built = time.perf_counter() - t0
            got = [node.id for node, _ in store.find_candidates(types, q, tags, None, now=NOW)]
            agreement[name] = _agree(got, want) + f"; index built in {built:.1f} s"
        methods += [
            Method(HG_MEM_DEFAULT, lambda: mem.find_candidates(types, q, tags, None, now=NOW)),
            Method(HG_LMDB_DEFAULT, lambda: lmdb.find_candidates(types, q, tags, None, now=NOW)),
        ]
    if n <= 10_000:
        ref = PythonReference(ds)
        qlists = queries.tolist()
        agreement[PY_REF] = _agree(ref.top(qlists), want)
        methods.append(Method(PY_REF, lambda: ref.top(qlists), every=every))
    log(f"N={size_label(n)}: loading LangGraph InMemoryStore and building hnswlib")
    recall: dict[str, float] = {}
    exact = exact_cosine_top(ds, q)
    lg = langgraph_memory_store(ds) if has_module("langgraph.store.memory") else None
    if lg is not None:
        methods.append(
            Method(LG_SEARCH, lambda: lg.search((SCANNED.value,), query=QUERY_KEY, limit=TOP_K), every=every)
        )
        found = lg.search((SCANNED.value,), query=QUERY_KEY, limit=TOP_K)
        recall[LG_SEARCH] = len({int(item.key.rsplit("-", 1)[1]) for item in found} & exact) / TOP_K
    index = hnsw_index(ds) if has_module("hnswlib") else None
    if index is not None:
        methods.append(Method(HNSW, lambda: index.knn_query(q, k=TOP_K, num_threads=1)))
        hits = []
        for rq in recall_queries(ds):
            labels, _ = index.knn_query(rq, k=TOP_K, num_threads=1)
            hits.append(len(set(labels[0].tolist()) & exact_cosine_top(ds, rq)) / TOP_K)
        recall[HNSW] = float(np.mean(hits))

    settle()
    log(f"N={size_label(n)}: scan, {reps} round-robin repetitions")
    scan = round_robin(methods, reps)
    log(f"N={size_label(n)}: query only, each store in its own block (a recall loop's steady state)")
    for name in (HG_MEM_ONE, HG_LMDB_ONE):
        own = next(m for m in methods if m.name == name)
        scan |= {name + OWN_BLOCK: round_robin([Method(name, own.fn)], reps)[name]}

    log(f"N={size_label(n)}: get_node")
    rng = np.random.default_rng(5)
    sample = [ds.ids[i] for i in rng.integers(0, n, plan.lookup_reps)]
    it_mem, it_lmdb = iter(sample * 2), iter(sample * 2)
    lookup = round_robin(
        [
            Method("get_node (InMemory)", lambda: mem.get_node(next(it_mem))),
            Method("get_node (LMDB)", lambda: lmdb.get_node(next(it_lmdb))),
        ],
        plan.lookup_reps - 1,
    )

    log(f"N={size_label(n)}: Repo.recall vs find_candidates (LMDB sync)")
    repo = hg.Repo(lmdb)
    fc_m = Method("LMDB find_candidates", lambda: lmdb.find_candidates(types, q, tags, None, exact=True))
    rc_m = Method("Repo.recall", lambda: repo.recall(q, tags, types, exact=True))
    round_robin([fc_m, rc_m], plan.recall_reps[n])
    stub = FixedHits(lmdb, lmdb.find_candidates(types, q, tags, None, exact=True))
    stub_repo = hg.Repo(stub)  # type: ignore[arg-type]
    sd_m = Method("fixed-hits find_candidates", lambda: stub.find_candidates(types, q, tags, None, exact=True))
    sr_m = Method("Repo.recall over fixed hits", lambda: stub_repo.recall(q, tags, types, exact=True))
    round_robin([sd_m, sr_m], plan.stub_reps)
    stub_repo.close()
    repo.close()
    overhead = RecallOverhead(
        find_candidates=Stats.of(fc_m.samples),
        recall=Stats.of(rc_m.samples),
        paired=Stats.of(np.subtract(rc_m.samples, fc_m.samples).tolist()),
        own=Stats.of(np.subtract(sr_m.samples, sd_m.samples).tolist()),
    )
    gc.unfreeze()
    gc.collect()
    return SizeResult(n, scan, agreement, recall, lookup, overhead)


def _agree(got: list[str], want: list[str]) -> str:
    if got == want:
        return f"identical top-{len(want)} (ids and order)"
    return f"{len(set(got) & set(want))}/{len(want)} ids shared, order {'same' if got == want else 'differs'}"


# -- approximate recall (vector index) ------------------------------------------------

ANN_QUERY_SETS = 50
RECALL_TARGET = 0.95
"""Every workload's mean recall@top_k against the exact path must reach this (`AnnConfig.target_recall`)."""
ESTIMATE_TOLERANCE = 0.03
"""How far a workload's mean recall may fall below the index's ``recall_estimate`` before the run fails."""
VARIED_SPEEDUP = 10.0
TURN_P50_RATIO = 1.5
TURN_P99_RATIO = 3.0

INDEX, HANDED, EXACT, UNKNOWN = "index", "handed over", "exact scan", "unknown"
"""Which path answered an ``exact=False`` query (see `AnswerProbe`)."""

F32 = npt.NDArray[np.float32]
Answer = Callable[[F32, bool], list[str]]


def answerer(store: LMDB | InMemory) -> Answer:
    """``answer(query set, exact)``: the ids `find_candidates` returns for the set's first vector plus its tags."""
    types = [SCANNED]

    def answer(q: F32, exact: bool) -> list[str]:
        return [node.id for node, _ in store.find_candidates(types, q[0], q[1:], None, now=NOW, exact=exact)]

    return answer


def index_stats(store: LMDB | InMemory) -> dict[str, Any]:
    """``vector_index_stats()`` of the scanned type ({} when the store reports none)."""
    return dict(store.vector_index_stats().get(SCANNED.value, {}))


def overlap(want: list[str], got: list[str]) -> float:
    return len(set(want) & set(got)) / max(1, len(want))


class AnswerProbe:
    """Tells which path answered each ``exact=False`` query, by wrapping `hippograph.engine.query.certified_scan`.

    ``scan`` calls ``certified_scan`` only when the type has a calibrated index that is not in exact fallback,
    and ``certified_scan`` returns None when it hands the query to the exact scan. Per query (between `start`
    and `outcome`, on the thread that made the probe): ``INDEX`` when the last call returned an answer,
    ``HANDED`` when it returned None, ``EXACT`` when there was no call (no index yet, below ``min_nodes``, or
    the index is in exact fallback). Calls made inside ``calibrate`` (its own sample queries, run by the first
    query on a new index) are not the query's and are ignored. ``UNKNOWN`` when the library no longer has
    these names.
    """

    def __init__(self) -> None:
        self.module: Any = importlib.import_module("hippograph.engine.query")
        self.works = all(callable(getattr(self.module, name, None)) for name in ("certified_scan", "calibrate"))
        self.owner = threading.get_ident()
        self.saved: dict[str, Any] = {}
        self.active = False
        self.calibrating = 0
        self.last: bool | None = None
        self.calibrated = False
        """The current query calibrated the index (the first query on an index built in the background)."""

    def __enter__(self) -> AnswerProbe:
        if not self.works:
            return self
        certified, calibrate = self.module.certified_scan, self.module.calibrate
        self.saved = {"certified_scan": certified, "calibrate": calibrate}

        def counted(*args: Any, **kwargs: Any) -> Any:
            got = certified(*args, **kwargs)
            if self.active and not self.calibrating and threading.get_ident() == self.owner:
                self.last = got is not None
            return got

        def measuring(*args: Any, **kwargs: Any) -> Any:
            mine = int(threading.get_ident() == self.owner)
            self.calibrated |= self.active and bool(mine)
            self.calibrating += mine
            try:
                return calibrate(*args, **kwargs)
            finally:
                self.calibrating -= mine

        self.module.certified_scan, self.module.calibrate = counted, measuring
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self.saved.items():
            setattr(self.module, name, fn)
        self.saved = {}

    def start(self) -> None:
        self.active, self.last, self.calibrated = True, None, False

    def outcome(self) -> str:
        self.active = False
        if not self.saved:
            return UNKNOWN
        return EXACT if self.last is None else INDEX if self.last else HANDED


def in_fallback(index: dict[str, Any]) -> bool:
    """No index, or one whose calibration found it not worth using: the exact scan answers every query."""
    return not index.get("available", False) or bool(index.get("exact_fallback", False))


def count_exact(outcomes: Sequence[str], index: dict[str, Any]) -> int | None:
    """How many queries the exact scan answered: per query from `AnswerProbe`; without it, all when the
    index is in exact fallback, else unknown (None)."""
    if UNKNOWN not in outcomes:
        return sum(o != INDEX for o in outcomes)
    return len(outcomes) if in_fallback(index) else None


def fallback_text(outcomes: Sequence[str], index: dict[str, Any]) -> str:
    count = count_exact(outcomes, index)
    if count is None:
        return "not counted"
    text = f"{count}/{len(outcomes)} ({count / max(1, len(outcomes)):.0%})"
    handed = sum(o == HANDED for o in outcomes)
    return text + (f"; {handed} handed over by the certified path" if handed else "")


def recall_problems(label: str, recall: Sequence[float], index: dict[str, Any]) -> list[str]:
    """Why this workload fails the run: mean recall below the target, or below what the stats promise."""
    if not recall:
        return []
    mean = float(np.mean(recall))
    out = []
    if mean < RECALL_TARGET:
        out.append(f"{label}: mean recall@{TOP_K} {mean:.3f} is below {RECALL_TARGET}")
    estimate = index.get("recall_estimate")
    if isinstance(estimate, (int, float)) and mean < estimate - ESTIMATE_TOLERANCE:
        out.append(
            f"{label}: mean recall@{TOP_K} {mean:.3f} is below the index's recall_estimate {estimate:.3f} "
            f"by more than {ESTIMATE_TOLERANCE}"
        )
    return out


@dataclass(frozen=True)
class Measured:
    """One kind of query on one store: each query set answered both ways, then each path timed on its own."""

    recall: list[float]
    identical: int
    outcomes: list[str]
    exact: Stats
    approx: Stats
    """Each path timed in its own block of repetitions, cycling over the query sets (caches hold what that
    path uses)."""


def cycling(answer: Answer, sets: list[F32], exact: bool) -> Callable[[], object]:
    """Each call answers the next query set."""
    it = iter(sets)
    return lambda: answer(next(it), exact)


def measure(answer: Answer, sets: list[F32], reps: int, probe: AnswerProbe) -> Measured:
    recall, outcomes, identical = [], [], 0
    for q in sets:
        want = answer(q, True)
        probe.start()
        got = answer(q, False)
        outcomes.append(probe.outcome())
        recall.append(overlap(want, got))
        identical += got == want
    settle()
    timed: dict[str, Stats] = {}
    for name, exact in (("exact", True), ("approx", False)):
        timed.update(round_robin([Method(name, cycling(answer, sets * (reps // len(sets) + 2), exact))], reps))
    gc.unfreeze()
    return Measured(recall, identical, outcomes, timed["exact"], timed["approx"])


@dataclass(frozen=True)
class Workload:
    """A data set and a kind of query against one store's ``exact=False`` path, index built beforehand."""

    data: str
    queries: str
    backend: str
    n: int
    dim: int
    build_s: float
    """`build_vector_index()`: the HNSW graph and its calibration."""
    m: Measured
    index: dict[str, Any]
    """``vector_index_stats()`` of the scanned type after the measurements."""

    @property
    def where(self) -> str:
        return f"{size_label(self.n)} × {self.dim}"

    @property
    def label(self) -> str:
        return f"{self.data} {self.where}, {self.queries}"

    @property
    def mean(self) -> float:
        return float(np.mean(self.m.recall))

    @property
    def speedup(self) -> float:
        return self.m.exact.median_us / self.m.approx.median_us


@dataclass(frozen=True)
class Turn:
    wrote: bool
    """This turn applied its changeset before querying (every other turn does)."""
    write_us: float
    query_us: float
    """The ``exact=False`` query's latency."""
    recall: float
    outcome: str
    ready: bool
    """The query found the index (in the background loop: its build had finished): it was available before
    the query, or the query calibrated it."""
    calibrated: bool
    """The query calibrated the index before answering."""


@dataclass(frozen=True)
class TurnLoop:
    mode: str
    n: int
    dim: int
    turns: list[Turn]
    index: dict[str, Any]
    ready_s: float | None
    """Background loop: seconds from the first ``exact=False`` query to the index's availability (None: never)."""
    limit_s: float

    @property
    def label(self) -> str:
        return f"turn loop ({self.mode}) {size_label(self.n)} × {self.dim}"

    def on_index(self, wrote: bool) -> list[Turn]:
        return [t for t in self.turns if t.ready and t.wrote == wrote]

    @property
    def building(self) -> list[Turn]:
        return [t for t in self.turns if not t.ready]


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_turns(
    store: LMDB, ds: Dataset, turns: int, probe: AnswerProbe, mode: str, *, tag: str, limit_s: float
) -> TurnLoop:
    """Agent turns: every other turn ingests a changeset of 8 nodes (`turn_inputs`) before its query; every
    turn asks one ``exact=False`` query (timed), then the same query exactly (for recall, not timed). Runs
    until ``turns`` turns have found the index available, or for ``limit_s`` seconds."""
    log(f"turn loop ({mode}) {size_label(ds.n)}×{ds.matrix.shape[1]}: {turns} turns on the index")
    feed = turn_inputs(ds, tag=tag)
    answer = answerer(store)
    out: list[Turn] = []
    start = time.perf_counter()
    ready_s: float | None = None
    settle()
    while sum(t.ready for t in out) < turns and time.perf_counter() - start < limit_s:
        available = bool(index_stats(store).get("available"))
        cs, q = next(feed)
        wrote = len(out) % 2 == 0
        write_ns = 0
        if wrote:
            t0 = time.perf_counter_ns()
            store.apply_changeset(cs)
            write_ns = time.perf_counter_ns() - t0
        probe.start()
        t0 = time.perf_counter_ns()
        got = answer(q, False)
        query_ns = time.perf_counter_ns() - t0
        outcome, calibrated = probe.outcome(), probe.calibrated
        ready = available or calibrated
        if ready and ready_s is None:
            ready_s = time.perf_counter() - start - query_ns / 1e9
        recall = overlap(answer(q, True), got)
        out.append(Turn(wrote, write_ns / 1e3, query_ns / 1e3, recall, outcome, ready, calibrated))
    gc.unfreeze()
    return TurnLoop(mode, ds.n, ds.matrix.shape[1], out, index_stats(store), ready_s, limit_s)


@dataclass(frozen=True)
class AnnResult:
    n: int
    dim: int
    build_s: float
    open_exact_s: float
    """Opening the store and answering one exact query: the derived scoring cache is rebuilt."""
    open_approx_s: float
    """Opening the store, one ``exact=False`` query (answered by the scan) and the saved index adopted in the
    background: when approximate answers start."""
    loaded: bool
    exact: Stats
    approx: Stats
    """Each path timed in its own block of repetitions (caches hold what that path uses)."""
    exact_mixed: Stats
    approx_mixed: Stats
    """The two paths interleaved: every approximate query follows a full exact scan, which evicts the CPU caches."""
    recall: list[float]
    identical: int


@dataclass
class AnnReport:
    results: list[AnnResult] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    loops: list[TurnLoop] = field(default_factory=list)
    probe_works: bool = True
    errors: list[str] = field(default_factory=list)
    """Runs that raised (what was measured before is kept)."""

    def problems(self) -> list[str]:
        out = list(self.errors)
        out += [p for w in self.workloads for p in recall_problems(w.label, w.m.recall, w.index)]
        for loop in self.loops:
            out += recall_problems(loop.label, [t.recall for t in loop.turns], loop.index)
        return out


def build_index(store: LMDB | InMemory, what: str) -> float:
    log(f"{what}: building the vector index (build_vector_index, then calibration)")
    t0 = time.perf_counter()
    store.build_vector_index([SCANNED])
    return time.perf_counter() - t0


def run_ann(n: int, dim: int, plan: Plan, tmp: Path, probe: AnswerProbe, report: AnnReport) -> None:
    """Clustered data on one LMDB store: approximate against exact recall (query + 4 tags, query only), the
    turn loop if the plan asks for it at this size; then the store is closed (index saved) and reopened twice,
    and reopened once more without its saved index for the background-build loop."""
    what = f"ANN clustered {size_label(n)}×{dim}"
    log(f"{what}: building dataset and LMDB store")
    ds = make_dataset(n, dim=dim)
    path = tmp / f"ann-{n}-{dim}"
    store = build_lmdb(ds, path, "fast")
    sets = query_sets(ds, ANN_QUERY_SETS)
    answer = answerer(store)
    build_s = build_index(store, what)
    log(f"{what}: recall and latency, query + 4 tags and query only")
    accustom(store, answer, sets, what, "query + 4 tags")
    tagged = measure(answer, sets, plan.ann_reps, probe)
    report.workloads.append(
        Workload("clustered", "query + 4 tags", "LMDB", n, dim, build_s, tagged, index_stats(store))
    )
    alone = measure(answer, query_only(sets), plan.ann_reps, probe)
    report.workloads.append(Workload("clustered", "query only", "LMDB", n, dim, build_s, alone, index_stats(store)))
    settle()
    log(f"{what}: interleaved latency, {plan.ann_reps} round-robin repetitions")
    cycle_exact, cycle_approx = iter(sets * (plan.ann_reps + 2)), iter(sets * (plan.ann_reps + 2))
    mixed = round_robin(
        [
            Method("exact", lambda: answer(next(cycle_exact), True)),
            Method("approx", lambda: answer(next(cycle_approx), False)),
        ],
        plan.ann_reps,
    )
    gc.unfreeze()
    loops = plan.turns > 0 and (n, dim) == plan.turn_loop
    if loops:
        report.loops.append(run_turns(store, ds, plan.turns, probe, "index built", tag="turn", limit_s=600.0))
    store.close()  # saves the index next to the store
    gc.collect()
    log(f"{what}: reopening")
    opened = []
    for exact in (True, False):
        t0 = time.perf_counter()
        b = LMDB(path, map_size=1 << 31)
        answerer(b)(sets[0], exact)  # exact=False: answered by the scan; the saved index loads in the background
        while not exact and not index_stats(b).get("available") and not index_stats(b).get("error"):
            time.sleep(0.005)
        opened.append(time.perf_counter() - t0)
        loaded = bool(index_stats(b).get("loaded"))
        b.close()
    report.results.append(
        AnnResult(
            n,
            dim,
            build_s,
            opened[0],
            opened[1],
            loaded,
            tagged.exact,
            tagged.approx,
            mixed["exact"],
            mixed["approx"],
            tagged.recall,
            tagged.identical,
        )
    )
    if loops and plan.background_s > 0:
        shutil.rmtree(path / "ann", ignore_errors=True)  # the saved index: without it the first query builds
        b = LMDB(path, durability="fast", map_size=1 << 31)
        answerer(b)(sets[0], True)  # the scoring cache is rebuilt before the loop, not inside its first turn
        report.loops.append(
            run_turns(b, ds, plan.turns, probe, "background build", tag="bg", limit_s=plan.background_s)
        )
        b.close()


def run_gauss(n: int, dim: int, plan: Plan, probe: AnswerProbe, report: AnnReport) -> None:
    """Unclustered Gaussian data in an InMemory store: i.i.d. Gaussian queries, and queries near stored vectors."""
    what = f"ANN Gaussian {size_label(n)}×{dim}"
    log(f"{what}: building dataset and InMemory store")
    ds = make_gaussian(n, dim=dim)
    store = build_memory(ds)
    build_s = build_index(store, what)
    answer = answerer(store)
    log(f"{what}: recall and latency, i.i.d. and near-stored queries")
    for kind, sets in (
        ("i.i.d. Gaussian queries", gaussian_queries(ds, ANN_QUERY_SETS)),
        ("queries near stored vectors", near_queries(ds, ANN_QUERY_SETS)),
    ):
        accustom(store, answer, sets, what, kind)
        m = measure(answer, sets, plan.ann_reps, probe)
        report.workloads.append(Workload("Gaussian", kind, "InMemory", n, dim, build_s, m, index_stats(store)))
    store.close()
    gc.collect()


ACCUSTOM_QUERIES = 128
"""Queries of a kind an index is asked before it is measured on them: an index that hands most of them
over to the exact scan is measured again on what is asked (``measuring`` in its stats meanwhile)."""


def accustom(store: LMDB | InMemory, answer: Answer, sets: list[F32], what: str, kind: str) -> None:
    """Asks `sets` the way an agent would, then waits for any measurement those queries asked for."""
    for i in range(ACCUSTOM_QUERIES):
        answer(sets[i % len(sets)], False)
    deadline = time.monotonic() + 900
    while index_stats(store).get("measuring") and time.monotonic() < deadline:
        time.sleep(0.05)
    index = index_stats(store)
    log(f"{what}: after {ACCUSTOM_QUERIES} {kind}, {'exact fallback' if in_fallback(index) else 'index used'}")


def run_aged(n: int, dim: int, plan: Plan, tmp: Path, probe: AnswerProbe, report: AnnReport) -> None:
    """Clustered data with aged usage metadata (`aged_metadata`) on an LMDB store."""
    what = f"ANN aged usage {size_label(n)}×{dim}"
    log(f"{what}: building dataset and LMDB store")
    ds = make_aged_dataset(n, dim=dim)
    store = build_lmdb(ds, tmp / f"aged-{n}-{dim}", "fast")
    build_s = build_index(store, what)
    answer = answerer(store)
    sets = query_sets(ds, ANN_QUERY_SETS)
    log(f"{what}: recall and latency, query + 4 tags and query only")
    for kind, chosen in (("query + 4 tags", sets), ("query only", query_only(sets))):
        accustom(store, answer, chosen, what, kind)
        m = measure(answer, chosen, plan.ann_reps, probe)
        report.workloads.append(Workload("clustered, aged usage", kind, "LMDB", n, dim, build_s, m, index_stats(store)))
    store.close()
    gc.collect()


def run_ann_all(plan: Plan, tmp: Path) -> AnnReport:
    """Every approximate-recall run of the plan; one that raises is reported (the report is still written, then
    the script fails) and the others go on."""
    report = AnnReport()

    def guarded(what: str, run: Callable[[], None]) -> None:
        try:
            run()
        except Exception as exc:
            log(f"{what} FAILED:\n{traceback.format_exc()}")
            report.errors.append(f"{what} raised {type(exc).__name__}: {exc}")
        finally:
            gc.unfreeze()

    with AnswerProbe() as probe:
        report.probe_works = probe.works
        for n, dim in plan.ann:
            guarded(f"clustered {size_label(n)} × {dim}", partial(run_ann, n, dim, plan, tmp, probe, report))
        for n, dim in plan.ann_gauss:
            guarded(f"Gaussian {size_label(n)} × {dim}", partial(run_gauss, n, dim, plan, probe, report))
        for n, dim in plan.ann_aged:
            guarded(f"aged usage {size_label(n)} × {dim}", partial(run_aged, n, dim, plan, tmp, probe, report))
    return report


def _estimate(index: dict[str, Any]) -> str:
    est, worst = index.get("recall_estimate"), index.get("recall_worst")
    if not isinstance(est, (int, float)):
        return "no calibration"
    return f"{est:.3f}" + (f" ({worst:.2f})" if isinstance(worst, (int, float)) else "")


def _delta(mean: float, index: dict[str, Any]) -> str:
    est = index.get("recall_estimate")
    return f"{mean - est:+.3f}" if isinstance(est, (int, float)) else ""


def _fallback_state(index: dict[str, Any]) -> str:
    if not index.get("available", False):
        return "no index" + (f" ({index['error']})" if index.get("error") else "")
    if index.get("exact_fallback"):
        return f"**yes**: {index.get('fallback_reason')}"
    return "no"


def _p(us: float) -> str:
    return "–" if math.isnan(us) else fmt_us(us)


def ann_section(ann: AnnReport) -> list[str]:
    L = [
        "## Approximate recall: `exact=False` with the HNSW vector index",
        "",
        "### Clustered data (LMDB): build, open, latency",
        "",
        "Same generator as above at other sizes and dimensions (the semantic type holds N nodes, plus N/10 of "
        f"other types), default `AnnConfig` (M = 16, ef_construction = 100, ef_search = 16 before calibration), "
        f"{ANN_QUERY_SETS} query sets (query + 4 tags near 5 random cluster centres), default value function, "
        f"`top_k` = {TOP_K}. Recall@{TOP_K} compares each `exact=False` answer with the `exact=True` answer for "
        "the same query set. Latencies are `find_candidates` medians cycling over the query sets on the "
        "single-threaded settings of the main tables (the core's index searches on one core, and builds on "
        "one thread too: `RAYON_NUM_THREADS=1`): each path in its own block of repetitions (the targets are judged on "
        "these), and the two interleaved, where every approximate query runs right after a full exact scan has "
        "evicted the CPU caches (the HNSW graph, the rows and LMDB's pages are then fetched from memory again). "
        "*Index build* is `build_vector_index()`: the HNSW graph, then the calibration that picks `ef_search`. "
        "*Open* times start from a closed store with a warm OS page cache: opening rebuilds the in-process "
        "scoring cache from the store; the first `exact=False` query is answered by the scan and starts adopting "
        "the saved index files (SHA-256 verified) in a background thread instead of building the graph; *index "
        "ready* is when approximate answers start.",
        "",
        f"| N × d | index build | open → first exact answer | open → index ready (saved index) "
        f"| exact p50 | `exact=False` p50 | speed-up | interleaved: exact / `exact=False` p50 "
        f"| recall@{TOP_K} mean (min) | identical top-{TOP_K} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in ann.results:
        saved = f"{r.open_approx_s:.1f} s" + ("" if r.loaded else " (**index rebuilt, not loaded**)")
        L.append(
            f"| {size_label(r.n)} × {r.dim} | {r.build_s:.1f} s | {r.open_exact_s:.1f} s | {saved} "
            f"| {fmt_us(r.exact.median_us)} | {fmt_us(r.approx.median_us)} "
            f"| {r.exact.median_us / r.approx.median_us:.1f}× "
            f"| {fmt_us(r.exact_mixed.median_us)} / {fmt_us(r.approx_mixed.median_us)} "
            f"({r.exact_mixed.median_us / r.approx_mixed.median_us:.1f}×) "
            f"| {np.mean(r.recall):.3f} ({min(r.recall):.2f}) "
            f"| {r.identical}/{len(r.recall)} |"
        )
    L += ["", *workload_table(ann), *loop_table(ann)]
    if ann.errors:
        L += ["### Runs that failed", "", *(f"- **{e}**" for e in ann.errors), ""]
    return L


def workload_table(ann: AnnReport) -> list[str]:
    counted = (
        "*Answered by the exact scan* counts the `exact=False` queries of the recall pass that the exact scan "
        "answered: every query while the index is in exact fallback (`vector_index_stats()` says "
        "`exact_fallback` and why), plus those the certified path handed over (`certified_scan` returned "
        "None). The benchmark tells them apart by wrapping `hippograph.engine.query.certified_scan` in its own "
        "process (calls made by `calibrate` are not counted)."
    )
    if not ann.probe_works:
        counted += " **This build has no such function: only exact-fallback indexes are counted.**"
    L = [
        "### Workloads",
        "",
        f"Each workload: a store built from its data, `build_vector_index()` with default settings (the time "
        f"includes its calibration), {ANN_QUERY_SETS} queries answered with `exact=True` and `exact=False` "
        f"(recall@{TOP_K} of the latter against the former: mean and worst query), then each path timed on its "
        "own cycling over the queries (p50 and p95). Speed-up = exact p50 / `exact=False` p50. The index's "
        "calibration estimates (`recall_estimate`, worst sample query in brackets; `speedup_estimate`; "
        "`ef_search`) come from `vector_index_stats()` after the run; they are measured with the default "
        "value function on up to 100 sample queries of each kind (near stored vectors, spread like the data, "
        "the latest real queries), queries with nothing indexed close enough going to the exact scan "
        "(docs/architecture.md, calibrated recall). The run fails if a workload's mean recall is below "
        f"{RECALL_TARGET} or more than {ESTIMATE_TOLERANCE} below `recall_estimate`.",
        "",
        "- *clustered*: the generator above (64 centres, spread 0.6) on LMDB; *query + 4 tags* are the query "
        "sets of the table above, *query only* their first vector alone.",
        "- *Gaussian*: i.i.d. standard normal vectors (no clusters; the same usage metadata generator) on "
        "InMemory, to save build time; *i.i.d. Gaussian queries* are standard normal too (no stored vector is "
        "near them), *queries near stored vectors* are a random stored vector at unit length moved by 0.2 in a "
        "random direction, as the calibration draws its own.",
        f"- *clustered, aged usage*: the clustered vectors with usage as a real memory ages, on LMDB: each node "
        f"last accessed (or, never accessed, created) at a time spread uniformly over the {AGED_HOURS:.0f} hours "
        f"before `now`, 0–{AGED_MAX_ACCESS} accesses, no rewards.",
        f"- Before each kind of query is measured, the store is asked {ACCUSTOM_QUERIES} of them as an agent "
        "would ask them, and the new measurement they ask for (an index measured before any query was asked is "
        "measured again on the first 64; one that hands most queries over, again on those) is awaited: each row "
        "shows the index as those queries left it.",
        f"- {counted}",
        "",
        f"| workload | store | recall@{TOP_K} mean (worst) | `recall_estimate` (worst) | measured − estimate "
        "| exact p50 / p95 | `exact=False` p50 / p95 | speed-up | `speedup_estimate` | answered by the exact "
        "scan | `ef_search` | exact fallback | index build |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    for w in ann.workloads:
        m, ix = w.m, w.index
        speed = ix.get("speedup_estimate")
        L.append(
            f"| {w.label} | {w.backend} | {w.mean:.3f} ({min(m.recall):.2f}) | {_estimate(ix)} "
            f"| {_delta(w.mean, ix)} | {fmt_us(m.exact.median_us)} / {fmt_us(m.exact.p95_us)} "
            f"| {fmt_us(m.approx.median_us)} / {fmt_us(m.approx.p95_us)} | {w.speedup:.1f}× "
            f"| {'' if speed is None else f'{speed}×'} | {fallback_text(m.outcomes, ix)} "
            f"| {ix.get('ef_search', '')} | {_fallback_state(ix)} | {w.build_s:.1f} s |"
        )
    L.append("")
    return L


def loop_table(ann: AnnReport) -> list[str]:
    if not ann.loops:
        return []
    L = [
        "### Turn loop: a write, then a query",
        "",
        "An agent's turn on the clustered LMDB store (`durability='fast'`): `apply_changeset` of 8 new semantic "
        "nodes with embeddings and fresh metadata (4 on the topic of the query that follows, spread 0.3 around "
        "its first centre; 4 ordinary data points), then one `exact=False` query (query + 4 tags, timed), then "
        "the same query with `exact=True` for its recall (not timed). Turns alternate: every other turn writes "
        "nothing before its query, so the two kinds of query see the same store size, the same cache state "
        "(each follows an exact scan) and the same machine noise. Targets: p50 of a query after a write within "
        f"{TURN_P50_RATIO}× of the p50 without one, p99 after a write within {TURN_P99_RATIO}× of its p50.",
        "",
        "- *index built*: the store of the table above, `build_vector_index()` done.",
        "- *background build*: that store closed, its saved index files deleted and reopened, one exact query "
        "(the scoring cache is rebuilt), then the loop: its first `exact=False` query answers exactly and starts "
        "the background build; turns go on while it runs (answered by the exact scan, their writes replayed "
        "into the new graph); once the index is published its upkeep thread calibrates it, off the query "
        "path, while queries are still answered by the exact scan. The columns after a write / without one "
        "count only turns that found the index available.",
        "",
        "| loop | turns on the index (with a write) | write p50 | after a write: p50 / p99 / max "
        f"| without a write: p50 / p99 | after / without (p50) | after a write: p99 / p50 | recall@{TOP_K} "
        "mean (worst): after a write / without | answered by the exact scan | `recall_estimate` |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for loop in ann.loops:
        after, without = loop.on_index(True), loop.on_index(False)
        a = [t.query_us for t in after]
        b = [t.query_us for t in without]
        ready = after + without
        writes = [t.write_us for t in loop.turns if t.wrote]
        L.append(
            f"| {loop.label} | {len(ready)} ({len(after)}) | {_p(_pct(writes, 50))} "
            f"| {_p(_pct(a, 50))} / {_p(_pct(a, 99))} / {_p(max(a, default=math.nan))} "
            f"| {_p(_pct(b, 50))} / {_p(_pct(b, 99))} | {_pct(a, 50) / _pct(b, 50):.2f}× "
            f"| {_pct(a, 99) / _pct(a, 50):.2f}× "
            f"| {_recall(after)} / {_recall(without)} "
            f"| {fallback_text([t.outcome for t in ready], loop.index)} | {_estimate(loop.index)} |"
        )
    L.append("")
    for loop in ann.loops:
        if loop.mode != "background build":
            continue
        built = loop.building
        q = [t.query_us for t in built]
        first = next((t for t in loop.turns if t.calibrated), None)
        state = (
            f"the index was ready {loop.ready_s:.1f} s after the first `exact=False` query"
            + (" (**loaded from saved files, not built**)" if loop.index.get("loaded") else ", built in the background")
            if loop.ready_s is not None
            else f"**the index was not ready after {loop.limit_s:.0f} s**"
        )
        L.append(
            f"{loop.label}: {state}; {len(built)} turns ran while it was built (query p50 {_p(_pct(q, 50))}, "
            f"p99 {_p(_pct(q, 99))}, recall@{TOP_K} mean {_recall(built)}, answered by the exact scan "
            f"{fallback_text([t.outcome for t in built], {})}); "
            + (
                "no query waited for its calibration (the upkeep thread ran it)."
                if first is None
                else f"a query calibrated it ({'after a write' if first.wrote else 'without a write'}) and "
                f"took {_p(first.query_us)}."
            )
        )
        L.append("")
    return L


def _recall(turns: Sequence[Turn]) -> str:
    if not turns:
        return "–"
    return f"{np.mean([t.recall for t in turns]):.3f} ({min(t.recall for t in turns):.2f})"


def ann_targets(ann: AnnReport) -> list[Target]:
    by = {(r.n, r.dim): r for r in ann.results}
    out = []
    for (n, dim), speed in (((100_000, DIM), 10.0), ((1_000_000, 128), None)):
        r = by.get((n, dim))
        where = f"{size_label(n)} × {dim}"
        if r is None:
            out.append(Target(f"`exact=False` latency target at {where} (clustered)", "not run in this mode", None))
            continue
        ratio = r.exact.median_us / r.approx.median_us
        if speed is not None:
            out.append(
                Target(
                    f"`exact=False` p50 ≥ {speed:.0f}× lower than exact at {where} (clustered, query + 4 tags)",
                    f"{ratio:.1f}× ({fmt_us(r.approx.median_us)} vs {fmt_us(r.exact.median_us)})",
                    ratio >= speed,
                )
            )
        else:
            out.append(
                Target(
                    f"`exact=False` p50 < 2 ms at {where} (clustered, query + 4 tags)",
                    f"{fmt_us(r.approx.median_us)} ({ratio:.0f}× below exact)",
                    r.approx.median_us < 2000,
                )
            )
    for w in ann.workloads:
        out.append(
            Target(
                f"recall@{TOP_K} mean ≥ {RECALL_TARGET}: {w.label}",
                f"{w.mean:.3f} (worst query {min(w.m.recall):.2f}); exact scan answered "
                f"{fallback_text(w.m.outcomes, w.index)}",
                w.mean >= RECALL_TARGET,
            )
        )
        out.append(estimate_target(w.label, w.mean, w.index))
    aged = [w for w in ann.workloads if w.data == "clustered, aged usage" and (w.n, w.dim) == (100_000, DIM)]
    for w in aged:
        out.append(
            Target(
                f"`exact=False` p50 ≥ {VARIED_SPEEDUP:.0f}× lower than exact with recall@{TOP_K} ≥ "
                f"{RECALL_TARGET}: {w.label}",
                f"{w.speedup:.1f}× ({fmt_us(w.m.approx.median_us)} vs {fmt_us(w.m.exact.median_us)}), "
                f"recall {w.mean:.3f}",
                w.speedup >= VARIED_SPEEDUP and w.mean >= RECALL_TARGET,
            )
        )
    if not aged:
        out.append(
            Target(f"aged usage at 100k × {DIM}: speed-up ≥ {VARIED_SPEEDUP:.0f}×", "not run in this mode", None)
        )
    for loop in ann.loops:
        a = [t.query_us for t in loop.on_index(True)]
        b = [t.query_us for t in loop.on_index(False)]
        p50, p99, base = _pct(a, 50), _pct(a, 99), _pct(b, 50)
        measured = bool(a and b)
        out.append(
            Target(
                f"{loop.label}: p50 after a write ≤ {TURN_P50_RATIO}× p50 without one",
                f"{p50 / base:.2f}× ({_p(p50)} vs {_p(base)})" if measured else "no turn found the index",
                p50 <= TURN_P50_RATIO * base if measured else None,
            )
        )
        out.append(
            Target(
                f"{loop.label}: p99 after a write ≤ {TURN_P99_RATIO}× its p50",
                f"{p99 / p50:.2f}× ({_p(p99)} vs {_p(p50)})" if measured else "no turn found the index",
                p99 <= TURN_P99_RATIO * p50 if measured else None,
            )
        )
        recall = [t.recall for t in loop.turns]
        mean = float(np.mean(recall)) if recall else 1.0
        out.append(
            Target(
                f"recall@{TOP_K} mean ≥ {RECALL_TARGET}: {loop.label}",
                f"{mean:.3f} over {len(recall)} turns (worst {min(recall, default=1.0):.2f})",
                mean >= RECALL_TARGET,
            )
        )
        out.append(estimate_target(loop.label, mean, loop.index))
    return out


def estimate_target(label: str, mean: float, index: dict[str, Any]) -> Target:
    name = f"measured recall not below `recall_estimate` − {ESTIMATE_TOLERANCE}: {label}"
    est = index.get("recall_estimate")
    if not isinstance(est, (int, float)):
        return Target(name, "no calibration: " + _fallback_state(index), None)
    note = "; index in exact fallback, every answer exact" if in_fallback(index) else ""
    return Target(
        name,
        f"{mean:.3f} vs {est:.3f} (Δ {mean - est:+.3f}"
        + (", above the estimate by more than the tolerance" if mean - est > ESTIMATE_TOLERANCE else "")
        + f"){note}",
        mean >= est - ESTIMATE_TOLERANCE,
    )


# -- multi-threaded section (subprocess) ---------------------------------------------


def _mt_size(n: int, reps: int, tmp: Path) -> dict[str, Stats]:
    ds = make_dataset(n)
    mem = build_memory(ds)
    lmdb = build_lmdb(ds, tmp / f"mt-{n}", "sync")
    nps = NumpyScan(ds)
    settle()

    def hg(store: InMemory | LMDB) -> Callable[[], object]:
        return lambda: store.find_candidates([SCANNED], ds.query, ds.tags, None, now=NOW, exact=True)

    try:
        # hippograph on its own first: OpenBLAS's worker threads keep spinning for a while after each numpy
        # call, and in the interleaved run below they compete with rayon for the same vCPUs.
        alone = round_robin([Method(HG_MEM + ALONE, hg(mem)), Method(HG_LMDB + ALONE, hg(lmdb))], reps)
        mixed = round_robin(
            [
                Method(HG_MEM, hg(mem)),
                Method(HG_LMDB, hg(lmdb)),
                Method(NP_PATH, lambda: nps.top(ds.queries)),
                Method(NP_FLOOR, lambda: nps.floor(ds.query)),
            ],
            reps,
        )
        return alone | mixed
    finally:
        lmdb.close()
        gc.unfreeze()


def mt_worker(sizes: list[int], reps: dict[int, int]) -> None:
    """Runs in a child with the libraries' default thread counts; prints JSON stats."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="hippograph-mt-") as tmp:
        for n in sizes:
            out[str(n)] = {name: s.as_dict() for name, s in _mt_size(n, reps[n], Path(tmp)).items()}
    print(json.dumps(out))


def run_mt(plan: Plan) -> dict[int, dict[str, Stats]]:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mt-worker", "--sizes", ",".join(map(str, plan.sizes))]
    if plan.quick:
        cmd.append("--quick")
    log("multi-threaded section (subprocess, default thread counts)")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    raw = json.loads(done.stdout)
    return {
        int(n): {
            name: Stats(s["median_us"], s["p95_us"], s["mean_us"], int(s["count"]), s["min_us"])
            for name, s in by.items()
        }
        for n, by in raw.items()
    }


# -- writes --------------------------------------------------------------------------


class LangGraphSqlite:
    """LangGraph's SqliteStore as its own ``from_conn_string`` opens it (autocommit connection,
    SQLite's default rollback journal and ``synchronous=FULL``; langgraph sets no pragmas).

    No vector index: LangGraph's sqlite index needs the sqlite-vec extension,
    which this interpreter's sqlite3 module cannot load, so the embedding is
    stored in the item's JSON value. One item per node (fields, embedding,
    metadata and links), one item for the ingestion record. ``batch`` writes
    them in one transaction; ``put`` (the documented one-item API) in one
    transaction each. LangGraph's put is an upsert: no compare-and-set.
    """

    def __init__(self, path: Path) -> None:
        from langgraph.store.sqlite import SqliteStore

        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.store = SqliteStore(self.conn)
        self.store.setup()

    def _items(self, ing: Ingestion) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
        rec, cs = ing.record, ing.changeset
        links: dict[str, list[list[str]]] = {}
        for a, b, edge in cs.links:
            links.setdefault(a, []).append([b, str(edge)])
            links.setdefault(b, []).append([a, str(edge)])
        items: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
            (
                ("nodes", node.node_type.value),
                node.id,
                {
                    "fields": node.fields_dict(),
                    "embedding": None if node.embedding is None else node.embedding.tolist(),
                    "created_at": node.created_at.isoformat(),
                    "metadata": json.loads(meta_json(cs.metadata.get(node.id)) or "null"),
                    "links": links.get(node.id, []),
                },
            )
            for node in cs.additions
        ]
        receipt = {
            "digest": rec.payload_digest.hex(),
            "version": rec.fingerprint_version,
            "node_ids": list(rec.receipt.node_ids),
            "stored_at": rec.receipt.stored_at.isoformat(),
        }
        items.append((("ingestions",), rec.source_id, receipt))
        return items

    def commit_batch(self, ing: Ingestion) -> None:
        from langgraph.store.base import PutOp

        self.store.batch([PutOp(ns, key, value, index=False) for ns, key, value in self._items(ing)])

    def commit_puts(self, ing: Ingestion) -> None:
        for ns, key, value in self._items(ing):
            self.store.put(ns, key, value, index=False)

    def close(self) -> None:
        self.conn.close()


W_LMDB_SYNC = "hippograph commit_ingestion (LMDB, sync)"
W_LMDB_FAST = "hippograph commit_ingestion (LMDB, fast)"
W_MEM = "hippograph commit_ingestion (InMemory)"
W_LG_BATCH = "LangGraph SqliteStore.batch (1 txn)"
W_LG_PUT = "LangGraph SqliteStore.put ×10 (10 txns)"
W_SQL_FULL = "sqlite3 WAL synchronous=FULL"
W_SQL_NORMAL = "sqlite3 WAL synchronous=NORMAL"
WRITE_ORDER = (W_LMDB_SYNC, W_LMDB_FAST, W_MEM, W_SQL_FULL, W_SQL_NORMAL, W_LG_BATCH, W_LG_PUT)
FSYNCS = {W_LMDB_SYNC, W_SQL_FULL, W_LG_BATCH, W_LG_PUT}


def run_writes(plan: Plan, tmp: Path) -> dict[str, Stats]:
    log(f"writes: {plan.write_reps} round-robin repetitions")
    root = tmp / "writes"
    root.mkdir()
    pool = vector_pool()
    lmdb_sync = LMDB(root / "lmdb-sync", durability="sync")
    lmdb_fast = LMDB(root / "lmdb-fast", durability="fast")
    mem = InMemory()
    with_lg = has_module("langgraph.store.sqlite")
    lg = LangGraphSqlite(root / "langgraph.sqlite") if with_lg else None
    lg_put = LangGraphSqlite(root / "langgraph-put.sqlite") if with_lg else None
    sql_full = SqliteWriter(root / "full.sqlite", "FULL")
    sql_normal = SqliteWriter(root / "normal.sqlite", "NORMAL")
    total = plan.write_reps + 1
    # Inputs are built up front: the figure is the store's cost, not building Node objects.
    feeds = {
        name: iter([make_ingestion(name.split()[0][:4] + str(i), j, pool) for j in range(total)])
        for i, name in enumerate([W_LMDB_SYNC, W_LMDB_FAST, W_MEM, W_LG_BATCH, W_LG_PUT, W_SQL_FULL, W_SQL_NORMAL])
    }

    def hg_commit(store: InMemory | LMDB, name: str) -> Callable[[], object]:
        return lambda: store.commit_ingestion(*_unpack(next(feeds[name])))

    # Two groups, each interleaved on its own: an fsync from a durable store stalls the file system for
    # everyone, so mixing them would charge the no-fsync stores for their neighbours' flushes.
    durable = [
        Method(W_LMDB_SYNC, hg_commit(lmdb_sync, W_LMDB_SYNC)),
        Method(W_SQL_FULL, lambda: sql_full.commit(next(feeds[W_SQL_FULL]))),
    ]
    if lg is not None and lg_put is not None:
        durable += [
            Method(W_LG_BATCH, lambda: lg.commit_batch(next(feeds[W_LG_BATCH]))),
            Method(W_LG_PUT, lambda: lg_put.commit_puts(next(feeds[W_LG_PUT]))),
        ]
    no_fsync = [
        Method(W_LMDB_FAST, hg_commit(lmdb_fast, W_LMDB_FAST)),
        Method(W_SQL_NORMAL, lambda: sql_normal.commit(next(feeds[W_SQL_NORMAL]))),
        Method(W_MEM, hg_commit(mem, W_MEM)),
    ]
    settle()
    measured = round_robin(no_fsync, plan.write_reps) | round_robin(durable, plan.write_reps)
    stats = {name: measured[name] for name in WRITE_ORDER if name in measured}
    stored = lmdb_sync.stats()
    assert stored["ingestion_records"] == total, stored
    for closable in (lmdb_sync, lmdb_fast, mem, lg, lg_put, sql_full, sql_normal):
        if closable is not None:
            closable.close()
    gc.unfreeze()
    return stats


def _unpack(ing: Ingestion) -> tuple[hg.IngestionRecord, hg.Changeset]:
    return ing.record, ing.changeset


# -- report --------------------------------------------------------------------------

REPRODUCE = (
    "## Reproduce",
    "",
    "- Bench dependencies: `pip install -e '.[bench]' langgraph-checkpoint-sqlite` "
    "(LangGraph's `SqliteStore` ships separately from `langgraph`).",
    "- This comparison: `python benches/compare.py` (about a quarter of an hour; `--quick` runs 1k and 10k and "
    "small approximate-recall stores in a few minutes and writes `benches/RESULTS-quick.md`, or wherever `--out` "
    "points, with the plot next to it). It exits non-zero after writing the report when an approximate-recall "
    "workload misses its recall target.",
    '- The pytest-benchmark suites (not collected by the test run, which uses `testpaths = ["tests"]`): '
    "`python -m pytest benches -p no:cacheprovider --benchmark-only` (add `--bench-max-n 10000` to skip the "
    "100k stores).",
)


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def machine() -> dict[str, str]:
    cpu = "?"
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "?":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except OSError:
        mem_kb = 0
    lscpu = {}
    for line in _sh(["lscpu"]).splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            lscpu[key.strip()] = value.strip()
    blas = "?"
    try:
        cfg = np.show_config(mode="dicts")
        lib = cfg["Build Dependencies"]["blas"]
        blas = f"{lib.get('name', '?')} {lib.get('version', '')}".strip()
    except Exception:
        pass
    versions = {}
    for dist in ("hippograph", "numpy", "lmdb", "langgraph", "langgraph-checkpoint-sqlite", "hnswlib", "matplotlib"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return {
        "cpu": cpu,
        "cpus": lscpu.get("CPU(s)", str(os.cpu_count())),
        "caches": ", ".join(f"{k} {lscpu[k]}" for k in ("L1d cache", "L2 cache", "L3 cache") if k in lscpu),
        "hypervisor": lscpu.get("Hypervisor vendor", "none"),
        "simd": ", ".join(f for f in ("avx2", "fma", "avx512f") if f in flags) or "none",
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "os": platform.platform(),
        "python": platform.python_version(),
        "blas": blas,
        "sqlite": sqlite3.sqlite_version,
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
        "git": _sh(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"])
        + (" (+ uncommitted changes)" if _sh(["git", "-C", str(HERE.parent), "status", "--porcelain"]) else ""),
    }


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 100 else f"{x:,.0f}×"


@dataclass
class Target:
    name: str
    measured: str
    met: bool | None
    """None: not measured in this run."""
    note: str = ""


def evaluate(results: list[SizeResult], writes: dict[str, Stats], quick: bool, ann: AnnReport) -> list[Target]:
    by_n = {r.n: r for r in results}
    big = max(by_n)
    at = f" (at {size_label(big)}{'; quick mode, the target is stated for 100k' if big != 100_000 else ''})"
    r = by_n[big]
    out: list[Target] = []
    mem, floor, path = r.scan[HG_MEM].median_us, r.scan[NP_FLOOR].median_us, r.scan[NP_PATH].median_us
    best = r.scan[HG_MEM].min_us
    out.append(
        Target(
            "exact hippograph ≤ 1.25× the bandwidth floor" + at,
            f"{mem / floor:.3f}× floor (fastest runs: {best / r.scan[NP_FLOOR].min_us:.3f}×)",
            mem / floor <= 1.25,
        )
    )
    out.append(
        Target(
            "exact hippograph ≤ 0.5× the numpy path" + at,
            f"{mem / path:.3f}× numpy path (fastest runs: {best / r.scan[NP_PATH].min_us:.3f}×)",
            mem / path <= 0.5,
        )
    )
    if 10_000 in by_n and PY_REF in by_n[10_000].scan:
        s = by_n[10_000].scan
        speedup = s[PY_REF].median_us / s[HG_MEM].median_us
        out.append(Target("≥ 50× faster than pure Python at 10k", f"{speedup:,.0f}× faster", speedup >= 50))
    if all(LG_SEARCH in x.scan for x in by_n.values()):
        worst = min(by_n[n].scan[LG_SEARCH].median_us / by_n[n].scan[HG_MEM].median_us for n in by_n)
        slower_lmdb = min(by_n[n].scan[LG_SEARCH].median_us / by_n[n].scan[HG_LMDB].median_us for n in by_n)
        out.append(
            Target(
                "faster than LangGraph InMemoryStore.search at every N",
                f"smallest speed-up {worst:,.1f}× (InMemory), {slower_lmdb:,.1f}× (LMDB)",
                worst > 1 and slower_lmdb > 1,
            )
        )
    else:
        out.append(Target("faster than LangGraph InMemoryStore.search at every N", "langgraph not installed", None))
    fast, normal = writes[W_LMDB_FAST].mean_us, writes[W_SQL_NORMAL].mean_us
    out.append(
        Target(
            "LMDB fast commit throughput ≥ 2× SQLite synchronous=NORMAL",
            f"{normal / fast:.2f}× the throughput ({1e6 / fast:,.0f} vs {1e6 / normal:,.0f} ingestions/s); "
            f"by median latency {writes[W_SQL_NORMAL].median_us / writes[W_LMDB_FAST].median_us:.2f}× "
            f"({fmt_us(writes[W_LMDB_FAST].median_us)} vs {fmt_us(writes[W_SQL_NORMAL].median_us)})",
            normal / fast >= 2,
        )
    )
    lm = r.scan[HG_LMDB].median_us
    out.append(
        Target(
            "LMDB warm find_candidates within 1.2× of InMemory" + at,
            f"{lm / mem:.3f}× (fastest runs: {r.scan[HG_LMDB].min_us / best:.3f}×)",
            lm / mem <= 1.2,
        )
    )
    if 1_000 in by_n and HG_MEM_ONE in by_n[1_000].scan:
        one = by_n[1_000].scan
        for name, label, most in ((HG_MEM_ONE, "InMemory", 80.0), (HG_LMDB_ONE, "LMDB warm", 120.0)):
            got = one[name + OWN_BLOCK].median_us
            out.append(
                Target(
                    f"exact find_candidates at 1k × {DIM}, query only, top {TOP_K} hydrated: {label} ≤ {most:.0f} µs "
                    "(own block)",
                    f"{fmt_us(got)} (fastest runs: {fmt_us(one[name + OWN_BLOCK].min_us)}; interleaved with the "
                    f"other methods {fmt_us(one[name].median_us)})",
                    got <= most,
                )
            )
    if 10_000 in by_n and HG_MEM_ONE in by_n[10_000].scan:
        ten = by_n[10_000].scan
        ratio = ten[HG_MEM_ONE].median_us / ten[NP_FLOOR].median_us
        out.append(
            Target(
                "exact find_candidates at 10k, query only: ≤ 1.3× the one-vector bandwidth floor",
                f"{ratio:.2f}× (fastest runs: {ten[HG_MEM_ONE].min_us / ten[NP_FLOOR].min_us:.2f}×)",
                ratio <= 1.3,
            )
        )
    own = {n: x.recall_overhead.own.median_us for n, x in by_n.items()}
    paired = {n: x.recall_overhead.paired.median_us for n, x in by_n.items()}
    out.append(
        Target(
            "Repo.recall adds ≤ 50 µs over find_candidates (median)",
            "Repo's own cost (fixed-hit backend): "
            + ", ".join(f"{d:+.0f} µs at {size_label(n)}" for n, d in own.items())
            + "; paired difference on the real store (noisier): "
            + ", ".join(f"{d:+.0f} µs at {size_label(n)}" for n, d in paired.items()),
            max(own.values()) <= 50,
        )
    )
    return out + ann_targets(ann)


def write_report(
    out: Path,
    plot: Path,
    plan: Plan,
    results: list[SizeResult],
    mt: dict[int, dict[str, Stats]],
    writes: dict[str, Stats],
    ann: AnnReport,
    info: dict[str, str],
    loads: tuple[str, str],
    command: str,
    elapsed: float,
) -> None:
    L: list[str] = []
    add = L.append
    add("# hippograph benchmark results" + (" (quick mode)" if plan.quick else ""))
    add("")
    add(f"Generated by `{command}` on {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} in {elapsed:.0f} s.")
    if plan.quick:
        add("")
        add("**Quick mode**: fewer sizes and repetitions; it proves the script works, the figures are indicative only.")
    add("")
    for line in REPRODUCE:
        add(line)
    add("")
    add("## Machine")
    add("")
    add(
        f"- CPU: {info['cpu']}, {info['cpus']} vCPUs ({info['hypervisor']} guest), "
        f"SIMD: {info['simd']}; {info['caches']}"
    )
    add(f"- Memory: {info['memory']}; OS: {info['os']}")
    add(f"- Python {info['python']}; BLAS: {info['blas']}; SQLite {info['sqlite']}")
    add(f"- Packages: {info['versions']}; hippograph git {info['git']}")
    add(
        f"- **The machine was shared** with other work (load average {loads[0]} at start, {loads[1]} at the end); "
        "methods are interleaved round-robin so disturbances hit all of them, but absolute figures carry that noise."
    )
    add(
        "- Threads: the main tables run with `OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=MKL_NUM_THREADS="
        "RAYON_NUM_THREADS=1` set before numpy/hippograph are imported; the multi-threaded section runs in a "
        "subprocess without them (rayon and OpenBLAS use all vCPUs)."
    )
    add("")
    add("## What is measured")
    add("")
    add(
        f"Synthetic data, fixed seed: {len(plan.sizes)} sizes N ∈ {{{', '.join(size_label(n) for n in plan.sizes)}}}, "
        f"d = {DIM}, float32 vectors around {64} cluster centres. The scanned type (semantic) holds N nodes, every "
        "one with usage metadata (age, accesses, rewards); the store also holds N/10 nodes spread over the six other "
        "types, which hippograph must skip. Baselines receive only the N scanned vectors, so every method scans N "
        f"vectors. A query plus 4 tag vectors; `top_k` = {TOP_K} (the semantic default), threshold 0, default "
        "value function, a fixed `now`."
    )
    add("")
    add(
        "- **hippograph**: `backend.find_candidates([semantic], query, tags, None, now=NOW, exact=True)`: the exact "
        "scan, returning hydrated `Node` objects. LMDB is warm (its derived scoring cache is current; the first call "
        "after opening a 100k store rebuilds it, which takes seconds)."
    )
    min_ann = ann_min_nodes()
    if min_ann is not None:
        add(
            f"- **hippograph, `exact=False`** (the default argument): above {min_ann:,} nodes of a type this build "
            "answers from its HNSW vector index (candidates rescored exactly until the ranking is certified). Those "
            "rows appear only at sizes above that threshold; below it `exact=False` is the exact scan. The index is "
            "built with `build_vector_index()` before timing (time shown, not included in the latency); without "
            "that call the first such query answers exactly and starts the build in a background thread."
        )
    add(
        "- **numpy path**: the same query in numpy: `M @ Qn.T` for the 5 unit vectors (one float32 GEMM), row norms "
        "precomputed as hippograph caches them, max/clip, the value function over the metadata columns, "
        "`argpartition` + `lexsort` for the top-k. Returns row indices only (no objects). Its top-k is the reference "
        "the others are checked against."
    )
    add("- **numpy floor**: `M @ q` for one vector: reading the matrix once, the bandwidth floor of any exact scan.")
    add(
        "- **pure Python**: the reference algorithm in plain Python (per-node cosine over lists, per-node value "
        "function with `math`, sort). Run at 1k and 10k only: at 100k one call would take about a minute."
    )
    add(
        "- **LangGraph `InMemoryStore.search`**: `index={'dims': 384, 'embed': f, 'fields': ['text']}` where `f` is "
        "a deterministic lookup (text key → our precomputed vector as `list[float]`): LangGraph cannot take "
        "precomputed vectors through `put`. It ranks by cosine to the query alone (no tags, no value function), so "
        "it does less work than hippograph; its per-search cost includes converting the stored lists to an array "
        "and a thread pool for query embedding, as shipped."
    )
    add(
        "- **hnswlib**: `knn_query(q, k=20)` on an HNSW index (cosine, M=16, ef_construction=100, ef=50), one "
        "thread, build time excluded; approximate, query vector only. Recall@20 is against the exact cosine top-20, "
        "averaged over 50 queries."
    )
    add(
        "- Timings are wall-clock `perf_counter_ns` per call; **median** and **p95** over the repetitions shown. "
        "Ratios: `× floor` and `× numpy path` divide a method's median by theirs (lower is better); "
        "`× floor (min)` divides the fastest repetitions, a cross-check that is less sensitive to the "
        "other work on the machine."
    )
    add("")
    add("## Scan latency, single-threaded")
    add("")
    for r in results:
        floor, path = r.scan[NP_FLOOR].median_us, r.scan[NP_PATH].median_us
        add(f"### N = {size_label(r.n)}")
        add("")
        add("| method | median | p95 | min | reps | × floor | × numpy path | × floor (min) | result check |")
        add("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for name, s in r.scan.items():
            check = r.agreement.get(name, "")
            if name in r.recall_at_k:
                check = f"recall@{TOP_K} vs exact cosine: {r.recall_at_k[name]:.3f}"
            if name == NP_PATH:
                check = "reference top-k"
            add(
                f"| {name} | {fmt_us(s.median_us)} | {fmt_us(s.p95_us)} | {fmt_us(s.min_us)} | {s.count} | "
                f"{fmt_ratio(s.median_us / floor)} | {fmt_ratio(s.median_us / path)} | "
                f"{fmt_ratio(s.min_us / r.scan[NP_FLOOR].min_us)} | {check} |"
            )
        if PY_REF not in r.scan:
            add(f"| {PY_REF} | not run (≈ a minute per call at this size) | | | | | | | |")
        for name, package in ((LG_SEARCH, "langgraph"), (HNSW, "hnswlib")):
            if name not in r.scan:
                add(f"| {name} | not run: `{package}` is not installed | | | | | | | |")
        add("")
    add("## Scan latency, multi-threaded (default thread counts, subprocess)")
    add("")
    add(
        f"rayon and OpenBLAS default to the {info['cpus']} vCPUs. hippograph's scan goes parallel above 2²¹ matrix "
        "elements (≈ 5.5k rows at d = 384). Ratios against the single-threaded floor of the main run, and against "
        "the multi-threaded numpy path. The first rows time hippograph alone; in the interleaved rows OpenBLAS's "
        "worker threads, which keep spinning for a while after each numpy call, compete with rayon for the same "
        "vCPUs. Two busy threads on a 2-vCPU guest are also the first thing other work on the machine disturbs, "
        "so compare the `min` column too."
    )
    add("")
    add("| N | method | median | p95 | min | × 1-thread floor | × numpy path (multi-threaded) |")
    add("|---|---|---:|---:|---:|---:|---:|")
    for r in results:
        if r.n not in mt:
            continue
        floor = r.scan[NP_FLOOR].median_us
        path = mt[r.n][NP_PATH].median_us
        for name, s in mt[r.n].items():
            add(
                f"| {size_label(r.n)} | {name} | {fmt_us(s.median_us)} | {fmt_us(s.p95_us)} | {fmt_us(s.min_us)} | "
                f"{fmt_ratio(s.median_us / floor)} | {fmt_ratio(s.median_us / path)} |"
            )
    add("")
    add("## get_node latency (random ids, interleaved)")
    add("")
    add("| N | backend | median | p95 | reps |")
    add("|---|---|---:|---:|---:|")
    for r in results:
        for name, s in r.lookup.items():
            add(f"| {size_label(r.n)} | {name} | {fmt_us(s.median_us)} | {fmt_us(s.p95_us)} | {s.count} |")
    add("")
    add("## Repo.recall overhead over find_candidates (LMDB, sync durability)")
    add("")
    add(
        "Same store, interleaved, both with `exact=True`, `now` defaulted (as an agent calls it). "
        "`Repo.recall` notes an access on each of the 20 hits; the counts are written in batches "
        "(every 1 s and every 1024 accesses, so about every 51 calls here) as one fsynced write "
        "transaction, after which every reader's scoring cache catches up. The median shows the "
        "steady cost, the mean and p95 include the batched writes."
    )
    add("")
    add(
        "`paired Δ` is the median of per-repetition differences (recall − find_candidates, run back to back). "
        "`Repo's own cost` repeats the pair with a backend whose find_candidates returns the same 20 hits "
        "without scanning (writes still go to the real store), which isolates what `Repo` adds."
    )
    add("")
    add(
        "| N | find_candidates median | recall median | paired Δ median | paired Δ mean "
        "| Repo's own cost: median | mean | p95 |"
    )
    add("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        o = r.recall_overhead
        add(
            f"| {size_label(r.n)} | {fmt_us(o.find_candidates.median_us)} | {fmt_us(o.recall.median_us)} | "
            f"{o.paired.median_us:+.0f} µs | {o.paired.mean_us:+.0f} µs | {o.own.median_us:+.1f} µs | "
            f"{o.own.mean_us:+.1f} µs | {o.own.p95_us:+.1f} µs |"
        )
    add("")
    add("## Writes: one trajectory-sized ingestion per call")
    add("")
    add(
        "One ingestion = 1 subgoal + 4 episodic + 4 source nodes, each with a 384-d embedding and metadata, 11 links, "
        "and the ingestion record: what `Repo.ingest` hands the backend for a 4-step trajectory. Each call writes a "
        "new source id into a store that starts empty, one transaction per ingestion except where stated. Inputs "
        "are prebuilt; each store encodes them itself. Throughput = 1 / mean latency. The stores that fsync "
        "every commit and those that do not are interleaved in two separate groups, so a neighbour's fsync "
        "never lands inside a no-fsync commit."
    )
    add("")
    add(
        "- hippograph `commit_ingestion`: compare-and-set on the source id inside LMDB's write transaction; `sync` "
        "fsyncs every commit, `fast` does not (survives a process crash, not an OS crash)."
    )
    add(
        "- plain `sqlite3`, WAL: `BEGIN IMMEDIATE`, check the ingestion row's primary key, insert 9 node rows "
        "(fields JSON, embedding blob, metadata JSON), 11 link rows (one per link), the ingestion row, `COMMIT`. "
        "`synchronous=NORMAL` in WAL mode has the same crash guarantee as hippograph's `fast`."
    )
    add(
        "- LangGraph `SqliteStore` (defaults of `from_conn_string`: rollback journal, `synchronous=FULL`): no vector "
        "index, because LangGraph's sqlite index needs the sqlite-vec extension and this Python's `sqlite3` module "
        "cannot load extensions; the embedding is stored as a JSON list in the item. `batch` = one transaction for "
        "the 10 items; `put` = the one-item API, one transaction each. Upserts, no compare-and-set."
    )
    add("")
    add("| method | fsync per commit | median | p95 | mean | ingestions/s | reps |")
    add("|---|---|---:|---:|---:|---:|---:|")
    for name, s in writes.items():
        add(
            f"| {name} | {'yes' if name in FSYNCS else 'no'} | {fmt_us(s.median_us)} | {fmt_us(s.p95_us)} | "
            f"{fmt_us(s.mean_us)} | {1e6 / s.mean_us:,.0f} | {s.count} |"
        )
    if W_LG_BATCH not in writes:
        add(
            "| LangGraph SqliteStore | | not run: `langgraph-checkpoint-sqlite` is not installed "
            "(`pip install langgraph-checkpoint-sqlite`) | | | | |"
        )
    add("")
    L.extend(ann_section(ann))
    add("## Targets")
    add("")
    add(
        "Judged on the medians above (write throughput on means). The fastest-run ratios in brackets show what "
        "the code does when the shared machine leaves it alone; where the two disagree, the machine was busy."
    )
    add("")
    add("| target | measured | met? |")
    add("|---|---|---|")
    for t in evaluate(results, writes, plan.quick, ann):
        verdict = "not measured" if t.met is None else "met" if t.met else "**not met**"
        add(f"| {t.name} | {t.measured} | {verdict} |")
    add("")
    add(f"![latency vs N]({plot.name})")
    add("")
    own = {line for line in L if line.startswith("## ")}
    L.extend(kept_sections(out, own))
    out.write_text("\n".join(L))


def kept_sections(out: Path, own: set[str]) -> list[str]:
    """Sections of the previous report that other bench scripts wrote (their heading names the
    ``benches/`` command, e.g. benches/maintenance.py and benches/postgres.py): kept, so a new run does
    not drop them. Any other section this script no longer writes is dropped."""
    if not out.exists():
        return []
    kept: list[str] = []
    keep = False
    for line in out.read_text().splitlines():
        if line.startswith("## "):
            keep = line not in own and "benches/" in line
        if keep:
            kept.append(line)
    return kept + ([""] if kept and kept[-1] else [])


def make_plot(path: Path, results: list[SizeResult], mt: dict[int, dict[str, Stats]], quick: bool) -> None:
    """Log-log median latency per method (bars up to p95); the legend sits outside so no line hides behind it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # name → (short label, colour, marker, line style, x nudge so coinciding markers stay visible)
    styles = {
        HG_MEM: ("hippograph InMemory, exact", "tab:blue", "o", "-", 1.0),
        HG_LMDB: ("hippograph LMDB (warm), exact", "tab:cyan", "s", "-", 1.0),
        HG_MEM_DEFAULT: ("hippograph InMemory, exact=False (vector index)", "tab:brown", "*", "none", 0.93),
        HG_LMDB_DEFAULT: ("hippograph LMDB, exact=False (vector index)", "tab:pink", "P", "none", 1.07),
        NP_PATH: ("numpy path: M @ Q.T + value fn + argpartition", "tab:orange", "^", "-", 1.0),
        NP_FLOOR: ("numpy floor: M @ q (one vector)", "black", "", "--", 1.0),
        PY_REF: ("pure Python reference", "tab:red", "x", "-", 1.0),
        LG_SEARCH: ("LangGraph InMemoryStore.search", "tab:purple", "D", "-", 1.0),
        HNSW: ("hnswlib knn_query (approximate, query only)", "tab:green", "v", "-", 1.0),
    }
    fig, ax = plt.subplots(figsize=(12, 6.5), dpi=110)
    for name, (label, color, marker, line, nudge) in styles.items():
        pts = [(r.n, r.scan[name]) for r in results if name in r.scan]
        if not pts:
            continue
        xs = [n * nudge for n, _ in pts]
        ys = [st.median_us / 1e3 for _, st in pts]
        err = [[0.0] * len(pts), [(st.p95_us - st.median_us) / 1e3 for _, st in pts]]
        ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, linestyle=line, label=label, capsize=3)
    mt_pts = [(n, by[HG_MEM]) for n, by in sorted(mt.items())]  # interleaved, like the single-threaded lines
    if mt_pts:
        ax.errorbar(
            [n for n, _ in mt_pts],
            [st.median_us / 1e3 for _, st in mt_pts],
            color="tab:blue",
            marker="o",
            linestyle=":",
            label="hippograph InMemory, exact, rayon default threads",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([r.n for r in results])
    ax.set_xticklabels([size_label(r.n) for r in results])
    ax.set_xlabel("N (scanned vectors, d = 384)")
    ax.set_ylabel("latency per query, ms (median; bar up to p95)")
    title = "find-candidates latency vs N (single-threaded unless noted)"
    ax.set_title(title + (" — quick mode" if quick else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- main ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N in {1k, 10k}, few repetitions: a few minutes")
    parser.add_argument(
        "--out", type=Path, help="markdown report (default benches/RESULTS.md, quick: RESULTS-quick.md)"
    )
    parser.add_argument("--plot", type=Path, help="PNG plot (default next to --out)")
    parser.add_argument("--sizes", help="comma-separated N values (overrides the mode's sizes)")
    parser.add_argument(
        "--ann",
        help="comma-separated NxD clustered stores for the approximate-recall section, e.g. 100000x384 "
        "('' or none: skip); the turn loops run on the first",
    )
    parser.add_argument("--ann-gauss", help="comma-separated NxD unclustered Gaussian stores ('' or none: skip)")
    parser.add_argument("--ann-aged", help="comma-separated NxD clustered stores with aged usage ('' or none: skip)")
    parser.add_argument("--turns", type=int, help="turns per turn loop that find the index (0: no turn loops)")
    parser.add_argument("--mt-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    plan = quick_plan() if args.quick else full_plan()
    if args.sizes:
        plan.sizes = [int(s) for s in args.sizes.split(",")]
        for table in (plan.reps, plan.slow_reps, plan.recall_reps):
            fallback = min(table.values())
            for n in plan.sizes:
                table.setdefault(n, fallback)
    if args.ann is not None:
        plan.ann = stores(args.ann)
        plan.turn_loop = plan.ann[0] if plan.ann else None
    if args.ann_gauss is not None:
        plan.ann_gauss = stores(args.ann_gauss)
    if args.ann_aged is not None:
        plan.ann_aged = stores(args.ann_aged)
    if args.turns is not None:
        plan.turns = args.turns
    if args.mt_worker:
        mt_worker(plan.sizes, {n: max(10, r // 2) for n, r in plan.reps.items()} if plan.quick else plan.reps)
        return

    out: Path = args.out or HERE / ("RESULTS-quick.md" if plan.quick else "RESULTS.md")
    plot: Path = args.plot or out.parent / ("latency_vs_n-quick.png" if plan.quick else "latency_vs_n.png")
    command = "python benches/compare.py" + (" --quick" if plan.quick else "")
    if args.out:
        command += f" --out {args.out}"
    start = time.perf_counter()
    load_start = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    info = machine()
    tmp = Path(tempfile.mkdtemp(prefix="hippograph-compare-"))
    try:
        results = [run_size(n, plan, tmp) for n in plan.sizes]
        writes = run_writes(plan, tmp)
        ann = run_ann_all(plan, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mt = run_mt(plan)
    load_end = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    out.parent.mkdir(parents=True, exist_ok=True)
    make_plot(plot, results, mt, plan.quick)
    write_report(
        out, plot, plan, results, mt, writes, ann, info, (load_start, load_end), command, time.perf_counter() - start
    )
    log(f"wrote {out} and {plot} in {time.perf_counter() - start:.0f} s")
    problems = ann.problems()
    if problems:  # after the report is written: the evidence is kept
        sys.exit("approximate recall below its target (see the report's Targets):\n  " + "\n  ".join(problems))


def stores(spec: str) -> list[tuple[int, int]]:
    """``"100000x384,30000x64"`` → [(100000, 384), (30000, 64)]; ``""`` or ``"none"`` → []."""
    if spec.strip().lower() in ("", "none"):
        return []
    return [(int(n), int(d)) for n, d in (item.split("x") for item in spec.split(",") if item)]


if __name__ == "__main__":
    main()
