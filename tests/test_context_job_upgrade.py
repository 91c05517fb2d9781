"""A context store written before the two-range job queue (its jobs by URI, and a due-time index, in
spaces of their own, the running jobs counted by a counter) reads the same before it is upgraded,
and a writable open moves it into the layout this version writes, nothing lost."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import hippograph.context.queue_calls as queue_calls
import hippograph.context.store as context_store
from hippograph.backends import LMDB, InMemory
from hippograph.context import ContextStore, jobs
from hippograph.context.inspect import verify_context
from hippograph.context.keys import COUNTERS, read_u64, u64
from hippograph.context.protocol import KvTxn
from pg_server import pg_dsn, pg_store

__all__ = ["pg_dsn", "pg_store"]  # fixtures


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    now = [1_700_000_000_000_000]
    for module in (context_store, queue_calls):
        monkeypatch.setattr(module, "now_us", lambda: now[0])
    yield now


def _written(ctx: ContextStore, clock: list[int]) -> None:
    """Ten jobs under two top subtrees: two running, one failed, one done, six pending."""
    for i, uri in enumerate(("a/x", "a/y", "a/z", "b/w", "b/v")):
        clock[0] += 1_000
        ctx.put_document(uri, f"text {i}", jobs=[("embed", {"i": i}), ("tag", {})])
    claimed = [ctx.dequeue_job([kind]) for kind in ("embed", "tag", "embed", "tag")]
    assert [None if job is None else job.id for job in claimed] == [1, 2, 3, 4]
    assert ctx.fail_job(2, "boom") == "failed"  # one attempt allowed
    ctx.complete_job(3)
    clock[0] += 5_000


def _answers(ctx: ContextStore) -> dict[str, Any]:
    statuses = list(jobs.STATUSES)
    return {
        "count": {uri: ctx.count_jobs(uri, statuses) for uri in ("a", "b", "a/x", "")},
        "running": ctx.count_jobs("", ["running"]),
        "failed": ctx.count_jobs("", ["failed"]),
        "kinds": {k: ctx.count_jobs_of_kind(k) for k in ("embed", "tag")},
        "detail": ctx.queue_detail(),
    }


def _downgrade(t: KvTxn) -> None:
    """Rewrites the job indexes as a store of the earlier layout held them."""
    for key, _ in list(t.range(jobs.QUEUE)):
        if key[:1] == b"\x01":
            t.put(jobs.LEGACY_URIS, key[1:], b"")
            t.delete(jobs.QUEUE, key)
        else:
            kind, rest = key.split(b"\x00", 1)
            t.put(jobs.LEGACY_DUE, rest, kind)
    running = sum(1 for _ in t.range(jobs.STATE, b"running\x00", b"running\x01"))
    t.put(COUNTERS, b"jobs\x00running", u64(running))


def _legacy(t: KvTxn) -> dict[str, int]:
    held = {space: sum(1 for _ in t.range(space)) for space in jobs.LEGACY}
    return {**held, "running counter": int(t.get(COUNTERS, b"jobs\x00running") is not None)}


def test_an_earlier_lmdb_store_reads_the_same_then_upgrades_on_a_writable_open(
    tmp_path: Path, clock: list[int]
) -> None:
    backend = LMDB(tmp_path / "store")
    ctx = ContextStore(backend, max_attempts=1)
    _written(ctx, clock)
    before = _answers(ctx)
    assert (before["running"], before["failed"], before["detail"]["oldest_pending_ms"]) == (2, 1, 7)
    backend.context_write(_downgrade)
    assert all(backend.context_read(_legacy).values())
    assert _answers(ctx) == before, "the earlier layout reads the same before the upgrade"
    backend.close()

    readonly = LMDB(tmp_path / "store", readonly=True)
    assert _answers(ContextStore(readonly, max_attempts=1)) == before
    assert verify_context(readonly) == []
    assert all(readonly.context_read(_legacy).values()), "a read-only open writes nothing"
    readonly.close()

    backend = LMDB(tmp_path / "store")
    ctx = ContextStore(backend, max_attempts=1)
    assert backend.context_read(_legacy) == dict.fromkeys([*jobs.LEGACY, "running counter"], 0)
    assert _answers(ctx) == before
    assert verify_context(backend) == []
    claimed = ctx.dequeue_job(["embed"])
    assert claimed is not None and claimed.uri == "a/z"
    assert ctx.reset_running_jobs() == 3, "the two running before the upgrade and the one claimed after"
    assert ctx.cancel_jobs("a") == 6
    assert ctx.count_jobs("", list(jobs.STATUSES)) == 4
    assert verify_context(backend) == []
    backend.close()


@pytest.mark.parametrize("kind", ["memory", "postgres"])
def test_an_upgrade_in_small_steps_moves_every_entry(clock: list[int], kind: str, pg_store: Callable[..., Any]) -> None:
    backend = InMemory() if kind == "memory" else pg_store()
    ctx = ContextStore(backend, max_attempts=1)
    _written(ctx, clock)
    before = _answers(ctx)
    backend.context_write(_downgrade)
    held = sum(n for space, n in backend.context_read(_legacy).items() if space in jobs.LEGACY)
    steps = 0
    while backend.context_write(lambda t: jobs.upgrade(t, most=3)):
        steps += 1
    assert steps == (held - 1) // 3
    assert backend.context_read(_legacy) == dict.fromkeys([*jobs.LEGACY, "running counter"], 0)
    assert _answers(ContextStore(backend, max_attempts=1)) == before
    assert verify_context(backend) == []
    backend.context_write(_downgrade)
    assert _answers(ContextStore(backend, max_attempts=1)) == before, "an open upgrades it at once"
    assert backend.context_read(_legacy) == dict.fromkeys([*jobs.LEGACY, "running counter"], 0)


def test_the_queue_space_keeps_its_two_ranges_apart(clock: list[int]) -> None:
    ctx = ContextStore(InMemory(), max_attempts=1)
    _written(ctx, clock)
    pending, by_uri = ctx.backend.context_read(jobs.index_entries)
    assert len(pending) == 6 and len(by_uri) == 10
    assert {read_u64(key, len(key) - 8) for key in by_uri} == set(range(1, 11))
    assert ctx.queue_stats()["running"] == 2, "running jobs are counted from their range"
