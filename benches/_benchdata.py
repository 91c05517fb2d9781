"""The synthetic workload shared by the pytest-benchmark suites and `compare.py`.

Both measure the same data so that a figure in a pytest-benchmark run can be
checked against the side-by-side table: clustered float32 embeddings from a
fixed seed, a query plus four tag vectors drawn near cluster centres, usage
metadata on every node, and one "trajectory-sized" ingestion (1 subgoal, 4
episodic and 4 source nodes with links) for the write paths.

The store holds ``n`` nodes of the scanned type (semantic) plus ``n // 10``
nodes spread over the other six types, so a scan must skip the rest of the
graph; the non-hippograph baselines are given only the ``n`` scanned vectors.
Everything is deterministic: same ``n`` and seed, same bytes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

import hippograph as hg
from hippograph.backends import LMDB, InMemory

DIM = 384
SEED = 20240611
CLUSTERS = 64
TOP_K = 20
"""The default ``top_k`` of the semantic type, used by every method."""
SCANNED = hg.NodeType.SEMANTIC
OTHER_TYPES = tuple(t for t in hg.NodeType if t != SCANNED)
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
"""A fixed evaluation instant, so every method applies the same recency decay."""

F32 = npt.NDArray[np.float32]


def size_label(n: int) -> str:
    """``1000`` → ``"1k"``; table and test ids read better that way."""
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


@dataclass(frozen=True)
class Dataset:
    """The scanned vectors with their ids and metadata, plus the rest of the graph."""

    n: int
    matrix: F32
    """``n × DIM`` float32, row ``i`` is node ``ids[i]``; C-contiguous."""
    ids: list[str]
    meta: list[hg.NodeMetadata]
    queries: F32
    """``5 × DIM``: the query, then four tag vectors."""
    extra: list[tuple[hg.NodeType, str, F32]]
    """Nodes of the six other types (not scanned)."""
    centers: F32

    @property
    def query(self) -> F32:
        return self.queries[0]

    @property
    def tags(self) -> F32:
        return self.queries[1:]


def _clustered(rng: np.random.Generator, centers: F32, count: int, spread: float) -> F32:
    labels = rng.integers(0, centers.shape[0], count)
    noise = rng.standard_normal((count, centers.shape[1]), dtype=np.float32)
    return np.ascontiguousarray(centers[labels] + np.float32(spread) * noise, dtype=np.float32)


def _metadata(rng: np.random.Generator, count: int) -> list[hg.NodeMetadata]:
    """Varied usage so the value function really changes the order."""
    age_h = rng.uniform(0.0, 30 * 24.0, count)
    accesses = rng.integers(0, 20, count)
    since_h = rng.uniform(0.0, 1.0, count)
    rewards = rng.integers(0, 5, count)
    avg = rng.uniform(-1.0, 1.0, count)
    out = []
    for i in range(count):
        created = NOW - timedelta(hours=float(age_h[i]))
        n_acc = int(accesses[i])
        last = None if n_acc == 0 else created + timedelta(hours=float(age_h[i] * since_h[i]))
        out.append(
            hg.NodeMetadata(
                created_at=created,
                access_count=n_acc,
                last_accessed_at=last,
                cumulative_reward=float(avg[i] * rewards[i]),
                reward_count=int(rewards[i]),
            )
        )
    return out


def make_dataset(n: int, *, seed: int = SEED, dim: int = DIM) -> Dataset:
    """The workload for ``n`` scanned nodes (deterministic in ``n`` and ``seed``)."""
    rng = np.random.default_rng([seed, n])
    centers = rng.standard_normal((CLUSTERS, dim), dtype=np.float32)
    matrix = _clustered(rng, centers, n, 0.6)
    ids = [f"{SCANNED.value}-{i:07d}" for i in range(n)]
    picks = rng.choice(CLUSTERS, 5, replace=False)
    queries = np.ascontiguousarray(
        centers[picks] + np.float32(0.3) * rng.standard_normal((5, dim), dtype=np.float32), dtype=np.float32
    )
    n_extra = n // 10
    extra_vecs = _clustered(rng, centers, n_extra, 0.6)
    extra = [
        (OTHER_TYPES[i % len(OTHER_TYPES)], f"{OTHER_TYPES[i % len(OTHER_TYPES)].value}-{i:07d}", extra_vecs[i])
        for i in range(n_extra)
    ]
    return Dataset(n, matrix, ids, _metadata(rng, n), queries, extra, centers)


def query_sets(ds: Dataset, count: int, *, seed: int = 99) -> list[F32]:
    """The benchmark's query + 4 tags, then ``count - 1`` more such sets around other cluster centres."""
    rng = np.random.default_rng([seed, ds.n])
    dim = ds.matrix.shape[1]
    sets = [ds.queries]
    for _ in range(count - 1):
        picks = rng.choice(len(ds.centers), 5, replace=False)
        noise = np.float32(0.3) * rng.standard_normal((5, dim), dtype=np.float32)
        sets.append(np.ascontiguousarray(ds.centers[picks] + noise, dtype=np.float32))
    return sets


