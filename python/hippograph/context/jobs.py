"""The durable job queue inside a transaction (docs/context.md, jobs).

A job record lives under its id; while it is pending it is also in ``ctx_job_queue`` (kind, due time,
id: a claim of given kinds is one range read per kind) and ``ctx_job_due`` (due time, id: the oldest
waiting job); while running or failed, in ``ctx_job_state`` (status, time, id: what a restart resets,
the newest failures); a job for a URI, in ``ctx_job_uris`` (removing a subtree drops its jobs).
Counters per status and per kind answer the counts without a scan. Every change of status goes
through `_move`, which keeps all of these in step.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotFoundError
from .keys import add, counter, counters_under, decode, encode, keys_of, next_id, node_key, read_u64, u64
from .model import Job
from .protocol import KvTxn

__all__ = [
    "STATUSES",
    "cancel",
    "claim",
    "complete",
    "count",
    "defer",
    "detail",
    "enqueue",
    "fail",
    "find",
    "get",
    "reset_running",
]

JOBS = "ctx_jobs"
QUEUE = "ctx_job_queue"
DUE = "ctx_job_due"
URIS = "ctx_job_uris"
STATE = "ctx_job_state"
NEXT_ID = b"next_job"
STATUSES = ("pending", "running", "done", "failed")
_BY_STATUS = b"jobs\x00"
_BY_KIND = b"kind\x00"
BACKOFF_MAX_S = 300
_new = tuple.__new__


def _status_key(status: str) -> bytes:
    return _BY_STATUS + status.encode()


def _load(t: KvTxn, job_id: int) -> dict[str, Any]:
    raw = t.get(JOBS, u64(job_id))
    if raw is None:
        raise NotFoundError("job", str(job_id))
    return decode(raw, "context job")


def _unindex(t: KvTxn, job_id: int, rec: dict[str, Any]) -> None:
    st = rec["st"]
    if st == "pending":
        t.delete(QUEUE, rec["k"].encode() + b"\x00" + u64(rec["ra"]) + u64(job_id))
        t.delete(DUE, u64(rec["ra"]) + u64(job_id))
    elif st in ("running", "failed"):
        t.delete(STATE, st.encode() + b"\x00" + u64(rec["t"]) + u64(job_id))


def _index(t: KvTxn, job_id: int, rec: dict[str, Any]) -> None:
    st = rec["st"]
    if st == "pending":
        t.put(QUEUE, rec["k"].encode() + b"\x00" + u64(rec["ra"]) + u64(job_id), b"")
        t.put(DUE, u64(rec["ra"]) + u64(job_id), rec["k"].encode())
    elif st in ("running", "failed"):
        t.put(STATE, st.encode() + b"\x00" + u64(rec["t"]) + u64(job_id), b"")


def _move(t: KvTxn, job_id: int, rec: dict[str, Any], now: int, **changes: Any) -> None:
    """Applies `changes` to the job and keeps its indexes and counters in step."""
    _unindex(t, job_id, rec)
    before = rec["st"]
    rec.update(changes, t=now)
    if rec["st"] != before:
        add(t, _status_key(before), -1)
        add(t, _status_key(rec["st"]), 1)
    _index(t, job_id, rec)
    t.put(JOBS, u64(job_id), encode(rec))


def enqueue(
    t: KvTxn,
    kind: str,
    payload: dict[str, Any],
    now: int,
    *,
    uri: tuple[str, ...] | None = None,
    revision: int | None = None,
    max_attempts: int = 5,
    delay_us: int = 0,
) -> int:
    job_id = next_id(t, NEXT_ID)
    rec = {"k": kind, "p": payload, "a": 0, "m": max_attempts, "st": "pending", "ra": now + delay_us,
           "u": None if uri is None else "/".join(uri), "r": revision, "e": None, "c": now, "t": now}  # fmt: skip
    t.put(JOBS, u64(job_id), encode(rec))
    _index(t, job_id, rec)
    add(t, _status_key("pending"), 1)
    add(t, _BY_KIND + kind.encode(), 1)
    if uri is not None:
        t.put(URIS, node_key(uri) + u64(job_id), b"")
    return job_id


def _job(job_id: int, rec: dict[str, Any]) -> Job:
    # `tuple.__new__`: the NamedTuple's own constructor is Python code, a claim's largest fixed cost after its commit
    return _new(Job, (job_id, rec["k"], rec["p"], rec["a"], rec["m"], rec["u"]))


def claim(t: KvTxn, kinds: list[str], now: int) -> Job | None:
    """The runnable job of one of `kinds` due first (then lowest id), now running, its attempts advanced."""
    native = getattr(t, "claim_job", None)  # `MovesJobs`: the search and the move in one native step
    if native is not None and (claimed := native(kinds, now)) is not None:
        return None if claimed[1] is None else _job(claimed[0], decode(claimed[1], "context job"))
    best: tuple[int, int] | None = None
    for kind in kinds:
        head = kind.encode() + b"\x00"
        first = next(t.range(QUEUE, head, head + u64(now + 1)), None)
        if first is not None:
            got = (read_u64(first[0], len(head)), read_u64(first[0], len(head) + 8))
            best = got if best is None or got < best else best
    if best is None:
        return None
    job_id = best[1]
    rec = _load(t, job_id)
    _move(t, job_id, rec, now, st="running", a=rec["a"] + 1)
    return _job(job_id, rec)


def get(t: KvTxn, job_id: int) -> dict[str, Any]:
    """The job's record (`NotFoundError` when there is none)."""
    return _load(t, job_id)


