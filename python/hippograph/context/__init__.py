"""Context memory: documents in a URI tree with layered summaries, memory assertions with history,
sessions, commit bookkeeping and a durable job queue, changed together (docs/context.md)."""

from __future__ import annotations

from .model import (
    ConflictPair,
    ContextHit,
    EmbeddingsUnavailableError,
    IsRootError,
    Job,
    LineMatch,
    MemoryRow,
    Message,
    NoCandidateError,
    PathMatch,
    SessionConflictError,
    SkillFile,
    TreeNode,
)
from .protocol import SPACES, ContextBackend, KvTxn
from .store import ContextStore, open_context

__all__ = [
    "SPACES",
    "ConflictPair",
    "ContextBackend",
    "ContextHit",
    "ContextStore",
    "EmbeddingsUnavailableError",
    "IsRootError",
    "Job",
    "KvTxn",
    "LineMatch",
    "MemoryRow",
    "Message",
    "NoCandidateError",
    "PathMatch",
    "SessionConflictError",
    "SkillFile",
    "TreeNode",
    "open_context",
]
