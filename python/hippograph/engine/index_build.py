"""Building a type's HNSW graph from its columns, and bringing a graph built from an earlier copy
of the rows up to the rows as they are now."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from . import index_probe, vector_index
from . import regions as regions_
from .regions import Regions
from .vector_index import AnnConfig, VectorIndex

__all__ = ["IndexedRows", "build_rows_index", "catch_up"]


class IndexedRows(Protocol):
    """What these need of a type's columns (`hippograph.engine.columns.TypeColumns`)."""

    regions: Regions | None

    @property
    def ids(self) -> Sequence[str]: ...

    @property
    def row(self) -> dict[str, int]: ...

    def matrix(self) -> npt.NDArray[np.float32]: ...

    def vectors(self, rows: npt.NDArray[np.int64] | list[int]) -> npt.NDArray[np.float32]: ...

    def norms(self) -> npt.NDArray[np.float32]: ...

    def current(self, ids: Iterable[str]) -> tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...


def build_rows_index(
    columns: IndexedRows,
    config: AnnConfig,
    progress: Callable[[int, int], None] | None = None,
    *,
    probe: bool = False,
) -> VectorIndex:
    """An HNSW graph over every embedded row of `columns`, reporting ``progress(rows_done, rows)``.
    `probe`: first judge from a sample whether the index can win (`index_probe`), raising
    `index_probe.Unpromising` when it cannot."""
    matrix = columns.matrix()
    found = index_probe.probe(matrix, config) if probe else None
    if found is not None:
        raise index_probe.Unpromising(found)
    built = vector_index.build_rows(list(columns.ids), matrix, config, progress)
    if built is None:  # pragma: no cover - only a `cancelled` callback stops a build
        raise RuntimeError("vector index build cancelled")
    columns.regions = regions_.partition(matrix, columns.norms(), len(columns.ids))
    return built


def catch_up(columns: IndexedRows, ann: VectorIndex, changed: set[str]) -> VectorIndex:
    """`ann`, built from an earlier copy of `columns`' rows, made to mirror `columns` now.

    `changed` must hold every id whose vector changed or that was removed
    since the copy: their old labels are marked deleted and their current
    vectors added. Every other label's row is looked up afresh (swap-removes
    moved rows since).
    """
    vector_index.replay(ann, changed, columns.current(changed))
    for node_id in [i for i in ann.label_of if i not in columns.row]:  # defensive: a removal not reported
        ann.discard(node_id)
    rows = np.full(len(ann.row_of_label), -1, np.int64)
    for node_id, label in ann.label_of.items():
        rows[label] = columns.row[node_id]
    ann.row_of_label = rows
    return ann
