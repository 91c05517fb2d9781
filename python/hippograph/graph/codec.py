"""Versioned binary encoding of stored records (never pickle).

Every record starts with one format byte, so a record written by a newer
hippograph is refused with a `StorageError` instead of being misread. After it:

- node: a node-type byte (so a scan can sort rows by type without decoding),
  then msgpack ``[created_at_us, {field: value}]``;
- embedding: raw little-endian float32, no header (bulk-loadable as is);
- links: msgpack ``{edge_type: [id, ...]}``;
- metadata: msgpack ``[created_us, access_count, last_accessed_us | None,
  cumulative_reward, reward_count, custom]``;
- ingestion record: msgpack ``[digest, fingerprint_version, [node_id, ...], stored_at_us]``.

Timestamps are integer microseconds since the Unix epoch, UTC, so receipts
round-trip bit-exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import numpy as np

from ..engine.checks import Embedding
from ..errors import StorageError
from .model import NODE_CLASSES, EdgeType, IngestionReceipt, IngestionRecord, Node, NodeMetadata, NodeType

__all__ = [
    "FORMAT_VERSION",
    "decode_embedding",
    "decode_links",
    "decode_meta",
    "decode_node",
    "decode_record",
    "encode_embedding",
    "encode_links",
    "encode_meta",
    "encode_node",
    "encode_record",
    "from_us",
    "node_type_of",
    "to_us",
]

FORMAT_VERSION = 1
_HEADER = bytes([FORMAT_VERSION])
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TYPE_CODES: dict[NodeType, int] = {t: i for i, t in enumerate(NodeType)}
_CODE_TYPES: dict[int, NodeType] = {i: t for t, i in _TYPE_CODES.items()}


def to_us(value: datetime) -> int:
    """Exact microseconds since the epoch (no float rounding)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _msgpack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _pack(value: Any) -> bytes:
    return _HEADER + _msgpack(value)


def _body(data: bytes, what: str) -> memoryview:
    if not data:
        raise StorageError(f"empty {what} record", operation="decode")
    if data[0] != FORMAT_VERSION:
        raise StorageError(
            f"{what} record has format version {data[0]}; this hippograph reads version {FORMAT_VERSION}"
            " (written by a newer release?)",
            operation="decode",
        )
    return memoryview(data)[1:]


_GARBAGE = (TypeError, ValueError, OverflowError, KeyError, IndexError, AttributeError)
"""What garbage in a stored record makes decoding raise; reported as a `StorageError` (`_corrupt`).
Decoders catch it inline rather than through a context manager: hydration decodes every hit."""


def _corrupt(what: str, exc: Exception) -> StorageError:
    return StorageError(f"corrupt {what} record: {exc}", operation="decode")


def _unpack(data: bytes | memoryview, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise StorageError(f"corrupt {what} record: {exc}", operation="decode") from None


def encode_node(node: Node) -> bytes:
    payload = _msgpack([to_us(node.created_at), node.fields_dict()])
    return _HEADER + bytes([_TYPE_CODES[node.node_type]]) + payload


def node_type_of(data: bytes) -> NodeType:
    body = _body(data, "node")
    try:
        return _CODE_TYPES[body[0]]
    except (KeyError, IndexError):
        raise StorageError("corrupt node record: unknown type code", operation="decode") from None


def decode_node(
    data: bytes, node_id: str, embedding: Embedding | None, links: Mapping[EdgeType, frozenset[str]]
) -> Node:
    node_type = node_type_of(data)
    try:
        created, fields = _unpack(_body(data, "node")[1:], "node")
        values = {"id": node_id, "embedding": embedding, "links": links, "created_at": from_us(created), **fields}
        return NODE_CLASSES[node_type].from_storage(values)
    except _GARBAGE as exc:
        raise _corrupt(f"node {node_id!r}", exc) from None


def encode_embedding(embedding: Embedding) -> bytes:
    return embedding.astype("<f4", copy=False).tobytes()


def decode_embedding(data: bytes, dim: int | None = None) -> Embedding:
    """The stored vector; `dim`, when given, is the store's dimension it must have."""
    if len(data) % 4 or (dim is not None and len(data) != 4 * dim):
        raise StorageError(f"corrupt embedding record: {len(data)} bytes for dimension {dim}", operation="decode")
    arr = np.frombuffer(data, dtype="<f4").astype(np.float32)
    arr.flags.writeable = False
    return arr.view()  # a view of a read-only base can never be made writeable again


def encode_links(links: Mapping[EdgeType, set[str] | frozenset[str]]) -> bytes:
    return _pack({e.value: sorted(ids) for e, ids in links.items() if ids})


def decode_links(data: bytes | None) -> dict[EdgeType, set[str]]:
    if data is None:
        return {}
    raw = _unpack(_body(data, "links"), "links")
    try:
        links = {EdgeType(e): set(ids) for e, ids in raw.items()}
        if not all(isinstance(i, str) for ids in links.values() for i in ids):
            raise TypeError("a linked id is not a string")
        return links
    except _GARBAGE as exc:
        raise _corrupt("links", exc) from None


def encode_meta(meta: NodeMetadata) -> bytes:
    last = None if meta.last_accessed_at is None else to_us(meta.last_accessed_at)
    return _pack(
        [to_us(meta.created_at), meta.access_count, last, meta.cumulative_reward, meta.reward_count, meta.custom]
    )


def decode_meta(data: bytes) -> NodeMetadata:
    try:
        created, count, last, reward, reward_count, custom = _unpack(_body(data, "metadata"), "metadata")
        return NodeMetadata.from_storage(
            {
                "created_at": from_us(created),
                "access_count": count,
                "last_accessed_at": None if last is None else from_us(last),
                "cumulative_reward": float(reward),
                "reward_count": reward_count,
                "custom": custom,
            }
        )
    except _GARBAGE as exc:
        raise _corrupt("metadata", exc) from None


def encode_record(record: IngestionRecord) -> bytes:
    r = record.receipt
    return _pack([record.payload_digest, record.fingerprint_version, list(r.node_ids), to_us(r.stored_at)])


def decode_record(source_id: str, data: bytes) -> IngestionRecord:
    try:
        digest, version, node_ids, stored = _unpack(_body(data, "ingestion"), "ingestion")
        if not isinstance(digest, bytes) or not all(isinstance(i, str) for i in node_ids):
            raise TypeError("wrong field types")
        receipt = IngestionReceipt(source_id=source_id, node_ids=tuple(node_ids), stored_at=from_us(stored))
        return IngestionRecord(source_id, digest, version, receipt)
    except _GARBAGE as exc:
        raise _corrupt("ingestion", exc) from None
