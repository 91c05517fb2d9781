"""The conformance suite catches broken backends.

Each mutant in tests/mutants.py is the reference `InMemory` with one promise
of the contract broken. For each one a small test module is generated that
runs `BackendConformance` against it, and pytest runs that module in a fresh
interpreter with ``-x`` and a ``-k`` selection of the relevant section of the
suite. The run must fail (exit code 1), and the test that failed must be one
of those guarding the broken promise. The control runs every selection against
the untouched `InMemory`, which must pass it (exit code 0).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from hippograph.testing import BackendConformance
from mutants import MUTANTS

TESTS_DIR = Path(__file__).resolve().parent

#: ``-k`` selections, one per section of the suite (plain words joined by "or").
SELECTIONS: dict[str, tuple[str, ...]] = {
    "ingestion": ("ingestion", "commit", "record"),
    "deleting": ("delete",),
    "rejected_input": ("rejected", "dimension"),
    "find_candidates": (
        "candidates",
        "relevance",
        "threshold",
        "ties",
        "top_k",
        "types",
        "vectors",
        "params",
        "score",
        "value_function",
    ),
    "traversal": ("linked", "links"),
    "metadata": ("metadata",),
    "closing": ("close",),
}


@dataclass(frozen=True)
class Case:
    mutant: str
    selection: str
    caught_by: frozenset[str]
    """Tests of the selection that guard the promise the mutant breaks."""


def _case(mutant: str, selection: str, *caught_by: str) -> Case:
    return Case(mutant, selection, frozenset(caught_by))


_RECEIPT_TESTS = (
    "test_equal_commit_returns_the_stored_receipt_and_applies_nothing",
    "test_record_survives_delete_nodes_and_blocks_recreation",
    "test_concurrent_commits_of_one_source_insert_once",
)

CASES = [
    _case("ReturnsCallersReceipt", "ingestion", *_RECEIPT_TESTS),
    _case("AppliesChangesetOnExisting", "ingestion", *_RECEIPT_TESTS),
    _case("ComparesDigestOnly", "ingestion", "test_conflicting_commit_raises_and_changes_nothing"),
    _case("ChecksThenCommits", "ingestion", "test_concurrent_commits_of_one_source_insert_once"),
    _case(
        "DeletesIngestionRecords",
        "deleting",
        "test_delete_keeps_ingestion_records",
        "test_record_survives_delete_nodes_and_blocks_recreation",
    ),
    _case("KeepsProvenanceLinksOnDelete", "deleting", "test_delete_removes_dangling_links_of_every_edge_type"),
    _case(
        "AppliesAdditionsBeforeValidating",
        "rejected_input",
        "test_rejected_call_writes_nothing",
        "test_rejected_first_changeset_does_not_fix_the_dimension",
    ),
    _case(
        "IgnoresTagVectors",
        "find_candidates",
        "test_tag_vectors_raise_a_node_above_its_query_score",
        "test_zero_vectors_have_zero_similarity",
    ),
    _case(
        "ExclusiveThreshold",
        "find_candidates",
        "test_threshold_is_inclusive",
        # Each of these keeps a node scoring exactly 0.0 at threshold 0.0.
        "test_find_candidates_returns_only_requested_types",
        "test_types_are_concatenated_in_the_order_given",
        "test_relevance_is_cosine_clamped_at_zero",
        "test_nodes_without_embedding_have_zero_relevance",
        "test_zero_vectors_have_zero_similarity",
    ),
    _case(
        "TiesByIdDescending",
        "find_candidates",
        "test_ties_are_broken_by_id_ascending",
        # Equal scores in a block: listed by id.
        "test_types_are_concatenated_in_the_order_given",
        "test_repeated_types_return_each_node_once",
        "test_default_params_apply_per_type",
    ),
    _case("RepeatsNodesAcrossTypes", "find_candidates", "test_repeated_types_return_each_node_once"),
    _case(
        "LinkedNodesUnordered",
        "traversal",
        "test_linked_nodes_of_any_edge_type_ordered_by_id",
        "test_linked_nodes_filtered_by_edge_type",
        "test_linked_nodes_are_unique",
    ),
    _case("MergesMetadataUpdates", "metadata", "test_update_metadata_replaces_the_whole_record"),
    _case("ReadsAfterClose", "closing", "test_calls_after_close_raise_storage_error"),
    _case(
        "CommitsBatchItemByItem",
        "ingestion",
        "test_commit_ingestions_with_a_conflict_writes_nothing",
        "test_commit_ingestions_refuses_a_malformed_batch_whole",
    ),
    _case("AnswersRepeatsWithTheirOwnReceipt", "ingestion", "test_commit_ingestions_answers_each_in_input_order"),
]

MODULE = """\
import sys

