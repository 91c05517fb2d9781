"""Derived scoring state shared by the built-in backends.

A `TypeIndex` holds, for one node type, what a scan needs as contiguous numpy
columns: the embedding matrix (zero rows for nodes without one), cached row
norms, and the metadata columns the default value function reads. Backends keep
it in step with their writes; it is derived data and can always be rebuilt.
`find_candidates` implements the DESIGN §3 query on top of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core
from .errors import ValidationError
from .model import Embedding, Node, NodeMetadata, NodeType, as_datetime, as_embedding, as_node_type, utcnow
from .value import ResolvedConfig, TypeParams, ValueFunctionConfig, resolve_config

__all__ = ["META_COLUMNS", "TypeIndex", "TypeSnapshot", "find_candidates", "meta_columns", "prepare_queries"]

META_COLUMNS = ("has_meta", "timestamp", "access_count", "reward_count", "cumulative_reward")


def meta_columns(meta: NodeMetadata | None) -> tuple[int, float, float, float, float]:
    """The metadata of one node as the value function's numeric columns."""
    if meta is None:
        return (0, 0.0, 0.0, 0.0, 0.0)
    return (
        1,
        meta.reference_time.timestamp(),
        float(meta.access_count),
        float(meta.reward_count),
        meta.cumulative_reward,
    )


@dataclass(frozen=True)
class TypeSnapshot:
    """A copy of one type's scoring columns, for maintenance passes."""

    ids: list[str]
    matrix: npt.NDArray[np.float32]
    norms: npt.NDArray[np.float32]
    columns: dict[str, npt.NDArray[Any]]


class TypeIndex:
    """Rows of one node type, in insertion order with swap-remove on delete."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.row: dict[str, int] = {}
        self.dim = 0
        self._mat: npt.NDArray[np.float32] = np.zeros((0, 0), np.float32)
        self._norms: npt.NDArray[np.float32] = np.zeros(0, np.float32)
        self._cols: dict[str, npt.NDArray[Any]] = {
            name: np.zeros(0, np.uint8 if name == "has_meta" else np.float64) for name in META_COLUMNS
        }
        self._rank: npt.NDArray[np.uint32] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def _grow(self, need: int) -> None:
        cap = self._norms.shape[0]
        if need <= cap:
            return
        new_cap = max(need, 2 * cap, 64)
        mat = np.zeros((new_cap, self.dim), np.float32)
        mat[:cap] = self._mat
        self._mat = mat
        self._norms = np.resize(self._norms, new_cap)
        for name, col in self._cols.items():
            self._cols[name] = np.resize(col, new_cap)

    def _ensure_dim(self, dim: int) -> None:
        if self.dim == dim:
            return
        if self.dim != 0:
            raise ValidationError(f"embedding dimension {dim} does not match the index dimension {self.dim}")
        self.dim = dim
        self._mat = np.zeros((self._norms.shape[0], dim), np.float32)

    def upsert(self, node_id: str, embedding: Embedding | None, meta: NodeMetadata | None) -> None:
        if embedding is not None:
            self._ensure_dim(embedding.shape[0])
        r = self.row.get(node_id)
        if r is None:
            r = len(self.ids)
            self._grow(r + 1)
            self.ids.append(node_id)
            self.row[node_id] = r
            self._rank = None
        if embedding is None:
            self._mat[r] = 0.0
            self._norms[r] = 0.0
        else:
            self._mat[r] = embedding
            self._norms[r] = np.sqrt(np.dot(embedding.astype(np.float64), embedding.astype(np.float64)))
        self.set_meta(node_id, meta)

    def set_meta(self, node_id: str, meta: NodeMetadata | None) -> None:
        r = self.row.get(node_id)
        if r is None:
            return
        for name, value in zip(META_COLUMNS, meta_columns(meta), strict=True):
            self._cols[name][r] = value

    def remove(self, node_id: str) -> None:
        r = self.row.pop(node_id, None)
        if r is None:
            return
        last = len(self.ids) - 1
        if r != last:
            moved = self.ids[last]
            self.ids[r] = moved
            self.row[moved] = r
            self._mat[r] = self._mat[last]
            self._norms[r] = self._norms[last]
            for col in self._cols.values():
                col[r] = col[last]
        self.ids.pop()
        self._rank = None

    def rank(self) -> npt.NDArray[np.uint32]:
        """Each row's position in id order: the tie-break of equal scores."""
        if self._rank is None:
            order = sorted(range(len(self.ids)), key=self.ids.__getitem__)
            rank = np.empty(len(order), np.uint32)
            rank[order] = np.arange(len(order), dtype=np.uint32)
            self._rank = rank
        return self._rank

    def matrix(self) -> npt.NDArray[np.float32]:
        return self._mat[: len(self.ids)]

    def norms(self) -> npt.NDArray[np.float32]:
        return self._norms[: len(self.ids)]

    def snapshot(self) -> TypeSnapshot:
        return TypeSnapshot(
            list(self.ids),
            self.matrix().copy(),
            self.norms().copy(),
            {name: self.column(name).copy() for name in META_COLUMNS},
        )

    def column(self, name: str) -> npt.NDArray[Any]:
        return self._cols[name][: len(self.ids)]

    def scan(
        self,
        queries: npt.NDArray[np.float32],
        cfg: ResolvedConfig,
        tp: TypeParams,
        now: datetime,
        hydrate: Callable[[list[str]], Mapping[str, tuple[Node, NodeMetadata | None]]],
    ) -> list[tuple[str, float]]:
        """Ids and scores of the best rows, best first (ties by id)."""
        if not self.ids or tp.top_k == 0:
            return []
        mat = self.matrix()
        if queries.shape[0] and self.dim == 0:
            queries = np.zeros((0, 0), np.float32)
        if cfg.is_default:
            idx, scores = _core.scan_default(
                mat,
                self.norms(),
                queries,
                has_meta=self.column("has_meta"),
                timestamp=self.column("timestamp"),
                access_count=self.column("access_count"),
                reward_count=self.column("reward_count"),
                cumulative_reward=self.column("cumulative_reward"),
                rank=self.rank(),
                now=now.timestamp(),
                lambda_=tp.lam,
                k=tp.k,
                base_floor=tp.base_floor,
                beta=tp.beta,
                threshold=tp.threshold,
                top_k=tp.top_k,
            )
            return [(self.ids[i], float(s)) for i, s in zip(idx.tolist(), scores.tolist(), strict=True)]
        rel = _core.relevance(mat, self.norms(), queries)
        loaded = hydrate(list(self.ids))
        params = {**tp.raw, "now": now}
        values = np.full(len(self.ids), np.nan, np.float64)
        for r, node_id in enumerate(self.ids):
            got = loaded.get(node_id)
            if got is not None:
                values[r] = float(cfg.function.score(float(rel[r]), got[0], got[1], params))
        idx = _core.select_top(values, tp.threshold, tp.top_k, self.rank())
        return [(self.ids[i], float(values[i])) for i in idx.tolist()]


