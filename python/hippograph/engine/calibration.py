"""Recall you can state: what a vector index's calibration measured, kept with the index.

`hippograph.engine.query.calibrate` runs the approximate path (vector-index
candidates, certified) and the exact scan side by side on queries drawn from
the stored vectors and raises ``ef_search`` until the approximate answers'
mean recall reaches `AnnConfig.target_recall`. An index that cannot reach it,
or not at `AnnConfig.min_speedup` times the exact scan's speed, is not used:
the exact scan answers, never a low-recall answer. A `Calibration` is saved
in the index's sidecar and restored when the targets are the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from .vector_index import VectorIndex

__all__ = ["Calibration", "restore"]


@dataclass(frozen=True)
class Calibration:
    """What calibration measured at `ef_search`: the approximate answers' mean `recall`@`k` over
    `sample` queries and the `worst` one, the exact path's time over the approximate path's
    (`speedup`), and whether approximate answers may use the index (`usable`; else `reason`)."""

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