def find(t: KvTxn, job_id: int) -> dict[str, Any] | None:
    """The job, or None when it is gone (done with, cancelled, removed with its URI);
    `NotFoundError` for an id never issued."""
    raw = t.get(JOBS, u64(job_id))
    if raw is None:
        if job_id > counter(t, NEXT_ID):
            raise NotFoundError("job", str(job_id))
        return None
    return decode(raw, "context job")


def complete(t: KvTxn, job_id: int, now: int) -> None:
    native = getattr(t, "move_job", None)  # `MovesJobs`: the move in one native step
    if native is not None and native(job_id, "complete", now) is not None:
        return
    rec = _load(t, job_id)
    if rec["st"] != "done":
        _move(t, job_id, rec, now, st="done", e=None)


def fail(t: KvTxn, job_id: int, reason: str | None, now: int) -> str:
    """Pending again after a backoff of ``min(300, 2^(attempts-1))`` s while attempts remain, else
    failed for good; the new status."""
    rec = _load(t, job_id)
    if rec["st"] in ("done", "failed"):
        return str(rec["st"])
    if rec["a"] < rec["m"]:
        backoff_s = min(BACKOFF_MAX_S, 2 ** max(0, rec["a"] - 1))
        _move(t, job_id, rec, now, st="pending", ra=now + backoff_s * 1_000_000, e=reason)
    else:
        _move(t, job_id, rec, now, st="failed", e=reason)
    return str(rec["st"])


def defer(t: KvTxn, job_id: int, delay_us: int, now: int) -> None:
    """Pending again after `delay_us`, the attempt its claim spent given back."""
    rec = _load(t, job_id)
    if rec["st"] in ("done", "failed"):
        return
    attempts = rec["a"] - 1 if rec["st"] == "running" and rec["a"] > 0 else rec["a"]
    _move(t, job_id, rec, now, st="pending", ra=now + delay_us, a=attempts)


def _drop(t: KvTxn, job_id: int) -> None:
    raw = t.get(JOBS, u64(job_id))
    if raw is None:
        return
    rec = decode(raw, "context job")
    _unindex(t, job_id, rec)
    add(t, _status_key(rec["st"]), -1)
    add(t, _BY_KIND + rec["k"].encode(), -1)
    t.delete(JOBS, u64(job_id))


def cancel(t: KvTxn, rng: tuple[bytes, bytes | None]) -> int:
    """Drops every job for a URI in the key range, in any state; how many."""
    keys = keys_of(t, URIS, rng)
    for key in keys:
        t.delete(URIS, key)
        _drop(t, read_u64(key, len(key) - 8))
    return len(keys)


def reset_running(t: KvTxn, now: int) -> int:
    head = b"running\x00"
    ids = [read_u64(k, len(k) - 8) for k in keys_of(t, STATE, (head, b"running\x01"))]
    for job_id in ids:
        _move(t, job_id, _load(t, job_id), now, st="pending", ra=now)
    return len(ids)


def count(t: KvTxn, rng: tuple[bytes, bytes | None], statuses: frozenset[str]) -> int:
    n = 0
    for key, _ in t.range(URIS, *rng):
        if _load(t, read_u64(key, len(key) - 8))["st"] in statuses:
            n += 1
    return n


def count_kind(t: KvTxn, kind: str) -> int:
    return counter(t, _BY_KIND + kind.encode())


def stats(t: KvTxn) -> dict[str, int]:
    got = {s: 0 for s in STATUSES}
    for name, n in counters_under(t, _BY_STATUS):
        got[name.decode()] = n
    return got


def detail(t: KvTxn, limit: int, now: int) -> dict[str, Any]:
    first = next(t.range(DUE, b"", u64(now + 1)), None)
    oldest = None if first is None else max(0, (now - read_u64(first[0])) // 1000)
    failed: list[dict[str, Any]] = []
    head = b"failed\x00"
    for key, _ in t.range(STATE, head, b"failed\x01", reverse=True):
        if len(failed) >= limit:
            break
        job_id = read_u64(key, len(key) - 8)
        rec = _load(t, job_id)
        failed.append({"id": job_id, "kind": rec["k"], "uri": rec["u"], "attempts": rec["a"],
                       "last_error": rec["e"], "failed_at": rec["t"]})  # fmt: skip
    counts = stats(t)
    return {**counts, "failed_count": counts["failed"], "oldest_pending_ms": oldest, "failed": failed}


def uri_segments(rec: dict[str, Any]) -> tuple[str, ...] | None:
    u = rec.get("u")
    return None if u is None else tuple(str(u).split("/"))
