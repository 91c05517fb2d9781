"""`ServerSearch`: `find_candidates` answered by the PostgreSQL server (``search="server"``).

The client holds no vectors. Per requested type the server returns, for each query vector, its
nearest stored vectors of that type (pgvector's HNSW index where the type has one, an exact scan
otherwise) with their embeddings and metadata records: a *pool*. The client scores the pool
exactly as the in-process path does (the same relevance and value-function code), and the answer
is *certified* when no row outside the pool could enter it: a value never exceeds relevance, and
a row outside every list is no closer than the farthest row of the list it missed. Otherwise the
pool deepens, and past `_ANN_MOST` rows the exact server scan takes over. ``docs/postgres.md``
(Server-side search) tells the rules in full.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql

from ...engine.checks import as_datetime, utcnow
from ...engine.columns import TypeColumns
from ...engine.query import F32, prepare_queries, scan
from ...engine.vector_index import AnnConfig
from ...graph import codec
from ...graph.explain import Explaining, subject_score
from ...graph.hits import ExplainedHit
from ...graph.model import Node, NodeType, as_node_types
from ...graph.recall import python_values, usage_of
from ...graph.value import ResolvedConfig, TypeParams, ValueFunctionConfig, resolve_config
from . import depth, upkeep, vectors
from .arrays import Float4Array
from .ranked import Ranked, RankedRow, margin
from .tx import Conn, _id, _key, _Tx

__all__ = ["ServerSearch"]

_ANN_MOST = 1000
"""The deepest pool drawn from an HNSW index per query vector; deeper, the exact scan answers
(pgvector's iterative scans stop at ``hnsw.max_scan_tuples`` and its cost grows with depth)."""
_UNWEIGHTED_MOST = 256
"""A type draws its default-value pools from the value-weighted index only while at most this many
of its rows have no weight (no metadata): every pool scans those exactly."""
_SPARE = 8
"""Rows fetched beyond top_k, so that rows the server and the client score a hair apart still
land on the right side of the cut."""

_POOLS = "server: HNSW pools, certified equal to the exact ranking over the rows the HNSW search reached"
_RANKING = "server: exact ranking"
_UNCERTIFIED = "server: exact ranking (the HNSW pools could not certify this answer)"
_EVERY_ROW = "server: every row scored (the value function does not declare bounded_by_relevance)"

Pool = list[tuple[int, bytes, float, bytes, bytes | None]]
"""(list, key, distance, embedding, metadata record) rows of one pool query."""


class ServerSearch:
    """Builds and runs the pool queries of one repo; holds no vectors."""

    def __init__(self, schema: str, repo: str, ext: str) -> None:
        self.schema = schema
        self.repo = repo
        self.ext = ext
        self.indexed: set[NodeType] = set()
        """Types with a valid HNSW index for the repo's dimension (set by `prepare`)."""
        self.depth: dict[NodeType, int] = {}
        """Per indexed type, the pool depth per query vector its calibration chose (`prepare`)."""
        self.floor: dict[NodeType, float] = {}
        """Per calibrated type, the least similarity of a query the pools may answer (`depth`)."""
        self.recall: dict[NodeType, float] = {}
        """Per indexed type, the mean recall@k its calibration measured."""
        self.ranked = Ranked(schema, repo, ext)
        self._statements: dict[tuple[NodeType, int, int, bool], bytes] = {}

    def prepare(
        self,
        conn: Conn,
        ann: AnnConfig | None,
        types: Iterable[NodeType] | None = None,
        stop: threading.Event | None = None,
    ) -> list[NodeType]:
        """Builds the HNSW indexes the repo wants, calibrates their depth (`depth`) and notes which
        serve; returns the types built. Each type of `types` (None: all) holding more than
        ``ann.min_nodes`` nodes gets one. Without `ann` nothing is built or measured: what other
        processes built and measured, and is still fresh, is noted. `stop`, once set, ends the work
        between steps. `conn`: autocommit."""
        s = sql.Identifier(self.schema)
        row = conn.execute(sql.SQL("SELECT dim FROM {}.repos WHERE repo = %s").format(s), (self.repo,)).fetchone()
        if row is None or row[0] is None:
            self.indexed, self.depth = set(), {}
            return []
        dim = int(row[0])
        counts = {
            NodeType(t): int(c)
            for t, c in conn.execute(
                sql.SQL("SELECT type, count(*) FROM {}.nodes WHERE repo = %s GROUP BY type").format(s), (self.repo,)
            ).fetchall()
        }
        built: list[NodeType] = []
        if ann is not None:
            with vectors.no_timeout(conn):
                upkeep.settle(conn, self.schema, self.repo, stop, wait=True)
            wanted = set(NodeType if types is None else types)
            large = [t for t, c in counts.items() if c > ann.min_nodes and t in wanted]
            names = {vectors.index_name(self.repo, t, dim): t for t in large}
            names.update({vectors.value_index_name(self.repo, t, dim): t for t in large})
            made = vectors.ensure_indexes(
                conn, self.schema, self.ext, self.repo, dim, large, ann.M, ann.ef_construction, stop
            )
            built = list(dict.fromkeys(names[n] for n in made))
        valid = vectors.existing_indexes(conn, self.schema, self.repo)
        # An earlier release's indexes serve until their replacements are built.
        indexed = {
            t
            for t in NodeType
            if any(
                valid.get(n)
                for n in (vectors.index_name(self.repo, t, dim), *vectors.earlier_index_names(self.repo, t, dim))
            )
        }
        # Pools of the default value function come from the value-weighted index where it serves and
        # the rows without a weight (no metadata), scanned exactly with each pool, are few.
        self.ranked.weighted = {
            t
            for t in indexed
            if any(
                valid.get(n)
                for n in (
                    vectors.value_index_name(self.repo, t, dim),
                    *vectors.earlier_value_index_names(self.repo, t, dim),
                )
            )
            and upkeep.unweighted(conn, self.schema, self.repo, t, _UNWEIGHTED_MOST + 1) <= _UNWEIGHTED_MOST
        }
        if ann is not None:
            for t in sorted(self.ranked.weighted, key=lambda t: t.value):
                most = upkeep.fold_at(counts.get(t, 0))
                if (
                    valid.get(vectors.value_index_name(self.repo, t, dim))
                    and upkeep.reweighed(conn, self.schema, self.repo, t, most + 1) > most
                ):
                    upkeep.fold(conn, self.schema, self.repo, t, dim, stop)
        measured = depth.stored(conn, self.schema, self.repo, dim)
        tx = _Tx(conn, self.repo, {})

        def answer(
            node_type: NodeType, q: F32, params: TypeParams, now: datetime, deep: int | None
        ) -> tuple[list[tuple[str, float]], float]:
            tops: list[float] = []
            hits = self._ranked(tx, node_type, dim, q, q, params, now, deep is None, deep, tops=tops)
            return hits, min(tops, default=1.0)  # no pool rows: nothing to say where pools serve

        for t in sorted(indexed, key=lambda t: t.value):
            if ann is not None and not depth.fresh(measured.get(t), counts.get(t, 0)):

                def neighbours(v: F32, k: int, node_type: NodeType = t) -> F32:
                    rows = self.ranked.nearest(tx, node_type, dim, v, k)
                    return np.array(rows, np.float32).reshape(len(rows), dim)

                got = depth.calibrate(
                    conn, self.schema, self.repo, dim, t, counts.get(t, 0), ann, answer, neighbours, stop
                )
                if got is not None:
                    measured[t] = got
        fresh = {t: m for t, m in measured.items() if t in indexed and depth.fresh(m, counts.get(t, 0))}
        self.indexed = indexed
        self.depth = {t: m[1] for t, m in fresh.items() if m[1] > 0}
        self.floor = {t: m[3] for t, m in fresh.items()}
        self.recall = {t: m[2] for t, m in fresh.items()}
        return built

    def stats(self) -> dict[str, dict[str, Any]]:
        """`vector_index_stats` of a server-side search: per type, whether its HNSW index serves, how
        deep its pools draw, from which index, and the least similarity calibration sampled."""
        return {
            t.value: {
                "available": t in self.depth,
                "where": "server",
                "index": t in self.indexed,
                "depth": self.depth.get(t, 0),
                "recall": self.recall.get(t),
                # Where the default value function's pools come from (None: no index of the type).
                "pools": ("value-weighted" if t in self.ranked.weighted else "similarity")
                if t in self.indexed
                else None,
                "floor": self.floor.get(t),
            }
            for t in NodeType
        }

    def _pool_sql(self, node_type: NodeType, dim: int, lists: int, exact: bool) -> bytes:
        got = self._statements.get((node_type, dim, lists, exact))
        if got is not None:
            return got
        s, e = sql.Identifier(self.schema), sql.Identifier(self.ext)
        vec = sql.SQL("(v.vec::{e}.vector({d}))").format(e=e, d=sql.Literal(dim))
        parts = []
        for i in range(lists):
            distance = sql.SQL("{vec} OPERATOR({e}.<=>) (%s::{e}.vector({d}))").format(vec=vec, e=e, d=sql.Literal(dim))
            # An expression no index matches: the server scans and sorts.
            scanned = sql.SQL("(({}) + 0)").format(distance)
            where = sql.SQL("v.repo = {repo} AND v.type = {type}").format(
                repo=sql.Literal(self.repo), type=sql.Literal(node_type.value)
            )
            if exact:
                part = sql.SQL(
                    "(SELECT {i} AS i, v.id, {dist} AS d FROM {s}.vectors v WHERE {where} ORDER BY d LIMIT %s)"
                ).format(i=sql.Literal(i), dist=scanned, s=s, where=where)
            else:  # the index's nearest settled rows and the nearest pending rows (`vectors._PENDING`)
                part = sql.SQL(
                    "(SELECT {i} AS i, z.id, z.d FROM ((SELECT v.id, {dist} AS d FROM {s}.vectors v "
                    "WHERE {where} AND NOT v.pending ORDER BY d LIMIT %s) UNION ALL (SELECT v.id, {scanned} AS d "
                    "FROM {s}.vectors v WHERE {where} AND v.pending ORDER BY d LIMIT %s)) z ORDER BY z.d LIMIT %s)"
                ).format(i=sql.Literal(i), dist=distance, scanned=scanned, s=s, where=where)
            parts.append(part)
        composed = sql.SQL(
            "SELECT x.i, x.id, x.d, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = {repo} AND e.id = x.id), "
            "(SELECT m.record FROM {s}.metadata m WHERE m.repo = {repo} AND m.id = x.id) FROM ({lists}) x"
        ).format(s=s, repo=sql.Literal(self.repo), lists=sql.SQL(" UNION ALL ").join(parts))
        got = self._statements[(node_type, dim, lists, exact)] = composed.as_bytes(None)
        return got

    def _pool(self, tx: _Tx, node_type: NodeType, dim: int, queries: F32, n: int, exact: bool) -> Pool:
        statement = self._pool_sql(node_type, dim, len(queries), exact)
        params: list[Any] = []
        for q in queries:
            params += [Float4Array(q), n] if exact else [Float4Array(q), n, Float4Array(q), n, n]
        with tx.conn.cursor(binary=True) as cur:
            cur.execute(statement, params)
            return [(int(i), bytes(k), float(d), bytes(v), None if m is None else bytes(m)) for i, k, d, v, m in cur]

    def find_candidates(
        self,
        tx: _Tx,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: ValueFunctionConfig | Mapping[str, Any] | None,
        now: datetime | None,
        dim: int | None,
        *,
        exact: bool,
        explain: Explaining | None = None,
    ) -> list[tuple[Node, float]]:
        """The `GraphBackend.find_candidates` query, in `tx`'s snapshot (`explain` collects its
        explanations: see `hippograph.graph.explain`)."""
        wanted = as_node_types(types)
        queries = prepare_queries(query, tags, dim)
        when = utcnow() if now is None else as_datetime(now, "now")
        cfg = resolve_config(value_function)
        bounded = cfg.is_default or getattr(cfg.function, "bounded_by_relevance", False) is True
        # A zero query vector matches nothing: it adds no relevance, so it needs no list.
        live = queries[np.einsum("ij,ij->i", queries, queries) > 0] if dim else queries[:0]
        out: list[tuple[Node, float]] = []
        seen: set[str] = set()
        known: dict[str, Node] = {}  # nodes the ranking statements returned with their rows
        for at, node_type in enumerate(wanted, 1):
            tp = cfg.params[node_type]
            if tp.top_k == 0:
                if explain is not None:  # nothing to rank, but `why_not`'s node still gets its numbers
                    self._explained(tx, explain, node_type, [], queries, tp, cfg, when, "server: top_k is 0")
                continue
            route: list[str] = []
            if cfg.is_default:
                scored: list[tuple[str, float]] | None = self._ranked(
                    tx, node_type, dim or 0, queries, live, tp, when, exact, known=known, route=route
                )
            elif bounded:
                scored = self._certified(tx, node_type, dim or 0, queries, live, tp, cfg, when, exact)
                route.append(_POOLS)
            else:
                scored = None
            if scored is None:
                scored = self._every_row(tx, node_type, queries, tp, cfg, when)
                route[:] = [_EVERY_ROW]
            picked = [(i, s) for i, s in scored if i not in seen]
            fetched = {i: node for i, (node, _) in tx.nodes([i for i, _ in picked if i not in known]).items()}
            hits = [(node, s) for i, s in picked if (node := known.get(i, fetched.get(i))) is not None]
            if explain is not None:
                hits = list(self._explained(tx, explain, node_type, hits, queries, tp, cfg, when, route[-1]))
            out += hits
            if at < len(wanted):  # a type listed twice answers its nodes once
                seen.update(node.id for node, _ in hits)
        return out

    def _explained(
        self,
        tx: _Tx,
        explain: Explaining,
        node_type: NodeType,
        hits: list[tuple[Node, float]],
        queries: F32,
        tp: TypeParams,
        cfg: ResolvedConfig,
        when: datetime,
        path: str,
    ) -> list[ExplainedHit]:
        """`hits` explained from columns of their rows (and of the node `why_not` asks about, when
        of this type), scored by the same in-process code that rescored the server's rows."""
        subject = explain.subject_id
        loaded = tx.nodes([n.id for n, _ in hits] + ([] if subject is None else [subject]), with_meta=True)
        columns = TypeColumns()
        for node_id, (node, meta) in sorted(loaded.items()):
            if node.node_type == node_type:
                columns.upsert(node_id, node.embedding, usage_of(meta))
        score = None
        if not cfg.is_default and subject is not None:
            score = subject_score(columns, queries, cfg, tp, when, loaded.get)
        return explain.type_answered(columns, node_type, hits, queries, tp, cfg, when, path, score)

    def _ranked(
        self,
        tx: _Tx,
        node_type: NodeType,
        dim: int,
        queries: F32,
        live: F32,
        tp: TypeParams,
        when: datetime,
        exact: bool,
        depth: int | None = None,
        known: dict[str, Node] | None = None,
        tops: list[float] | None = None,
        route: list[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The default value function's answer: from the HNSW pools reranked by the server when the
        type has a calibrated depth (and the pools fill top_k), else from the server's exact ranking,
        certified against the client's scores (see `ranked`). `known` gains the nodes the ranking
        statements returned (the answer's, so that they need no second statement); `tops`, the best
        similarity of any row the pools ranked (calibration measures its floor with it)."""
        measuring = depth is not None
        depth = depth if measuring else (None if exact else self.depth.get(node_type))
        zero_passes = tp.threshold <= 0.0

        def passing(hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
            # With a threshold at or below zero the server hands over its positive scores only;
            # zero scores (the client's, exactly) are filled in by id below.
            return [(i, s) for i, s in hits if s > 0.0] if zero_passes else hits

        def ranked(limit: int, depth: int | None) -> list[RankedRow]:
            rows = self.ranked.rows(tx, node_type, dim, live, tp, when.timestamp(), limit, depth)
            if known is not None:
                known.update((_id(row[0]), row[5]) for row in rows if row[5] is not None)
            return rows

        if depth is not None and len(live):
            rows = ranked(tp.top_k + _SPARE, depth)
            if tops is not None and rows:
                tops.append(rows[0][4])
            hits = passing(self._rescored(rows, queries, tp, when))
            # Where calibration measured (a depth given by the caller is being measured: no floor yet).
            near = bool(rows) and (measuring or rows[0][4] >= self.floor.get(node_type, 1.0))
            if len(hits) == tp.top_k and near and not _stamped_after(rows, when):
                if route is not None:
                    route.append(_POOLS)
                return hits
        if route is not None:
            route.append(_RANKING if exact or depth is None else _UNCERTIFIED)
        limit = tp.top_k + _SPARE
        while True:
            rows = ranked(limit, None) if len(live) else []
            hits = passing(self._rescored(rows, queries, tp, when))
            if len(rows) < limit:  # every row the server's gate passes is here
                break
            if len(hits) == tp.top_k and hits[-1][1] > rows[-1][1] + margin(dim):
                return hits
            limit *= 4
        if len(hits) < tp.top_k and zero_passes:
            return hits + self._zero_fill(tx, node_type, [i for i, _ in hits], tp.top_k - len(hits))
        return hits

    def _rescored(self, rows: list[RankedRow], queries: F32, tp: TypeParams, when: datetime) -> list[tuple[str, float]]:
        """The rows' best by the in-process scan (the same scores as the client path)."""
        columns = TypeColumns()
        for key, _, vec, meta, _, _ in rows:
            columns.upsert(_id(key), codec.decode_embedding(vec), None if meta is None else codec.usage_of_meta(meta))
        return scan(columns, queries, tp, when.timestamp(), None)

    def _certified(
        self,
        tx: _Tx,
        node_type: NodeType,
        dim: int,
        queries: F32,
        live: F32,
        tp: TypeParams,
        cfg: ResolvedConfig,
        when: datetime,
        exact: bool,
    ) -> list[tuple[str, float]] | None:
        """The type's answer from certified pools, or None when only scoring every row can answer."""
        use_index = not exact and node_type in self.depth  # where calibration found the index worth it
        first = n = max(tp.top_k, 16) if len(live) <= 1 else max(tp.top_k // 2, 8)
        while True:
            rows: Pool = self._pool(tx, node_type, dim, live, n, not use_index) if len(live) else []
            per_list: dict[int, list[float]] = {}
            for i, _, d, _, _ in rows:
                per_list.setdefault(i, []).append(d)
            full = [ds for i, ds in per_list.items() if len(ds) >= n]
            short = len(per_list) < len(live) or any(len(ds) < n for ds in per_list.values())
            if use_index and short:  # an index scan may stop early: only the exact scan tells "no more"
                use_index, n = False, first
                continue
            bound = 0.0
            for ds in full:
                finite = [d for d in ds if d == d]  # NaN: zero vectors, listed last; every other row was seen
                if len(finite) == len(ds):
                    bound = max(bound, 1.0 - max(finite) + margin(dim) if max(finite) < 1.0 else 0.0)
            hits = self._score_pool(tx, rows, queries, tp, cfg, when)
            if len(hits) == tp.top_k and hits[-1][1] > bound:
                return hits
            if tp.threshold > bound:  # nothing outside the pool passes the gate
                return hits
            if bound <= 0.0 and tp.threshold <= 0.0:  # the rest score zero: they fill up in id order
                if not cfg.is_default:
                    return None
                positive = [(i, s) for i, s in hits if s > 0.0]
                return positive + self._zero_fill(tx, node_type, [i for i, _ in positive], tp.top_k - len(positive))
            n *= 4
            if use_index and n > _ANN_MOST:
                use_index, n = False, first

    def _score_pool(
        self, tx: _Tx, rows: Pool, queries: F32, tp: TypeParams, cfg: ResolvedConfig, when: datetime
    ) -> list[tuple[str, float]]:
        """The pool's best rows by exact score, as the in-process scan scores them."""
        columns = TypeColumns()
        for _, key, _, vec, meta in rows:
            columns.upsert(_id(key), codec.decode_embedding(vec), None if meta is None else codec.usage_of_meta(meta))
        return self._scan(tx, columns, queries, tp, cfg, when)

    def _scan(
        self, tx: _Tx, columns: TypeColumns, queries: F32, tp: TypeParams, cfg: ResolvedConfig, when: datetime
    ) -> list[tuple[str, float]]:
        def hydrate(ids: list[str], metadata: bool) -> Mapping[str, Any]:
            return tx.nodes(ids, with_meta=metadata)

        values = None if cfg.is_default else python_values(cfg, tp, when, hydrate)
        return scan(columns, queries, tp, when.timestamp(), values)

    def _zero_fill(self, tx: _Tx, node_type: NodeType, exclude: list[str], count: int) -> list[tuple[str, float]]:
        """`count` rows of the type scoring zero, in id order: every row but the positive ones."""
        if count <= 0:
            return []
        statement = sql.SQL(
            "SELECT id FROM {s}.nodes WHERE repo = %s AND type = %s AND NOT id = ANY(%s) ORDER BY id LIMIT %s"
        ).format(s=sql.Identifier(self.schema))
        with tx.conn.cursor(binary=True) as cur:
            cur.execute(statement, (self.repo, node_type.value, [_key(i) for i in exclude], count))
            return [(_id(row[0]), 0.0) for row in cur]

    def _every_row(
        self, tx: _Tx, node_type: NodeType, queries: F32, tp: TypeParams, cfg: ResolvedConfig, when: datetime
    ) -> list[tuple[str, float]]:
        """A value function that may exceed relevance: every row of the type is scored."""
        statement = sql.SQL(
            "SELECT n.id, (SELECT e.vec FROM {s}.embeddings e WHERE e.repo = n.repo AND e.id = n.id), "
            "(SELECT m.record FROM {s}.metadata m WHERE m.repo = n.repo AND m.id = n.id) "
            "FROM {s}.nodes n WHERE n.repo = %s AND n.type = %s ORDER BY n.id"
        ).format(s=sql.Identifier(self.schema))
        columns = TypeColumns()
        with tx.conn.cursor(binary=True) as cur:
            cur.execute(statement, (self.repo, node_type.value))
            for key, vec, meta in cur:
                columns.upsert(
                    _id(key),
                    None if vec is None else codec.decode_embedding(bytes(vec)),
                    None if meta is None else codec.usage_of_meta(bytes(meta)),
                )
        if not columns.ids:
            return []
        return self._scan(tx, columns, queries, tp, cfg, when)


def _stamped_after(rows: list[RankedRow], when: datetime) -> bool:
    """Whether a pooled row's usage is stamped after `now` (beyond `vectors.AHEAD`). Such a row
    scores as if it were used now, below its weight in the value-weighted index (weights are fixed
    when written), so it sits higher in the index than its score: enough of them crowd the pools
    and push the best rows out (a query "as of" a time before later writes). The exact ranking
    answers then."""
    moment = when.timestamp() + vectors.AHEAD
    return any(meta is not None and codec.usage_of_meta(meta)[0] > moment for _, _, _, meta, _, _ in rows)
