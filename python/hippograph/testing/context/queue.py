"""The context conformance suite's sessions, commits and the job queue (mixed into `ContextConformance`)."""

from __future__ import annotations

import contextlib
import threading

import pytest

from ...context import (
    ContextBackend,
    ContextStore,
    Message,
    SessionConflictError,
)
from ...errors import NotFoundError, ValidationError
from .support import (
    _ALL_JOB_STATUSES,
    DOCUMENT_JOBS,
    SuiteBase,
    _job_statuses,
    dump,
)

__all__ = ["ContextQueue"]


class ContextQueue(SuiteBase):
    """Tests of sessions, commits and the job queue; the fixtures come from `ContextConformance`."""

    # -- sessions and commits -------------------------------------------------------------------

    def test_sessions_keep_their_messages_in_order(self, store: ContextStore, other: ContextStore) -> None:
        first, second = store.create_session(), other.create_session()
        assert first != second
        for i in range(3):
            store.append_message(first, "user", f"q{i}")
            other.append_message(second, "user", f"other {i}")
            other.append_message(first, "assistant", f"a{i}")
        got = store.get_session(first)
        assert [(m.role, m.content) for m in got] == [
            (r, f"{p}{i}") for i in range(3) for r, p in (("user", "q"), ("assistant", "a"))
        ]
        assert [m.seq for m in got] == sorted(m.seq for m in got) and len({m.seq for m in got}) == 6
        assert [m.content for m in other.get_session(second)] == ["other 0", "other 1", "other 2"]
        ids = other.list_session_ids()
        assert sorted([first, second]) == ids
        assert store.get_session(store.create_session()) == []

    def test_unknown_sessions(self, backend: ContextBackend, store: ContextStore) -> None:
        before = dump(backend)
        with pytest.raises(NotFoundError):
            store.append_message("nosuchsession", "user", "hi")
        with contextlib.suppress(NotFoundError):  # an unknown session reads as empty, or is not found
            assert store.get_session("nosuchsession") == []
        assert dump(backend) == before and store.list_session_ids() == []

    def test_restore_session(self, backend: ContextBackend, store: ContextStore, other: ContextStore) -> None:
        messages = [("user", "hi"), ("assistant", "hello"), ("user", "bye")]
        assert store.restore_session("exported1", messages) == "imported"
        assert [(m.role, m.content) for m in other.get_session("exported1")] == messages
        before = dump(backend)
        as_messages = [Message(seq=i + 10, role=r, content=c) for i, (r, c) in enumerate(messages)]
        assert other.restore_session("exported1", as_messages) == "skipped"
        assert other.restore_session("exported1", messages) == "skipped"
        assert dump(backend) == before
        for different in (messages[:2], [*messages, ("user", "more")], [("user", "HI"), *messages[1:]], []):
            with pytest.raises(SessionConflictError):
                other.restore_session("exported1", different)
        assert dump(backend) == before
        assert store.restore_session("empty", []) == "imported"
        assert store.restore_session("empty", []) == "skipped"
        with pytest.raises(SessionConflictError):
            store.restore_session("empty", messages)
        assert other.get_session("empty") == []
        assert "exported1" in other.list_session_ids()
        store.append_message("exported1", "assistant", "see you")
        assert [m.content for m in other.get_session("exported1")][-1] == "see you"

    def test_a_commit_writes_the_document_and_its_hash_together(
        self, backend: ContextBackend, store: ContextStore, other: ContextStore
    ) -> None:
        sid = store.create_session()
        assert other.commit_hash(sid, "res/doc") is None
        store.put_commit(sid, "res/doc", "first", "h1")
        got = other.get_node("res/doc")
        assert got is not None and got.content == "first" and other.commit_hash(sid, "res/doc") == "h1"
        assert other.count_jobs("res/doc", ["pending"]) == len(DOCUMENT_JOBS)
        other.put_commit(sid, "res/doc", "second", "h2")
        got = store.get_node("res/doc")
        assert got is not None and got.content == "second" and store.commit_hash(sid, "res/doc") == "h2"
        assert store.commit_hash("othersession", "res/doc") is None and store.commit_hash(sid, "res") is None
        before = dump(backend)
        with pytest.raises(ValidationError):
            store.put_commit(sid, "res/doc/below", "x", "h3")
        assert dump(backend) == before
        store.remove_subtree("res")
        assert other.commit_hash(sid, "res/doc") is None

    def test_a_dequeue_claims_only_the_kinds_asked(self, store: ContextStore, other: ContextStore) -> None:
        a = store.enqueue_job("k1", {"n": 1})
        b = store.enqueue_job("k2", {"n": 2, "deep": {"x": [1, "y"]}}, uri="j/doc")
        c = store.enqueue_job("k1", {"n": 3})
        assert len({a, b, c}) == 3
        assert other.dequeue_job(["k3"]) is None
        got = other.dequeue_job(["k2", "k3"])
        assert got is not None and (got.id, got.kind, got.payload, got.attempts) == (
            b,
            "k2",
            {"n": 2, "deep": {"x": [1, "y"]}},
            1,
        )
        assert got.max_attempts >= 1 and got.uri == "j/doc"
        assert store.dequeue_job(["k2"]) is None
        assert [j.id if j else None for j in (store.dequeue_job(["k1"]), other.dequeue_job(["k1", "k2"]))] == [a, c]
        assert store.dequeue_job(["k1", "k2"]) is None
        assert store.queue_stats() == {"pending": 0, "running": 3, "done": 0, "failed": 0}

    def test_complete_job(self, store: ContextStore, other: ContextStore) -> None:
        job = store.enqueue_job("k", uri="j/a")
        claimed = store.dequeue_job(["k"])
        assert claimed is not None and claimed.id == job
        other.complete_job(job)
        assert _job_statuses(store, "j") == {"pending": 0, "running": 0, "done": 1, "failed": 0}
        assert store.dequeue_job(["k"]) is None
        with pytest.raises(NotFoundError):
            other.complete_job(job + 1)

    def test_a_failed_job_waits_out_its_backoff(self, backend: ContextBackend, store: ContextStore) -> None:
        """Retried later, not at once. After several attempts the backoff is far longer than the
        few calls this test makes, so nothing depends on how fast they run."""
        patient = self.make_store(backend, max_attempts=20)
        job = patient.enqueue_job("k", {}, uri="j/a")
        for attempt in range(1, 8):
            claimed = patient.dequeue_job(["k"])
            assert claimed is not None and claimed.id == job and claimed.attempts == attempt
            if attempt < 7:
                assert store.reset_running_jobs() == 1
        assert store.fail_job(job, "timeout") == "pending"
        assert patient.dequeue_job(["k"]) is None and store.dequeue_job(["k"]) is None
        assert _job_statuses(store, "j") == {"pending": 1, "running": 0, "done": 0, "failed": 0}
        detail = store.queue_detail()
        assert detail["oldest_pending_ms"] is None and detail["failed"] == []
        other_kind = patient.enqueue_job("k2")
        claimed = patient.dequeue_job(["k", "k2"])
        assert claimed is not None and claimed.id == other_kind

    def test_a_job_out_of_attempts_fails_with_its_reason(self, backend: ContextBackend, other: ContextStore) -> None:
        once = self.make_store(backend, max_attempts=1)
        first = once.enqueue_job("k", {}, uri="j/a")
        second = once.enqueue_job("k", {}, uri="j/b")
        for _ in range(2):
            assert once.dequeue_job(["k"]) is not None
        assert other.fail_job(second, "rate_limited") == "failed"
        assert other.fail_job(first, "bad_input") == "failed"
        assert once.dequeue_job(["k"]) is None
        detail = other.queue_detail()
        assert [(f["id"], f["last_error"], f["kind"]) for f in detail["failed"]] == [
            (first, "bad_input", "k"),
            (second, "rate_limited", "k"),
        ]
        assert detail["failed"][0]["uri"] == "j/a" and detail["failed"][0]["attempts"] == 1
        assert [f["id"] for f in other.queue_detail(1)["failed"]] == [first]
        assert other.queue_stats() == {"pending": 0, "running": 0, "done": 0, "failed": 2}
        assert other.count_jobs("j", ["failed"]) == 2
        three = self.make_store(backend, max_attempts=3)
        job = three.enqueue_job("k3")
        claimed = three.dequeue_job(["k3"])
        assert claimed is not None and claimed.max_attempts == 3
        assert three.fail_job(job) == "pending"

    def test_defer_does_not_spend_an_attempt(self, store: ContextStore, other: ContextStore) -> None:
        job = store.enqueue_job("k", uri="j/a")
        claimed = store.dequeue_job(["k"])
        assert claimed is not None and claimed.attempts == 1
        other.defer_job(job)
        for _ in range(3):
            again = store.dequeue_job(["k"])
            assert again is not None and again.id == job and again.attempts == 1
            other.defer_job(job, 0)
        assert store.dequeue_job(["k"]) is not None
        other.defer_job(job, 3600)
        assert store.dequeue_job(["k"]) is None
        assert _job_statuses(store, "j") == {"pending": 1, "running": 0, "done": 0, "failed": 0}
        assert store.queue_detail()["oldest_pending_ms"] is None

    def test_cancel_jobs_drops_the_subtree_in_any_state(self, store: ContextStore, other: ContextStore) -> None:
        once = self.make_store(store.backend, max_attempts=1)
        once.enqueue_job("pend", uri="c/a")
        once.enqueue_job("run", uri="c/a/b")
        failed = once.enqueue_job("fail", uri="c/x")
        done = once.enqueue_job("done", uri="c")
        for kind in ("run", "fail", "done"):
            assert once.dequeue_job([kind]) is not None
        once.fail_job(failed, "boom")
        once.complete_job(done)
        once.enqueue_job("pend", uri="c-old/z")
        once.enqueue_job("pend")
        assert other.cancel_jobs("c") == 4
        assert _job_statuses(store, "c") == {"pending": 0, "running": 0, "done": 0, "failed": 0}
        assert store.count_jobs("c-old", ["pending"]) == 1 and store.count_jobs_of_kind("pend") == 2
        assert store.queue_stats() == {"pending": 2, "running": 0, "done": 0, "failed": 0}
        assert store.queue_detail()["failed"] == []
        assert other.cancel_jobs("c") == 0 and other.cancel_jobs("nothing") == 0

    def test_reset_running_jobs(self, store: ContextStore, other: ContextStore) -> None:
        for i in range(3):
            store.enqueue_job("k", {"i": i})
        assert store.dequeue_job(["k"]) is not None and store.dequeue_job(["k"]) is not None
        assert other.reset_running_jobs() == 2
        assert store.queue_stats() == {"pending": 3, "running": 0, "done": 0, "failed": 0}
        claimed = [store.dequeue_job(["k"]) for _ in range(3)]
        assert sorted(j.attempts for j in claimed if j is not None) == [1, 2, 2]
        assert other.reset_running_jobs() == 3 and other.reset_running_jobs() == 0

    def test_count_jobs_by_statuses_and_subtree(self, store: ContextStore, other: ContextStore) -> None:
        for uri in ("n/a", "n/a/b", "n/a-old", "n/c"):
            store.enqueue_job("k", uri=uri)
        store.enqueue_job("k")
        claimed = store.dequeue_job(["k"])
        assert claimed is not None and claimed.uri == "n/a"
        assert other.count_jobs("n/a", ["pending"]) == 1 and other.count_jobs("n/a", ["running"]) == 1
        assert other.count_jobs("n/a", ["pending", "running"]) == 2 and other.count_jobs("n/a", []) == 0
        assert other.count_jobs("n/a/b", list(_ALL_JOB_STATUSES)) == 1
        assert other.count_jobs("n", ["pending"]) == 3 and other.count_jobs("", ["pending"]) >= 3
        assert other.count_jobs("n/zzz", list(_ALL_JOB_STATUSES)) == 0

    def test_count_jobs_of_kind(self, store: ContextStore, other: ContextStore) -> None:
        assert other.count_jobs_of_kind("standing") == 0
        store.enqueue_job("standing")
        store.enqueue_job("standing", uri="s/a")
        store.enqueue_job("elsewhere")
        claimed = store.dequeue_job(["standing"])
        assert claimed is not None
        store.complete_job(claimed.id)
        assert other.count_jobs_of_kind("standing") == 2 and other.count_jobs_of_kind("elsewhere") == 1
        store.cancel_jobs("s")
        assert other.count_jobs_of_kind("standing") == 1

    def test_queue_stats_and_detail(self, store: ContextStore, other: ContextStore) -> None:
        empty = other.queue_detail()
        assert empty["oldest_pending_ms"] is None and empty["failed"] == []
        assert other.queue_stats() == {"pending": 0, "running": 0, "done": 0, "failed": 0}
        store.enqueue_job("later", delay_s=3600)
        assert other.queue_detail()["oldest_pending_ms"] is None
        assert other.queue_stats()["pending"] == 1
        store.enqueue_job("now")
        age = other.queue_detail()["oldest_pending_ms"]
        assert isinstance(age, int) and age >= 0
        assert store.dequeue_job(["now"]) is not None
        detail = other.queue_detail()
        assert detail["oldest_pending_ms"] is None and detail["failed"] == []
        assert other.queue_stats() == {"pending": 1, "running": 1, "done": 0, "failed": 0}

    def test_concurrent_dequeues_never_claim_a_job_twice(self, store: ContextStore, other: ContextStore) -> None:
        ids = {store.enqueue_job("k", {"i": i}) for i in range(24)}
        claimed: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(s: ContextStore) -> None:
            try:
                while (job := s.dequeue_job(["k"])) is not None:
                    s.complete_job(job.id)
                    with lock:
                        claimed.append(job.id)
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in (store, other, store, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sorted(claimed) == sorted(ids)
        assert store.queue_stats() == {"pending": 0, "running": 0, "done": 24, "failed": 0}