# -- other workloads for the approximate-recall section ------------------------------


def make_gaussian(n: int, *, dim: int = DIM, seed: int = SEED) -> Dataset:
    """Unclustered data: i.i.d. standard normal vectors (scanned and other types), the same usage metadata
    generator as `make_dataset`; ``queries`` are i.i.d. Gaussian too and ``centers`` is empty."""
    rng = np.random.default_rng([seed, n, dim, 1])
    matrix = rng.standard_normal((n, dim), dtype=np.float32)
    ids = [f"{SCANNED.value}-{i:07d}" for i in range(n)]
    queries = rng.standard_normal((5, dim), dtype=np.float32)
    n_extra = n // 10
    extra_vecs = rng.standard_normal((n_extra, dim), dtype=np.float32)
    extra = [
        (OTHER_TYPES[i % len(OTHER_TYPES)], f"{OTHER_TYPES[i % len(OTHER_TYPES)].value}-{i:07d}", extra_vecs[i])
        for i in range(n_extra)
    ]
    return Dataset(n, matrix, ids, _metadata(rng, n), queries, extra, np.zeros((0, dim), np.float32))


def gaussian_queries(ds: Dataset, count: int, *, seed: int = 101) -> list[F32]:
    """``count`` single query vectors (``1 × dim``), i.i.d. standard normal: far from every stored vector."""
    rng = np.random.default_rng([seed, ds.n])
    dim = ds.matrix.shape[1]
    return [rng.standard_normal((1, dim), dtype=np.float32) for _ in range(count)]


def near_queries(ds: Dataset, count: int, *, noise: float = 0.2, seed: int = 103) -> list[F32]:
    """``count`` single query vectors near random stored vectors: the stored vector scaled to unit length,
    moved by ``noise`` (of that unit length) in a random direction."""
    rng = np.random.default_rng([seed, ds.n])
    out = []
    for row in rng.choice(ds.n, count, replace=False):
        v = ds.matrix[row] / np.linalg.norm(ds.matrix[row])
        d = rng.standard_normal(v.shape[0])
        out.append(np.ascontiguousarray((v + noise * d / np.linalg.norm(d))[None, :], dtype=np.float32))
    return out


def query_only(sets: list[F32]) -> list[F32]:
    """The first vector of each query set, alone (no tags)."""
    return [np.ascontiguousarray(q[:1]) for q in sets]


@dataclass(frozen=True)
class Shape:
    """Data unlike the main workload, for checking that the default path holds beyond it: ``clusters``
    centres with rows spread ``spread`` around them, or (``latent`` > 0) rows drawn from a
    ``latent``-dimensional Gaussian mapped into ``dim`` dimensions plus a little noise, the continuum a
    text embedding model gives more than tight clusters do."""

    label: str
    n: int
    dim: int
    clusters: int = 0
    spread: float = 0.0
    latent: int = 0
    aged: bool = False


