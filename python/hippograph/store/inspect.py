"""What ``hippograph store stats | verify | search`` print: a store looked at from the outside."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TextIO

from .model import STATUSES, Scope
from .protocol import EntryBackend, EntryTxn
from .store import Store

__all__ = ["print_hits", "print_stats", "verify_entries"]


def print_stats(store: Store, title: str, out: TextIO) -> None:
    """`title` (the store's name and directory), then the store's figures, one a line."""
    stats = store.stats()
    print(title, file=out)
    for name in ("entries", *STATUSES, "expired", "scopes", "dim", "embedded", "change_counter"):
        print(f"  {name:<18} {stats[name] if stats[name] is not None else '-'}", file=out)


def print_hits(store: Store, scope: Scope, text: str, limit: int, out: TextIO, *, explain: bool = False) -> None:
    """The best entries for `text` by words, one a line (each followed by its explanation when asked)."""
    hits = store.search_text(text, scope, limit=limit, explain=explain)
    if not hits:
        print("no entry matches", file=out)
    for h in hits:
        shown = h.entry.text if len(h.entry.text) <= 72 else h.entry.text[:71] + "…"
        print(f"{h.score:.3f}  {'/'.join(h.entry.scope)} :: {h.entry.key}  {shown}", file=out)
        if h.explanation is not None:
            print("\n".join("  " + line for line in h.explanation.lines()[1:]), file=out)


def _problems(t: EntryTxn) -> Iterator[str]:
    dim: int | None = None
    for e in t.scan(()):
        where = f"entry {'/'.join(e.scope)!r} :: {e.key!r}"
        again = t.get(e.scope, e.key)
        if again is None or again != e:
            yield f"{where}: reading it by its scope and key does not give it back"
        if e.status not in STATUSES:
            yield f"{where}: unknown status {e.status!r}"
        if e.updated_at < e.created_at:
            yield f"{where}: updated before it was created"
        if e.embedding is not None:
            if dim is None:
                dim = len(e.embedding)
            elif len(e.embedding) != dim:
                yield f"{where}: embedding dimension {len(e.embedding)}, others have {dim}"


def verify_entries(backend: EntryBackend) -> tuple[int, list[str]]:
    """Entries checked and the problems found, in one read snapshot: every entry reads back by its
    ref, has a known status and consistent times, and every vector has the same dimension."""

    def run(t: EntryTxn) -> tuple[int, list[str]]:
        count = sum(1 for _ in t.scan(()))
        return count, list(_problems(t))

    return backend.entry_read(run)
