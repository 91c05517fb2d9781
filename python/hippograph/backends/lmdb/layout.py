"""The LMDB backend's on-disk format: database names, record keys, fixed-size numbers.

One definition shared by the transaction wrappers, the cache and the open-time
checks (``docs/lmdb.md`` describes the layout). The others read `LOG_KEEP` as
``layout.LOG_KEEP`` when they use it, so setting it here takes effect at once.
"""

from __future__ import annotations

import hashlib
import struct

import msgpack

from ...errors import StorageError

MAGIC = b"hippograph-lmdb"
STORAGE_FORMAT = 2
"""2: embeddings by number in ``vectors`` (appended), a node record naming its number. A store of
format 1 keeps its embeddings in ``emb`` by node key until each node is written again; a writable
open marks it format 2, so an earlier hippograph, which reads only ``emb``, refuses it."""
LOG_KEEP = 50_000
"""Change-log entries kept: a cache further behind than this rebuilds instead of catching up."""
DEFAULT_MAP_SIZE = 1 << 30
_DBS = ("info", "nodes", "emb", "links", "meta", "ingest", "log", "longids", "vectors")
# LMDB keys hold at most 511 bytes, ids up to 512: longer ids are keyed by a
# hash behind a 0xFF byte (never the first byte of UTF-8) and their full text
# is kept in ``longids``.
MAX_PLAIN_KEY = 480
_LONG = b"\xff"


def _key(node_id: str) -> bytes:
    """The LMDB key of an id: its UTF-8 bytes, or a hash behind `_LONG` when too long."""
    raw = node_id.encode("utf-8")
    return raw if len(raw) <= MAX_PLAIN_KEY else _LONG + hashlib.sha256(raw).digest()


def _seq_key(seq: int) -> bytes:
    return struct.pack(">Q", seq)


_vector_key = _seq_key
"""The ``vectors`` key of an embedding's number: the same 8-byte big-endian key."""


def _number(raw: bytes, fmt: str, what: str) -> int:
    """A fixed-size big-endian integer (an ``info`` value or a change-log key)."""
    if len(raw) != struct.calcsize(fmt):
        raise StorageError(f"corrupt {what}: {len(raw)} bytes", operation="decode")
    return int(struct.unpack(fmt, raw)[0])


def _logged_ids(raw: bytes) -> list[str]:
    """The ids one change-log entry lists."""
    try:
        ids = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise StorageError(f"corrupt change log entry: {exc}", operation="decode") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise StorageError("corrupt change log entry: not a list of ids", operation="decode")
    return ids
