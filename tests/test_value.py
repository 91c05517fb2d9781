"""Value functions (docs/architecture.md, scoring): the default params table, config validation, the formula."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hippograph import DEFAULT_PARAMS, ConfigError, DefaultValueFunction, NodeMetadata, NodeType, ValueFunction
from hippograph.graph.value import resolve_config
from hippograph.testing.graphs import NOW, make_node

NODE = make_node(NodeType.SEMANTIC, "a", [1.0, 0.0])
PARAMS = {**DEFAULT_PARAMS[NodeType.SEMANTIC], "now": NOW}


def test_default_params_follow_the_design_table() -> None:
    table = {
        "semantic": (0.0, 20, "score"),
        "procedural": (0.8, 10, "relevance"),
        "episodic": (0.0, 30, "score"),
        "subgoal": (0.75, 10, "relevance"),
        "tag": (0.9, 10, "relevance"),
        "source": (0.0, 50, "score"),
        "intent": (0.7, 10, "relevance"),
    }
    for node_type in NodeType:
        params = DEFAULT_PARAMS[node_type]
        assert (params["threshold"], params["top_k"], params["gate"]) == table[node_type.value]
        assert (params["k"], params["base_floor"], params["beta"]) == (5, 0.3, 1.0)
        assert params["lambda"] == math.log(2) / 2160


def test_default_half_life_is_ninety_days() -> None:
    """An unused memory's score halves every 90 days (2,160 hours)."""
    for days, factor in ((90, 0.5), (180, 0.25), (0, 1.0)):
        meta = NodeMetadata(created_at=NOW - timedelta(days=days))
        assert DefaultValueFunction().score(1.0, NODE, meta, PARAMS) == pytest.approx(0.3 * factor, rel=1e-12)


@pytest.mark.parametrize("gate", ["Score", "", None, 1, "similarity"])
def test_unknown_gate_is_a_config_error(gate: object) -> None:
    with pytest.raises(ConfigError, match="gate of type 'tag'"):
        resolve_config({"params": {"tag": {"gate": gate}}})


def test_gate_is_resolved_per_type() -> None:
    cfg = resolve_config({"params": {"procedural": {"gate": "score"}, "semantic": {"gate": "relevance"}}})
    assert cfg.params[NodeType.PROCEDURAL].gate == "score" and cfg.params[NodeType.SEMANTIC].gate == "relevance"
    assert cfg.params[NodeType.TAG].gate == "relevance" and cfg.params[NodeType.EPISODIC].gate == "score"


def test_no_config_resolves_to_the_default_function_and_params() -> None:
    cfg = resolve_config(None)
    assert cfg.is_default
    assert cfg.params[NodeType.TAG].threshold == 0.9
    assert cfg.params[NodeType.EPISODIC].top_k == 30


def test_overrides_replace_only_what_they_name() -> None:
    cfg = resolve_config({"params": {"tag": {"threshold": 0.5}, NodeType.SEMANTIC: {"top_k": 3, "lambda": 0.1}}})
    assert (cfg.params[NodeType.TAG].threshold, cfg.params[NodeType.TAG].top_k) == (0.5, 10)
    semantic = cfg.params[NodeType.SEMANTIC]
    assert (semantic.top_k, semantic.lam, semantic.k, semantic.threshold) == (3, 0.1, 5.0, 0.0)
    assert cfg.params[NodeType.INTENT].threshold == 0.7


def test_extra_param_keys_pass_through_to_custom_functions() -> None:
    cfg = resolve_config({"params": {"semantic": {"boost": 2}}})
    assert cfg.params[NodeType.SEMANTIC].raw["boost"] == 2


def test_custom_function_is_kept() -> None:
    class Constant:
        def score(self, relevance: float, node: Any, metadata: Any, params: Any) -> float:
            return 0.5

    function = Constant()
    cfg = resolve_config({"function": function})
    assert cfg.function is function
    assert not cfg.is_default
    assert isinstance(function, ValueFunction)


