"""Rows sorted by their time-independent usage bound, for the certified vector-index walk.

The walk visits rows in this order to find every row whose value could still reach the k-th best
score. Writes do not re-sort: they append the rows they touch to `stale`, which the walk checks on
their current metadata. Past `STALE_MAX` of them the next query merges them in (one pass in Rust);
past a sixteenth of the type, it sorts afresh.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .. import _core
from .regions import NO_REGION, Regions

__all__ = ["UsageOrder", "current_order", "keys_at", "regions_at", "stale_at"]

STALE_MAX = 1024


@dataclass
class UsageOrder:
    """`rows` by descending bound `keys` (`_core.usage_order`) under value-function `params`;
    `stale`: rows written since, checked on their own."""

    params: _core.ValueParams
    rows: npt.NDArray[np.uint32]
    keys: npt.NDArray[np.float64]
    stale: list[int] = dataclasses.field(default_factory=list)
    regions_in_order: tuple[Regions, npt.NDArray[np.uint32]] | None = None
    """`regions_at`'s copy, with the regions it was taken from."""
    keys_by_row: npt.NDArray[np.float64] | None = None
    """`keys_at`'s copy."""
    stale_rows: tuple[int, npt.NDArray[np.uint32]] | None = None
    """`stale_at`'s copy, with the length of `stale` it was taken at."""


def keys_at(order: UsageOrder) -> npt.NDArray[np.float64]:
    """Each row's key laid out by row (rows the order does not hold: infinity, a factor of one,
    which bounds any row's), so the value-weighted search reads one number per visited row. Taken
    once per order."""
    got = order.keys_by_row
    if got is None:
        got = np.full(int(order.rows.max()) + 1 if len(order.rows) else 0, np.inf)
        got[order.rows] = order.keys
        order.keys_by_row = got
    return got


def stale_at(order: UsageOrder) -> npt.NDArray[np.uint32]:
    """`order.stale` as an array, taken again only once rows were added to it (writers append)."""
    cached = order.stale_rows
    if cached is None or cached[0] != len(order.stale):
        order.stale_rows = cached = (len(order.stale), np.array(order.stale, np.uint32))
    return cached[1]


def regions_at(order: UsageOrder, regions: Regions) -> npt.NDArray[np.uint32]:
    """The region of the row at each position of `order`, for the walk to read in order.

    Taken once per order and regions. It stays good enough while both live: a row that leaves its
    region later (a new vector, a swap-remove) is stale in the order, which the walk checks on its
    current region anyway, and a row placed in a region later only has a looser bound here.
    """
    cached = order.regions_in_order
    if cached is None or cached[0] is not regions:
        of_row = regions.of_row
        got = np.full(len(order.rows), NO_REGION, np.uint32)
        inside = order.rows < len(of_row)
        got[inside] = of_row[order.rows[inside]]
        order.regions_in_order = cached = (regions, got)
    return cached[1]


def current_order(
    order: UsageOrder | None, params: _core.ValueParams, usage: _core.UsageColumns, rows: int
) -> UsageOrder:
    """`order` if it still serves `params` over `rows` rows, else merged or sorted afresh (a new
    object: readers may call this concurrently, and none is changed in place)."""
    if order is None or order.params != params or len(order.stale) > rows // 16:
        return UsageOrder(params, *_core.usage_order(usage, params))
    if len(order.stale) > STALE_MAX:
        stale = np.array(order.stale, np.uint32)
        return UsageOrder(params, *_core.merge_usage_order(order.rows, order.keys, stale, usage, params))
    return order
