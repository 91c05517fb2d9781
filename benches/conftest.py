"""Fixtures of the pytest-benchmark suites (run: ``python -m pytest benches -p no:cacheprovider --benchmark-only``).

The suites are not part of the test run (``testpaths = ["tests"]``). They pin
BLAS and rayon to one thread unless the caller already chose, so a figure
means the same thing on a laptop and on a shared CI box; export
``RAYON_NUM_THREADS`` to measure the parallel scan instead.

Stores are expensive to build at 100k nodes, so they are built once per
session on first use and shared; ``--bench-max-n 10000`` skips the largest size.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from _benchdata import Stores, size_label  # noqa: E402

SIZES = (1_000, 10_000, 100_000)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-max-n",
        type=int,
        default=max(SIZES),
        help="largest store size (scanned nodes) the hippograph benches build; default 100000",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every bench taking ``n`` runs once per store size up to ``--bench-max-n``."""
    if "n" in metafunc.fixturenames:
        limit = metafunc.config.getoption("--bench-max-n")
        sizes = [n for n in SIZES if n <= limit] or [min(SIZES)]
        metafunc.parametrize("n", sizes, ids=[size_label(n) for n in sizes], scope="session")


@pytest.fixture(scope="session")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    cache = Stores(tmp_path_factory.mktemp("hippograph-bench"))
    yield cache
    cache.close()
