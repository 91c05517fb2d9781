"""The scoped store's entry index takes a batch of writes at once (`EntryIndex.set_many`, as a
`batch` or `put_many` commits them) and holds what the entries say, as after one `set` each."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.engine.checks import vector_norm
from hippograph.errors import ConfigError
from hippograph.store.index import EntryIndex
from hippograph.store.model import Entry

DIM = 6
NOW = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ("tea", "coffee", "cargo", "maturin", "lmdb")


def entry(key: int, vector: list[float] | None, word: int, status: str = "active") -> Entry:
    embedding = None if vector is None else np.asarray(vector, np.float32)
    scope = ("s", str(key % 2))
    return Entry(scope, f"k{key}", f"{WORDS[word]} note {key}", {}, "semantic", 0.5, embedding, status,  # type: ignore[arg-type]
                 NOW, NOW, NOW, 0)  # fmt: skip


vectors = st.one_of(
    st.none(),
    st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=DIM, max_size=DIM),
)
writes = st.lists(
    st.tuples(st.integers(0, 5), vectors, st.integers(0, len(WORDS) - 1), st.sampled_from(["active", "retracted"])),
    min_size=1,
    max_size=30,
)


def state(index: EntryIndex) -> tuple[object, ...]:
    n = len(index.entries)
    half, residual = index.vectors.shadow.arrays(n)
    return (
        dict(index.slot_of),
        [None if e is None else (e.ref, e.text) for e in index.entries],
        index.vectors.norms(n).tolist(),
        index.vectors.vectors(n).tolist(),
        half.tolist(),
        residual.tolist(),
        sorted(index._unsynced.items()),
        [tuple(a.tolist() for a in index.lexical.search(word, 10)) for word in WORDS],
    )


@settings(max_examples=80, deadline=None)
@given(steps=writes, size=st.integers(1, 9), dtype=st.sampled_from(["float32", "float16"]))
def test_a_batch_indexes_as_one_write_after_another(steps: list[tuple[int, list[float] | None, int, str]], size: int,
                                                    dtype: str) -> None:  # fmt: skip
    made = [entry(k, v, w, s) for k, v, w, s in steps]
    batched, single = EntryIndex(None, dtype), EntryIndex(None, dtype)  # type: ignore[arg-type]
    for start in range(0, len(made), size):
        batched.set_many(made[start : start + size])
    for e in made:
        single.set(e)
    assert state(batched) == state(single)
    # Every ref holds its last write: its vector (or none) with that vector's norm.
    last = {e.ref: e for e in made}
    n = len(batched.entries)
    rows, norms = batched.vectors.vectors(n), batched.vectors.norms(n)
    for ref, e in last.items():
        slot = batched.slot_of[ref]
        assert batched.entries[slot] is e
        if e.embedding is None or vector_norm(e.embedding) == 0:
            assert norms[slot] == 0.0
        elif dtype == "float32":
            assert rows[slot].tolist() == e.embedding.tolist() and norms[slot] == np.float32(vector_norm(e.embedding))
        else:
            unit = e.embedding / vector_norm(e.embedding)
            assert norms[slot] == 1.0 and np.allclose(rows[slot], unit, atol=2e-3)


def test_an_entry_refused_midway_leaves_those_before_it_indexed() -> None:
    good = [entry(1, [1.0] * DIM, 0), entry(2, [0.5] * DIM, 1)]
    wrong = entry(3, [1.0] * (DIM + 1), 2)
    batched, single = EntryIndex(None), EntryIndex(None)
    with pytest.raises(ConfigError, match="dimension"):
        batched.set_many([*good, wrong, entry(4, [2.0] * DIM, 3)])
    for e in good:
        single.set(e)
    with pytest.raises(ConfigError, match="dimension"):
        single.set(wrong)
    assert state(batched) == state(single)
    assert batched.vectors.vectors(len(batched.entries))[batched.slot_of[good[1].ref]].tolist() == [0.5] * DIM


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_large_batch_writes_its_vectors_in_one_step_as_one_at_a_time(dtype: str) -> None:
    rng = np.random.default_rng(7)
    made = [entry(k % 40, rng.standard_normal(DIM).tolist(), k % len(WORDS)) for k in range(60)]
    made[45] = entry(5, None, 0)  # a ref written with a vector, then without one, in the same batch
    batched, single = EntryIndex(None, dtype), EntryIndex(None, dtype)  # type: ignore[arg-type]
    batched.set_many(made)
    for e in made:
        single.set(e)
    assert state(batched) == state(single)
