"""How deep server-side search draws from an HNSW index: each indexed type's pool depth per query
vector, calibrated on queries around stored vectors and kept in ``{s}.search_depth`` for every process.

A pool of the `depth` nearest rows per query vector, reranked by score, finds the exact answer
only as far as those rows hold it: a value function can lift a less similar row above more similar
ones. Calibration measures the mean recall@k of the pooled answer against the exact ranking, for
depths doubling from the type's top_k, and keeps the first that reaches halfway from
``AnnConfig.target_recall`` to 1 (samples are not the queries a memory meets later: the margin
keeps those at the target) at ``AnnConfig.min_speedup`` times the exact ranking's speed or
better; none does: depth 0, the exact ranking answers. A type whose row count moved by more than
a quarter since is measured again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import numpy as np
from psycopg import sql

from ...engine.checks import utcnow
from ...engine.query import F32
from ...engine.vector_index import AnnConfig
from ...graph.model import NodeType
from ...graph.value import TypeParams, resolve_config
from .tx import Conn

__all__ = ["Calibrated", "calibrate", "stored"]

DEEPEST = 1000
"""The deepest pool per query vector (pgvector's iterative scans stop at ``hnsw.max_scan_tuples``)."""
_NOISE = (0.1, 0.3, 0.6)
"""Sample queries are stored vectors moved by these fractions of their length (in turn) in a random
direction: from queries about a stored memory to queries between memories, where a pool misses most."""

Answer = Callable[[NodeType, F32, TypeParams, datetime, int | None], list[tuple[str, float]]]
"""(type, query vectors, params, now, depth: None for the exact ranking) → the type's answer."""
Calibrated = tuple[int, int, float]
"""(rows of the type when measured, depth per query vector or 0 for none, mean recall measured)."""


def stored(conn: Conn, schema: str, repo: str, dim: int) -> dict[NodeType, Calibrated]:
    rows = conn.execute(
        sql.SQL("SELECT type, rows, depth, recall FROM {}.search_depth WHERE repo = %s AND dim = %s").format(
            sql.Identifier(schema)
        ),
        (repo, dim),
    ).fetchall()
    return {NodeType(t): (int(n), int(d), float(r)) for t, n, d, r in rows}


def fresh(found: Calibrated | None, count: int) -> bool:
    return found is not None and abs(count - found[0]) * 4 <= found[0]


def calibrate(
    conn: Conn, schema: str, repo: str, dim: int, node_type: NodeType, count: int, ann: AnnConfig, answer: Answer
) -> Calibrated:
    """Measures and stores `node_type`'s depth (see the module docstring)."""
    rows = conn.execute(
        sql.SQL("SELECT vec::real[] FROM {}.vectors WHERE repo = %s AND type = %s ORDER BY random() LIMIT %s").format(
            sql.Identifier(schema)
        ),
        (repo, node_type.value, min(ann.calibration_queries, 50)),
    ).fetchall()
    rng = np.random.default_rng(count)
    queries = []
    for at, (values,) in enumerate(rows):
        v = np.asarray(values, np.float64)
        norm = float(np.linalg.norm(v))
        if norm > 0:
            d = rng.standard_normal(v.shape[0])
            noise = _NOISE[at % len(_NOISE)]
            queries.append((v / norm + noise * d / np.linalg.norm(d)).astype(np.float32)[None, :])
    params = resolve_config(None).params[node_type]
    now = utcnow()
    truth, exact_time = [], 0.0
    for q in queries:
        t0 = time.perf_counter()
        truth.append({i for i, _ in answer(node_type, q, params, now, None)})
        exact_time += time.perf_counter() - t0
    chosen: Calibrated = (count, 0, 0.0)
    depth = max(params.top_k, 16)
    while queries and depth <= DEEPEST:
        found, took = 0.0, 0.0
        for q, want in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            got = {i for i, _ in answer(node_type, q, params, now, depth)}
            took += time.perf_counter() - t0
            found += len(got & want) / len(want) if want else 1.0
        recall = found / len(queries)
        if recall >= (1.0 + ann.target_recall) / 2:  # halfway past the target: queries met later differ
            if took * ann.min_speedup <= exact_time:
                chosen = (count, depth, recall)
            break
        depth *= 2
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.search_depth (repo, type, dim, rows, depth, recall) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (repo, type, dim) DO UPDATE SET rows = EXCLUDED.rows, depth = EXCLUDED.depth, "
            "recall = EXCLUDED.recall, measured_at = clock_timestamp()"
        ).format(sql.Identifier(schema)),
        (repo, node_type.value, dim, *chosen),
    )
    return chosen
