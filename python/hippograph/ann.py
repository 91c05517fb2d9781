"""Approximate nearest-neighbour candidates (HNSW via hnswlib), as derived data.

An `AnnIndex` mirrors one node type's embeddings. It is only ever a source of
*candidates*: every candidate is rescored exactly in Rust, and the candidate
pool grows until the ranking is certified (see `certified_scan`), so the only
error left is the HNSW graph's own neighbour recall.

Guarantees, whatever the index holds:

- labels are stable integers, never rows; a label maps back to an id only
  while that id is live in the owning `TypeIndex`, so a deleted node can
  never be returned;
- re-embedding a node marks its old label deleted and adds a new one, so an
  old vector never ranks it;
- deletions are marks, counted as ``reclaimable`` until `rebuild` compacts.

hnswlib is not safe to add to while searching: the owning backend only adds
and marks under its write lock, and searches here run under `self.lock`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .errors import ConfigError

if TYPE_CHECKING:
    from ._index import TypeIndex

try:
    import hnswlib
except ImportError:  # pragma: no cover - hnswlib is a declared dependency
    hnswlib = None

__all__ = ["DEFAULT_ANN", "AnnConfig", "AnnIndex", "ann_available"]


def ann_available() -> bool:
    return hnswlib is not None


@dataclass(frozen=True)
class AnnConfig:
    """When and how to build HNSW indexes.

    `min_nodes`: a type with more embedded nodes than this uses the index
    (below it the exact scan is faster). `M`, `ef_construction`, `ef_search`
    are hnswlib's parameters; `ef_search` is raised to the pool size per query.
    """

    min_nodes: int = 20_000
    M: int = 16
    ef_construction: int = 100
    ef_search: int = 64
    threads: int = 0

    def __post_init__(self) -> None:
        for name in ("min_nodes", "M", "ef_construction", "ef_search"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"AnnConfig.{name} must be a positive int, got {value!r}")


DEFAULT_ANN: AnnConfig | None = AnnConfig() if hnswlib is not None else None
"""The built-in backends' default: HNSW above 20k nodes of a type, when hnswlib is installed."""


class AnnIndex:
    """One type's HNSW graph with stable labels."""

    def __init__(self, dim: int, config: AnnConfig, capacity: int) -> None:
        if hnswlib is None:  # pragma: no cover
            raise ConfigError("hnswlib is not installed; approximate recall is unavailable")
        self.dim = dim
        self.config = config
        self.lock = threading.Lock()
        self.index = hnswlib.Index(space="cosine", dim=dim)
        self.index.init_index(max_elements=max(capacity, 1024), M=config.M, ef_construction=config.ef_construction)
        if config.threads:
            self.index.set_num_threads(config.threads)
        self.label_of: dict[str, int] = {}
        self.id_of: dict[int, str] = {}
        self.row_of_label = np.full(max(capacity, 1024), -1, np.int64)
        self.next_label = 0
        self.reclaimable = 0

    def __len__(self) -> int:
        return len(self.label_of)

    def _reserve(self, extra: int) -> None:
        need = self.index.element_count + extra
        cap = self.index.get_max_elements()
        if need > cap:
            self.index.resize_index(max(need, 2 * cap))

    def add_many(self, ids: list[str], vectors: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]) -> None:
        """Adds (or re-adds under a fresh label) each id's vector at its row; zero vectors are skipped."""
        norms = np.linalg.norm(vectors, axis=1) if len(ids) else np.zeros(0)
        keep = [i for i in range(len(ids)) if norms[i] > 0]
        for node_id in ids:
            self.discard(node_id)
        if not keep:
            return
        labels = np.arange(self.next_label, self.next_label + len(keep), dtype=np.int64)
        self.next_label += len(keep)
        self._reserve(len(keep))
        self.index.add_items(np.ascontiguousarray(vectors[keep]), labels)
        if self.next_label > len(self.row_of_label):
            grown = np.full(max(self.next_label, 2 * len(self.row_of_label)), -1, np.int64)
            grown[: len(self.row_of_label)] = self.row_of_label
            self.row_of_label = grown
        self.row_of_label[labels] = rows[keep]
        for label, i in zip(labels.tolist(), keep, strict=True):
            self.label_of[ids[i]] = label
            self.id_of[label] = ids[i]

    def moved(self, node_id: str, row: int) -> None:
        """The owning index moved `node_id` to `row` (swap-remove)."""
        label = self.label_of.get(node_id)
        if label is not None:
            self.row_of_label[label] = row

    def discard(self, node_id: str) -> None:
        label = self.label_of.pop(node_id, None)
        if label is not None:
            self.id_of.pop(label, None)
            self.row_of_label[label] = -1
            self.index.mark_deleted(label)
            self.reclaimable += 1

    def knn(self, queries: npt.NDArray[np.float32], k: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]] | None:
        """Labels and cosine similarities of the k nearest per query, or None if hnswlib cannot answer."""
        k = min(k, len(self))
        if k == 0:
            return None
        with self.lock:
            self.index.set_ef(max(self.config.ef_search, k))
            try:
                labels, distances = self.index.knn_query(queries, k=k)
            except RuntimeError:
                return None
        return labels, 1.0 - distances

    def stats(self) -> dict[str, int]:
        return {"vectors": int(self.index.element_count), "live": len(self), "reclaimable": self.reclaimable}


