"""The public conformance suite: one test battery every `GraphBackend` must pass.

Subclass `BackendConformance` in a test module pytest collects and implement
``make_backend(path)`` (a fresh, empty directory per test; the `backend`
fixture closes what it returns). ``reopen = True`` (or `PersistentConformance`)
adds the durability tests, ``shared = True`` (or `SharedConformance`) the
multi-process ones, whose spawned children call the classmethod `open_in_child`.
docs/custom-backends.md explains both. The tests live in mixins by section
(nodes.py, candidates.py, ingestion.py, links.py, processes.py); this module
assembles them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..errors import StorageError
from ..graph.protocol import GraphBackend
from ._helpers import KEEP_ALL, SuiteMixin
from .candidates import CandidateConformance
from .ingestion import BAD_INPUTS, CALLS_AFTER_CLOSE, IngestionConformance
from .links import LinkConformance
from .nodes import NodeConformance
from .processes import DurabilityConformance, MultiProcessConformance

__all__ = [
    "BAD_INPUTS",
    "CALLS_AFTER_CLOSE",
    "KEEP_ALL",
    "BackendConformance",
    "PersistentConformance",
    "SharedConformance",
]

#: Capability flag → (the class that switches it on, the mixin holding its tests); filled in below.
_CAPABILITIES: dict[str, tuple[type[BackendConformance], type[SuiteMixin]]] = {}


class BackendConformance(IngestionConformance, CandidateConformance, NodeConformance, LinkConformance):
    """The behaviour every backend shares. Subclass it as ``Test<Name>``."""

    #: The backend is durable: enables the `PersistentConformance` tests.
    reopen: ClassVar[bool] = False
    #: Several processes may open one path: enables the `SharedConformance` tests.
    shared: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for flag, (public, tests) in _CAPABILITIES.items():
            if issubclass(cls, tests):
                if not getattr(cls, flag):
                    raise TypeError(f"{cls.__name__} inherits {public.__name__} but sets {flag} = False")
            elif getattr(cls, flag):
                for name, value in vars(tests).items():
                    if name.startswith("test_") and not hasattr(cls, name):
                        setattr(cls, name, value)

    def make_backend(self, path: Path) -> GraphBackend:
        """A backend storing under `path` (an empty directory, or one a previous backend used)."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_backend(path)")

    @classmethod
    def open_in_child(cls, path: Path) -> GraphBackend:
        """Opens the backend inside a spawned child process (shared-backend tests)."""
        return cls().make_backend(path)

    @pytest.fixture
    def store_path(self, tmp_path: Path) -> Path:
        return tmp_path

    @pytest.fixture
    def backend(self, store_path: Path) -> Iterator[GraphBackend]:
        b = self.make_backend(store_path)
        try:
            yield b
        finally:
            with contextlib.suppress(StorageError):
                b.close()


class PersistentConformance(DurabilityConformance, BackendConformance):
    """Durability: what a backend stored survives close and reopen on the same path."""

    reopen: ClassVar[bool] = True


class SharedConformance(MultiProcessConformance, BackendConformance):
    """Several processes on one store: the ingestion compare-and-set holds across them."""

    shared: ClassVar[bool] = True


_CAPABILITIES.update(
    reopen=(PersistentConformance, DurabilityConformance), shared=(SharedConformance, MultiProcessConformance)
)