@pytest.mark.parametrize(
    "config",
    [
        ["not", "a", "mapping"],
        {"function": object()},
        {"function": type("NoScore", (), {"score": 1})()},
        {"params": ["semantic"]},
        {"params": {"memory": {}}},
        {"params": {"semantic": 0.5}},
        {"params": {"semantic": {"top_k": -1}}},
        {"params": {"semantic": {"top_k": 2.0}}},
        {"params": {"semantic": {"top_k": True}}},
        {"params": {"semantic": {"top_k": "5"}}},
        {"params": {"semantic": {"threshold": "0.5"}}},
        {"params": {"semantic": {"threshold": math.nan}}},
        {"params": {"semantic": {"threshold": False}}},
        {"params": {"semantic": {"lambda": -0.1}}},
        {"params": {"semantic": {"k": -1}}},
        {"params": {"semantic": {"beta": None}}},
        {"params": {"semantic": {"base_floor": "low"}}},
        {"params": {"semantic": {"base_floor": 1.5}}},
        {"params": {"semantic": {"base_floor": -0.1}}},
        {"params": {"semantic": {"lambda": math.inf}}},
        {"params": {"semantic": {"beta": -math.inf}}},
    ],
    ids=[
        "config_not_mapping",
        "function_without_score",
        "score_not_callable",
        "params_not_mapping",
        "unknown_type",
        "type_params_not_mapping",
        "negative_top_k",
        "float_top_k",
        "bool_top_k",
        "str_top_k",
        "str_threshold",
        "nan_threshold",
        "bool_threshold",
        "negative_lambda",
        "negative_k",
        "none_beta",
        "str_base_floor",
        "base_floor_above_one",
        "negative_base_floor",
        "infinite_lambda",
        "infinite_beta",
    ],
)
def test_bad_configs_raise_config_error(config: Any) -> None:
    with pytest.raises(ConfigError):
        resolve_config(config)


# -- DefaultValueFunction.score ----------------------------------------------


def test_score_without_metadata_is_relevance() -> None:
    assert DefaultValueFunction().score(0.42, NODE, None, PARAMS) == 0.42


def test_score_matches_the_formula_by_hand() -> None:
    meta = NodeMetadata(
        created_at=NOW - timedelta(hours=30),
        last_accessed_at=NOW - timedelta(hours=2),
        access_count=10,
        reward_count=2,
        cumulative_reward=1.0,
    )
    # 0.8 × 2^(-2/2160) × 10/(10+5) × 1/(1+e^(-1·0.5))
    want = 0.8 * 2 ** (-2 / 2160) * (10 / 15) * (1 / (1 + math.exp(-0.5)))
    assert want == pytest.approx(0.3317653, abs=1e-7)
    assert DefaultValueFunction().score(0.8, NODE, meta, PARAMS) == pytest.approx(want, rel=1e-12)


def test_score_measures_age_from_creation_when_never_accessed() -> None:
    meta = NodeMetadata(created_at=NOW - timedelta(hours=10))
    # 1.0 × 2^(-10/2160) × max(0.3, 0/5) × 1
    want = 2 ** (-10 / 2160) * 0.3
    assert DefaultValueFunction().score(1.0, NODE, meta, PARAMS) == pytest.approx(want, rel=1e-12)


def test_score_uses_the_given_params() -> None:
    meta = NodeMetadata(created_at=NOW - timedelta(hours=4), access_count=3, reward_count=1, cumulative_reward=-1.0)
    params = {**PARAMS, "lambda": 0.25, "k": 1.0, "base_floor": 0.0, "beta": 2.0}
    want = 0.5 * math.exp(-1.0) * (3 / 4) * (1 / (1 + math.exp(2.0)))
    assert DefaultValueFunction().score(0.5, NODE, meta, params) == pytest.approx(want, rel=1e-12)


def test_timestamps_after_now_count_as_now() -> None:
    meta = NodeMetadata(created_at=NOW + timedelta(days=3), access_count=50)
    # no decay; 50/55 frequency; never exceeds relevance
    assert DefaultValueFunction().score(0.9, NODE, meta, PARAMS) == pytest.approx(0.9 * 50 / 55, rel=1e-12)


def test_no_rewards_weigh_twice_a_neutral_reward() -> None:
    fresh = NodeMetadata(created_at=NOW)
    neutral = fresh.update_reward(1.0).update_reward(-1.0)
    vf = DefaultValueFunction()
    assert vf.score(1.0, NODE, neutral, PARAMS) == pytest.approx(0.5 * vf.score(1.0, NODE, fresh, PARAMS))


def test_default_functions_compare_equal() -> None:
    assert DefaultValueFunction() == DefaultValueFunction()
    assert hash(DefaultValueFunction()) == hash(DefaultValueFunction())


@given(
    relevance=st.floats(0.0, 1.0),
    hours=st.floats(-48.0, 5000.0),
    count=st.integers(0, 1000),
    rewards=st.lists(st.floats(-5.0, 5.0), max_size=6),
)
def test_score_never_exceeds_relevance_and_is_never_negative(
    relevance: float, hours: float, count: int, rewards: list[float]
) -> None:
    meta = NodeMetadata(created_at=NOW - timedelta(hours=hours), access_count=count)
    for r in rewards:
        meta = meta.update_reward(r)
    assert 0.0 <= DefaultValueFunction().score(relevance, NODE, meta, PARAMS) <= relevance
