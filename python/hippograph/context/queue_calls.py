"""`ContextStore`'s session, commit and job-queue calls (docs/context.md)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..engine.checks import check_collection
from ..errors import ValidationError
from . import jobs, sessions
from .base import (
    JOB_STATUSES,
    MAX_LIMIT,
    ContextBase,
    delay_of,
    job_id_of,
    now_us,
    str_set,
)
from .keys import subtree
from .model import (
    MAX_ID_BYTES,
    Job,
    Message,
    SessionConflictError,
    check_limit,
    check_name,
    check_payload,
    check_text,
    check_uri,
)
from .protocol import KvTxn

__all__ = ["QueueCalls"]


class QueueCalls(ContextBase):
    """Sessions of ordered messages, commit bookkeeping and the durable job queue."""

    # -- sessions and commits -------------------------------------------------------------------

    def create_session(self) -> str:
        session_id = uuid.uuid4().hex
        self._write(lambda t: sessions.create(t, session_id, now_us()))
        return session_id

    def append_message(self, session_id: str, role: str, content: str) -> int:
        """Appends a message (`NotFoundError` for an unknown session); its sequence number."""
        sid, r = check_name(session_id, "session_id", MAX_ID_BYTES), check_name(role, "role")
        text = check_text(content, "content")
        assert text is not None
        return self._write(lambda t: sessions.append(t, sid, r, text))

    def get_session(self, session_id: str) -> list[Message]:
        sid = check_name(session_id, "session_id", MAX_ID_BYTES)
        return self._read(lambda t: sessions.messages(t, sid))

    def list_session_ids(self) -> list[str]:
        return self._read(sessions.ids)

    def restore_session(self, session_id: str, messages: Sequence[Message | tuple[str, str]]) -> str:
        """Creates the session with `messages` (``"imported"``); ``"skipped"`` when it already holds
        exactly these (role, content) pairs; `SessionConflictError` when it holds others."""
        sid = check_name(session_id, "session_id", MAX_ID_BYTES)
        pairs = []
        for i, m in enumerate(check_collection(messages, "messages", "messages")):
            if isinstance(m, Message):
                role, content = m.role, m.content
            elif isinstance(m, (tuple, list)) and len(m) == 2:
                role, content = m
            else:
                raise ValidationError(f"messages[{i}] must be a Message or a (role, content) pair")
            text = check_text(content, f"messages[{i}].content")
            assert text is not None
            pairs.append((check_name(role, f"messages[{i}].role"), text))

        def run(t: KvTxn) -> str:
            if sessions.exists(t, sid):
                if [(m.role, m.content) for m in sessions.messages(t, sid)] == pairs:
                    return "skipped"
                raise SessionConflictError(sid)
            sessions.create(t, sid, now_us())
            for role, content in pairs:
                sessions.append(t, sid, role, content)
            return "imported"

        return self._write(run)

    def put_commit(self, session_id: str, uri: str, content: str, content_hash: str) -> None:
        """Writes the committed document and its (session, destination) hash in one step."""
        sid = check_name(session_id, "session_id", MAX_ID_BYTES)
        segments = check_uri(uri)
        text = check_text(content, "content")
        digest = check_name(content_hash, "content_hash")
        assert text is not None
        work = self._jobs(None)

        def run(t: KvTxn) -> None:
            self._document(t, segments, text, None, None, work, now_us())
            sessions.put_commit_hash(t, sid, segments, digest)

        self._write(run)

    def commit_hash(self, session_id: str, uri: str) -> str | None:
        sid = check_name(session_id, "session_id", MAX_ID_BYTES)
        segments = check_uri(uri)
        return self._read(lambda t: sessions.commit_hash(t, sid, segments))

    # -- jobs -----------------------------------------------------------------------------------

    def enqueue_job(
        self, kind: str, payload: Mapping[str, Any] | None = None, *, uri: str | None = None, delay_s: float = 0.0
    ) -> int:
        """Records durable background work (for `uri`, when given: removing it drops the job); its id."""
        k = check_name(kind, "kind")
        body = check_payload(payload)
        segments = None if uri is None else check_uri(uri)
        delay = delay_of(delay_s)
        return self._write(lambda t: jobs.enqueue(t, k, body, now_us(), uri=segments,
                                                  max_attempts=self.max_attempts, delay_us=delay))  # fmt: skip

    def dequeue_job(self, kinds: Iterable[str]) -> Job | None:
        """Claims the runnable job of one of `kinds` due first, its attempts advanced (None: none)."""
        if isinstance(kinds, str) or not isinstance(kinds, Iterable):
            raise ValidationError("kinds must be a collection of str")
        wanted = sorted({check_name(k, "kind") for k in kinds})
        if not wanted:
            raise ValidationError("kinds must not be empty")
        return self._write(lambda t: jobs.claim(t, wanted, now_us()))

    def complete_job(self, job_id: int) -> None:
        i = job_id_of(job_id)
        self._write(lambda t: jobs.complete(t, i, now_us()))

    def fail_job(self, job_id: int, reason: str | None = None) -> str:
        """Pending again after ``min(300, 2^(attempts-1))`` s while attempts remain, else failed;
        the job's status. `reason`: a classification, never content."""
        i = job_id_of(job_id)
        why = None if reason is None else check_name(reason, "reason")
        return self._write(lambda t: jobs.fail(t, i, why, now_us()))

    def defer_job(self, job_id: int, delay_s: float = 0.0) -> None:
        """Puts a job back without spending an attempt, due after `delay_s`."""
        i = job_id_of(job_id)
        delay = delay_of(delay_s)
        self._write(lambda t: jobs.defer(t, i, delay, now_us()))

    def cancel_jobs(self, uri: str) -> int:
        """Drops every job for `uri` or below it, in any state; how many."""
        segments = check_uri(uri)
        return self._write(lambda t: jobs.cancel(t, subtree(segments)))

    def reset_running_jobs(self) -> int:
        """Jobs left running (by a process that died) are pending again; how many."""
        return self._write(lambda t: jobs.reset_running(t, now_us()))

    def count_jobs(self, uri: str, statuses: Iterable[str]) -> int:
        segments = check_uri(uri, root=True)
        wanted = str_set(statuses, "statuses")
        if wanted - JOB_STATUSES:
            raise ValidationError(f"statuses must be a subset of {sorted(JOB_STATUSES)}")
        return self._read(lambda t: jobs.count(t, subtree(segments), wanted))

    def count_jobs_of_kind(self, kind: str) -> int:
        k = check_name(kind, "kind")
        return self._read(lambda t: jobs.count_kind(t, k))

    def queue_stats(self) -> dict[str, int]:
        return self._read(jobs.stats)

    def queue_detail(self, limit: int = 20) -> dict[str, Any]:
        """`queue_stats` with ``oldest_pending_ms`` (None when nothing is runnable) and the newest
        `limit` failed jobs with their reasons."""
        check_limit(limit, "limit", MAX_LIMIT)
        return self._read(lambda t: jobs.detail(t, limit, now_us()))
