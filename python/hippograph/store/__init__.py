"""Scoped memory: entries filed under scopes, found by words and by meaning, with a lifecycle
(docs/store.md). Its public names are re-exported by `hippograph` itself (`Hit` as `StoreHit`: graph
memory's `hippograph.Hit` is a recalled node).
"""

from __future__ import annotations

from .explained import SearchExplanation, TermWeight, TextRoute, VectorRoute
from .model import Entry, Hit, Scope, ScopeReceipt
from .protocol import CountsWrites, EntryBackend, EntryTxn
from .store import Store, open_store, text_similarity

__all__ = [
    "CountsWrites",
    "Entry",
    "EntryBackend",
    "EntryTxn",
    "Hit",
    "Scope",
    "ScopeReceipt",
    "SearchExplanation",
    "Store",
    "TermWeight",
    "TextRoute",
    "VectorRoute",
    "open_store",
    "text_similarity",
]