OTHER_SHAPES = (
    Shape("200 clusters, aged usage", 60_000, 768, clusters=200, spread=0.5, aged=True),
    Shape("32 diffuse clusters", 30_000, 1536, clusters=32, spread=1.2),
    Shape("1,000 small clusters", 120_000, 128, clusters=1000, spread=0.4),
    Shape("32-d latent structure, aged usage", 60_000, 384, latent=32, aged=True),
)


def make_shaped(shape: Shape, count: int = 50, *, seed: int = SEED) -> tuple[Dataset, list[F32]]:
    """The scanned rows of `shape` (no other types), and ``count`` query sets: each a query near a
    vector drawn like the rows but not stored (moved by a fifth of its length), with four tags near
    other such vectors."""
    rng = np.random.default_rng([seed, shape.n, shape.dim, shape.clusters, shape.latent])
    held = 200
    if shape.latent:
        mix = rng.standard_normal((shape.latent, shape.dim), dtype=np.float32)
        drawn = rng.standard_normal((shape.n + held, shape.latent), dtype=np.float32) @ mix
        drawn += np.float32(0.3) * rng.standard_normal(drawn.shape, dtype=np.float32)
        centers = np.zeros((0, shape.dim), np.float32)
    else:
        centers = rng.standard_normal((shape.clusters, shape.dim), dtype=np.float32)
        drawn = _clustered(rng, centers, shape.n + held, shape.spread)
    matrix, unseen = np.ascontiguousarray(drawn[: shape.n]), drawn[shape.n :]
    meta = aged_metadata(shape.n, seed=seed) if shape.aged else _metadata(rng, shape.n)
    ids = [f"{SCANNED.value}-{i:07d}" for i in range(shape.n)]
    sets = []
    for i in range(count):
        base = unseen[i % held]
        scale = float(np.linalg.norm(base)) / np.sqrt(shape.dim)
        query = base + np.float32(0.2 * scale) * rng.standard_normal(shape.dim, dtype=np.float32)
        tags = unseen[rng.choice(held, 4, replace=False)]
        tags = tags + np.float32(0.1 * scale) * rng.standard_normal(tags.shape, dtype=np.float32)
        sets.append(np.ascontiguousarray(np.vstack([query[None, :], tags]), dtype=np.float32))
    return Dataset(shape.n, matrix, ids, meta, sets[0], [], centers), sets


AGED_HOURS = 300.0
AGED_MAX_ACCESS = 6


def aged_metadata(count: int, *, seed: int = SEED) -> list[hg.NodeMetadata]:
    """Usage as a real memory ages: each node last touched (accessed, else created) at a time spread uniformly
    over the ``AGED_HOURS`` before ``NOW``, accessed 0 to ``AGED_MAX_ACCESS`` times, no rewards."""
    rng = np.random.default_rng([seed, count, 300])
    touched_h = rng.uniform(0.0, AGED_HOURS, count)
    accesses = rng.integers(0, AGED_MAX_ACCESS + 1, count)
    before_h = rng.uniform(0.0, 30 * 24.0, count)
    out = []
    for i in range(count):
        touched = NOW - timedelta(hours=float(touched_h[i]))
        n_acc = int(accesses[i])
        if n_acc == 0:
            out.append(hg.NodeMetadata(created_at=touched))
        else:
            created = touched - timedelta(hours=float(before_h[i]))
            out.append(hg.NodeMetadata(created_at=created, access_count=n_acc, last_accessed_at=touched))
    return out


def make_aged_dataset(n: int, *, dim: int = DIM, seed: int = SEED) -> Dataset:
    """`make_dataset`'s vectors and queries with `aged_metadata` instead of its usage."""
    return replace(make_dataset(n, seed=seed, dim=dim), meta=aged_metadata(n, seed=seed))


TURN_NODES = 8


