"""The derived per-type index: its tie-break keys order like the ids under incremental updates."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.engine import tiebreak
from hippograph.engine.columns import TypeColumns

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.text("abcxyzé☕", min_size=1, max_size=4), max_size=40)),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=10_000)),
        st.tuples(st.just("rank"), st.just(0)),
    ),
    max_size=12,
)


def full_rank(ids: list[str] | list[int]) -> np.ndarray:
    """Each entry's position in sorted order: keys order like ids exactly when their positions agree."""
    rank = np.empty(len(ids), np.uint32)
    rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return rank


def same_order(index: TypeColumns) -> bool:
    keys = index.rank().tolist()
    return len(set(keys)) == len(keys) == len(index.ids) and (full_rank(keys) == full_rank(index.ids)).all()


@settings(max_examples=200, deadline=None)
@given(ops, st.sampled_from([1 << 12, 2, 1]))
def test_rank_keys_order_like_the_ids_after_any_updates(steps: list[tuple[str, object]], spacing: int) -> None:
    # Spacings of 2 and 1 run out of room between neighbours at once: every key is dealt again.
    previous = tiebreak._RANK_SPACING
    tiebreak._RANK_SPACING = spacing
    try:
        _apply_and_check(steps)
    finally:
        tiebreak._RANK_SPACING = previous


def _apply_and_check(steps: list[tuple[str, object]]) -> None:
    index = TypeColumns()
    for op, arg in steps:
        if op == "add":
            for node_id in arg:  # type: ignore[attr-defined]
                index.upsert(node_id, None, None)
        elif op == "remove" and index.ids:
            index.remove(index.ids[int(arg) % len(index.ids)])  # type: ignore[call-overload]
        assert same_order(index)


def test_readers_merging_new_rows_at_once_agree_on_one_rank() -> None:
    """Recalls share a read lock; two of them merging the same new rows must not merge them twice."""
    index = TypeColumns()
    rng = np.random.default_rng(3)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads inside the merge as often as the interpreter allows
    try:
        for round_ in range(20):
            for i in rng.permutation(3000):
                index.upsert(f"r{round_:02d}-{i:05d}", None, None)
            barrier = threading.Barrier(4)
            got: list[np.ndarray] = []

            def read(barrier: threading.Barrier, got: list[np.ndarray]) -> None:
                barrier.wait()
                got.append(index.rank().copy())

            threads = [threading.Thread(target=read, args=(barrier, got)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert same_order(index)
            expected = index.rank()
            assert all(len(r) == len(index.ids) and (r == expected).all() for r in got), f"round {round_}"
            assert index._tiebreak._sorted == sorted(index.ids)
    finally:
        sys.setswitchinterval(old_interval)


def test_ids_arriving_between_the_same_neighbours_relabel_a_neighbourhood_not_every_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ascending ids that all sort before the existing ones (e.g. a new prefix) run out of room in one gap
    within a dozen inserts; the keys around them are spread again instead of dealing all of them."""
    index = TypeColumns()
    for i in range(2000):
        index.upsert(f"s{i:05d}", None, None)
    index.rank()
    deals: list[int] = []
    real = tiebreak.TieBreak._deal

    def deal(self: tiebreak.TieBreak, row: dict[str, int]) -> np.ndarray:
        deals.append(len(row))
        return real(self, row)

    monkeypatch.setattr(tiebreak.TieBreak, "_deal", deal)
    for i in range(300):
        for j in range(8):
            index.upsert(f"b{i:05d}-{j}", None, None)
        assert same_order(index), f"turn {i}"
    assert deals == []
