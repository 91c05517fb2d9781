"""Stored graph records: the scoring caches' shortcut through a metadata record agrees with the full decode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.errors import StorageError
from hippograph.graph import codec
from hippograph.graph.model import NodeMetadata
from hippograph.graph.recall import usage_of

INSTANTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
) | st.integers(-(2**40), 2**40).map(lambda us: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=us))


@settings(max_examples=500, deadline=None)
@given(
    created=INSTANTS,
    last=st.none() | INSTANTS,
    count=st.integers(0, 2**62),
    reward=st.floats(allow_nan=False, allow_infinity=False),
    reward_count=st.integers(0, 2**62),
    custom=st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5), max_size=3),
)
def test_usage_of_a_record_is_the_usage_of_its_metadata(
    created: datetime, last: datetime | None, count: int, reward: float, reward_count: int, custom: dict[str, object]
) -> None:
    meta = NodeMetadata(
        created_at=created,
        access_count=count,
        last_accessed_at=last,
        cumulative_reward=reward,
        reward_count=reward_count,
        custom=custom,
    )
    data = codec.encode_meta(meta)
    assert codec.usage_of_meta(data) == usage_of(codec.decode_meta(data)) == usage_of(meta)


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2, 3],
        [None, 1, None, 0.0, 0, {}],
        ["x", 1, None, 0.0, 0, {}],
        [0, 1, 2**63 - 1, 0.0, 0, {}],
        [0, None, None, 0.0, 0, {}],
        [0, 1, None, "r", 0, {}],
    ],
)
def test_a_garbled_metadata_record_is_a_storage_error(payload: list[object]) -> None:
    data = codec.HEADER + msgpack.packb(payload)
    with pytest.raises(StorageError, match="corrupt metadata"):
        codec.usage_of_meta(data)