def turn_inputs(ds: Dataset, *, tag: str = "turn", seed: int = 77) -> Iterator[tuple[hg.Changeset, F32]]:
    """Agent turns without end: each a changeset of ``TURN_NODES`` new scanned-type nodes (fresh metadata),
    then the query set (query + 4 tags near 5 random cluster centres) the turn asks. Half the new nodes lie on
    the topic of that query (spread 0.3 around its first centre, as close as the query itself), half are
    ordinary data around random centres (spread 0.6). Needs clustered data (``ds.centers``); node ids start
    with ``tag``."""
    rng = np.random.default_rng([seed, ds.n])
    dim = ds.matrix.shape[1]
    half = TURN_NODES // 2
    meta = hg.NodeMetadata(created_at=NOW)
    i = 0
    while True:
        picks = rng.choice(len(ds.centers), 5, replace=False)
        noise = np.float32(0.3) * rng.standard_normal((5, dim), dtype=np.float32)
        queries = np.ascontiguousarray(ds.centers[picks] + noise, dtype=np.float32)
        near = ds.centers[picks[0]] + np.float32(0.3) * rng.standard_normal((half, dim), dtype=np.float32)
        vectors = np.vstack([near, _clustered(rng, ds.centers, TURN_NODES - half, 0.6)]).astype(np.float32)
        cs = hg.Changeset()
        for j in range(TURN_NODES):
            node_id = f"{tag}-{i:05d}-{j}"
            cs.add_node(make_node(SCANNED, node_id, np.ascontiguousarray(vectors[j]), ds.n + TURN_NODES * i + j))
            cs.put_metadata(node_id, meta)
        yield cs, queries
        i += 1


def make_node(node_type: hg.NodeType, node_id: str, embedding: F32 | None, i: int) -> hg.Node:
    """A node of any type with plausible field values."""
    created = NOW - timedelta(minutes=i % 10_000)
    common = {"id": node_id, "embedding": embedding, "created_at": created}
    match node_type:
        case hg.NodeType.EPISODIC:
            return hg.Episodic(
                **common,
                observation=f"saw screen {i}",
                action=f"clicked button {i % 17}",
                state="browsing",
                subgoal=f"subgoal {i // 4}",
                reward=0.5,
                trajectory_id=f"traj-{i // 4}",
            )
        case hg.NodeType.SEMANTIC:
            return hg.Semantic(**common, proposition=f"fact number {i}", confidence=0.8)
        case hg.NodeType.PROCEDURAL:
            return hg.Procedural(
                **common, instruction=f"do step {i}", condition="when asked", expected_outcome="it works"
            )
        case hg.NodeType.TAG:
            return hg.Tag(**common, label=f"tag {i}")
        case hg.NodeType.INTENT:
            return hg.Intent(**common, description=f"intent {i}")
        case hg.NodeType.SUBGOAL:
            return hg.Subgoal(**common, description=f"subgoal {i}")
        case hg.NodeType.SOURCE:
            return hg.Source(**common, episode_id=f"episode-{i // 4}", step_index=i % 4, plain_text=f"step {i}")
    raise AssertionError(node_type)


def graph_changesets(ds: Dataset, chunk: int = 20_000) -> Iterator[hg.Changeset]:
    """The whole graph (scanned + other types, metadata on every node) in chunks."""
    cs = hg.Changeset()
    for i, node_id in enumerate(ds.ids):
        cs.add_node(make_node(SCANNED, node_id, ds.matrix[i], i))
        cs.put_metadata(node_id, ds.meta[i])
        if len(cs.additions) >= chunk:
            yield cs
            cs = hg.Changeset()
    for i, (node_type, node_id, vec) in enumerate(ds.extra):
        cs.add_node(make_node(node_type, node_id, vec, i))
        cs.put_metadata(node_id, ds.meta[i % ds.n])
        if len(cs.additions) >= chunk:
            yield cs
            cs = hg.Changeset()
    if cs.additions:
        yield cs