def prepare_queries(query: object, tags: Iterable[object], dim: int | None) -> npt.NDArray[np.float32]:
    """The query and tag vectors as one `m × dim` matrix, validated."""
    vectors = [as_embedding(query, "query")]
    if isinstance(tags, np.ndarray) and tags.ndim == 2:
        tags = list(tags)
    vectors += [as_embedding(t, f"tag vector {i}") for i, t in enumerate(tags)]
    width = vectors[0].shape[0]
    for i, v in enumerate(vectors):
        expected = dim or width
        if v.shape[0] != expected:
            what = "query" if i == 0 else f"tag vector {i - 1}"
            raise ValidationError(f"{what} has dimension {v.shape[0]}, the store holds dimension {expected}")
    return np.ascontiguousarray(np.stack(vectors))


def find_candidates(
    indexes: Mapping[NodeType, TypeIndex],
    types: Sequence[NodeType | str],
    query: object,
    tags: Iterable[object],
    value_function: ValueFunctionConfig | Mapping[str, Any] | None,
    now: datetime | None,
    dim: int | None,
    hydrate: Callable[[list[str]], Mapping[str, tuple[Node, NodeMetadata | None]]],
) -> list[tuple[Node, float]]:
    """The DESIGN §3 query over a backend's type indexes.

    `hydrate` loads nodes (and metadata) for ids; an id it cannot load is
    skipped, so a stale index can never surface a node the store lost.
    """
    if isinstance(types, (str, NodeType)):
        types = [types]
    wanted = [as_node_type(t) for t in types]
    queries = prepare_queries(query, tags, dim)
    when = utcnow() if now is None else as_datetime(now, "now")
    cfg = resolve_config(value_function)
    out: list[tuple[Node, float]] = []
    seen: set[str] = set()
    for node_type in wanted:
        index = indexes.get(node_type)
        if index is None:
            continue
        tp = cfg.params[node_type]
        picked = [(i, s) for i, s in index.scan(queries, cfg, tp, when, hydrate) if i not in seen]
        loaded = hydrate([i for i, _ in picked])
        for node_id, score in picked:
            got = loaded.get(node_id)
            if got is not None:
                seen.add(node_id)
                out.append((got[0], score))
    return out
