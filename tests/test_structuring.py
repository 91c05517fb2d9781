"""`structuring.episodic`: one subgoal, and per step an episodic and a source node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.embedding import HashingEmbedder
from hippograph.graph.structuring import MAX_KEY_BYTES, episodic, node_key, step_text

DIM = 16
embed = HashingEmbedder(DIM)


def trajectory(source_id: str = "run-1", steps: int = 3) -> hg.Trajectory:
    return hg.Trajectory(
        source_id=source_id,
        goal="Fix the failing build",
        steps=[hg.Step(f"observation {i}", f"action {i}") for i in range(steps)],
        metadata={"agent": "ci-fixer"},
    )


def structure(t: hg.Trajectory) -> hg.Changeset:
    return episodic(embed)(t)


def nodes_by_id(cs: hg.Changeset) -> dict[str, hg.Node]:
    return {n.id: n for n in cs.additions}


def link_set(cs: hg.Changeset) -> set[tuple[frozenset[str], hg.EdgeType]]:
    return {(frozenset((a, b)), hg.EdgeType(e)) for a, b, e in cs.links}


def test_additions_are_goal_then_episodic_and_source_per_step() -> None:
    assert structure(trajectory(steps=2)).node_ids == (
        "run-1:goal",
        "run-1:step:0",
        "run-1:source:0",
        "run-1:step:1",
        "run-1:source:1",
    )


def test_goal_becomes_a_subgoal_node() -> None:
    goal = nodes_by_id(structure(trajectory()))["run-1:goal"]
    assert isinstance(goal, hg.Subgoal)
    assert goal.description == "Fix the failing build"
    assert goal.parent_goal is None


def test_each_step_becomes_an_episodic_node() -> None:
    node = nodes_by_id(structure(trajectory()))["run-1:step:1"]
    assert isinstance(node, hg.Episodic)
    assert node.fields_dict() == {
        "observation": "observation 1",
        "action": "action 1",
        "state": "",
        "subgoal": "Fix the failing build",
        "reward": 0.0,
        "trajectory_id": "run-1",
    }


def test_each_step_has_a_source_node_with_its_text() -> None:
    node = nodes_by_id(structure(trajectory()))["run-1:source:2"]
    assert isinstance(node, hg.Source)
    assert (node.episode_id, node.step_index) == ("run-1", 2)
    assert node.plain_text == "observation 2\naction 2"


def test_steps_are_hierarchical_to_the_goal_and_provenance_to_their_source() -> None:
    links = link_set(structure(trajectory(steps=2)))
    for i in range(2):
        assert (frozenset({f"run-1:step:{i}", "run-1:goal"}), hg.EdgeType.HIERARCHICAL) in links
        assert (frozenset({f"run-1:step:{i}", f"run-1:source:{i}"}), hg.EdgeType.PROVENANCE) in links


def test_consecutive_steps_are_siblings() -> None:
    links = link_set(structure(trajectory(steps=3)))
    siblings = {ends for ends, edge in links if edge == hg.EdgeType.SIBLING}
    assert siblings == {
        frozenset({"run-1:step:0", "run-1:step:1"}),
        frozenset({"run-1:step:1", "run-1:step:2"}),
    }


def test_a_single_step_has_no_siblings() -> None:
    links = link_set(structure(trajectory(steps=1)))
    assert all(edge != hg.EdgeType.SIBLING for _, edge in links)


def test_there_are_no_other_links() -> None:
    assert len(structure(trajectory(steps=3)).links) == 3 + 3 + 2


def test_stored_links_connect_the_graph_as_described() -> None:
    with InMemory() as backend:
        backend.apply_changeset(structure(trajectory(steps=3)))
        assert [n.id for n in backend.get_linked_nodes(["run-1:goal"], "hierarchical")] == [
            "run-1:step:0",
            "run-1:step:1",
            "run-1:step:2",
        ]
        assert [n.id for n in backend.get_linked_nodes(["run-1:step:1"], "sibling")] == [
            "run-1:step:0",
            "run-1:step:2",
        ]


def test_every_node_gets_fresh_metadata() -> None:
    cs = structure(trajectory())
    assert set(cs.metadata) == set(cs.node_ids)
    for meta in cs.metadata.values():
        assert (meta.access_count, meta.last_accessed_at, meta.reward_count, meta.cumulative_reward) == (
            0,
            None,
            0,
            0.0,
        )


def test_nodes_and_metadata_share_one_creation_time() -> None:
    cs = structure(trajectory())
    times = {n.created_at for n in cs.additions} | {m.created_at for m in cs.metadata.values()}
    assert len(times) == 1


def test_embed_is_called_once_with_the_goal_then_every_step_text() -> None:
    calls: list[list[str]] = []

    def recording(texts: list[str]) -> npt.NDArray[np.float32]:
        calls.append(list(texts))
        return embed(texts)

    t = trajectory(steps=2)
    episodic(recording)(t)
    assert calls == [["Fix the failing build", step_text(t.steps[0]), step_text(t.steps[1])]]


def test_step_text_joins_observation_and_action() -> None:
    assert step_text(hg.Step("disk full", "rotate logs")) == "disk full\nrotate logs"


def test_goal_and_steps_carry_the_embedding_of_their_text() -> None:
    t = trajectory(steps=1)
    nodes = nodes_by_id(structure(t))
    goal, step, source = (nodes[f"run-1:{k}"].embedding for k in ("goal", "step:0", "source:0"))
    assert goal is not None and step is not None and source is not None
    assert np.array_equal(goal, embed([t.goal])[0])
    assert np.array_equal(step, embed([step_text(t.steps[0])])[0])
    assert np.array_equal(source, step)


def test_the_same_trajectory_always_yields_the_same_ids() -> None:
    assert structure(trajectory()).node_ids == structure(trajectory()).node_ids


def test_a_short_source_id_is_used_verbatim() -> None:
    source_id = "é" * (MAX_KEY_BYTES // 2)
    assert node_key(source_id) == source_id


def test_long_source_ids_keep_every_id_within_512_bytes() -> None:
    cs = structure(trajectory(source_id="x" * 510, steps=12))
    assert max(len(i.encode("utf-8")) for i in cs.node_ids) <= 512


def test_long_source_ids_with_a_common_prefix_get_distinct_keys() -> None:
    a, b = "p" * 600 + "a", "p" * 600 + "b"
    assert node_key(a) != node_key(b)
    assert node_key(a) == node_key("p" * 600 + "a")


def test_a_long_multibyte_source_id_is_cut_at_a_character_boundary() -> None:
    key = node_key("日本語" * 200)
    assert key.startswith("日本語")
    assert "\ufffd" not in key
    assert len(key.encode("utf-8")) <= MAX_KEY_BYTES


def test_long_source_ids_keep_the_full_id_in_node_fields() -> None:
    source_id = "y" * 500
    nodes = nodes_by_id(structure(trajectory(source_id=source_id, steps=1)))
    step = nodes[f"{node_key(source_id)}:step:0"]
    assert isinstance(step, hg.Episodic)
    assert step.trajectory_id == source_id


def test_an_invalid_trajectory_is_refused_before_embedding() -> None:
    def never(texts: list[str]) -> Any:
        raise AssertionError("embed must not be called")

    with pytest.raises(hg.IngestionError) as err:
        episodic(never)(hg.Trajectory("run-1", "goal", []))
    assert err.value.reason == "invalid_steps"


@pytest.mark.parametrize(
    "bad_embed",
    [
        lambda texts: np.zeros((len(texts) - 1, DIM), dtype=np.float32),
        lambda texts: np.zeros(DIM, dtype=np.float32),
        lambda texts: [["not", "numbers"]] * len(texts),
    ],
    ids=["too-few-rows", "one-dimensional", "not-numeric"],
)
def test_an_embedder_returning_the_wrong_shape_is_a_validation_error(bad_embed: Callable[[list[str]], Any]) -> None:
    with pytest.raises(hg.ValidationError, match="embed"):
        episodic(bad_embed)(trajectory())


def test_an_ingested_trajectory_is_recalled_by_its_goal() -> None:
    with hg.Repo(InMemory(), flush_interval=0) as repo:
        t = trajectory()
        receipt = repo.ingest(t, episodic(embed))
        hits = repo.recall(
            embed([t.goal])[0], types=[hg.NodeType.SUBGOAL], value_function={"params": {"subgoal": {"threshold": 0.0}}}
        )
        assert receipt.node_ids[0] == "run-1:goal"
        assert [h.node.id for h in hits] == ["run-1:goal"]
