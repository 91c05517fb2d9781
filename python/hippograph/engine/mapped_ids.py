"""A type's ids in row order, kept as one UTF-8 blob and the end offset of each id.

Saved scoring columns store their ids this way (`column_files`), and a process opening them maps
both arrays: an id is decoded only when asked for, so readers of a large store share the pages
and hold no object per id. The columns copy the ids into a list on their first write.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

__all__ = ["MappedIds", "encode_ids", "snapshot"]

_ITER_CHUNK = 4096
"""Ids decoded per step when iterating: one bulk read of their offsets and bytes."""
_SEEN_MAX = 1 << 16
"""Decoded ids kept for repeated reads."""


class MappedIds(Sequence[str]):
    """Read-only ids over `blob` (UTF-8 bytes) and `ends` (id i is `blob[ends[i-1]:ends[i]]`).

    Bytes that are not UTF-8 (a damaged file, which the set's hash check rejects) decode with
    replacement characters rather than raising: such an id matches no stored node.
    """

    __slots__ = ("_arrays", "_blob", "_ends", "_seen")

    def __init__(self, blob: npt.NDArray[np.uint8], ends: npt.NDArray[np.uint64]) -> None:
        self._arrays = (blob, ends)
        self._blob = np.ascontiguousarray(blob).data.cast("B")
        self._ends = np.ascontiguousarray(ends).data.cast("B").cast("Q")
        self._seen: dict[int, str] = {}
        """Ids decoded by row (recall asks for the same hits again), dropped once `_SEEN_MAX` are held."""

    @property
    def arrays(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        """The blob and the end offsets, as given."""
        return self._arrays

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        got = self._seen.get(index) if type(index) is int else None
        if got is not None:
            return got
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self._ends)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} is outside the {n} saved ids")
        got = str(self._blob[self._ends[i - 1] if i else 0 : self._ends[i]], "utf-8", "replace")
        if len(self._seen) >= _SEEN_MAX:
            self._seen.clear()
        self._seen[i] = got
        return got

    def __iter__(self) -> Iterator[str]:
        blob, ends = self._blob, self._ends
        start = 0
        for first in range(0, len(ends), _ITER_CHUNK):
            stops = ends[first : first + _ITER_CHUNK].tolist()
            chunk, base = blob[start : stops[-1]].tobytes(), start
            if chunk.isascii():  # one character a byte: slice the decoded chunk
                text = chunk.decode("ascii")
                yield from (text[a - base : b - base] for a, b in zip([start, *stops[:-1]], stops, strict=True))
                start = stops[-1]
                continue
            for end in stops:
                yield chunk[start - base : end - base].decode("utf-8", "replace")
                start = end


def encode_ids(ids: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
    """`ids` as a UTF-8 blob and each id's end offset (`MappedIds` reads them back)."""
    if isinstance(ids, MappedIds):
        return ids.arrays
    encoded = [i.encode() for i in ids]
    ends = np.cumsum(np.fromiter(map(len, encoded), np.uint64, count=len(encoded)), dtype=np.uint64)
    return np.frombuffer(b"".join(encoded), np.uint8), ends


def snapshot(ids: Sequence[str]) -> list[str] | MappedIds:
    """Ids that later writes to `ids` leave alone: mapped ids are never written, so they are shared."""
    return ids if isinstance(ids, MappedIds) else list(ids)
