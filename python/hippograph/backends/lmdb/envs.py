"""One LMDB environment per store directory per process, shared by every handle opened on it.

LMDB forbids opening one environment twice in a process: closing the second
handle drops the file locks the first still relies on, and py-lmdb 2 and later
refuse the second open outright. So an `LMDB` backend asks this registry for
the directory's environment: the first handle opens it, later ones share it
(and its gate, which `set_mapsize` needs to hold every transaction of the
process out), and the last one to close closes it. A forked child never
inherits an entry: it opens its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import lmdb

from ...errors import StorageError
from .._base import RWLock
from .group import GroupCommit

__all__ = ["SharedEnv", "acquire", "release"]


@dataclass(eq=False)
class SharedEnv:
    """An open environment, whether it was opened read-only or syncing each commit, and its users."""

    env: lmdb.Environment
    readonly: bool
    synced: bool
    key: tuple[int, int]
    pid: int = field(default_factory=os.getpid)
    gate: RWLock = field(default_factory=RWLock)
    group: GroupCommit = field(default_factory=GroupCommit)
    """The queue every `sync` handle's writes join (`group`)."""
    users: int = 1


_open: dict[tuple[int, int], SharedEnv] = {}
_lock = threading.Lock()


def _key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def acquire(
    path: Path,
    readonly: bool,
    synced: bool,
    opener: Callable[[], lmdb.Environment],
    check: Callable[[lmdb.Environment], None],
) -> SharedEnv:
    """The directory's shared environment: this process's, or opened by `opener` and passed by
    `check` (which closes it and raises to refuse it) before any other handle may use it."""
    try:
        key = _key(path)
    except OSError as exc:
        raise StorageError(f"cannot read store directory {str(path)!r}: {exc}", operation="open") from None
    with _lock:
        got = _open.get(key)
        if got is not None and got.pid == os.getpid():
            if got.readonly and not readonly:
                raise StorageError(
                    f"{str(path)!r} is open read-only in this process: close that handle before opening it for writing",
                    operation="open",
                )
            got.users += 1
            return got
        env = opener()
        check(env)
        shared = SharedEnv(env, readonly, synced, key)
        _open[key] = shared
        return shared


def release(shared: SharedEnv) -> None:
    """One handle is done; the last one closes the environment (not in a forked child: the
    parent's environment is not the child's to close)."""
    with _lock:
        shared.users -= 1
        if shared.users > 0:
            return
        if _open.get(shared.key) is shared:
            del _open[shared.key]
    if shared.pid == os.getpid():
        with shared.gate.write():
            shared.env.close()
