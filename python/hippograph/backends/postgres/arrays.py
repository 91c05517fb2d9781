"""Values sent to PostgreSQL in binary, encoded here at once rather than element by element by
psycopg's adapters: `Float4Array` (float32 values as ``real[]``, for the server-side vectors, through
psycopg), and the raw parameters of statements run by `prepared.fetch` (`write_graph`'s keys,
records, names, times and usage columns)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.pq import Format

from ...engine.codec import to_us

__all__ = [
    "Float4Array",
    "bytea_array",
    "float4_array",
    "float8_array",
    "int4",
    "register",
    "text_array",
    "timestamptz",
    "timestamptz_array",
]


class Float4Array:
    """Float32 values sent as a PostgreSQL ``real[]`` in binary: ``p_flat[(i-1)*d+1 : i*d]`` is the
    i-th vector of a write, which pgvector's assignment cast turns into a `vector`."""

    __slots__ = ("values",)

    def __init__(self, values: npt.NDArray[np.float32]) -> None:
        self.values = values.reshape(-1)


class _Float4ArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1021  # real[]

    def dump(self, obj: Float4Array) -> bytes:
        return float4_array(obj.values)


def float4_array(values: npt.NDArray[np.float32]) -> bytes:
    """Float32 values as a binary ``real[]`` value (one dimension)."""
    return _fixed_array(values, ">f4", 700)


def float8_array(values: Sequence[float]) -> bytes:
    """`values` as a binary ``float8[]`` value."""
    return _fixed_array(values, ">f8", 701)


def _fixed_array(values: object, dtype: str, element_oid: int) -> bytes:
    """Numbers as a one-dimensional binary array of a fixed-size element type, in one numpy pass."""
    flat = np.asarray(values, dtype=dtype).reshape(-1)
    if not flat.shape[0]:
        return _HEAD.pack(0, 0, element_oid)
    cells = np.empty(flat.shape[0], dtype=[("len", ">i4"), ("value", dtype)])
    cells["len"] = flat.dtype.itemsize
    cells["value"] = flat
    return _HEAD.pack(1, 0, element_oid) + _DIM.pack(flat.shape[0], 1) + cells.tobytes()


def _array(items: Sequence[bytes], element_oid: int) -> bytes:
    """A one-dimensional array of non-NULL values in PostgreSQL's binary format."""
    if not items:
        return _HEAD.pack(0, 0, element_oid)
    parts = [_HEAD.pack(1, 0, element_oid), _DIM.pack(len(items), 1)]
    for item in items:
        parts.append(_SIZE.pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def bytea_array(items: Sequence[bytes]) -> bytes:
    """`items` as a binary ``bytea[]`` value, for a parameter sent as raw bytes (`prepared.fetch`)."""
    return _array(items, 17)


def text_array(items: Sequence[str]) -> bytes:
    """`items` as a binary ``text[]`` value."""
    return _array([s.encode("utf-8") for s in items], 25)


def timestamptz(value: datetime) -> bytes:
    """A timezone-aware datetime as a binary ``timestamptz``: microseconds since 2000-01-01 UTC."""
    return _INT8.pack(to_us(value) - _PG_EPOCH_US)


def timestamptz_array(values: Sequence[datetime]) -> bytes:
    """`values` as a binary ``timestamptz[]`` value."""
    return _array([timestamptz(v) for v in values], 1184)


def int4(value: int) -> bytes:
    return _INT4.pack(value)


_HEAD = struct.Struct(">iiI")
_DIM = struct.Struct(">ii")
_SIZE = struct.Struct(">i")
_INT4 = struct.Struct(">i")
_INT8 = struct.Struct(">q")
_PG_EPOCH_US = 946_684_800_000_000
"""2000-01-01 UTC, PostgreSQL's timestamp epoch, in microseconds since the Unix epoch."""


def register(conn: Connection[Any]) -> None:
    """Lets `conn` send the arrays of this module."""
    conn.adapters.register_dumper(Float4Array, _Float4ArrayDumper)
