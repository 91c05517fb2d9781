"""Versioned binary records (never pickle): the envelope every family's stored records share.

A record is one format byte (`FORMAT_VERSION`; a record written by a newer
release is refused with a `StorageError` instead of being misread) followed by
msgpack. Timestamps are integer microseconds since the Unix epoch, UTC, so
they round-trip bit-exactly. Vectors are raw little-endian float32 with no
header, bulk-loadable as they are. Garbage in a record is a `StorageError`.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import numpy as np

from ..errors import StorageError
from .checks import Embedding

__all__ = [
    "FORMAT_VERSION",
    "GARBAGE",
    "HEADER",
    "body",
    "corrupt",
    "decode_embedding",
    "encode_embedding",
    "from_us",
    "pack",
    "packb",
    "to_us",
    "unpack",
]

FORMAT_VERSION = 1
HEADER = bytes([FORMAT_VERSION])
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(value: datetime) -> int:
    """Exact microseconds since the epoch (no float rounding)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


_PACKERS = threading.local()


def packb(value: Any) -> bytes:
    """msgpack without the format byte (for records that put more header bytes first), on this
    thread's packer: `msgpack.packb` builds one per call, a write's largest fixed cost here."""
    packer: msgpack.Packer | None = getattr(_PACKERS, "packer", None)
    if packer is None:
        packer = _PACKERS.packer = msgpack.Packer(use_bin_type=True)
    packed: bytes = packer.pack(value)
    return packed


def pack(value: Any) -> bytes:
    return HEADER + packb(value)


def body(data: bytes, what: str) -> memoryview:
    """The record after its format byte, checked."""
    if not data:
        raise StorageError(f"empty {what} record", operation="decode")
    if data[0] != FORMAT_VERSION:
        raise StorageError(
            f"{what} record has format version {data[0]}; this hippograph reads version {FORMAT_VERSION}"
            " (written by a newer release?)",
            operation="decode",
        )
    return memoryview(data)[1:]


GARBAGE = (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError)
"""What garbage in a stored record makes decoding raise; reported as a `StorageError` (`corrupt`).
Decoders catch it inline rather than through a context manager: hydration decodes every hit."""


def corrupt(what: str, exc: Exception) -> StorageError:
    return StorageError(f"corrupt {what} record: {exc}", operation="decode")


def unpack(data: bytes | memoryview, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise StorageError(f"corrupt {what} record: {exc}", operation="decode") from None


def encode_embedding(embedding: Embedding) -> bytes:
    return embedding.astype("<f4", copy=False).tobytes()


def decode_embedding(data: bytes, dim: int | None = None) -> Embedding:
    """The stored vector; `dim`, when given, is the store's dimension it must have."""
    if len(data) % 4 or (dim is not None and len(data) != 4 * dim):
        raise StorageError(f"corrupt embedding record: {len(data)} bytes for dimension {dim}", operation="decode")
    arr = np.frombuffer(data, dtype="<f4").astype(np.float32)
    arr.flags.writeable = False
    return arr.view()  # a view of a read-only base can never be made writeable again
