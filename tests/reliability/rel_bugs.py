"""Markers for regression tests of library bugs this suite found (listed in README.md).

Each such test states the correct behaviour and is marked ``xfail(strict=True)``:
it is reported as XFAIL while the bug is there and fails the run (XPASS) once the
bug is fixed, so the marker must then be removed and the test guards the fix.
Delete the marker to see the failure itself.
"""

from __future__ import annotations

import pytest


def known_bug(bug: str, summary: str, *, strict: bool = True) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=strict, reason=f"{bug}: {summary} (tests/reliability/README.md)")
