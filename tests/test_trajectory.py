"""Trajectory dataclasses and the ordered validation of docs/architecture.md (fingerprint)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hippograph.errors import IngestionError
from hippograph.graph.atom import Atom
from hippograph.graph.trajectory import Step, Trajectory, validate_trajectory

GOOD_STEPS = [Step("saw", "did")]


def make(**changes: Any) -> Trajectory:
    fields: dict[str, Any] = {"source_id": "src-1", "goal": "g", "steps": GOOD_STEPS, "metadata": {}}
    fields.update(changes)
    return Trajectory(**fields)


def reason(t: Trajectory) -> str:
    with pytest.raises(IngestionError) as info:
        validate_trajectory(t)
    return info.value.reason


def test_valid_trajectory_passes() -> None:
    validate_trajectory(make(metadata={"k": [1, 2.5, None, True, Atom("a"), b"x", ("t",)]}))


def test_step_and_trajectory_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        make().goal = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Step("o", "a").action = "b"  # type: ignore[misc]


def test_metadata_defaults_to_a_fresh_empty_dict() -> None:
    one, two = Trajectory("s", "g", GOOD_STEPS), Trajectory("s", "g", GOOD_STEPS)
    assert one.metadata == {}
    assert one.metadata is not two.metadata


def test_invalid_values_can_be_constructed() -> None:
    t = Trajectory(None, 5, "steps", [])  # type: ignore[arg-type]
    assert dataclasses.astuple(t) == (None, 5, "steps", [])


@pytest.mark.parametrize("source_id", [None, 7, "", "   ", "\ud800"])
def test_bad_source_id_is_invalid_source_id(source_id: object) -> None:
    assert reason(make(source_id=source_id)) == "invalid_source_id"


@pytest.mark.parametrize("goal", [None, 3, "", " \n\t", "\udfff"])
def test_bad_goal_is_invalid_goal(goal: object) -> None:
    assert reason(make(goal=goal)) == "invalid_goal"


@pytest.mark.parametrize("metadata", [None, [], "x", {"k": {1}}, {"k": float("nan")}, {"k": object()}])
def test_bad_metadata_is_invalid_metadata(metadata: object) -> None:
    assert reason(make(metadata=metadata)) == "invalid_metadata"


def test_metadata_dict_subclass_is_invalid_metadata() -> None:
    class Meta(dict[str, int]):
        pass

    assert reason(make(metadata=Meta(a=1))) == "invalid_metadata"


def nested_in_metadata(lists: int) -> dict[str, Any]:
    """Metadata whose deepest value sits at depth 2 + lists in the fingerprinted tuple."""
    deep: Any = 0
    for _ in range(lists):
        deep = [deep]
    return {"d": deep}


def test_metadata_reaching_depth_512_of_the_fingerprinted_tuple_is_accepted() -> None:
    validate_trajectory(make(metadata=nested_in_metadata(510)))


def test_metadata_past_depth_512_of_the_fingerprinted_tuple_is_invalid_metadata() -> None:
    assert reason(make(metadata=nested_in_metadata(511))) == "invalid_metadata"


@pytest.mark.parametrize("steps", [None, (), [], (Step("o", "a"),), "steps"])
def test_bad_steps_is_invalid_steps(steps: object) -> None:
    assert reason(make(steps=steps)) == "invalid_steps"


BAD_STEPS: list[object] = [
    ("o", "a"),
    {"observation": "o", "action": "a"},
    None,
    Step(1, "a"),  # type: ignore[arg-type]
    Step("o", None),  # type: ignore[arg-type]
    Step("\ud800", "a"),
]


@pytest.mark.parametrize("step", BAD_STEPS)
def test_bad_step_is_invalid_step(step: object) -> None:
    assert reason(make(steps=[Step("ok", "ok"), step])) == "invalid_step"


def test_empty_observation_and_action_are_valid() -> None:
    validate_trajectory(make(steps=[Step("", "")]))


def test_source_id_is_checked_before_goal() -> None:
    assert reason(make(source_id="", goal="")) == "invalid_source_id"


def test_goal_is_checked_before_metadata() -> None:
    assert reason(make(goal="", metadata=None)) == "invalid_goal"


def test_metadata_is_checked_before_steps() -> None:
    assert reason(make(metadata={"k": {1}}, steps=[])) == "invalid_metadata"


def test_steps_are_checked_before_each_step() -> None:
    assert reason(make(steps=(Step(1, 2),))) == "invalid_steps"  # type: ignore[arg-type]


def test_errors_carry_the_source_id() -> None:
    with pytest.raises(IngestionError) as info:
        validate_trajectory(make(source_id="s-9", steps=[]))
    assert info.value.source_id == "s-9"


def test_error_message_says_which_step_is_wrong() -> None:
    with pytest.raises(IngestionError, match=r"steps\[1\]\.action"):
        validate_trajectory(make(steps=[Step("o", "a"), Step("o", 5)]))  # type: ignore[arg-type]


def test_metadata_error_keeps_the_encoder_reason_and_path() -> None:
    with pytest.raises(IngestionError, match=r"invalid_metadata: .*'set'.*metadata\['k'\]") as info:
        validate_trajectory(make(metadata={"k": {1}}))
    assert info.value.source_id == "src-1"
