"""Where a store given by name lives on disk: ``./.hippograph/<name>`` unless a path is given, for
every memory family (a graph repo and a scoped store of the same name share the directory)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ValidationError

__all__ = ["DEFAULT_ROOT", "check_repo_name", "store_path"]


def check_repo_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"repo name must be a non-blank str, got {name!r}")
    bad = [c for c in ("/", "\\", os.sep, "\0") if c in name]
    if bad or name in (".", "..") or name.startswith("."):
        raise ValidationError(f"repo name {name!r} must not contain path separators or start with '.'")
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        raise ValidationError(f"repo name {name[:40]!r}… is longer than 255 bytes")
    return name


DEFAULT_ROOT = Path(".hippograph")
"""Where `open_repo` keeps repos given by name alone (relative to the working directory)."""


def store_path(name: str, path: str | os.PathLike[str] | None = None) -> Path:
    """The LMDB directory of repo `name`: `path` when given, else `DEFAULT_ROOT/<name>`.

    A name never leaves the root: besides the checks of `check_repo_name`, a
    default store that is a symlink pointing outside the root is refused.
    """
    check_repo_name(name)
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise ValidationError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        return Path(path)
    store = DEFAULT_ROOT / name
    if store.is_symlink() and not store.resolve().is_relative_to(DEFAULT_ROOT.resolve()):
        raise ValidationError(f"repo {name!r}: {str(store)!r} is a symlink out of {str(DEFAULT_ROOT)!r}")
    return store
