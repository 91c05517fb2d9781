"""The stores a directory holds, by name and family, for the command line.

``--path`` names either one store's directory (it holds ``data.mdb``) or a directory of stores
such as ``./.hippograph`` (the default), where `open_repo`, `open_store` and `open_context` keep a
store given by name alone. A store's name is its directory's; one directory may hold a graph
repo, a scoped store and a context store at once. Everything here opens stores read-only, so
looking never creates or changes one; a name or family that is not there is a `NotFoundError`
naming what is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .backends.lmdb import LMDB
from .backends.lmdb.families import CONTEXT, FAMILIES, GRAPH, STORE, families
from .engine.paths import DEFAULT_ROOT, check_repo_name, store_path
from .errors import HippographError, NotFoundError, StorageError, ValidationError

__all__ = ["LABELS", "Place", "held", "inventory", "missing", "one", "select", "store_name"]

LABELS = {GRAPH: "graph repo", STORE: "scoped store", CONTEXT: "context store"}
"""What each family is called in output and messages."""

_OPENERS = {GRAPH: "hippograph.open_repo", STORE: "hippograph.open_store", CONTEXT: "hippograph.context.open_context"}
_DEMO = "demo"


@dataclass(frozen=True)
class Place:
    """Where the options point: `stores` are the store directories found there, by name."""

    where: Path
    given: bool
    """Whether ``--path`` named it (else it is ``./.hippograph``)."""
    single: bool
    """Whether `where` is itself one store's directory."""
    stores: tuple[Path, ...]

    @property
    def at(self) -> str:
        """``in DIR`` for a directory of stores, ``at DIR`` for a store's (or a missing) directory."""
        return f"{'in' if self.where.is_dir() and not self.single else 'at'} {str(self.where)!r}"


def store_name(where: Path) -> str:
    """A store's name: its directory's, as `open_repo(name)` keeps it in ``./.hippograph/<name>``."""
    return Path(os.path.abspath(where)).name


def _is_store(where: Path) -> bool:
    return (where / "data.mdb").is_file()


def _place(path: str | None) -> Place:
    where = DEFAULT_ROOT if path is None else Path(path)
    if _is_store(where):
        return Place(where, path is not None, True, (where,))
    if where.exists() and not where.is_dir():
        raise NotFoundError(
            "store",
            str(where),
            f"{str(where)!r} is a file, not a hippograph store: --path takes a store's directory "
            f"or a directory of stores such as {str(DEFAULT_ROOT)!r}",
        )
    return Place(where, path is not None, False, tuple(_stores_in(where, default=path is None)))


def _stores_in(root: Path, *, default: bool) -> Iterator[Path]:
    """The store directories in `root` by name; in the default root, only those `store_path` would
    give for their name (no symlink out of it)."""
    if not root.is_dir():
        return
    try:
        children = sorted(root.iterdir())
    except OSError as exc:
        raise StorageError(f"cannot list {str(root)!r}: {exc}", operation="list") from None
    for child in children:
        try:
            check_repo_name(child.name)
            if default:
                store_path(child.name)
        except ValidationError:
            continue
        if _is_store(child):
            yield child


def held(where: Path) -> tuple[str, ...]:
    """The families a store directory holds (none: opened but never written), opened read-only."""
    with LMDB(where, readonly=True) as backend:
        return families(backend)


def _held_or_none(where: Path) -> tuple[str, ...]:
    """`held`, or nothing for a store that cannot be read (it is named in the error if no other
    store fits; naming it with --name shows why it cannot be read)."""
    try:
        return held(where)
    except HippographError:
        return ()


def select(path: str | None, name: str | None, family: str | None = None) -> tuple[Place, tuple[Path, ...]]:
    """The place the options point at and the store directories they select there: the one named
    `name`, or every one; `NotFoundError` (saying what `family` the command wanted) when none."""
    if name is not None:
        check_repo_name(name)
        if path is None:
            store_path(name)  # refuses a symlink out of the default root
    place = _place(path)
    chosen = place.stores if name is None else tuple(s for s in place.stores if store_name(s) == name)
    if not chosen:
        raise missing(place, name, family)
    return place, chosen


def one(path: str | None, name: str | None, family: str) -> Path:
    """The one store directory holding `family` the options select. A store chosen by name, or by
    a --path to its directory, may also be empty (every family's store starts so); without a name,
    a directory of stores must hold exactly one of the family."""
    place, chosen = select(path, name, family)
    if place.single or name is not None:
        families_there = held(chosen[0])
        if families_there and family not in families_there:
            raise missing(place, name, family)
        return chosen[0]
    holding = [s for s in chosen if family in _held_or_none(s)]
    if not holding:
        raise missing(place, None, family)
    if len(holding) > 1:
        names = ", ".join(repr(store_name(s)) for s in holding)
        raise ValidationError(
            f"{str(place.where)!r} holds {len(holding)} {LABELS[family]}s ({names}): choose one with --name"
        )
    return holding[0]


def missing(place: Place, name: str | None, family: str | None) -> NotFoundError:
    """The error for a store (of `family`, named `name`) that `place` does not hold: what it holds
    instead, by family, or how to make one."""
    what = LABELS[family] if family is not None else "hippograph store"
    named = "" if name is None else f" named {name!r}"
    message = f"no {what}{named} {place.at}"
    if place.stores:
        message += f": it holds {inventory(place.stores)}"
        if place.single and name is not None and name != store_name(place.where):
            message += " (a store is named for its directory: leave out --name)"
    else:
        message += _how_to_make(place, name, family)
    return NotFoundError(family or "store", name or str(place.where), message)


def inventory(stores: Iterable[Path]) -> str:
    """What `stores` hold, by family: ``graph repo 'demo'; scoped stores 'a', 'b'``."""
    by: dict[str, list[str]] = {}
    for where in stores:
        try:
            found = held(where) or ("empty",)
        except HippographError:
            found = ("unreadable",)
        for family in found:
            by.setdefault(family, []).append(repr(store_name(where)))
    labels = {**LABELS, "empty": "never-written store", "unreadable": "unreadable store"}
    return "; ".join(
        f"{labels[f]}{'s' if len(by[f]) > 1 else ''} {', '.join(by[f])}"
        for f in (*FAMILIES, "empty", "unreadable")
        if f in by
    )


def _how_to_make(place: Place, name: str | None, family: str | None) -> str:
    """How to make the store asked for where nothing is: the call from Python and, when it would
    answer the same command, the sample repo of ``hippograph demo``."""
    where = place.where
    if place.given and (not where.exists() or not any(where.iterdir())):
        target, made = where, store_name(where)  # the directory becomes the store
        demo, demo_fits = f"hippograph demo --path {where}", name in (None, made)
    else:
        made = name or _DEMO
        target = where / made
        demo = f"hippograph demo --path {where / _DEMO}" if place.given else "hippograph demo"
        demo_fits = name in (None, _DEMO) and not (where / _DEMO).exists()
    call = f"{_OPENERS[family or GRAPH]}({made!r}{f', path={str(target)!r}' if place.given else ''})"
    hint = f": create one from Python with {call}"
    if family is None:
        hint += " (or open_store, or context.open_context, for the other families)"
    if demo_fits and family in (None, GRAPH):
        hint += f", or try the sample one with `{demo}`"
    return hint
