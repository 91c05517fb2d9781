"""Recall you can state: how well a vector index finds each row's true neighbours, measured.

A sample of the stored vectors is used as queries (each query's own row left
out). Their exact top-k by cosine is the truth; the index's neighbours at a
given ``ef`` are what approximate queries would get. ``ef`` doubles from the
configured one until the mean recall reaches `AnnConfig.target_recall`; the
index query's time is set against the exact scan's. An index that cannot
reach the target, or not at `AnnConfig.min_speedup` times the exact scan's
speed, is marked unusable and the exact scan answers instead: never a
low-recall answer. docs/architecture.md (derived data) says when it runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .. import _core
from .vector_index import VectorIndex

__all__ = ["Calibration", "calibrate", "restore"]

_BATCH = 16
"""Sample queries scored against the matrix at once (bounds the temporary `n × batch` array)."""


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` measured: `recall` (mean over the sample) and `worst` at `ef_search`,
    the exact scan's time over the index's (`speedup`), and whether approximate answers may use
    the index (`usable`; otherwise `reason` says why)."""

    ef_search: int
    k: int
    target: float
    min_speedup: float
    recall: float
    worst: float
    speedup: float
    rows: int
    sample: int
    usable: bool
    reason: str | None

    def stats(self) -> dict[str, object]:
        return {
            "recall_estimate": round(self.recall, 4),
            "recall_worst": round(self.worst, 4),
            "ef_search": self.ef_search,
            "speedup_estimate": round(self.speedup, 2),
            "calibrated_rows": self.rows,
            "exact_fallback": not self.usable,
            "fallback_reason": self.reason,
        }


def _exact_neighbours(
    matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], k: int
) -> list[set[int]]:
    """Each sample row's k most similar other rows by cosine (zero rows never match)."""
    safe = np.where(norms > 0, norms, np.inf).astype(np.float32)
    out: list[set[int]] = []
    for start in range(0, len(rows), _BATCH):
        batch = rows[start : start + _BATCH]
        queries = matrix[batch] / safe[batch, None]
        sims = (matrix @ queries.T) / safe[:, None]
        sims[batch, np.arange(len(batch))] = -np.inf  # a row is not its own neighbour
        top = np.argpartition(-sims, k - 1, axis=0)[:k]
        out.extend(set(top[:, j].tolist()) for j in range(len(batch)))
    return out


def _index_neighbours(
    ann: VectorIndex, queries: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], k: int, ef: int
) -> tuple[list[set[int]], float]:
    """Each sample row's k nearest other rows by the index at `ef`, and the seconds per query."""
    with ann.lock:
        ann.index.set_ef(max(ef, k + 1))
        start = time.perf_counter()
        labels, _ = ann.index.knn_query(queries, k=min(k + 1, len(ann)))
        elapsed = (time.perf_counter() - start) / len(rows)
    found = ann.row_of_label[labels.astype(np.int64)]
    out: list[set[int]] = []
    for j, own in enumerate(rows.tolist()):
        out.append(set([r for r in found[j].tolist() if r >= 0 and r != own][:k]))
    return out, elapsed


def _exact_seconds(
    matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> float:
    """The exact scan's time for one query vector (the best of three, so a stray pause does not count)."""
    best = float("inf")
    one = np.ascontiguousarray(query[None, :])
    for _ in range(3):
        start = time.perf_counter()
        _core.relevance(matrix, norms, one)
        best = min(best, time.perf_counter() - start)
    return best


def calibrate(
    ann: VectorIndex, matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], *, k: int = 20
) -> Calibration:
    """Measures `ann` (whose labels map to rows of `matrix`) and picks its ``ef_search``; sets
    ``ann.ef_search`` and ``ann.calibration``. Call where no write can run on `ann` meanwhile."""
    config = ann.config
    embedded = np.flatnonzero(norms > 0)
    n = len(embedded)
    k = max(1, min(k, n - 1))
    if n < 2:
        result = Calibration(
            config.ef_search, k, config.target_recall, config.min_speedup, 1.0, 1.0, 1.0, n, 0, True, None
        )
        ann.calibration, ann.ef_search = result, config.ef_search
        return result
    rng = np.random.default_rng(n)  # the same sample for the same rows: repeatable estimates
    rows = np.sort(rng.choice(embedded, size=min(config.calibration_queries, n), replace=False)).astype(np.int64)
    queries = np.ascontiguousarray(matrix[rows])
    truth = _exact_neighbours(matrix, norms, rows, k)
    exact_seconds = _exact_seconds(matrix, norms, queries[0])
    ef, most = config.ef_search, max(config.ef_search, min(config.max_ef_search, n))
    while True:
        found, seconds = _index_neighbours(ann, queries, rows, k, ef)
        recalls = np.array([len(f & t) / len(t) for f, t in zip(found, truth, strict=True)])
        if recalls.mean() >= config.target_recall or ef >= most:
            break
        ef = min(2 * ef, most)
    speedup = exact_seconds / seconds if seconds > 0 else float("inf")
    reason = None
    if recalls.mean() < config.target_recall:
        reason = f"mean recall@{k} {recalls.mean():.3f} below the target {config.target_recall} at ef_search {ef}"
    elif speedup < config.min_speedup:
        reason = f"only {speedup:.1f}x faster than the exact scan at the recall target (needs {config.min_speedup}x)"
    result = Calibration(
        ef, k, config.target_recall, config.min_speedup, float(recalls.mean()), float(recalls.min()), speedup, n,
        len(rows), reason is None, reason,
    )  # fmt: skip
    ann.calibration, ann.ef_search = result, ef
    return result


def restore(doc: object, ann: VectorIndex) -> None:
    """Adopts a calibration saved with `ann`'s files when it was made for the current targets
    (anything malformed or made for other targets is ignored: the index is measured again)."""
    if not isinstance(doc, dict):
        return
    try:
        saved = Calibration(**doc)
    except TypeError:
        return
    numbers = (saved.ef_search, saved.k, saved.rows, saved.sample)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers) or saved.ef_search < 1:
        return
    if (saved.target, saved.min_speedup) != (ann.config.target_recall, ann.config.min_speedup):
        return
    ann.calibration, ann.ef_search = saved, min(saved.ef_search, ann.config.max_ef_search)
