"""`Float4Array`: float32 values sent to PostgreSQL as a binary ``real[]`` (no text formatting, no
per-value Python objects), for the server-side vectors (`vectors`, `write_graph`)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import Connection
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["Float4Array", "register"]


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


def register(conn: Connection[Any]) -> None:
    """Lets `conn` send `Float4Array` values."""
    conn.adapters.register_dumper(Float4Array, _Float4ArrayDumper)
