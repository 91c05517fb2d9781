"""The crash matrix: SIGKILL a writer at random moments of every operation kind, then prove nothing was lost.

A child process (`rel_crash_child.py`) runs a stream of operations on an LMDB
store in ``sync`` durability: `Repo.ingest` with the built-in ``episodic``
structure, ``delete_nodes``, ``update_metadata``, `Repo.decay`,
`Repo.consolidate` (deterministic ``decide``) and `Repo.reward`, printing each
operation before it starts and an acknowledgement after it returns. The parent
kills it (cycling the target through every kind, plus purely random moments,
including while the store is being opened), reopens the store and checks it;
see `rel_crash.py` for the invariants. The CI profile performs 56 kills, the
``slow`` profile 1,008 (``pytest -m slow tests/reliability/test_crash_matrix.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rel_crash import KINDS, Figures, run_matrix

PROFILES = {"ci": (56, 8), "slow": (1008, 24)}
"""kills, kills per store (a fresh store then starts, so checks stay cheap)."""


@pytest.fixture(scope="module", params=["ci", pytest.param("slow", marks=pytest.mark.slow)])
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Figures:
    kills, per_store = PROFILES[request.param]
    figures = run_matrix(tmp_path_factory.mktemp(f"crash-{request.param}"), kills, seed=20250101, per_store=per_store)
    summary = json.dumps({"profile": request.param, **figures.summary()}, indent=1)
    print(f"\ncrash matrix figures: {summary}")
    report = os.environ.get("HIPPOGRAPH_CRASH_REPORT")
    if report:
        Path(report).write_text(summary + "\n")
    return figures


def test_every_planned_kill_is_performed(matrix: Figures) -> None:
    assert matrix.kills >= 50
    assert matrix.acknowledged > matrix.kills


def test_kills_land_during_every_operation_kind(matrix: Figures) -> None:
    assert set(KINDS) <= set(matrix.in_flight), matrix.in_flight


def test_some_kills_land_after_a_commit_but_before_its_acknowledgement(matrix: Figures) -> None:
    assert matrix.outcome["applied"] > 0, matrix.outcome


def test_children_die_of_the_kill_and_nothing_else(matrix: Figures) -> None:
    assert matrix.violations.get("child", []) == []


def test_every_acknowledged_ingestion_keeps_its_exact_receipt(matrix: Figures) -> None:
    assert matrix.violations.get("receipt", []) == []


def test_no_ingestion_is_ever_partially_visible(matrix: Figures) -> None:
    assert matrix.violations.get("partial", []) == []


def test_no_node_exists_without_its_ingestion_record(matrix: Figures) -> None:
    assert matrix.violations.get("orphan", []) == []


def test_no_link_dangles_after_a_kill(matrix: Figures) -> None:
    assert matrix.violations.get("link", []) == []


def test_verify_finds_no_problem_after_any_kill(matrix: Figures) -> None:
    assert matrix.violations.get("verify", []) == []


def test_acknowledged_metadata_updates_are_durable(matrix: Figures) -> None:
    assert matrix.violations.get("metadata", []) == []


def test_store_equals_acknowledged_prefix_plus_at_most_part_of_the_op_in_flight(matrix: Figures) -> None:
    assert matrix.violations.get("shadow", []) == []


def test_lmdb_and_inmemory_agree_on_every_maintenance_result(matrix: Figures) -> None:
    assert matrix.violations.get("agree", []) == []
