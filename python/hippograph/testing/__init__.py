"""Test support for hippograph backends (install with ``pip install 'hippograph[testing]'``).

`BackendConformance` is the public conformance suite every `GraphBackend` is
held to; `PersistentConformance` and `SharedConformance` add the durability and
multi-process tests; `StoreConformance` (and `PersistentStoreConformance`) hold an `EntryBackend`
to the scoped store's contract; `ContextConformance` (and `PersistentContextConformance`) hold a
`ContextBackend` to the context store's. `hippograph.testing.graphs` holds reusable fixtures:
sample nodes, snapshots, random graphs and an independent reference scorer.
"""

from __future__ import annotations

try:
    import pytest as _pytest  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("hippograph.testing needs pytest: pip install 'hippograph[testing]'") from exc

from . import graphs
from .conformance import BackendConformance, PersistentConformance, SharedConformance
from .context import ContextConformance, PersistentContextConformance
from .store import PersistentStoreConformance, StoreConformance

__all__ = [
    "BackendConformance",
    "ContextConformance",
    "PersistentConformance",
    "PersistentContextConformance",
    "PersistentStoreConformance",
    "SharedConformance",
    "StoreConformance",
    "graphs",
]
