"""Arrays sent to PostgreSQL in binary, encoded here at once rather than element by element by
psycopg's list dumper: `Float4Array` (float32 values as ``real[]``, for the server-side vectors)
and `ByteaArray` / `TextArray` (the keys, records and names of a `write_graph` call)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["ByteaArray", "Float4Array", "TextArray", "bytea_array", "register"]


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
        n = obj.values.shape[0]
        cells = np.empty(n, dtype=[("len", ">i4"), ("value", ">f4")])
        cells["len"] = 4
        cells["value"] = obj.values
        return struct.pack(">iiIii", 1, 0, 700, n, 1) + cells.tobytes()


class ByteaArray:
    """Byte strings sent as a PostgreSQL ``bytea[]``."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[bytes]) -> None:
        self.items = items


class TextArray:
    """Strings sent as a PostgreSQL ``text[]``."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[str]) -> None:
        self.items = [s.encode("utf-8") for s in items]


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


class _ByteaArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1001  # bytea[]

    def dump(self, obj: ByteaArray) -> bytes:
        return bytea_array(obj.items)


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = 1009  # text[]

    def dump(self, obj: TextArray) -> bytes:
        return _array(obj.items, 25)


_HEAD = struct.Struct(">iiI")
_DIM = struct.Struct(">ii")
_SIZE = struct.Struct(">i")


def register(conn: Connection[Any]) -> None:
    """Lets `conn` send the arrays of this module."""
    conn.adapters.register_dumper(Float4Array, _Float4ArrayDumper)
    conn.adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
    conn.adapters.register_dumper(TextArray, _TextArrayDumper)
