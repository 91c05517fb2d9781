"""Sessions of ordered messages and commit bookkeeping inside a transaction (docs/context.md).

A session is a record under its id and its messages under (id, sequence number): the number is
taken inside the appending transaction, so concurrent appends keep one order. A commit's hash is
kept under (destination URI, session), so removing a subtree drops its bookkeeping with it.
"""

from __future__ import annotations

from ..errors import NotFoundError
from .keys import decode, encode, node_key, read_u64, u64
from .model import Message
from .protocol import KvTxn

__all__ = ["append", "commit_hash", "create", "messages", "put_commit_hash"]

SESSIONS = "ctx_sessions"
MESSAGES = "ctx_messages"
COMMITS = "ctx_commits"


def exists(t: KvTxn, session_id: str) -> bool:
    return t.get(SESSIONS, session_id.encode()) is not None


def create(t: KvTxn, session_id: str, now: int) -> None:
    t.put(SESSIONS, session_id.encode(), encode({"c": now, "n": 0}))


def append(t: KvTxn, session_id: str, role: str, content: str) -> int:
    raw = t.get(SESSIONS, session_id.encode())
    if raw is None:
        raise NotFoundError("session", session_id)
    rec = decode(raw, "context session")
    seq = int(rec["n"]) + 1
    t.put(MESSAGES, session_id.encode() + b"\x00" + u64(seq), encode({"r": role, "c": content}))
    t.put(SESSIONS, session_id.encode(), encode({**rec, "n": seq}))
    return seq


def messages(t: KvTxn, session_id: str) -> list[Message]:
    if not exists(t, session_id):
        raise NotFoundError("session", session_id)
    head = session_id.encode() + b"\x00"
    out = []
    for key, raw in t.range(MESSAGES, head, session_id.encode() + b"\x01"):
        rec = decode(raw, "context message")
        out.append(Message(seq=read_u64(key, len(head)), role=rec["r"], content=rec["c"]))
    return out


def ids(t: KvTxn) -> list[str]:
    return [k.decode() for k, _ in t.range(SESSIONS)]


def put_commit_hash(t: KvTxn, session_id: str, segments: tuple[str, ...], content_hash: str) -> None:
    t.put(COMMITS, node_key(segments) + session_id.encode(), content_hash.encode())


def commit_hash(t: KvTxn, session_id: str, segments: tuple[str, ...]) -> str | None:
    raw = t.get(COMMITS, node_key(segments) + session_id.encode())
    return None if raw is None else bytes(raw).decode()
