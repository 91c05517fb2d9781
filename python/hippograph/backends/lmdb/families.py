"""Which memory families an LMDB store directory holds, read in one snapshot of an open handle
(read-only is enough): what ``hippograph stats`` lists and the other commands check.

Opening an environment for writing creates the databases of every family, so their presence says
nothing. What tells the families apart is what a write leaves: a graph write sets ``info/seq``
(kept when its nodes are deleted later), a scoped store's write ``info/entry_seq``, and a context
store keeps its counters in its ``ctx_*`` databases. An environment with none of these was opened
and never written: an empty store of any family. ``docs/lmdb.md`` describes the layout.
"""

from __future__ import annotations

from typing import Any

from .backend import LMDB
from .context import CONTEXT_DBS
from .entries import _SEQ as ENTRY_SEQ
from .txn import _Txn

__all__ = ["CONTEXT", "FAMILIES", "GRAPH", "STORE", "families"]

GRAPH = "graph"
STORE = "store"
CONTEXT = "context"
FAMILIES = (GRAPH, STORE, CONTEXT)
"""Every family, in the order listings show them."""


def families(backend: LMDB) -> tuple[str, ...]:
    """The families written to `backend`'s directory, in `FAMILIES` order (none: never written)."""

    def run(t: _Txn) -> tuple[str, ...]:
        held = {
            GRAPH: t.get("info", b"seq") is not None or any(_holds(t, db) for db in ("nodes", "ingest", "meta")),
            STORE: t.get("info", ENTRY_SEQ) is not None or _holds(t, "entries"),
            CONTEXT: any(_holds(t, space) for space in CONTEXT_DBS),
        }
        return tuple(f for f in FAMILIES if held[f])

    backend._guard("families")
    return backend._read(run, "families")


def _holds(t: _Txn, name: str) -> bool:
    """Whether database `name` has a record (a store older than it, opened read-only, lacks it)."""
    db: Any = t.dbs.get(name)
    return db is not None and int(t.txn.stat(db)["entries"]) > 0
