"""The context store's values and the checks that refuse bad input before anything is written
(docs/context.md).

A URI is a path of whole segments, ``"user/notes/today"``: no scheme, no empty segment, no control
character. Membership of a subtree is *exact-or-descendant* by whole segments, so ``user/a`` never
holds ``user/a-old``. Every listing is in tree order: segment by segment, so a node comes before
its descendants and ``user/a/b`` before ``user/a-old``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

from ..engine.checks import check_collection, finite_float
from ..errors import HippographError, NotFoundError, ValidationError
from ..store.model import check_json

__all__ = [
    "MAX_QUERY_CHARS",
    "ConflictPair",
    "ContextHit",
    "EmbeddingsUnavailableError",
    "IsRootError",
    "Job",
    "LineMatch",
    "MemoryRow",
    "MemoryStatus",
    "Message",
    "NoCandidateError",
    "NodeKind",
    "PathMatch",
    "SessionConflictError",
    "SkillFile",
    "TreeNode",
    "check_query",
    "check_uri",
    "check_uris",
]

NodeKind = Literal["doc", "dir"]
MemoryStatus = Literal["active", "superseded", "candidate"]
Layer = Literal["abstract", "overview"]
MAX_QUERY_CHARS = 256
MAX_SEGMENT_BYTES = 255
MAX_SEGMENTS = 64
MAX_URI_BYTES = 400
"""A URI's key, with what follows it in the longest composite key, stays within LMDB's 511 bytes."""
MAX_ID_BYTES = 100
"""Session ids: a commit's key is the destination URI's key, then the session id."""


class IsRootError(ValidationError):
    """The operation is refused on the root of the tree (removing everything at once)."""


class NoCandidateError(NotFoundError):
    """No candidate assertion waits at the URI (`promote_memory`, `reject_memory_candidate`)."""


class SessionConflictError(HippographError):
    """`restore_session` found the session holding other messages; nothing was written."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already holds different messages")
        self.session_id = session_id


class EmbeddingsUnavailableError(HippographError):
    """Conflicts cannot be evaluated: the memories asked about have no stored vectors."""


class TreeNode(NamedTuple):
    """A stored document or directory. Fields a projection did not ask for are None."""

    uri: str
    parent_uri: str | None
    name: str
    kind: NodeKind
    content: str | None
    abstract: str | None
    overview: str | None
    enabled: bool = True
    group_tag: str = ""


class ContextHit(NamedTuple):
    """A vector search hit: the document it names, as stored now, and its cosine similarity."""

    uri: str
    content: str | None
    abstract: str | None
    overview: str | None
    score: float


class Job(NamedTuple):
    """A unit of durable background work as a worker claims it."""

    id: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    uri: str | None = None


class LineMatch(NamedTuple):
    uri: str
    line_number: int
    excerpt: str


class PathMatch(NamedTuple):
    uri: str
    name: str
    kind: NodeKind


class ConflictPair(NamedTuple):
    """Two active memories at distinct URIs whose stored vectors are this similar (cosine)."""

    uri_a: str
    uri_b: str
    similarity: float


class MemoryRow(NamedTuple):
    """One assertion ever made at a memory's URI. Times are microseconds since the epoch (UTC)."""

    id: int
    uri: str
    value: str
    confidence: float
    importance: float | None
    source: str | None
    status: MemoryStatus
    supersedes: int | None
    last_surfaced_at: int | None
    updated_at: int
    truncated: bool | None = None


class Message(NamedTuple):
    seq: int
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class SkillFile:
    """One file of a skill, at `path` (segments) below the skill's root."""

    path: tuple[str, ...]
    content: str


_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CHECKED: dict[str, tuple[str, ...]] = {}
"""URIs that passed `check_uri`: the URI an agent reads again costs one lookup."""


def check_uri(value: object, what: str = "uri", *, root: bool = False) -> tuple[str, ...]:
    """The URI's segments. `root`: the empty URI (the whole tree) is allowed."""
    if type(value) is str:
        known = _CHECKED.get(value)
        if known is not None:
            return known
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    if value == "":
        if root:
            return ()
        raise ValidationError(f"{what} must not be empty")
    segments = tuple(value.split("/"))
    # Printable ASCII (no control character, one byte a character) within the limits passes as a
    # whole; anything else is checked segment by segment, which names the fault.
    plain = value.isascii() and value.isprintable() and len(value) <= MAX_URI_BYTES and "" not in segments
    if not (plain and len(segments) <= MAX_SEGMENTS and max(map(len, segments)) <= MAX_SEGMENT_BYTES):
        if len(segments) > MAX_SEGMENTS:
            raise ValidationError(f"{what} has more than {MAX_SEGMENTS} segments")
        for s in segments:
            check_segment(s, what)
        if len(value.encode()) > MAX_URI_BYTES:
            raise ValidationError(f"{what} is longer than {MAX_URI_BYTES} UTF-8 bytes")
    if len(_CHECKED) >= 65_536:
        _CHECKED.clear()
    _CHECKED[str(value)] = segments
    return segments


def check_segment(s: object, what: str) -> str:
    if not isinstance(s, str) or not s:
        raise ValidationError(f"{what} has an empty segment (or one that is not a str)")
    if _CONTROL.search(s):
        raise ValidationError(f"{what} holds a control character")
    try:
        size = len(s.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid Unicode (lone surrogate)") from None
    if size > MAX_SEGMENT_BYTES:
        raise ValidationError(f"{what} has a segment longer than {MAX_SEGMENT_BYTES} UTF-8 bytes")
    return s


def check_text(value: object, what: str, *, none: bool = False) -> str | None:
    if value is None and none:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid Unicode (lone surrogate)") from None
    return value


def check_uris(value: object, what: str = "uris") -> list[tuple[str, ...]]:
    """Each URI's segments, in order; a single str or anything not a collection is refused."""
    return [check_uri(u, f"{what}[{i}]") for i, u in enumerate(check_collection(value, what, "str"))]


def check_name(value: object, what: str, most: int = MAX_SEGMENT_BYTES) -> str:
    """A short name (a job kind, a role, a group tag, a session id): non-empty text of at most
    `most` UTF-8 bytes, no control character."""
    if not isinstance(value, str):
        raise ValidationError(f"{what} must be a str, got {type(value).__name__}")
    check_segment(value, what)
    if len(value.encode()) > most:
        raise ValidationError(f"{what} is longer than {most} UTF-8 bytes")
    return value


def check_query(value: object, what: str = "query") -> str:
    """A literal substring to look for: 1 to 256 characters."""
    text = check_text(value, what)
    assert text is not None
    if not 1 <= len(text) <= MAX_QUERY_CHARS:
        raise ValidationError(f"{what} must be 1 to {MAX_QUERY_CHARS} characters, got {len(text)}")
    return text


def check_limit(value: object, what: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValidationError(f"{what} must be an int in [1, {most}], got {value!r:.40}")
    return value


def check_offset(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"offset must be a non-negative int, got {value!r:.40}")
    return value


def check_unit(value: object, what: str) -> float:
    out = finite_float(value, what)
    if not 0.0 <= out <= 1.0:
        raise ValidationError(f"{what} must be in [0, 1], got {out}")
    return out


def check_payload(value: object) -> dict[str, Any]:
    """A job payload: a JSON-compatible mapping with str keys (None: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"payload must be a mapping, got {type(value).__name__}")
    return cast(dict[str, Any], check_json(value, "payload"))
