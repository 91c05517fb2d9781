"""Entries as bytes for backends that store bytes (LMDB, PostgreSQL): msgpack, never pickle.

A versioned map with short field names; vectors as raw little-endian float32 and times as integer
microseconds since the epoch (UTC), so an entry reads back equal to what was written.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack
import numpy as np

from ..engine.codec import packb
from ..errors import StorageError
from .model import STATUSES, Entry, trusted_entry

__all__ = ["decode_entry", "encode_entry", "ref_bytes"]

_FORMAT = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_EPOCH_DAY = _EPOCH.toordinal()


def _stored_layout(v: np.ndarray[Any, Any]) -> bool:
    """Already the stored layout: `tobytes` needs no conversion."""
    return v.dtype == np.float32 and sys.byteorder == "little" and v.flags.c_contiguous


def _micros(t: datetime) -> int:
    """Exact integer microseconds since the epoch (integer arithmetic; UTC times take the short way)."""
    if t.tzinfo is not UTC:
        return (t - _EPOCH) // timedelta(microseconds=1)
    seconds = (t.toordinal() - _EPOCH_DAY) * 86400 + t.hour * 3600 + t.minute * 60 + t.second
    return seconds * 1_000_000 + t.microsecond


def _time(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def encode_entry(e: Entry) -> bytes:
    v = e.embedding
    emb = None if v is None else v.tobytes() if _stored_layout(v) else np.asarray(v, "<f4").tobytes()
    updated = _micros(e.updated_at)
    created = updated if e.created_at == e.updated_at else _micros(e.created_at)
    accessed = updated if e.accessed_at == e.updated_at else _micros(e.accessed_at)
    doc = {
        "f": _FORMAT, "s": list(e.scope), "k": e.key, "t": e.text, "v": e.value, "d": e.kind,
        "i": e.importance, "e": emb, "st": e.status, "c": created, "u": updated, "a": accessed, "n": e.access_count,
        "x": None if e.expires_at is None else _micros(e.expires_at),
    }  # fmt: skip
    return packb(doc)


def decode_entry(raw: bytes) -> Entry:
    try:
        d: dict[str, Any] = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        if d.get("f") != _FORMAT:
            raise ValueError(f"unknown entry format {d.get('f')!r}")
        emb = None
        if d["e"] is not None:
            emb = np.frombuffer(d["e"], "<f4").astype(np.float32)
            emb.flags.writeable = False
        if d["st"] not in STATUSES:
            raise ValueError("unknown status")
        updated = _time(d["u"])
        return trusted_entry({
            "scope": tuple(d["s"]), "key": d["k"], "text": d["t"], "value": d["v"], "kind": d["d"],
            "importance": float(d["i"]), "embedding": emb, "status": d["st"],
            "created_at": updated if d["c"] == d["u"] else _time(d["c"]), "updated_at": updated,
            "accessed_at": updated if d["a"] == d["u"] else _time(d["a"]), "access_count": int(d["n"]),
            "expires_at": None if d["x"] is None else _time(d["x"]),
        })  # fmt: skip
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"corrupt entry: {type(exc).__name__}: {exc}", operation="decode") from None


def ref_bytes(scope: tuple[str, ...], key: str) -> bytes:
    """A ref as bytes that sort like ``(scope, key)``: each segment then NUL (segments hold no NUL),
    a second NUL, then the key."""
    return b"".join(s.encode() + b"\0" for s in scope) + b"\0" + key.encode()
