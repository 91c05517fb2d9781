"""Background threads at interpreter exit: every owner of vector-index threads is tracked, and its
threads are stopped and joined before the interpreter goes away.

A daemon thread frozen by the interpreter's exit in the middle of hnswlib's threaded code aborts the
process ("terminate called without an active exception"); an owner nobody closed must not do that.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Protocol

__all__ = ["Closed", "track"]


class Closed(Exception):
    """Raised into a calibration running on the upkeep thread once its owner is closed."""


class _Owner(Protocol):
    def close_background_builds(self) -> list[threading.Thread]: ...


_LIVE: weakref.WeakSet[_Owner] = weakref.WeakSet()
"""Every owner not yet collected."""


def track(owner: _Owner) -> None:
    _LIVE.add(owner)


@atexit.register
def _stop_all_threads() -> None:
    """Stops and joins every background build and upkeep thread still running at exit."""
    threads = [t for owner in list(_LIVE) for t in owner.close_background_builds()]
    for thread in threads:
        thread.join(timeout=30)
