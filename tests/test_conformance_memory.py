"""The public conformance suite run against the in-memory reference backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from hippograph.backends import InMemory
from hippograph.testing import BackendConformance, PersistentConformance, SharedConformance


class TestInMemory(BackendConformance):
    def make_backend(self, path: Path) -> InMemory:
        return InMemory()


def test_capability_flags_add_only_their_tests() -> None:
    """reopen/shared switch the persistent and multi-process tests on, and nothing else."""

    class Durable(BackendConformance):
        reopen = True

    class Shared(BackendConformance):
        shared = True

    assert hasattr(Durable, "test_everything_survives_reopen")
    assert not hasattr(Durable, "test_processes_racing_commit_ingestion_insert_once")
    assert hasattr(Shared, "test_processes_racing_commit_ingestion_insert_once")
    assert not hasattr(Shared, "test_everything_survives_reopen")
    assert not hasattr(TestInMemory, "test_everything_survives_reopen")
    assert not hasattr(TestInMemory, "test_processes_racing_commit_ingestion_insert_once")
    assert issubclass(PersistentConformance, BackendConformance) and PersistentConformance.reopen
    assert issubclass(SharedConformance, BackendConformance) and SharedConformance.shared


def test_mixin_with_its_flag_switched_off_is_refused() -> None:
    """Inheriting a capability mixin while setting its flag False is a contradiction."""
    with pytest.raises(TypeError):

        class Confused(PersistentConformance):
            reopen = False
