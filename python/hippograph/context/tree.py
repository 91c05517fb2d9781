"""The URI tree inside a transaction: documents, directories, their counters, and removal of a
subtree from every space keyed by URI (docs/context.md)."""

from __future__ import annotations

import secrets
from typing import Any

from ..errors import ValidationError
from . import jobs, memories
from .keys import COUNTERS, add, decode, encode, keys_of, node_key, read_u64, subtree, u64, uri_of
from .model import TreeNode
from .protocol import KvTxn

__all__ = [
    "ALL_FIELDS",
    "COMMITS",
    "DIRS",
    "DOCS",
    "NODES",
    "VECTORS",
    "VECTOR_COUNT",
    "VECTOR_LOG",
    "VECTOR_LOG_KEPT",
    "VECTOR_SEQ",
    "node",
    "put_document",
    "remove",
    "to_node",
    "vectors_changed",
]

NODES = "ctx_nodes"
VECTORS = "ctx_vectors"
COMMITS = "ctx_commits"
DOCS = b"docs"
DIRS = b"dirs"
TOP = b"top\x00"
VECTOR_COUNT = b"vectors"
VECTOR_SEQ = b"vector_seq"
"""Bumped by every change of the vectors space: a process's vector cache reloads when it moved."""
VECTOR_LOG = b"vector_log\x00"
"""Under `VECTOR_LOG` + each value `VECTOR_SEQ` took: what that change touched (one vector's key, a
range of keys, or nothing), so a cache a few changes behind rereads only those vectors."""
VECTOR_LOG_KEPT = 4096
"""Changes the log keeps; a cache further behind, or missing an entry, reads every vector again."""
_LOG_PRUNED_EVERY = 256

ALL_FIELDS = frozenset({"uri", "content", "abstract", "overview"})
_new = tuple.__new__


def vectors_changed(t: KvTxn, key: bytes | None = None, rng: tuple[bytes, bytes | None] | None = None) -> None:
    """Moves the vector counter every process's cache compares with, logging what moved it: the
    vector at `key`, those in `rng`, or none (a change of which rows may be returned). A counter
    created afresh (a new store, or one whose records were all dropped) starts at a random value,
    so a cache of the dropped store can never meet its old value again."""
    raw = t.get(COUNTERS, VECTOR_SEQ)
    seq = secrets.randbits(48) + 1 if raw is None else read_u64(raw) + 1
    t.put(COUNTERS, VECTOR_SEQ, u64(seq))
    t.put(COUNTERS, VECTOR_LOG + u64(seq), encode({"k": key} if key is not None else {"r": list(rng)} if rng else {}))
    if seq % _LOG_PRUNED_EVERY == 0 and seq > VECTOR_LOG_KEPT:
        for old in keys_of(t, COUNTERS, (VECTOR_LOG, VECTOR_LOG + u64(seq - VECTOR_LOG_KEPT))):
            t.delete(COUNTERS, old)


def node(t: KvTxn, segments: tuple[str, ...]) -> dict[str, Any] | None:
    raw = t.get(NODES, node_key(segments))
    return None if raw is None else decode(raw, "context node")


def to_node(uri: str, rec: dict[str, Any], fields: frozenset[str] = ALL_FIELDS) -> TreeNode:
    parent, _, name = uri.rpartition("/")
    return _new(TreeNode, (  # `tuple.__new__`: the NamedTuple's own constructor is Python code
        uri,
        parent or None,
        name,
        rec["k"],
        rec.get("c") if "content" in fields else None,
        rec.get("a") if "abstract" in fields else None,
        rec.get("o") if "overview" in fields else None,
        rec.get("e", True),
        rec.get("g", ""),
    ))  # fmt: skip


def _count(t: KvTxn, segments: tuple[str, ...], kind: str, delta: int) -> None:
    if kind == "doc":
        add(t, DOCS, delta)
        add(t, TOP + segments[0].encode(), delta)
    else:
        add(t, DIRS, delta)


def _ensure_dirs(t: KvTxn, segments: tuple[str, ...]) -> None:
    for depth in range(1, len(segments)):
        parent = segments[:depth]
        rec = node(t, parent)
        if rec is None:
            t.put(NODES, node_key(parent), encode({"k": "dir", "e": True, "g": ""}))
            _count(t, parent, "dir", 1)
        elif rec["k"] != "dir":
            raise ValidationError(f"{'/'.join(parent)!r} is a document: it cannot hold {'/'.join(segments)!r}")


def has_children(t: KvTxn, segments: tuple[str, ...]) -> bool:
    head = node_key(segments)[:-1]
    return next(t.range(NODES, head + b"\x01", head + b"\x02"), None) is not None


def put_document(t: KvTxn, segments: tuple[str, ...], content: str, abstract: str | None, overview: str | None) -> int:
    """Writes the document (parents created), retires its vector; returns its new revision."""
    _ensure_dirs(t, segments)
    key = node_key(segments)
    old = node(t, segments)
    if old is not None and old["k"] == "dir" and has_children(t, segments):
        raise ValidationError(f"{'/'.join(segments)!r} is a directory with children: it cannot become a document")
    if old is None or old["k"] == "dir":
        if old is not None:
            _count(t, segments, "dir", -1)
        _count(t, segments, "doc", 1)
        old = {"e": True, "g": "", "r": 0} if old is None else old
    revision = int(old.get("r", 0)) + 1
    t.put(NODES, key, encode({
        "k": "doc", "c": content, "a": old.get("a") if abstract is None else abstract,
        "o": old.get("o") if overview is None else overview, "e": old.get("e", True), "g": old.get("g", ""),
        "r": revision, "s": old.get("s"),
    }))  # fmt: skip
    retire_vector(t, key)
    return revision


def retire_vector(t: KvTxn, key: bytes) -> None:
    if t.delete(VECTORS, key):
        add(t, VECTOR_COUNT, -1)
        vectors_changed(t, key)


def set_field(t: KvTxn, segments: tuple[str, ...], name: str, value: Any) -> int:
    """Sets one field of every node in the subtree; how many nodes there were."""
    rng = subtree(segments)
    done = 0
    for key in keys_of(t, NODES, rng):
        raw = t.get(NODES, key)
        assert raw is not None
        rec = decode(raw, "context node")
        rec[name] = value
        t.put(NODES, key, encode(rec))
        done += 1
    if done:
        vectors_changed(t)  # the cache keeps which rows are searchable
    return done


def remove(t: KvTxn, segments: tuple[str, ...]) -> int:
    """Removes the subtree from every space keyed by URI (nodes, vectors, memories, commits, jobs);
    how many nodes it held."""
    rng = subtree(segments)
    removed = 0
    for key, raw in list(t.range(NODES, *rng)):
        rec = decode(raw, "context node")
        _count(t, tuple(uri_of(key).split("/")), rec["k"], -1)
        t.delete(NODES, key)
        removed += 1
    vectors = keys_of(t, VECTORS, rng)
    for key in vectors:
        t.delete(VECTORS, key)
    if vectors:
        add(t, VECTOR_COUNT, -len(vectors))
        vectors_changed(t, rng=rng)
    memories.remove_range(t, rng)
    for key in keys_of(t, COMMITS, rng):
        t.delete(COMMITS, key)
    jobs.cancel(t, rng)
    return removed


def top_counts(t: KvTxn) -> dict[str, int]:
    return {k[len(TOP) :].decode(): int.from_bytes(v, "big") for k, v in t.range(COUNTERS, TOP, b"top\x01")}
