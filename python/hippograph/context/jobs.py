"""The durable job queue inside a transaction (docs/context.md, jobs).

A job record lives under its id in ``ctx_jobs``. ``ctx_job_queue`` holds two key ranges, so a
document write and its job dirty one index database's pages: a pending job under (kind, due time,
id) (a claim of given kinds is one range read per kind; the oldest waiting job is the first of each
kind's range), and a job for a URI under (0x01, the URI's key, id) (removing a subtree drops its
jobs); a kind holds no control character, so the ranges never meet. A running or failed job is in
``ctx_job_state`` (status, time, id: what a restart resets, the newest failures), a space of its own,
kept small, so a completion dirties only its pages. Counters per status and per kind answer the
counts without a scan, but for the running jobs, which are counted from their range (as many as
there are workers at work), so a claim and a completion each move one counter. Every change of
status goes through `_move`, which keeps all of these in step. Stores written before kept the jobs
by URI, and a due-time index, in spaces of their own (`LEGACY`): `upgrade` moves them in, and reads
also look there until it has.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, islice
from typing import Any

from ..errors import NotFoundError
from .keys import (
    COUNTERS,
    add,
    counter,
    counters_under,
    decode,
    encode,
    keys_of,
    next_id,
    node_key,
    read_u64,
    u64,
)
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
    "index_entries",
    "legacy_held",
    "reset_running",
    "upgrade",
]

JOBS = "ctx_jobs"
QUEUE = "ctx_job_queue"
STATE = "ctx_job_state"
_RUNNING = (b"running\x00", b"running\x01")
"""The state space's range of running jobs."""
_URI = b"\x01"
"""The queue space's range of jobs by URI."""
LEGACY_DUE, LEGACY_URIS = "ctx_job_due", "ctx_job_uris"
LEGACY = (LEGACY_DUE, LEGACY_URIS)
"""The spaces a store written before the two-range queue kept its indexes in (read until `upgrade`)."""
NEXT_ID = b"next_job"
STATUSES = ("pending", "running", "done", "failed")
_BY_STATUS = b"jobs\x00"
_BY_KIND = b"kind\x00"
BACKOFF_MAX_S = 300
_new = tuple.__new__


def _status_key(status: str) -> bytes:
    return _BY_STATUS + status.encode()


def _count(t: KvTxn, status: str, delta: int) -> None:
    """Moves the counter of `status` (the running jobs have none: `stats` counts their range)."""
    if status != "running":
        add(t, _status_key(status), delta)


def _load(t: KvTxn, job_id: int) -> dict[str, Any]:
    raw = t.get(JOBS, u64(job_id))
    if raw is None:
        raise NotFoundError("job", str(job_id))
    return decode(raw, "context job")


def _unindex(t: KvTxn, job_id: int, rec: dict[str, Any]) -> None:
    st = rec["st"]
    if st == "pending":
        t.delete(QUEUE, rec["k"].encode() + b"\x00" + u64(rec["ra"]) + u64(job_id))
    elif st in ("running", "failed"):
        t.delete(STATE, st.encode() + b"\x00" + u64(rec["t"]) + u64(job_id))


def _index(t: KvTxn, job_id: int, rec: dict[str, Any]) -> None:
    st = rec["st"]
    if st == "pending":
        t.put(QUEUE, rec["k"].encode() + b"\x00" + u64(rec["ra"]) + u64(job_id), b"")
    elif st in ("running", "failed"):
        t.put(STATE, st.encode() + b"\x00" + u64(rec["t"]) + u64(job_id), b"")


def _move(t: KvTxn, job_id: int, rec: dict[str, Any], now: int, **changes: Any) -> None:
    """Applies `changes` to the job and keeps its indexes and counters in step."""
    _unindex(t, job_id, rec)
    before = rec["st"]
    rec.update(changes, t=now)
    if rec["st"] != before:
        _count(t, before, -1)
        _count(t, rec["st"], 1)
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
        t.put(QUEUE, _URI + node_key(uri) + u64(job_id), b"")
    return job_id


def _job(job_id: int, rec: dict[str, Any]) -> Job:
    # `tuple.__new__`: the NamedTuple's own constructor is Python code, a claim's largest fixed cost after its commit
    return _new(Job, (job_id, rec["k"], rec["p"], rec["a"], rec["m"], rec["u"]))


def claim(t: KvTxn, kinds: list[str], now: int) -> Job | None:
    """The runnable job of one of `kinds` due first (then lowest id), now running, its attempts advanced."""
    native = getattr(t, "claim_job", None)  # `MovesJobs`: the search and the move in one native step
    if native is not None and (claimed := native(kinds, now)) is not None:
        return None if claimed[1] is None else _job(claimed[0], decode(claimed[1], "context job"))
    due = [d for d in (_due_first(t, kind, now) for kind in kinds) if d]
    if not due:
        return None
    job_id = min(due)[1]
    rec = _load(t, job_id)
    _move(t, job_id, rec, now, st="running", a=rec["a"] + 1)
    return _job(job_id, rec)


