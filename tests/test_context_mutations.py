"""`ContextConformance` catches broken context stores (tests/context_mutants.py).

One pytest run in a fresh interpreter holds every mutant to the conformance tests it names (one
test class per mutant) and the untouched reference to all of them; its JUnit report says, class by
class, what failed. Each mutant must fail at least one of its tests by an assertion or an error the
store raises, not by a mistake in the mutant (a TypeError, say); the reference must pass them all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from context_mutants import MUTANTS

TESTS_DIR = Path(__file__).resolve().parent

HEAD = """
from context_mutants import MUTANTS, REFERENCE
from hippograph.testing import ContextConformance


class TestReference(ContextConformance):
    def make_backend(self, path):
        return REFERENCE.backend()

    def make_store(self, backend, **options):
        return REFERENCE.store(backend, **options)
"""

CLASS = """

class Test_{name}(ContextConformance):
    def make_backend(self, path):
        return MUTANTS[{name!r}].backend()

    def make_store(self, backend, **options):
        return MUTANTS[{name!r}].store(backend, **options)
"""

MISTAKES = ("TypeError", "AttributeError", "NameError", "ImportError", "UnboundLocalError", "fixture")

Outcomes = dict[str, dict[str, str | None]]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    """By test class: each test run, and its failure message (None when it passed)."""
    where = tmp_path_factory.mktemp("mutants")
    module = where / "test_target.py"
    module.write_text(HEAD + "".join(CLASS.format(name=n) for n in MUTANTS), encoding="utf-8")
    tests = sorted({t for m in MUTANTS.values() for t in m.catches})
    ids = [f"{module.name}::TestReference::{t}" for t in tests]
    ids += [f"{module.name}::Test_{n}::{t}" for n, m in MUTANTS.items() for t in m.catches]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])}
    report = where / "report.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit2",
            *ids,
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    got: Outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        broken = case.find("failure")
        if broken is None:
            broken = case.find("error")
        message = None if broken is None else (broken.get("message") or broken.tag)
        got.setdefault(case.get("classname", "").rsplit(".", 1)[-1], {})[case.get("name", "")] = message
    return got


def _named(tests: set[str], catches: tuple[str, ...]) -> set[str]:
    """The named tests among `tests` (a name without ``[...]`` covers all its parameters)."""
    return {t for t in tests if t in catches or t.split("[", 1)[0] in catches}


def test_the_reference_passes_every_named_test(outcomes: Outcomes) -> None:
    named = tuple({t for m in MUTANTS.values() for t in m.catches})
    ran = outcomes.get("TestReference", {})
    assert _named(set(ran), named) == set(ran) and {t.split("[", 1)[0] for t in ran} >= {
        t.split("[", 1)[0] for t in named
    }
    assert {t: why for t, why in ran.items() if why is not None} == {}


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_the_suite_catches_the_mutant(outcomes: Outcomes, mutant: str) -> None:
    catches = MUTANTS[mutant].catches
    ran = outcomes.get(f"Test_{mutant}", {})
    assert ran and _named(set(ran), catches) == set(ran), "the mutant's tests did not run"
    assert {t.split("[", 1)[0] for t in ran} == {t.split("[", 1)[0] for t in catches}
    caught = {t: why for t, why in ran.items() if why is not None}
    assert caught, f"{mutant} passed {sorted(ran)}"
    assert not any(why.startswith(MISTAKES) for why in caught.values()), caught
