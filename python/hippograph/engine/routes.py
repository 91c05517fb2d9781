"""Which path answered a type's query, in words an explanation shows (`scan`'s `route`).

Asking costs nothing when nobody asks: `scan` only fills a route list it is handed.
"""

from __future__ import annotations

from .columns import TypeColumns
from .vector_index import VectorIndex

__all__ = ["CERTIFIED", "EXACT", "SCAN", "UNBOUNDED", "UNCERTIFIED", "exact_reason"]

EXACT = "exact scan (exact=True)"
SCAN = "exact scan"
CERTIFIED = "vector index, certified equal to the exact scan over the rows its graph search reached"
UNCERTIFIED = "exact scan: the vector index could not certify this answer"
UNBOUNDED = "exact scan: the value function does not declare bounded_by_relevance"


def exact_reason(columns: TypeColumns, ann: VectorIndex | None) -> str:
    """Why a non-exact query of this type went to the exact scan without asking the index."""
    config = columns.ann_config
    if ann is None:
        if config is None:
            return "exact scan: no vector index configured"
        if columns.dim == 0:
            return "exact scan: no embeddings"
        if len(columns.ids) <= config.min_nodes:
            return f"exact scan: {len(columns.ids)} vectors, an index starts past min_nodes={config.min_nodes}"
        if columns.unpromising is not None and not columns.wants_vector_index():
            return f"exact scan: a sample ruled the index out ({columns.unpromising.reason})"
        return "exact scan: the vector index is being built"
    calibration = ann.calibration
    if calibration is None:
        return "exact scan: the vector index is not measured yet"
    if not calibration.usable:
        return f"exact scan: calibration chose it ({calibration.reason})"
    return "exact scan: no query vector near the indexed data"
