"""Memory assertions inside a transaction (docs/context.md, memories).

Every assertion ever made at a URI is a row under its id; ``ctx_memory_uris`` lists a URI's rows
(URI key, id -> status), so the rows of a subtree are one range. At most one row per URI is active;
a newer active assertion supersedes it. Counters per status, per type (the URI's first segment)
and of active rows never surfaced answer `stats` without reading the rows.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotFoundError
from .keys import add, counter, counters_under, decode, encode, next_id, node_key, read_u64, u64
from .model import MemoryRow, MemoryStatus, NoCandidateError
from .protocol import KvTxn

__all__ = ["mark_surfaced", "promote", "put", "recall", "recorded", "reject", "remove_range", "stats"]

MEMORIES = "ctx_memories"
URIS = "ctx_memory_uris"
NEXT_ID = b"next_memory"
_STATUS = b"mem_status\x00"
_TYPE = b"mem_type\x00"
_UNSURFACED = b"mem_unsurfaced"


def _rows_at(t: KvTxn, segments: tuple[str, ...]) -> list[tuple[int, str]]:
    """(id, status) of the URI's rows, oldest first."""
    head = node_key(segments)
    return [(read_u64(k, len(head)), v.decode()) for k, v in t.range(URIS, head, head[:-1] + b"\x01")]


def _load(t: KvTxn, memory_id: int) -> dict[str, Any]:
    raw = t.get(MEMORIES, u64(memory_id))
    if raw is None:
        raise NotFoundError("memory", str(memory_id))
    return decode(raw, "context memory")


def _count(t: KvTxn, rec: dict[str, Any], delta: int) -> None:
    add(t, _STATUS + rec["st"].encode(), delta)
    add(t, _TYPE + rec["u"].split("/", 1)[0].encode(), delta)
    if rec["st"] == "active" and rec["ls"] is None:
        add(t, _UNSURFACED, delta)


def _save(t: KvTxn, memory_id: int, rec: dict[str, Any], old: dict[str, Any] | None) -> None:
    if old is not None:
        _count(t, old, -1)
    _count(t, rec, 1)
    t.put(MEMORIES, u64(memory_id), encode(rec))
    t.put(URIS, node_key(tuple(rec["u"].split("/"))) + u64(memory_id), rec["st"].encode())


def _supersede_active(t: KvTxn, rows: list[tuple[int, str]], now: int) -> int | None:
    for memory_id, status in rows:
        if status == "active":
            rec = _load(t, memory_id)
            _save(t, memory_id, {**rec, "st": "superseded", "t": now}, rec)
            return memory_id
    return None


def put(
    t: KvTxn,
    segments: tuple[str, ...],
    value: str,
    confidence: float,
    source: str | None,
    importance: float | None,
    status: MemoryStatus,
    now: int,
) -> int | None:
    """Records the assertion; its id, or None when an active re-record of the active value is a no-op."""
    rows = _rows_at(t, segments)
    supersedes = None
    if status == "active":
        for memory_id, st in rows:
            if st == "active" and _load(t, memory_id)["v"] == value:
                return None
        supersedes = _supersede_active(t, rows, now)
    memory_id = next_id(t, NEXT_ID)
    rec = {"u": "/".join(segments), "v": value, "c": confidence, "i": importance, "s": source, "st": status,
           "p": supersedes, "ls": None, "t": now}  # fmt: skip
    _save(t, memory_id, rec, None)
    return memory_id


def _row(memory_id: int, rec: dict[str, Any], truncated: bool | None = None) -> MemoryRow:
    return MemoryRow(id=memory_id, uri=rec["u"], value=rec["v"], confidence=rec["c"], importance=rec["i"],
                     source=rec["s"], status=rec["st"], supersedes=rec["p"], last_surfaced_at=rec["ls"],
                     updated_at=rec["t"], truncated=truncated)  # fmt: skip


def recall(
    t: KvTxn, rng: tuple[bytes, bytes | None], source: str | None, statuses: frozenset[str], top_k: int
) -> list[MemoryRow]:
    """Rows in the subtree with one of `statuses` (and `source`), most confident first (then the
    newest, then the lowest id), at most `top_k`, each saying whether more matched."""
    found = []
    for key, status in t.range(URIS, *rng):
        if status.decode() not in statuses:
            continue
        memory_id = read_u64(key, len(key) - 8)
        rec = _load(t, memory_id)
        if source is None or rec["s"] == source:
            found.append((memory_id, rec))
    found.sort(key=lambda p: (-p[1]["c"], -p[1]["t"], p[0]))
    truncated = len(found) > top_k
    return [_row(i, rec, truncated) for i, rec in found[:top_k]]


def promote(t: KvTxn, segments: tuple[str, ...], now: int) -> str:
    """The latest candidate becomes the active assertion; its value (the document's new content)."""
    rows = _rows_at(t, segments)
    candidates = [i for i, st in rows if st == "candidate"]
    if not candidates:
        raise NoCandidateError("candidate memory at", "/".join(segments))
    supersedes = _supersede_active(t, rows, now)
    rec = _load(t, candidates[-1])
    _save(t, candidates[-1], {**rec, "st": "active", "p": supersedes, "t": now}, rec)
    return str(rec["v"])


def reject(t: KvTxn, segments: tuple[str, ...]) -> int:
    rows = [i for i, st in _rows_at(t, segments) if st == "candidate"]
    if not rows:
        raise NoCandidateError("candidate memory at", "/".join(segments))
    for memory_id in rows:
        _drop(t, memory_id, node_key(segments) + u64(memory_id))
    return len(rows)


def _drop(t: KvTxn, memory_id: int, uri_key: bytes) -> None:
    raw = t.get(MEMORIES, u64(memory_id))
    if raw is not None:
        _count(t, decode(raw, "context memory"), -1)
        t.delete(MEMORIES, u64(memory_id))
    t.delete(URIS, uri_key)


def remove_range(t: KvTxn, rng: tuple[bytes, bytes | None]) -> None:
    for key in [k for k, _ in t.range(URIS, *rng)]:
        _drop(t, read_u64(key, len(key) - 8), key)


def recorded(t: KvTxn, segments: tuple[str, ...]) -> bool:
    return bool(_rows_at(t, segments))


def mark_surfaced(t: KvTxn, ids: list[int], now: int) -> int:
    done = 0
    for memory_id in dict.fromkeys(ids):
        raw = t.get(MEMORIES, u64(memory_id))
        if raw is None:
            continue
        rec = decode(raw, "context memory")
        _save(t, memory_id, {**rec, "ls": now}, rec)
        done += 1
    return done


def stats(t: KvTxn) -> dict[str, Any]:
    by_status = {s: 0 for s in ("active", "superseded", "candidate")}
    by_status.update((k.decode(), n) for k, n in counters_under(t, _STATUS))
    return {
        "total": sum(by_status.values()),
        "by_status": by_status,
        "by_type": {k.decode(): n for k, n in counters_under(t, _TYPE)},
        "waiting_review": by_status["candidate"],
        "never_surfaced": counter(t, _UNSURFACED),
    }


def active_under(t: KvTxn, rng: tuple[bytes, bytes | None]) -> list[str]:
    """URIs in the subtree holding an active assertion, in tree order."""
    seen: list[str] = []
    for key, status in t.range(URIS, *rng):
        if status == b"active":
            seen.append(key[: key.index(b"\x00")].decode().replace("\x01", "/"))
    return seen