sys.path.insert(0, {tests_dir!r})

from hippograph.testing import BackendConformance
{import_backend}


class TestBackend(BackendConformance):
    def make_backend(self, path):
        return Backend()
"""


@dataclass(frozen=True)
class Run:
    returncode: int
    passed: list[str]
    failed: list[str]
    output: str


def run_suite(where: Path, mutant: str | None, selection: str) -> Run:
    """Runs the selected conformance tests against a mutant (None: plain InMemory) in a fresh interpreter."""
    if mutant is None:
        import_backend = "from hippograph.backends import InMemory as Backend"
    else:
        import_backend = f"from mutants import {mutant} as Backend"
    (where / "pytest.ini").write_text("[pytest]\n")  # keeps the repository's pytest config out
    module = where / "test_suite.py"
    module.write_text(MODULE.format(tests_dir=str(TESTS_DIR), import_backend=import_backend))
    report = where / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", f"--junitxml={report}"]
    command += ["--rootdir", str(where), "-k", " or ".join(SELECTIONS[selection]), str(module)]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the suite needs no plugin; loading them is slow
    proc = subprocess.run(command, cwd=where, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert report.exists(), output
    passed, failed = [], []
    for case in ET.parse(report).iter("testcase"):
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is None:
            passed.append(name)
    return Run(proc.returncode, passed, failed, output)


def test_every_mutant_has_a_case() -> None:
    """Each mutant in tests/mutants.py is run, and each case names one (at least eight)."""
    assert sorted(c.mutant for c in CASES) == sorted(MUTANTS)
    assert len(CASES) >= 8


@pytest.mark.parametrize("case", CASES, ids=[c.mutant for c in CASES])
def test_guarding_tests_exist_and_are_selected(case: Case) -> None:
    """The expected tests are real suite tests that the case's selection runs."""
    words = SELECTIONS[case.selection]
    for name in case.caught_by:
        assert callable(getattr(BackendConformance, name, None)), name
        assert any(word in name.lower() for word in words), f"{name} is outside selection {case.selection!r}"


@pytest.mark.parametrize("selection", list(SELECTIONS))
def test_reference_backend_passes_the_selection(tmp_path: Path, selection: str) -> None:
    """Control: the unmutated InMemory passes exactly the run each mutant gets."""
    run = run_suite(tmp_path, None, selection)
    assert run.returncode == 0, run.output
    assert run.passed and not run.failed


@pytest.mark.parametrize("case", CASES, ids=[c.mutant for c in CASES])
def test_suite_catches_the_mutant(tmp_path: Path, case: Case) -> None:
    """The run fails, and the first failing test is one that guards the broken promise."""
    run = run_suite(tmp_path, case.mutant, case.selection)
    assert run.returncode == 1, run.output
    assert len(run.failed) == 1, run.output
    failed = run.failed[0].split("[")[0]
    assert failed in case.caught_by, f"{case.mutant} was caught by {run.failed[0]}, expected one of:\n" + "\n".join(
        sorted(case.caught_by)
    )
