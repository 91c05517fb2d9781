"""Stored records of graph memory, in the engine's versioned envelope (`hippograph.engine.codec`).

After the format byte: a node has a node-type byte (so a scan can sort rows by
type without decoding), then msgpack ``[created_at_us, {field: value}]``;
links are msgpack ``{edge_type: [id, ...]}``; metadata ``[created_us,
access_count, last_accessed_us | None, cumulative_reward, reward_count,
custom]``; an ingestion record ``[digest, fingerprint_version, [node_id, ...],
stored_at_us]``. Embeddings are the engine's raw float32 vectors.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from ..engine.checks import Embedding
from ..engine.codec import (
    GARBAGE,
    HEADER,
    body,
    corrupt,
    decode_embedding,
    encode_embedding,
    from_us,
    pack,
    packb,
    to_us,
    unpack,
)
from ..engine.columns import Usage
from ..errors import StorageError
from .model import NODE_CLASSES, ORPHAN_TYPES, EdgeType, IngestionReceipt, IngestionRecord, Node, NodeMetadata, NodeType

__all__ = [
    "EDGE_CODES",
    "NODE_KINDS",
    "ORPHAN_CODES",
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
    "node_type_of",
    "usage_of_meta",
]

_TYPE_CODES: dict[NodeType, int] = {t: i for i, t in enumerate(NodeType)}
_CODE_TYPES: dict[int, NodeType] = {i: t for t, i in _TYPE_CODES.items()}
EDGE_CODES: dict[EdgeType, int] = {e: i for i, e in enumerate(EdgeType)}
"""Edge codes of the Rust core's link records (`_core.GraphWrite`): `EdgeType`'s order."""
ORPHAN_CODES: list[int] = sorted(_TYPE_CODES[t] for t in ORPHAN_TYPES)


NODE_KINDS: dict[NodeType, tuple[int, tuple[str, ...]]] = {
    t: (_TYPE_CODES[t], cls.field_names()) for t, cls in NODE_CLASSES.items()
}
"""Each node type's code and field names: what the Rust core encodes a node record from
(`_core.GraphWrite.put_changeset`), the record `encode_node` writes."""


def encode_node(node: Node, vector: int | None = None) -> bytes:
    """The record of `node`, naming its embedding's number (`vector`) where a store keeps one."""
    payload = packb([to_us(node.created_at), vector, node.fields_dict()])
    return HEADER + bytes([_TYPE_CODES[node.node_type]]) + payload


def node_type_of(data: bytes) -> NodeType:
    rest = body(data, "node")
    try:
        return _CODE_TYPES[rest[0]]
    except (KeyError, IndexError):
        raise StorageError("corrupt node record: unknown type code", operation="decode") from None


def decode_node(
    data: bytes, node_id: str, embedding: Embedding | None, links: Mapping[EdgeType, frozenset[str]]
) -> Node:
    node_type = node_type_of(data)
    try:
        # `[created_us, vector, fields]`, or `[created_us, fields]` as written before embedding numbers
        created, *_, fields = unpack(body(data, "node")[1:], "node")
        values = {"id": node_id, "embedding": embedding, "links": links, "created_at": from_us(created), **fields}
        return NODE_CLASSES[node_type].from_storage(values)
    except GARBAGE as exc:
        raise corrupt(f"node {node_id!r}", exc) from None


def encode_links(links: Mapping[EdgeType, set[str] | frozenset[str]]) -> bytes:
    return pack({e.value: sorted(ids) for e, ids in links.items() if ids})


def decode_links(data: bytes | None) -> dict[EdgeType, set[str]]:
    if data is None:
        return {}
    raw = unpack(body(data, "links"), "links")
    try:
        links = {EdgeType(e): set(ids) for e, ids in raw.items()}
        if not all(isinstance(i, str) for ids in links.values() for i in ids):
            raise TypeError("a linked id is not a string")
        return links
    except GARBAGE as exc:
        raise corrupt("links", exc) from None


def encode_meta(meta: NodeMetadata) -> bytes:
    last = None if meta.last_accessed_at is None else to_us(meta.last_accessed_at)
    return pack(
        [to_us(meta.created_at), meta.access_count, last, meta.cumulative_reward, meta.reward_count, meta.custom]
    )


def decode_meta(data: bytes) -> NodeMetadata:
    try:
        created, count, last, reward, reward_count, custom = unpack(body(data, "metadata"), "metadata")
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
    except GARBAGE as exc:
        raise corrupt("metadata", exc) from None


_US_RANGE = (to_us(datetime.min.replace(tzinfo=UTC)), to_us(datetime.max.replace(tzinfo=UTC)))


def usage_of_meta(data: bytes) -> Usage:
    """The default value function's usage columns of a stored metadata record: what
    `usage_of(decode_meta(data))` gives (the reference time in seconds, exactly as
    `datetime.timestamp` divides its microseconds), without building the metadata. Scoring
    caches read every node's record this way when they load or catch up."""
    try:
        created, count, last, reward, reward_count, _ = unpack(body(data, "metadata"), "metadata")
        ref = created if last is None else last
        if not (type(ref) is int and _US_RANGE[0] <= ref <= _US_RANGE[1]):
            raise ValueError(f"timestamp {ref!r} out of range")
        return ref / 1_000_000, float(count), float(reward_count), float(reward)
    except GARBAGE as exc:
        raise corrupt("metadata", exc) from None


def encode_record(record: IngestionRecord) -> bytes:
    r = record.receipt
    return pack([record.payload_digest, record.fingerprint_version, list(r.node_ids), to_us(r.stored_at)])


def decode_record(source_id: str, data: bytes) -> IngestionRecord:
    try:
        digest, version, node_ids, stored = unpack(body(data, "ingestion"), "ingestion")
        if not isinstance(digest, bytes) or not all(isinstance(i, str) for i in node_ids):
            raise TypeError("wrong field types")
        receipt = IngestionReceipt(source_id=source_id, node_ids=tuple(node_ids), stored_at=from_us(stored))
        return IngestionRecord(source_id, digest, version, receipt)
    except GARBAGE as exc:
        raise corrupt("ingestion", exc) from None