def build(index: TypeIndex, config: AnnConfig) -> AnnIndex:
    """An HNSW graph over every embedded row of `index`."""
    ann = AnnIndex(index.dim, config, capacity=len(index))
    ann.add_many(list(index.ids), index.matrix(), np.arange(len(index), dtype=np.int64))
    return ann


Scorer = Callable[[npt.NDArray[np.int64]], tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]


def certified_scan(
    index: TypeIndex,
    ann: AnnIndex,
    queries: npt.NDArray[np.float32],
    top_k: int,
    threshold: float,
    score_rows: Scorer,
    usage: npt.NDArray[np.float64] | None = None,
) -> list[tuple[int, float]] | None:
    """Top rows by exact score from an ANN candidate pool, or None when the exact scan must answer.

    Why the answer is exact (up to the HNSW graph's own neighbour recall): a
    row outside the pool has relevance at most `bound`, the smallest
    similarity the ANN returned per query vector (maximised over them), and
    the value function never exceeds relevance × the row's usage factor
    (`usage`; all ones for a custom function that only declares it never
    exceeds relevance). With `cutoff` the k-th best pool score (or the
    threshold while fewer rows qualify), every row with bound × usage ≥ cutoff
    is scored too; all others are provably below the answer. When that extra
    set is large the pool grows instead. When too few rows score above zero
    while the threshold admits zero, the remaining slots belong to zero-score
    rows in id order, which only the exact scan enumerates: None.
    """
    n = len(index.ids)
    factors = np.ones(n, np.float64) if usage is None else usage
    pool = max(8 * top_k, 128)
    while True:
        found = ann.knn(queries, pool)
        if found is None:
            return None
        labels, sims = found
        exhausted = labels.shape[1] >= len(ann)
        rows = ann.row_of_label[labels.ravel().astype(np.int64)]
        rows = np.unique(rows[rows >= 0])
        picked, scores = score_rows(rows)
        full = len(picked) >= top_k
        if not full and threshold <= 0.0:
            return None
        cutoff = float(scores[top_k - 1]) if full else threshold
        # Float noise between hnswlib's and the Rust core's cosine is far below this margin.
        bound = 0.0 if exhausted else max(0.0, float(sims[:, -1].max())) + 1e-6
        contenders = np.flatnonzero(bound * factors >= cutoff - 1e-9)
        extra = np.setdiff1d(contenders, rows, assume_unique=True)
        if len(extra) == 0:
            return list(zip(picked.tolist(), scores.tolist(), strict=True))
        if exhausted or len(extra) <= max(4 * pool, n // 16):
            picked, scores = score_rows(np.union1d(rows, extra))
            if len(picked) < top_k and threshold <= 0.0:
                return None
            return list(zip(picked.tolist(), scores.tolist(), strict=True))
        pool *= 4
