"""The crash matrix: SIGKILL a writer at random moments of every operation kind, then prove nothing was lost.

A child process (`rel_crash_child.py`) runs a stream of operations on a store
(an LMDB directory in ``sync`` durability, or a PostgreSQL schema of its own):
`Repo.ingest` with the built-in ``episodic`` structure, `Repo.ingest_many`
(a batch in one transaction: all of it or none), ``delete_nodes``,
``update_metadata``, `Repo.decay`, `Repo.consolidate` (deterministic
``decide``) and `Repo.reward`, printing each operation before it starts and an
acknowledgement after it returns. The parent
kills it (cycling the target through every kind, plus purely random moments,
including while the store is being opened), reopens the store and checks it;
see `rel_crash.py` for the invariants. The CI profile performs 56 kills on
each backend, the ``slow`` profile 1,008 (LMDB) and 240 (PostgreSQL, and PostgreSQL with
``search="server"``, whose stores keep pgvector copies of the embeddings that `Repo.verify`
checks after every kill) (``pytest -m slow tests/reliability/test_crash_matrix.py [-k postgres]``). The
PostgreSQL matrix kills the client only: the server stays up and settles the
client's last transaction, as it would for a crashed application host.
Without a server it fails like the other PostgreSQL tests (unless
``HIPPOGRAPH_SKIP_PG=1`` leaves them out).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rel_crash import KINDS, Figures, LmdbStores, PostgresStores, Stores, run_matrix

PROFILES = {
    "lmdb": {"ci": (56, 8), "slow": (1008, 24)},
    "postgres": {"ci": (56, 8), "slow": (240, 24)},
    "postgres-server": {"ci": (56, 8), "slow": (240, 24)},
}
"""Per backend and profile: kills, kills per store (a fresh store then starts, so checks stay cheap)."""
MIN_KILLS = {"lmdb": 50, "postgres": 50, "postgres-server": 50}
"""The fewest kills a profile may have and still put every kind in flight several times."""


def _postgres(server_search: bool) -> Stores:
    """Stores on the test server (one with pgvector for `server_search`); skips or fails
    (HIPPOGRAPH_REQUIRE_PG=1) as the other PostgreSQL tests do."""
    tests = str(Path(__file__).resolve().parents[1])
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from pg_server import require_dsn, require_psycopg, require_vector_dsn

    require_psycopg()
    if server_search:
        return PostgresStores(require_vector_dsn(), server_search=True)
    return PostgresStores(require_dsn())


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
        pytest.param(
            (backend, profile), id=f"{backend}-{profile}", marks=[pytest.mark.slow] if profile == "slow" else []
        )
        for backend, profiles in PROFILES.items()
        for profile in profiles
    ],
)
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Figures:
    backend, profile = request.param
    kills, per_store = PROFILES[backend][profile]
    base = tmp_path_factory.mktemp(f"crash-{backend}-{profile}")
    stores = LmdbStores(base) if backend == "lmdb" else _postgres(backend == "postgres-server")
    figures = run_matrix(stores, base, kills, seed=20250101, per_store=per_store)
    summary = {"profile": profile, **figures.summary()}
    print(f"\ncrash matrix figures: {json.dumps(summary, indent=1)}")
    _report(f"{backend}-{profile}", summary)
    return figures


def test_every_planned_kill_is_performed(matrix: Figures) -> None:
    assert matrix.kills >= MIN_KILLS[matrix.backend]
    assert matrix.acknowledged > matrix.kills


def test_kills_land_during_every_operation_kind(matrix: Figures) -> None:
    assert set(KINDS) <= set(matrix.in_flight), matrix.in_flight


def test_some_kills_land_after_a_commit_but_before_its_acknowledgement(matrix: Figures) -> None:
    assert matrix.outcome["applied"] > 0, matrix.outcome


def test_children_die_of_the_kill_and_nothing_else(matrix: Figures) -> None:
    assert matrix.violations.get("child", []) == []


def test_a_killed_clients_hold_on_the_store_ends(matrix: Figures) -> None:
    """Until it does, the client's last transaction may still commit (PostgreSQL) or block the next writer."""
    assert matrix.violations.get("session", []) == []


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


def test_store_and_inmemory_agree_on_every_maintenance_result(matrix: Figures) -> None:
    assert matrix.violations.get("agree", []) == []
