"""The derived per-type index: its tie-break order stays exact under incremental updates."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph._index import TypeIndex

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.text("abcxyzé☕", min_size=1, max_size=4), max_size=40)),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=10_000)),
        st.tuples(st.just("rank"), st.just(0)),
    ),
    max_size=12,
)


def full_rank(ids: list[str]) -> np.ndarray:
    rank = np.empty(len(ids), np.uint32)
    rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return rank


@settings(max_examples=200, deadline=None)
@given(ops)
def test_rank_is_each_rows_position_in_id_order_after_any_updates(steps: list[tuple[str, object]]) -> None:
    index = TypeIndex()
    for op, arg in steps:
        if op == "add":
            for node_id in arg:  # type: ignore[attr-defined]
                index.upsert(node_id, None, None)
        elif op == "remove" and index.ids:
            index.remove(index.ids[int(arg) % len(index.ids)])  # type: ignore[call-overload]
        assert (index.rank() == full_rank(index.ids)).all()
