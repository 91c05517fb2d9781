"""How deep server-side search draws from an HNSW index: each indexed type's pool depth per query
vector, calibrated on queries around stored vectors and kept in ``{s}.search_depth`` for every process.

A pool of the `depth` nearest rows per query vector, reranked by score, finds the exact answer
only as far as those rows hold it: a value function can lift a less similar row above more similar
ones. Calibration answers sample queries (four groups, `_NOISE`) exactly and from pools of depths
doubling from the type's top_k, and keeps the first depth that meets the in-process index's rule
(`hippograph.engine.query.route`): with the samples whose pools hold no row as similar as a
*floor* sent to the exact ranking, every group's mean recall@k less 1.645 standard errors, and the
pools' own answers, reach ``AnnConfig.target_recall``, the pools taking at least a quarter of the
samples, at ``AnnConfig.min_speedup`` times the exact ranking's speed or better; none does: depth 0,
the exact ranking answers. A type whose row count moved by more than a quarter since is measured
again.

The floor is the lowest similarity of the most similar row a sample's pools ranked at which the
rule holds, and never below the least such similarity of any sample: a query whose pools hold no
row as similar lands where samples were answered badly or where none was (far from every memory),
and the exact ranking answers it. It is measured on the pools, the quantity a query is checked
with: an HNSW search for a sample's nearest row may miss it (on 1M clustered rows at
``hnsw.ef_search`` 40, for a quarter of the samples near a stored vector), and a floor taken from
such misses let far queries through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
from psycopg import sql

from ...engine.checks import utcnow
from ...engine.query import F32, Trial, route
from ...engine.vector_index import AnnConfig
from ...graph.model import NodeType
from ...graph.value import TypeParams, resolve_config
from .tx import Conn

__all__ = ["Calibrated", "calibrate", "stored"]

SAMPLES = 100
"""The most sample queries a calibration answers (each also exactly: seconds apiece at 1M rows)."""
DEEPEST = 1000
"""The deepest pool per query vector (pgvector's iterative scans stop at ``hnsw.max_scan_tuples``)."""
_NOISE = (0.1, 0.3, 0.6, None)
"""Sample queries, in turn: stored vectors moved by these fractions of their length in a random
direction (from queries about one memory to queries between memories), and (None) the centre of a
stored vector's `_CENTRE` nearest neighbours, where similarities are alike and usage decides, so a
pool must reach furthest."""
_CENTRE = 32

Answer = Callable[[NodeType, F32, TypeParams, datetime, int | None], tuple[list[tuple[str, float]], float]]
"""(type, query vectors, params, now, depth: None for the exact ranking) → the type's answer, and the
best similarity of any row its pools ranked (pooled answers only)."""
Calibrated = tuple[int, int, float, float]
"""(rows of the type when measured, depth per query vector or 0 for none, mean recall measured, the
floor: see the module docstring; 1.0 without a depth)."""


def stored(conn: Conn, schema: str, repo: str, dim: int) -> dict[NodeType, Calibrated]:
    rows = conn.execute(
        sql.SQL("SELECT type, rows, depth, recall, floor FROM {}.search_depth WHERE repo = %s AND dim = %s").format(
            sql.Identifier(schema)
        ),
        (repo, dim),
    ).fetchall()
    return {NodeType(t): (int(n), int(d), float(r), float(f)) for t, n, d, r, f in rows}


def fresh(found: Calibrated | None, count: int) -> bool:
    return found is not None and abs(count - found[0]) * 4 <= found[0]


def calibrate(
    conn: Conn,
    schema: str,
    repo: str,
    dim: int,
    node_type: NodeType,
    count: int,
    ann: AnnConfig,
    answer: Answer,
    neighbours: Callable[[F32, int], F32],
    stop: threading.Event | None = None,
) -> Calibrated | None:
    """Measures and stores `node_type`'s depth (see the module docstring); None when `stop` was set
    meanwhile (nothing stored)."""
    rows = conn.execute(
        sql.SQL("SELECT vec::real[] FROM {}.vectors WHERE repo = %s AND type = %s ORDER BY md5(id) LIMIT %s").format(
            sql.Identifier(schema)
        ),
        (repo, node_type.value, min(ann.calibration_queries, SAMPLES)),
    ).fetchall()
    rng = np.random.default_rng(count)
    queries, groups = [], []
    for at, (values,) in enumerate(rows):
        v = np.asarray(values, np.float64)
        norm = float(np.linalg.norm(v))
        if norm > 0:
            d = rng.standard_normal(v.shape[0])
            noise = _NOISE[at % len(_NOISE)]
            if noise is None:
                near = neighbours(v.astype(np.float32), _CENTRE).astype(np.float64)
                near = near / np.maximum(np.linalg.norm(near, axis=1, keepdims=True), 1e-30)
                q = near.mean(axis=0) if len(near) else v / norm
            else:
                q = v / norm + noise * d / np.linalg.norm(d)
            if np.linalg.norm(q) > 0:
                queries.append(q.astype(np.float32)[None, :])
                groups.append(at % len(_NOISE))
    params = resolve_config(None).params[node_type]
    now = utcnow()
    truth, exact_times = [], []
    for q in queries:
        if stop is not None and stop.is_set():
            return None
        t0 = time.perf_counter()
        truth.append({i for i, _ in answer(node_type, q, params, now, None)[0]})
        exact_times.append(time.perf_counter() - t0)
    chosen: Calibrated = (count, 0, 0.0, 1.0)
    depth = max(params.top_k, 16)
    while queries and depth <= DEEPEST:
        trials = []
        for q, want in zip(queries, truth, strict=True):
            if stop is not None and stop.is_set():
                return None
            t0 = time.perf_counter()
            hits, top = answer(node_type, q, params, now, depth)
            seconds = time.perf_counter() - t0
            got = {i for i, _ in hits}
            trials.append(Trial(len(got & want) / len(want) if want else 1.0, seconds, top))
        exact_each = float(np.median(exact_times))
        routing = route(trials, groups, exact_each, ann.target_recall, set(groups), None)
        if routing.meets:
            if routing.speedup >= ann.min_speedup:
                floor = max(routing.floor, min(t.top for t in trials))  # never below where samples were
                recall = float(np.mean([t.recall if t.top >= floor and t.recall is not None else 1.0 for t in trials]))
                chosen = (count, depth, recall, floor)
            break
        depth *= 2
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.search_depth (repo, type, dim, rows, depth, recall, floor) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (repo, type, dim) DO UPDATE SET rows = EXCLUDED.rows, "
            "depth = EXCLUDED.depth, recall = EXCLUDED.recall, floor = EXCLUDED.floor, measured_at = clock_timestamp()"
        ).format(sql.Identifier(schema)),
        (repo, node_type.value, dim, *chosen),
    )
    return chosen