def build_memory(ds: Dataset) -> InMemory:
    store = InMemory()
    for cs in graph_changesets(ds):
        store.apply_changeset(cs)
    return store


def build_lmdb(ds: Dataset, path: Path, durability: Literal["sync", "fast"] = "sync") -> LMDB:
    """An LMDB store holding the graph, with its scoring cache already warm."""
    store = LMDB(path, durability=durability, map_size=1 << 31)
    for cs in graph_changesets(ds):
        store.apply_changeset(cs)
    store.find_candidates([SCANNED], ds.query, ds.tags, None, now=NOW, exact=True)
    return store


class Stores:
    """Datasets and stores built on first use, shared by the whole session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._data: dict[int, Dataset] = {}
        self._memory: dict[int, InMemory] = {}
        self._lmdb: dict[int, LMDB] = {}

    def dataset(self, n: int) -> Dataset:
        if n not in self._data:
            self._data[n] = make_dataset(n)
        return self._data[n]

    def memory(self, n: int) -> InMemory:
        if n not in self._memory:
            self._memory[n] = build_memory(self.dataset(n))
        return self._memory[n]

    def lmdb(self, n: int) -> LMDB:
        """A synchronous-durability LMDB store with a warm scoring cache."""
        if n not in self._lmdb:
            self._lmdb[n] = build_lmdb(self.dataset(n), self.root / f"lmdb-{n}", "sync")
        return self._lmdb[n]

    def close(self) -> None:
        for store in self._lmdb.values():
            store.close()


# -- writes ------------------------------------------------------------------------

EPISODES_PER_INGESTION = 4


@dataclass(frozen=True)
class Ingestion:
    """One trajectory's worth of writes: what `commit_ingestion` receives.

    The sqlite baselines encode the very same nodes, links and metadata
    themselves (a row per node with its embedding, rows for links, one
    ingestion row), so both sides write the same logical data.
    """

    record: hg.IngestionRecord
    changeset: hg.Changeset

    @property
    def source_id(self) -> str:
        return self.record.source_id


def make_ingestion(tag: str, i: int, pool: F32) -> Ingestion:
    """Ingestion number ``i``: 1 subgoal, 4 episodic and 4 source nodes, 11 links, 9 metadata."""
    source_id = f"{tag}-trajectory-{i:07d}"
    cs = hg.Changeset()
    sg = f"{tag}-subgoal-{i:07d}"
    cs.add_node(make_node(hg.NodeType.SUBGOAL, sg, pool[(9 * i) % len(pool)], i))
    prev: str | None = None
    for j in range(EPISODES_PER_INGESTION):
        ep = f"{tag}-episodic-{i:07d}-{j}"
        src = f"{tag}-source-{i:07d}-{j}"
        cs.add_node(make_node(hg.NodeType.EPISODIC, ep, pool[(9 * i + 1 + j) % len(pool)], 4 * i + j))
        cs.add_node(make_node(hg.NodeType.SOURCE, src, pool[(9 * i + 5 + j) % len(pool)], 4 * i + j))
        cs.add_link(sg, ep, hg.EdgeType.HIERARCHICAL)
        cs.add_link(ep, src, hg.EdgeType.PROVENANCE)
        if prev is not None:
            cs.add_link(prev, ep, hg.EdgeType.SIBLING)
        prev = ep
    meta = hg.NodeMetadata(created_at=NOW)
    for node_id in cs.node_ids:
        cs.put_metadata(node_id, meta)
    digest = hashlib.sha256(source_id.encode()).digest()
    receipt = hg.IngestionReceipt(source_id=source_id, node_ids=cs.node_ids, stored_at=NOW)
    return Ingestion(hg.IngestionRecord(source_id, digest, hg.FINGERPRINT_VERSION, receipt), cs)


def vector_pool(count: int = 4096, *, seed: int = SEED) -> F32:
    """Embeddings the write benchmarks draw from (writes do not depend on their values)."""
    rng = np.random.default_rng([seed, 7])
    return rng.standard_normal((count, DIM), dtype=np.float32)


def sample_trajectory(steps: int = EPISODES_PER_INGESTION) -> hg.Trajectory:
    """A trajectory with metadata, for the fingerprint benchmark."""
    return hg.Trajectory(
        source_id="bench-trajectory",
        goal="book a table for two",
        steps=[hg.Step(f"observation {i}: " + "x" * 200, f"action {i}") for i in range(steps)],
        metadata={"user": "bench", "attempt": 3, "score": 0.75, "tags": ["a", "b", "c"], "ok": True},
    )


@dataclass(frozen=True)
class SqliteRows:
    """One ingestion as `SqliteWriter` stores it: node rows, link rows, the ingestion row."""

    nodes: list[tuple[object, ...]]
    links: list[tuple[str, str, str]]
    record: tuple[str, bytes, int, str]


class SqliteWriter:
    """Plain sqlite3, WAL mode: a row per node (embedding blob + metadata), rows for links, an ingestion row.

    One transaction per ingestion (``BEGIN IMMEDIATE``), with the same
    compare-and-set as ``commit_ingestion``: the ingestion row's primary key is
    checked inside the transaction before anything is written.
    """

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS nodes (
                id TEXT PRIMARY KEY, type TEXT NOT NULL, fields TEXT NOT NULL,
                embedding BLOB, created_at INTEGER NOT NULL, meta TEXT);
            CREATE TABLE IF NOT EXISTS links (
                a TEXT NOT NULL, b TEXT NOT NULL, type TEXT NOT NULL, PRIMARY KEY (a, b, type)) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS ingestions (
                source_id TEXT PRIMARY KEY, digest BLOB NOT NULL, version INTEGER NOT NULL, receipt TEXT NOT NULL);
            """
        )

    def encode(self, ing: Ingestion) -> SqliteRows:
        """The ingestion's rows, encoded as `commit` encodes them: a caller may do this before its clock
        starts, so that `commit_rows` measures the storage engine alone."""
        rec, cs = ing.record, ing.changeset
        nodes = [
            (
                node.id,
                node.node_type.value,
                json.dumps(node.fields_dict(), sort_keys=True),
                None if node.embedding is None else node.embedding.tobytes(),
                int(node.created_at.timestamp() * 1e6),
                meta_json(cs.metadata.get(node.id)),
            )
            for node in cs.additions
        ]
        links = [(a, b, str(edge)) for a, b, edge in cs.links]
        receipt = json.dumps({"node_ids": list(rec.receipt.node_ids), "stored_at": rec.receipt.stored_at.isoformat()})
        return SqliteRows(nodes, links, (rec.source_id, rec.payload_digest, rec.fingerprint_version, receipt))

    def commit(self, ing: Ingestion) -> bool:
        return self.commit_rows(self.encode(ing))

    def commit_rows(self, rows: SqliteRows) -> bool:
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            row = cur.execute("SELECT digest, version FROM ingestions WHERE source_id = ?", rows.record[:1]).fetchone()
            if row is not None:
                cur.execute("ROLLBACK")
                return False
            cur.executemany("INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?)", rows.nodes)
            cur.executemany("INSERT OR IGNORE INTO links VALUES (?, ?, ?)", rows.links)
            cur.execute("INSERT INTO ingestions VALUES (?, ?, ?, ?)", rows.record)
            cur.execute("COMMIT")
            return True
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


def meta_json(meta: hg.NodeMetadata | None) -> str | None:
    if meta is None:
        return None
    return json.dumps(
        {
            "created_at": meta.created_at.isoformat(),
            "access_count": meta.access_count,
            "last_accessed_at": None if meta.last_accessed_at is None else meta.last_accessed_at.isoformat(),
            "cumulative_reward": meta.cumulative_reward,
            "reward_count": meta.reward_count,
            "custom": dict(meta.custom),
        }
    )
