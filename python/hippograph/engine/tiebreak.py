"""Tie-break keys: equal scores go to the smaller id, so each row carries a key that orders like its id.

Keys leave gaps (`_RANK_SPACING`), so a new id takes a key between its
neighbours' and a removal drops one: a write followed by a recall costs a
binary search per changed id, not a pass over the type (the ids in key order
are a `sortedcontainers.SortedList`: an id that sorts first is not a shift of
every other, as in a plain list). When a gap runs out
(ids that keep arriving between the same two neighbours), the keys of a
neighbourhood, doubled until it has room, are spread again; only when the
whole key space is crowded are all keys dealt again. The Rust core only
compares keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from .mapped_ids import snapshot

__all__ = ["TieBreak"]

_RANK_MERGE_MAX = 4096
"""New rows merged into the keys incrementally; more trigger one full sort."""
_RANK_SPACING = 1 << 12
"""The gap between neighbouring keys when they are dealt: room for new ids in between."""
_RANK_TOP = (1 << 32) - 1


class TieBreak:
    """The tie-break keys of one type's rows, kept in step with appends (merged when asked) and
    removals (swap-remove, as the rows). Readers ask concurrently: merges are serialised."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rank: npt.NDArray[np.uint32] | None = None
        self._room: npt.NDArray[np.uint32] | None = None
        """The array `_rank` is the start of, with room for rows appended later: a merge writes the
        new rows' keys after the old ones (which readers may still hold) instead of copying them."""
        self._sorted: SortedList | None = None
        self._adopted: Sequence[str] | None = None
        """Ids of rows whose keys were taken over (`adopt`), until `_ordered` lists them by key."""

    def adopt(self, rank: npt.NDArray[np.uint32], ids: Sequence[str]) -> None:
        """Takes over saved keys of rows holding `ids` (keys that order like the ids, as dealt); the
        ids in key order are listed only once a row is added or removed."""
        with self._lock:
            self._rank, self._sorted, self._adopted = rank, None, snapshot(ids)  # rows move later
            self._room = rank

    def _ordered(self) -> SortedList | None:
        """The ids in key order (listed from adopted keys on first need); None when not kept."""
        if self._sorted is None and self._adopted is not None and self._rank is not None:
            # Called before the keys change (an append or a removal): they still match the snapshot.
            self._sorted = SortedList(self._adopted[i] for i in np.argsort(self._rank, kind="stable").tolist())
            self._adopted = None
        return self._sorted

    def keys(self, ids: Sequence[str], rows: Callable[[], dict[str, int]]) -> npt.NDArray[np.uint32]:
        """Each row's key (row i holds `ids[i]`, `rows()` maps ids to rows, asked for only when keys
        are dealt or merged); rows appended since the last call are merged in first."""
        with self._lock:
            n = len(ids)
            if self._rank is not None and len(self._rank) == n:
                return self._rank
            return self._merged(ids, rows())

    def _merged(self, ids: Sequence[str], row: dict[str, int]) -> npt.NDArray[np.uint32]:
        n = len(ids)
        ranked = 0 if self._rank is None else len(self._rank)
        listed = None if self._rank is None else self._ordered()
        if self._rank is None or listed is None or not 0 <= n - ranked <= _RANK_MERGE_MAX:
            self._sorted = SortedList(ids)
            return self._deal(row)
        # Readers may still use the last keys: they are copied only when an old row's key changes
        # (a crowded gap spread again), and the new rows' keys go into a new array.
        kept, ordered = [self._rank], listed
        keys: dict[str, int] = {}

        def key(node_id: str) -> int:
            got = keys.get(node_id)
            return int(kept[0][row[node_id]]) if got is None else got

        def set_key(node_id: str, value: int) -> None:
            if node_id in keys or row[node_id] >= ranked:
                keys[node_id] = value
                return
            if kept[0] is self._rank:
                kept[0] = kept[0].copy()
            kept[0][row[node_id]] = value

        for node_id in ids[ranked:]:
            at = ordered.bisect_left(node_id)
            low = key(ordered[at - 1]) if at else -1
            high = key(ordered[at]) if at < len(ordered) else _RANK_TOP + 1
            ordered.add(node_id)
            if high - low >= 2:
                appended = high > _RANK_TOP and low + _RANK_SPACING <= _RANK_TOP
                keys[node_id] = low + _RANK_SPACING if appended else (low + high) // 2
                continue
            window = _window(ordered, at, key)
            if window is None:  # the whole key space is crowded: deal every key again
                self._sorted = SortedList(ids)
                return self._deal(row)
            start, stop, left, right = window
            step = (right - left) // (stop - start + 1)
            for j, other in enumerate(ordered[start:stop]):
                set_key(other, left + step * (j + 1))
        fresh = np.array([keys[i] for i in ids[ranked:]], np.uint32)
        room = self._room
        if kept[0] is not self._rank or room is None or len(room) < n:  # old keys changed, or no room
            room = self._room = np.empty(n + n // 8 + 64, np.uint32)
            room[:ranked] = kept[0]
        room[ranked:n] = fresh
        self._rank = room[:n]
        return self._rank

    def _deal(self, row: dict[str, int]) -> npt.NDArray[np.uint32]:
        """Keys for every row from `_sorted`, evenly spaced."""
        assert self._sorted is not None
        n = len(self._sorted)
        spacing = max(1, min(_RANK_SPACING, _RANK_TOP // max(n, 1)))
        self._room = np.empty(n + n // 8 + 64, np.uint32)
        rank = self._room[:n]
        rows = np.fromiter((row[i] for i in self._sorted), np.int64, count=n)
        rank[rows] = np.arange(n, dtype=np.uint32) * np.uint32(spacing)
        self._rank = rank
        return rank

    def removed(self, r: int, node_id: str, last: int) -> None:
        """Row `r` (holding `node_id`) is removed and the last row moves into it: its key goes too."""
        with self._lock:
            rank, ordered = self._rank, self._ordered()
            if rank is None or ordered is None or len(rank) != last + 1:
                self._rank = self._sorted = None  # not caught up with appends: dealt afresh when asked
                return
            ordered.remove(node_id)
            rank[r] = rank[last]
            self._rank = rank[:last]


def _window(ordered: SortedList, at: int, key: Callable[[str], int]) -> tuple[int, int, int, int] | None:
    """The smallest run of ids around position `at` (doubling its width) whose keys can be spread evenly
    between its outer neighbours' with room to spare: (start, stop, left key, right key); None when even
    the whole list cannot. Relabelling a neighbourhood, not every row, keeps a crowded gap cheap."""
    width = 8
    while True:
        start, stop = max(0, at - width), min(len(ordered), at + width + 1)
        left = key(ordered[start - 1]) if start else -1
        right = key(ordered[stop]) if stop < len(ordered) else _RANK_TOP + 1
        if right - left > 2 * (stop - start + 1):
            return start, stop, left, right
        if start == 0 and stop == len(ordered):
            return None
        width *= 2
