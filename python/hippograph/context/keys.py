"""How the context store lays its records out in a backend's ordered spaces (docs/context.md).

A URI's key is its segments joined by 0x01 and closed by 0x00. Segments hold no control character,
so bytewise key order is tree order (a node, then its descendants, then its next sibling) and a
subtree is one key range: ``[segments + 0x00, segments + 0x02)``. Every space keyed by URI puts
that key first, so removing a subtree is one range per space. Numbers in keys are big-endian
u64, which sort as numbers. Records are the engine's versioned msgpack (`engine.codec`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import msgpack

from ..engine.codec import FORMAT_VERSION, body, pack, unpack
from ..errors import StorageError
from .protocol import KvTxn

__all__ = [
    "COUNTERS",
    "add",
    "counter",
    "decode",
    "encode",
    "keys_of",
    "next_id",
    "node_key",
    "subtree",
    "u64",
    "uri_of",
]

COUNTERS = "ctx_counters"
_U64 = struct.Struct(">Q")


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u64(data: bytes, at: int = 0) -> int:
    return int(_U64.unpack_from(data, at)[0])


_KEYS: dict[tuple[str, ...], bytes] = {}
"""Keys of URIs seen lately: a URI read or written again costs one lookup, not an encoding."""


def node_key(segments: tuple[str, ...]) -> bytes:
    key = _KEYS.get(segments)
    if key is None:
        key = b"\x01".join(s.encode() for s in segments) + b"\x00"
        if len(_KEYS) >= 65_536:
            _KEYS.clear()
        _KEYS[segments] = key
    return key


def subtree(segments: tuple[str, ...]) -> tuple[bytes, bytes | None]:
    """The key range of every record keyed by a URI at `segments` or below (the root: all)."""
    if not segments:
        return b"", None
    head = b"\x01".join(s.encode() for s in segments)
    return head + b"\x00", head + b"\x02"


def uri_of(key: bytes) -> str:
    """The URI a URI-first key starts with."""
    return key[: key.index(b"\x00")].decode().replace("\x01", "/")


def encode(record: dict[str, Any]) -> bytes:
    return pack(record)


def decode(data: bytes, what: str) -> dict[str, Any]:
    if data and data[0] == FORMAT_VERSION:  # `unpack` inline: every record read pays it
        try:
            got = msgpack.unpackb(data[1:], raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException, TypeError):
            got = unpack(data[1:], what)  # raises the `StorageError`
    else:
        got = unpack(body(data, what), what)  # `body` raises
    if not isinstance(got, dict):
        raise StorageError(f"corrupt {what} record: not a map", operation="decode")
    return got


def keys_of(t: KvTxn, space: str, rng: tuple[bytes, bytes | None]) -> list[bytes]:
    """The keys of a range, read in full before the caller writes to the space."""
    return [k for k, _ in t.range(space, rng[0], rng[1])]


def counter(t: KvTxn, name: bytes) -> int:
    raw = t.get(COUNTERS, name)
    return 0 if raw is None else read_u64(raw)


def next_id(t: KvTxn, name: bytes) -> int:
    """Takes the next id of the sequence counter `name` (one read and one write)."""
    taken = counter(t, name) + 1
    t.put(COUNTERS, name, u64(taken))
    return taken


def add(t: KvTxn, name: bytes, delta: int) -> int:
    """Moves a counter by `delta`; a counter back at zero is removed (sparse: e.g. per top subtree)."""
    value = counter(t, name) + delta
    if value < 0:
        raise StorageError(f"counter {name!r} would go below zero", operation="write")
    if value:
        t.put(COUNTERS, name, u64(value))
    else:
        t.delete(COUNTERS, name)
    return value


def counters_under(t: KvTxn, prefix: bytes) -> Iterator[tuple[bytes, int]]:
    for k, v in t.range(COUNTERS, prefix, prefix[:-1] + bytes([prefix[-1] + 1])):
        yield k[len(prefix) :], read_u64(v)
