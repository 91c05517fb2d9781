"""Constructors and openers refuse malformed configuration with a typed error naming it.

Each is given keyword arguments of every shape a caller could pass by mistake (numpy arrays, whose
truth is an error past one element; numbers past 64 bits; strings where flags belong; collections
where names belong); it must either open or raise a `HippographError` (a `ConfigError` or a
`ValidationError`), never Python's own TypeError, ValueError or SystemError.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.context import ContextStore
from hippograph.engine.vector_index import AnnConfig
from hippograph.errors import HippographError

odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=4),
    st.sampled_from(["sync", "fast", "core", "float16", "float32", "embed"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    st.integers(1, 3).map(lambda n: np.zeros(n)),
)

_made = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(tmp_path_factory.mktemp("ctors"))


def makers(root: Path) -> dict[str, tuple[Callable[..., Any], Callable[[], list[Any]]]]:
    return {
        "LMDB": (LMDB, lambda: [root / f"l{next(_made)}"]),
        "InMemory": (InMemory, list),
        "AnnConfig": (AnnConfig, list),
        "Store": (hg.Store, lambda: [InMemory()]),
        "ContextStore": (ContextStore, lambda: [InMemory()]),
        "open_repo": (hg.open_repo, lambda: [f"r{next(_made)}"]),
        "open_store": (hg.open_store, lambda: [f"s{next(_made)}"]),
    }


def _keywords(fn: Callable[..., Any]) -> list[str]:
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "backend"
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_malformed_configuration_gets_a_typed_error(root: Path, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(makers(root))))
    make, required = makers(root)[name]
    names = _keywords(make)
    chosen = data.draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    kwargs = {k: data.draw(odd, label=k) for k in chosen}
    if name.startswith("open_") and (kwargs.get("path") is None or isinstance(kwargs["path"], str)):
        # A usable path is always one under `root`, never one the working directory resolves.
        kwargs["path"] = root / f"p{next(_made)}"
    try:
        made = make(*required(), **kwargs)
    except HippographError:
        return
    close = getattr(made, "close", None)
    if close is not None:
        close()


def test_an_array_flag_and_a_non_path_are_refused_by_name(root: Path) -> None:
    with pytest.raises(HippographError, match="readonly must be a bool"):
        LMDB(root / "x", readonly=np.zeros(3))
    with pytest.raises(HippographError, match="vector_dtype must be"):
        InMemory(vector_dtype=np.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(HippographError, match="ann must be an AnnConfig"):
        InMemory(ann="core")  # type: ignore[arg-type]
    with pytest.raises(HippographError, match="path must be a str"):
        hg.open_store("s", path=3)  # type: ignore[arg-type]
    with pytest.raises(HippographError, match="document_jobs must be a collection"):
        ContextStore(InMemory(), document_jobs=1)  # type: ignore[arg-type]
