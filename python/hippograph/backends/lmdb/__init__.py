"""`LMDB`: the durable, multi-process embedded default backend.

One LMDB environment per store directory; every mutating call is one write
transaction that logs the ids it touched, and each process catches its derived
scoring columns (and vector indexes) up from that change log. ``docs/lmdb.md``
explains the layout, transactions, saved vector indexes, durability modes, the
LMDB rules followed and how damaged files are refused; ``docs/architecture.md``
the rules every backend shares.

Modules: `layout` (the on-disk format and its constants, `LOG_KEEP` among
them), `txn` (transaction wrappers), `cache` (derived columns, saved vector
indexes), `checks` (refusals at open, the storage walk), `backend` (`LMDB`).
"""

from __future__ import annotations

from . import layout
from .backend import LMDB

__all__ = ["LMDB", "layout"]
