"""The default value function scored by the server (``search="server"``).

`Ranked` builds the statements that rank one type's rows by score inside PostgreSQL: the
relevance from pgvector's cosine distance over every query vector, and the value from the usage
columns `write_graph` keeps beside each vector. Either over every row of the type (`exact`) or
over the union of each query vector's nearest rows from the type's HNSW index (`depth` per
vector). Only the best rows travel to the client, which scores them again with the in-process
code; the server's score only chooses them, so it needs to agree to within `margin`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psycopg import sql

from ...engine.query import F32, ScanParams
from ...graph.model import Node, NodeType
from . import vectors as server_vectors
from .arrays import Float4Array
from .tx import _decode_node, _id, _links, _Tx

__all__ = ["Ranked", "RankedRow", "margin"]


def margin(dim: int) -> float:
    """How far the server's similarities (and so scores, which never exceed them) may be from the
    client's: pgvector sums a cosine's products in single precision, whose rounding grows with the
    dimension (at most about ``dim`` units of 2**-24); four times that, and never below 1e-5."""
    return max(1e-5, 4.0 * dim * 2.0**-24)


RankedRow = tuple[bytes, float, bytes, bytes | None, float, Node | None]
"""(key, the server's score, embedding, metadata record, the best similarity of any row ranked, the
node with its links as the same snapshot holds it)."""

_VALUE = (
    "CASE WHEN x.ts IS NULL THEN x.r WHEN x.r <= 0 OR greatest(%(floor)s, x.freq) <= 0 THEN 0 ELSE "
    "exp(least(700, greatest(-740, ln(x.r) - %(lam)s * greatest(0, (%(now)s - x.ts) / 3600) "
    "+ ln(greatest(%(floor)s, x.freq)) "
    "- CASE WHEN x.reward_count <= 0 THEN 0 ELSE greatest(x.t, 0) + ln(1 + exp(greatest(-700, -abs(x.t)))) END))) END"
)
"""`hippograph_core::scoring::default_value` in SQL, as a sum of logarithms: a product of small
factors would raise an underflow error in PostgreSQL where Rust rounds to zero, so exponents are
clamped. The reward factor is ``1 / (1 + exp(t))`` with ``t = -beta * average reward``, whose
logarithm is minus softplus(t), computed without overflow."""


class Ranked:
    """The ranking statements of one repo (cached per type, dimension, vector count and path)."""

    def __init__(self, schema: str, repo: str, ext: str) -> None:
        self.schema = schema
        self.repo = repo
        self.ext = ext
        self.weighted: set[NodeType] = set()
        """Types whose value-weighted vectors have an inner-product index (set by `ServerSearch.prepare`)."""
        self._statements: dict[tuple[NodeType, int, int, bool, bool, str], bytes] = {}

    def _statement(self, node_type: NodeType, dim: int, vectors: int, pooled: bool, weighted: bool, gate: str) -> bytes:
        key = (node_type, dim, vectors, pooled, weighted, gate)
        got = self._statements.get(key)
        if got is not None:
            return got
        s, e, d = sql.Identifier(self.schema), sql.Identifier(self.ext), sql.Literal(dim)
        repo, kind = sql.Literal(self.repo), sql.Literal(node_type.value)
        sims = [
            sql.SQL("coalesce(nullif(1 - (v.vec OPERATOR({e}.<=>) {q}::{e}.vector), 'NaN'::float8), 0)").format(
                e=e, q=sql.Placeholder(f"q{i}")
            )
            for i in range(vectors)
        ]
        where = sql.SQL("v.repo = {repo} AND v.type = {kind}").format(repo=repo, kind=kind)
        if pooled and weighted:
            # Per query vector, the rows of best weighted inner product (the best default scores);
            # the rows whose usage raised their weight since the index took it (`vectors._REWEIGHED`),
            # best by their current weight, scanned (`vectors.fold` keeps them few); and the rows
            # without metadata (no weight: scored by relevance alone), most similar to any query
            # vector, found by scanning them (`ServerSearch.prepare`: they are few).
            lists = [
                sql.SQL(
                    "(SELECT w.id FROM {s}.valued w WHERE w.repo = {repo} AND w.type = {kind} AND NOT w.pending "
                    "ORDER BY (w.val::{e}.vector({d})) OPERATOR({e}.<#>) ({q}::{e}.vector({d})) LIMIT %(depth)s)"
                ).format(s=s, repo=repo, kind=kind, e=e, d=d, q=sql.Placeholder(f"q{i}"))
                for i in range(vectors)
            ]
            # Per query vector, the same list over the pending rows (`vectors._PENDING`: written since
            # the index last took rows), scanned: the pool holds what a whole index would hand out.
            # (An expression no index matches: an earlier release's index also lists pending rows.)
            lists += [
                sql.SQL(
                    "(SELECT w.id FROM {s}.valued w WHERE w.repo = {repo} AND w.type = {kind} AND w.pending "
                    "AND w.val IS NOT NULL ORDER BY w.val OPERATOR({e}.<#>) {q}::{e}.vector LIMIT %(depth)s)"
                ).format(s=s, repo=repo, kind=kind, e=e, q=sql.Placeholder(f"q{i}"))
                for i in range(vectors)
            ]
            lists.append(
                sql.SQL(
                    "(SELECT c.id FROM {s}.reweighed c WHERE c.repo = {repo} AND c.type = {kind} "
                    "ORDER BY {best} LIMIT %(depth)s)"
                ).format(
                    s=s,
                    repo=repo,
                    kind=kind,
                    # unit query vectors: a row's score is its best cosine over them times its weight
                    best=_least(e, "c.val", "<#>", "u", vectors),
                )
            )
            lists.append(
                sql.SQL(
                    "(SELECT w.id FROM {s}.valued w JOIN {s}.vectors u ON u.repo = w.repo AND u.id = w.id "
                    "WHERE w.repo = {repo} AND w.type = {kind} AND w.val IS NULL "
                    "ORDER BY {near} LIMIT %(depth)s)"
                ).format(s=s, repo=repo, kind=kind, near=_least(e, "u.vec", "<=>", "q", vectors))
            )
            where = sql.SQL("{where} AND v.id IN ({lists})").format(where=where, lists=sql.SQL(" UNION ").join(lists))
        elif pooled:
            lists = [
                sql.SQL(
                    "(SELECT v.id FROM {s}.vectors v WHERE {where} AND NOT v.pending "
                    "ORDER BY (v.vec::{e}.vector({d})) OPERATOR({e}.<=>) ({q}::{e}.vector({d})) LIMIT %(depth)s)"
                ).format(s=s, where=where, e=e, d=d, q=sql.Placeholder(f"q{i}"))
                for i in range(vectors)
            ]
            lists += [
                sql.SQL(
                    "(SELECT v.id FROM {s}.vectors v WHERE {where} AND v.pending "
                    "ORDER BY v.vec OPERATOR({e}.<=>) {q}::{e}.vector LIMIT %(depth)s)"
                ).format(s=s, where=where, e=e, q=sql.Placeholder(f"q{i}"))
                for i in range(vectors)
            ]
            where = sql.SQL("{where} AND v.id IN ({lists})").format(where=where, lists=sql.SQL(" UNION ").join(lists))
        passes = {
            "zero": "y.score > 0",
            "score": "y.score >= %(threshold)s - %(margin)s",
            "relevance": "y.r >= %(threshold)s - %(margin)s",
        }[gate]
        # The best rows are chosen first and only they fetch their embedding and metadata record: in
        # one level, the lookups (and a window over every row) ran for each row the scan passed.
        # The best similarity of any row ranked serves the pooled path only (a pool's rows, not the type's).
        top = "max(y.r) OVER ()" if pooled else "0::float8"
        composed = sql.SQL(
            "SELECT b.id, b.score, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = {repo} AND e.id = b.id), "
            "(SELECT m.record FROM {s}.metadata m WHERE m.repo = {repo} AND m.id = b.id), b.top, "
            "n.record, l.edges, l.targets FROM ("
            "SELECT y.id, y.score, " + top + " AS top "
            "FROM (SELECT x.id, x.r, " + _VALUE + " AS score FROM ("
            "SELECT v.id, m.ts, m.reward_count, greatest(0, {sims}) AS r, "
            "CASE WHEN m.accesses + %(k)s > 0 THEN m.accesses / (m.accesses + %(k)s) ELSE 0 END AS freq, "
            "CASE WHEN m.reward_count > 0 THEN -%(beta)s * m.reward_sum / m.reward_count END AS t "
            "FROM {s}.vectors v LEFT JOIN {s}.metadata m ON m.repo = v.repo AND m.id = v.id WHERE {where}) x) y "
            "WHERE " + passes + " ORDER BY y.score DESC, y.id LIMIT %(limit)s) b "
            "LEFT JOIN {s}.nodes n ON n.repo = {repo} AND n.id = b.id "
            "LEFT JOIN LATERAL (SELECT array_agg(x.edge) AS edges, array_agg(x.b) AS targets FROM {s}.links x "
            "WHERE x.repo = {repo} AND x.a = b.id) l ON true ORDER BY b.score DESC, b.id"
        ).format(s=s, repo=repo, sims=sql.SQL(", ").join(sims), where=where)
        got = self._statements[key] = composed.as_bytes(None)  # rendered once: it holds only literals
        return got

    def rows(
        self,
        tx: _Tx,
        node_type: NodeType,
        dim: int,
        live: F32,
        params: ScanParams,
        now: float,
        limit: int,
        depth: int | None,
    ) -> list[RankedRow]:
        """The type's `limit` best rows by the server's score that pass the gate (with threshold
        <= 0: the rows scoring above zero), best first; from every row (`depth` None) or from each
        query vector's `depth` nearest rows in the HNSW index."""
        gate = "zero" if params.threshold <= 0.0 else params.gate
        weighted = node_type in self.weighted and server_vectors.weighted_alike(
            params.lam, params.k, params.base_floor, params.beta
        )
        statement = self._statement(node_type, dim, len(live), depth is not None, weighted, gate)
        values: dict[str, Any] = {
            "lam": params.lam,
            "k": params.k,
            "floor": params.base_floor,
            "beta": params.beta,
            "now": now,
            "threshold": params.threshold,
            "margin": margin(dim),
            "limit": limit,
            "depth": depth,
        }
        values.update({f"q{i}": Float4Array(q) for i, q in enumerate(live)})
        if depth is not None and weighted:
            values.update({f"u{i}": Float4Array(_unit(q)) for i, q in enumerate(live)})
        with tx.conn.cursor(binary=True) as cur:
            # A scan of every row is planned with the query's values (a custom plan): in the generic
            # plan of a prepared statement, the vectors' cast to `vector` ran again for every row.
            cur.execute(statement, values, prepare=depth is not None)
            return [
                (
                    bytes(k),
                    float(score),
                    bytes(v),
                    None if m is None else bytes(m),
                    float(top),
                    None if record is None else _decode_node(_id(k), record, v, _links(edges, targets)),
                )
                for k, score, v, m, top, record, edges, targets in cur
            ]

    def nearest(self, tx: _Tx, node_type: NodeType, dim: int, v: F32, k: int) -> list[list[float]]:
        """The vectors of the type's `k` rows nearest to `v` (through its HNSW index)."""
        e = sql.Identifier(self.ext)
        statement = sql.SQL(
            "SELECT v.vec::real[] FROM {s}.vectors v WHERE v.repo = {repo} AND v.type = {kind} AND NOT v.pending "
            "ORDER BY (v.vec::{e}.vector({d})) OPERATOR({e}.<=>) (%s::{e}.vector({d})) LIMIT %s"
        ).format(
            s=sql.Identifier(self.schema),
            repo=sql.Literal(self.repo),
            kind=sql.Literal(node_type.value),
            e=e,
            d=sql.Literal(dim),
        )
        with tx.conn.cursor(binary=True) as cur:
            cur.execute(statement, (Float4Array(v), k))
            return [list(row[0]) for row in cur]


def _least(e: sql.Identifier, column: str, operator: str, prefix: str, vectors: int) -> sql.Composed:
    """The least of `column` `operator` each query vector (placeholders `prefix`0, `prefix`1, ...):
    a row's order by its best match over them."""
    return sql.SQL("least({})").format(
        sql.SQL(", ").join(
            sql.SQL("{c} OPERATOR({e}.{o}) {p}::{e}.vector").format(
                c=sql.SQL(column), e=e, o=sql.SQL(operator), p=sql.Placeholder(f"{prefix}{i}")
            )
            for i in range(vectors)
        )
    )


def _unit(v: F32) -> F32:
    """`v` scaled to length 1 (a zero vector as it is)."""
    norm = float(np.linalg.norm(v))
    return v if norm == 0.0 else (v / np.float32(norm)).astype(np.float32)
