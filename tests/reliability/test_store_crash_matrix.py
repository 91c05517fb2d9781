"""The crash matrix of the scoped store: SIGKILL a writer at random moments of every store operation.

A child process (`rel_store_crash_child.py`) runs a random stream of
``put``, ``put_many``, ``forget``, ``flush``, ``discard``, ``retract``,
``prune`` and ``sweep`` on ``hippograph.open_store(..., durability="sync")``
(LMDB), printing each operation before it starts and an acknowledgement after
it returns. The parent kills it (cycling the target through every kind, plus
purely random moments, including while the store is being opened), reopens the
store and checks it; see `rel_store_crash.py` for the invariants. The CI
profile performs 36 kills, the ``slow`` profile 450
(``pytest -m slow tests/reliability/test_store_crash_matrix.py -s``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rel_store_crash import KINDS, Figures, run_matrix

PROFILES = {"ci": (36, 12), "slow": (450, 30)}
"""Per profile: kills, kills per store (a fresh store then starts)."""
MIN_KILLS = 36


def _report(name: str, summary: dict[str, object]) -> None:
    """Adds this run's figures, under `name`, to the JSON file $HIPPOGRAPH_CRASH_REPORT names (if set)."""
    report = os.environ.get("HIPPOGRAPH_CRASH_REPORT")
    if report:
        path = Path(report)
        runs = json.loads(path.read_text()) if path.exists() else {}
        runs[name] = summary
        path.write_text(json.dumps(runs, indent=1) + "\n")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(profile, id=f"store-{profile}", marks=[pytest.mark.slow] if profile == "slow" else [])
        for profile in PROFILES
    ],
)
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Figures:
    profile = request.param
    kills, per_store = PROFILES[profile]
    figures = run_matrix(tmp_path_factory.mktemp(f"store-crash-{profile}"), kills, seed=20250301, per_store=per_store)
    summary = {"profile": profile, **figures.summary()}
    print(f"\nstore crash matrix figures: {json.dumps(summary, indent=1)}")
    _report(f"store-lmdb-{profile}", summary)
    return figures


def test_every_planned_kill_is_performed(matrix: Figures) -> None:
    assert matrix.kills >= MIN_KILLS
    assert matrix.acknowledged > matrix.kills


def test_kills_land_during_every_store_operation(matrix: Figures) -> None:
    assert set(KINDS) <= set(matrix.in_flight), matrix.in_flight


def test_some_kills_land_after_a_commit_but_before_its_acknowledgement(matrix: Figures) -> None:
    assert matrix.outcome["applied"] > 0, matrix.outcome


def test_children_die_of_the_kill_and_nothing_else(matrix: Figures) -> None:
    assert matrix.violations.get("child", []) == []


def test_a_killed_writers_hold_on_the_store_ends(matrix: Figures) -> None:
    assert matrix.violations.get("session", []) == []


def test_every_lifecycle_receipt_names_exactly_what_it_changed(matrix: Figures) -> None:
    assert matrix.violations.get("receipt", []) == []


def test_every_acknowledged_put_survives_unless_an_acknowledged_verb_removed_it(matrix: Figures) -> None:
    assert matrix.violations.get("durable", []) == []


def test_no_entry_appears_that_nothing_wrote(matrix: Figures) -> None:
    assert matrix.violations.get("phantom", []) == []


def test_no_acknowledged_forget_leaves_an_entry_written_before_it(matrix: Figures) -> None:
    assert matrix.violations.get("forget", []) == []


def test_the_operation_in_flight_is_all_or_nothing(matrix: Figures) -> None:
    assert matrix.violations.get("atomic", []) == []


def test_store_equals_the_acknowledged_prefix_with_or_without_the_operation_in_flight(matrix: Figures) -> None:
    assert matrix.violations.get("shadow", []) == []


def test_verify_entries_finds_no_problem_after_any_kill(matrix: Figures) -> None:
    assert matrix.violations.get("verify", []) == []


def test_a_fresh_store_reads_exactly_what_the_backend_holds_after_any_kill(matrix: Figures) -> None:
    assert matrix.violations.get("read", []) == []
