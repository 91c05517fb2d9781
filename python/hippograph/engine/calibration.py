"""Recall you can state: what a vector index's calibration measured, kept with the index.

`hippograph.engine.query.calibrate` runs the approximate path (vector-index
candidates, certified) and the exact scan side by side on sample queries of
several kinds (near stored vectors, spread like the data, recent real ones),
raises ``ef_search`` and picks a similarity floor (queries with nothing
indexed that close go to the exact scan) until every kind's mean recall
reaches `AnnConfig.target_recall`. An index that cannot reach it,
or not at `AnnConfig.min_speedup` times the exact scan's speed, is not used:
the exact scan answers, never a low-recall answer. A `Calibration` is saved
in the index's sidecar and restored when the targets are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .vector_index import VectorIndex

__all__ = ["Calibration", "restore"]


@dataclass(frozen=True)
class Calibration:
    """What calibration measured at `ef_search` over `sample` queries: the mean `recall`@`k` and the
    `worst` one of what non-exact queries get (1.0 when the exact scan answers them all), the exact
    path's time over the index's on the queries it answers (`speedup`), whether non-exact queries
    may use the index (`usable`; else `reason`), the similarity of the nearest indexed vector below
    which a query goes to the exact scan (`min_similarity`), and the index's own answers' mean
    recall (`index_recall`)."""

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
    min_similarity: float
    index_recall: float
    asked: int = 0
    """Real queries among the samples (0: measured before any were asked)."""
    valued: bool = True
    """Whether queries search the value-weighted pool first: calibration keeps it only where its
    answers reach the target (a calibration saved before this field was measured with it)."""

    def stats(self) -> dict[str, object]:
        return {
            "recall_estimate": round(self.recall, 4),
            "recall_worst": round(self.worst, 4),
            "index_recall": round(self.index_recall, 4),
            "min_similarity": round(self.min_similarity, 4) if np.isfinite(self.min_similarity) else None,
            "ef_search": self.ef_search,
            "speedup_estimate": round(self.speedup, 2),
            "calibrated_rows": self.rows,
            "calibrated_on_queries_asked": self.asked,
            "value_weighted_search": self.valued,
            "exact_fallback": not self.usable,
            "fallback_reason": self.reason,
        }


def restore(doc: object, ann: VectorIndex) -> None:
    """Adopts a calibration saved with `ann`'s files when it was made for the current targets
    (anything malformed or made for other targets is ignored: the index is measured again)."""
    if not isinstance(doc, dict):
        return
    try:
        saved = Calibration(**doc)
    except TypeError:
        return
    numbers = (saved.ef_search, saved.k, saved.rows, saved.sample, saved.asked)
    floats = (saved.recall, saved.worst, saved.speedup, saved.min_similarity, saved.index_recall)
    if not all(isinstance(v, float) and not np.isnan(v) for v in floats):
        return
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers) or saved.ef_search < 1:
        return
    if not isinstance(saved.valued, bool):
        return
    if (saved.target, saved.min_speedup) != (ann.config.target_recall, ann.config.min_speedup):
        return
    ann.calibration, ann.ef_search = saved, min(saved.ef_search, ann.config.max_ef_search)