def _due_first(t: KvTxn, kind: str, now: int) -> tuple[int, int] | None:
    """(due time, id) of the pending job of `kind` due first by `now` (then lowest id), if any."""
    head = kind.encode() + b"\x00"
    first = next(t.range(QUEUE, head, head + u64(now + 1)), None)
    return None if first is None else (read_u64(first[0], len(head)), read_u64(first[0], len(head) + 8))


def _by_uri(rng: tuple[bytes, bytes | None]) -> tuple[bytes, bytes]:
    """The queue space's range of the jobs for the URIs of node-key range `rng`."""
    return _URI + rng[0], _URI + rng[1] if rng[1] is not None else b"\x02"


def _keys(t: KvTxn, space: str, rng: tuple[bytes, bytes | None], *, reverse: bool = False) -> Iterator[bytes]:
    return (k for k, _ in t.range(space, rng[0], rng[1], reverse=reverse))


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
    _count(t, rec["st"], -1)
    add(t, _BY_KIND + rec["k"].encode(), -1)
    t.delete(JOBS, u64(job_id))


def cancel(t: KvTxn, rng: tuple[bytes, bytes | None]) -> int:
    """Drops every job for a URI in the key range, in any state; how many."""
    keys = keys_of(t, QUEUE, _by_uri(rng))
    for key in keys:
        t.delete(QUEUE, key)
        _drop(t, read_u64(key, len(key) - 8))
    return len(keys)


def reset_running(t: KvTxn, now: int) -> int:
    ids = [read_u64(k, len(k) - 8) for k in keys_of(t, STATE, _RUNNING)]
    for job_id in ids:
        _move(t, job_id, _load(t, job_id), now, st="pending", ra=now)
    return len(ids)


def count(t: KvTxn, rng: tuple[bytes, bytes | None], statuses: frozenset[str]) -> int:
    n = 0
    for key in chain(_keys(t, QUEUE, _by_uri(rng)), _keys(t, LEGACY_URIS, rng)):
        if _load(t, read_u64(key, len(key) - 8))["st"] in statuses:
            n += 1
    return n


def count_kind(t: KvTxn, kind: str) -> int:
    return counter(t, _BY_KIND + kind.encode())


def stats(t: KvTxn) -> dict[str, int]:
    got = {s: 0 for s in STATUSES}
    for name, n in counters_under(t, _BY_STATUS):
        got[name.decode()] = n
    got["running"] = sum(1 for _ in t.range(STATE, *_RUNNING))  # a store not yet upgraded counted them too
    return got


def detail(t: KvTxn, limit: int, now: int) -> dict[str, Any]:
    due = [d for d in (_due_first(t, kind.decode(), now) for kind, _ in counters_under(t, _BY_KIND)) if d]
    oldest = None if not due else max(0, (now - min(due)[0]) // 1000)
    failed: list[dict[str, Any]] = []
    for key in _keys(t, STATE, (b"failed\x00", b"failed\x01"), reverse=True):
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


def index_entries(t: KvTxn) -> tuple[list[bytes], list[bytes]]:
    """The keys of the queue's two ranges, each without its range's prefix, a store's `LEGACY`
    spaces included: pending (kind, due time, id), by URI (the URI's key, id)."""
    pending, by_uri = [], []
    for key in _keys(t, QUEUE, (b"", None)):
        if key[:1] == _URI:
            by_uri.append(key[1:])
        else:
            pending.append(key)
    by_uri += _keys(t, LEGACY_URIS, (b"", None))
    return pending, by_uri


def legacy_held(t: KvTxn) -> bool:
    """Whether `upgrade` has more to do: a space of `LEGACY` holds an entry, or the running jobs'
    counter (which this layout does not keep) is there."""
    return counter(t, _status_key("running")) > 0 or any(next(t.range(space), None) is not None for space in LEGACY)


def upgrade(t: KvTxn, most: int = 10_000) -> bool:
    """Moves up to `most` entries of the `LEGACY` spaces into the queue space (the due-time index is
    dropped: a kind's queue range answers it) and drops the running jobs' counter; whether any are
    left. Idempotent, so an upgrade cut short by a crash goes on at the next open."""
    t.delete(COUNTERS, _status_key("running"))
    left = most
    for space, head in ((LEGACY_URIS, _URI), (LEGACY_DUE, None)):
        for key in [k for k, _ in islice(t.range(space), left)]:
            t.delete(space, key)
            if head is not None:
                t.put(QUEUE, head + key, b"")
            left -= 1
        if left == 0:
            return legacy_held(t)
    return False
