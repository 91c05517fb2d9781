"""`find_candidates`: which nodes come back, in what order, with what score.

`CandidateConformance` holds the selection rules (types, threshold, top_k,
ties, tag vectors, rejected queries and configs, custom value functions) and
the default value function, checked against the scoring rules of
docs/architecture.md by hand and against an independent numpy scorer.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from ..backends.memory import InMemory
from ..errors import ConfigError, ValidationError
from ..graph.changeset import Changeset
from ..graph.model import EdgeType, Node, NodeMetadata, NodeType, Semantic
from ..graph.protocol import GraphBackend
from ._helpers import E1, E2, KEEP_ALL, SuiteMixin, _links, _meta, _pairs, _sem
from .graphs import (
    NOW,
    ReferenceValueFunction,
    assert_selection,
    make_node,
    random_graph,
    reference_gated,
    reference_scores,
    resolved_params,
    vec,
)

__all__ = ["CandidateConformance"]


class CandidateConformance(SuiteMixin):
    """find_candidates and the default value function."""

    # -- find_candidates -----------------------------------------------------

    def test_find_candidates_on_an_empty_graph_is_empty(self, backend: GraphBackend) -> None:
        """An empty store has no candidates, whatever the types asked."""
        assert backend.find_candidates(list(NodeType), E1, [vec(0, 1, 0, 0)], None) == []

    def test_find_candidates_returns_only_requested_types(self, backend: GraphBackend) -> None:
        """Nodes of types not asked for never appear."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert {n.node_type for n, _ in hits} == {NodeType.SEMANTIC}
        assert sorted(n.id for n, _ in hits) == ["s1", "s2", "s3"]
        assert backend.find_candidates([NodeType.PROCEDURAL], E1, [], KEEP_ALL) == []

    def test_types_are_concatenated_in_the_order_given(self, backend: GraphBackend) -> None:
        """Results hold each requested type's block in request order."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.TAG, NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert [n.id for n, _ in hits] == ["t1", "s2", "s1", "s3"]

    def test_relevance_is_cosine_clamped_at_zero(self, backend: GraphBackend) -> None:
        """Relevance is the cosine to the query; opposite vectors score 0."""
        cs = Changeset().add_nodes([_sem("same", vec(2, 0, 0, 0)), _sem("p6", vec(3, 4, 0, 0))])
        backend.apply_changeset(cs.add_node(_sem("p8", vec(4, -3, 0, 0))).add_node(_sem("opp", vec(-1, 0, 0, 0))))
        scores = self._scores(backend, vec(5, 0, 0, 0))
        assert scores == pytest.approx({"same": 1.0, "p8": 0.8, "p6": 0.6, "opp": 0.0}, abs=self.score_tolerance)

    def test_candidates_carry_full_nodes(self, backend: GraphBackend) -> None:
        """Returned nodes equal get_node: fields, embedding and current links."""
        cs = Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]).add_link("a", "b", EdgeType.SIBLING)
        backend.apply_changeset(cs)
        (node, _), *_ = backend.find_candidates([NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert node == backend.get_node("a")
        assert _links(node) == {EdgeType.SIBLING: {"b"}}

    def test_threshold_is_inclusive(self, backend: GraphBackend) -> None:
        """A score exactly equal to the threshold is kept."""
        half = vec(0.5, 0.5, 0.5, 0.5)
        backend.apply_changeset(Changeset().add_nodes([_sem("exact", half), _sem("near", vec(0.5, 0.5, 0.5, 0.4))]))
        config = {"params": {NodeType.SEMANTIC: {"threshold": 1.0}}}
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], half, [], config)) == [("exact", 1.0)]

    def test_top_k_bounds_each_type(self, backend: GraphBackend) -> None:
        """At most top_k nodes per type are returned, the best ones."""
        rows = [vec(1, 0.1 * i, 0, 0) for i in range(6)]
        backend.apply_changeset(Changeset().add_nodes([_sem(f"n{i}", rows[i]) for i in range(6)]))
        config = {"params": {NodeType.SEMANTIC: {"top_k": 3}}}
        assert [n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E1, [], config)] == ["n0", "n1", "n2"]
        config = {"params": {NodeType.SEMANTIC: {"top_k": 0}}}
        assert backend.find_candidates([NodeType.SEMANTIC], E1, [], config) == []

    def test_ties_are_broken_by_id_ascending(self, backend: GraphBackend) -> None:
        """Equal scores are ordered by id, and top_k keeps the smallest ids."""
        backend.apply_changeset(Changeset().add_nodes([_sem(i, E1) for i in ["m", "c", "x", "a", "k"]]))
        got = backend.find_candidates([NodeType.SEMANTIC], E1, [], {"params": {"semantic": {"top_k": 3}}})
        assert _pairs(got) == [("a", 1.0), ("c", 1.0), ("k", 1.0)]

    def test_default_params_apply_per_type(self, backend: GraphBackend) -> None:
        """Without a config, the default thresholds and top_k of docs/architecture.md apply per type."""
        cs = Changeset().add_nodes([_sem(f"s{i:02d}", E1) for i in range(25)])
        cs.add_node(make_node(NodeType.TAG, "t-hit", E1)).add_node(make_node(NodeType.TAG, "t-miss", vec(3, 4, 0, 0)))
        cs.add_node(make_node(NodeType.PROCEDURAL, "p-miss", vec(3, 4, 0, 0)))
        backend.apply_changeset(cs)
        sem = backend.find_candidates([NodeType.SEMANTIC], E1, [], None)
        assert [n.id for n, _ in sem] == [f"s{i:02d}" for i in range(20)]
        assert [n.id for n, _ in backend.find_candidates([NodeType.TAG, NodeType.PROCEDURAL], E1, [], None)] == [
            "t-hit"
        ]

    def test_params_override_threshold_and_top_k_per_type(self, backend: GraphBackend) -> None:
        """Per-type overrides replace only the params they name, only for that type."""
        cs = Changeset().add_nodes([_sem(f"s{i}", vec(1, 0.2 * i, 0, 0)) for i in range(4)])
        backend.apply_changeset(cs.add_node(make_node(NodeType.TAG, "t", vec(3, 4, 0, 0))))
        config = {"params": {"semantic": {"top_k": 2}, NodeType.TAG: {"threshold": 0.5}}}
        hits = backend.find_candidates([NodeType.SEMANTIC, NodeType.TAG], E1, [], config)
        assert [n.id for n, _ in hits] == ["s0", "s1", "t"]
        config = {"params": {NodeType.SEMANTIC: {"threshold": 0.95}}}
        assert [n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], E1, [], config)] == ["s0", "s1"]

    def test_tag_vectors_raise_a_node_above_its_query_score(self, backend: GraphBackend) -> None:
        """Relevance is the best cosine over the query and every tag vector."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E2), _sem("b", vec(0, 0, 1, 0))]))
        assert self._scores(backend, E1) == {"a": 0.0, "b": 0.0}
        got = self._scores(backend, E1, [vec(0, 3, 0, 0), vec(0, 0, 3, 4)])
        assert got == pytest.approx({"a": 1.0, "b": 0.6}, abs=1e-6)

    def test_repeated_types_return_each_node_once(self, backend: GraphBackend) -> None:
        """A type asked for twice does not repeat its nodes."""
        self._mixed(backend)
        hits = backend.find_candidates([NodeType.SEMANTIC, NodeType.TAG, NodeType.SEMANTIC], E1, [], KEEP_ALL)
        assert [n.id for n, _ in hits] == ["s2", "s1", "s3", "t1"]

    def test_nodes_without_embedding_have_zero_relevance(self, backend: GraphBackend) -> None:
        """Embedding-less nodes score 0.0: kept at threshold 0, dropped above it."""
        backend.apply_changeset(Changeset().add_nodes([_sem("e", E1), _sem("plain")]))
        assert self._scores(backend, E1) == {"e": 1.0, "plain": 0.0}
        config = {"params": {NodeType.SEMANTIC: {"threshold": 1e-9}}}
        assert self._scores(backend, E1, config=config) == {"e": 1.0}

    def test_zero_vectors_have_zero_similarity(self, backend: GraphBackend) -> None:
        """A zero embedding matches nothing; a zero query leaves only the tags to match."""
        zero = vec(0, 0, 0, 0)
        backend.apply_changeset(Changeset().add_nodes([_sem("zero", zero), _sem("e", E1)]))
        assert self._scores(backend, E1) == {"e": 1.0, "zero": 0.0}
        assert self._scores(backend, zero) == {"e": 0.0, "zero": 0.0}
        assert self._scores(backend, zero, [E1]) == {"e": 1.0, "zero": 0.0}

    @pytest.mark.parametrize(
        ("query", "tags"),
        [
            (vec(1, 0, 0), []),
            (vec(1, 0, 0, 0, 0), []),
            (E1, [vec(1, 0, 0)]),
            (E1, [E2, vec(1, 0, 0, 0, 0)]),
        ],
        ids=["short_query", "long_query", "short_tag", "long_second_tag"],
    )
    def test_wrong_dimension_is_rejected(self, backend: GraphBackend, query: object, tags: list[object]) -> None:
        """A query or tag whose dimension differs from the store's is a ValidationError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.SEMANTIC], query, tags, None)
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.TAG], query, tags, None)

    @pytest.mark.parametrize(
        ("query", "tags"),
        [
            ([1.0, math.nan, 0.0, 0.0], []),
            ([1.0, 0.0, math.inf, 0.0], []),
            pytest.param([1.0, 0.0, 0.0, 1e39], [], marks=pytest.mark.filterwarnings("ignore:overflow")),
            (E1, [[0.0, -math.inf, 0.0, 0.0]]),
            (E1, [E2, [math.nan, 0.0, 0.0, 0.0]]),
        ],
        ids=["nan_query", "inf_query", "float32_overflow_query", "inf_tag", "nan_second_tag"],
    )
    def test_non_finite_vectors_are_rejected(self, backend: GraphBackend, query: object, tags: list[object]) -> None:
        """NaN or infinite query and tag values are a ValidationError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.SEMANTIC], query, tags, None)

    @pytest.mark.parametrize(
        "tags",
        [
            np.zeros((2, 5), np.float32),
            np.array([E2, [math.nan, 0, 0, 0]], np.float32),
            np.full((1, 4), np.inf, np.float32),
        ],
        ids=["wide_matrix", "nan_in_matrix", "inf_matrix"],
    )
    def test_tag_matrix_is_checked_like_a_list(self, backend: GraphBackend, tags: np.ndarray) -> None:
        """Tags given as one float32 matrix are refused for the same faults as a list of vectors."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        with pytest.raises(ValidationError):
            backend.find_candidates([NodeType.SEMANTIC], E1, tags, None)

    def test_tag_matrix_answers_like_a_list(self, backend: GraphBackend) -> None:
        """A float32 tag matrix ranks as its rows given one by one; an empty one as no tags."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E2), _sem("c", vec(0, 0, 1, 0))]))
        rows = [E2, vec(0, 0, 1, 0.5)]
        want = _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, rows, None, now=NOW))
        assert (
            _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, np.array(rows, np.float32), None, now=NOW)) == want
        )
        alone = _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, [], None, now=NOW))
        assert (
            _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, np.zeros((0, 4), np.float32), None, now=NOW))
            == alone
        )
        assert want != alone

    def test_unknown_type_is_rejected(self, backend: GraphBackend) -> None:
        """Asking for a type outside the seven is a ValidationError."""
        with pytest.raises(ValidationError):
            backend.find_candidates(["memory"], E1, [], None)

    def test_bad_value_function_params_are_a_config_error(self, backend: GraphBackend) -> None:
        """Params naming an unknown type or holding a bad value raise ConfigError."""
        backend.apply_changeset(Changeset().add_node(_sem("a", E1)))
        for config in (
            {"params": {"memory": {"top_k": 1}}},
            {"params": {"semantic": {"top_k": -1}}},
            {"params": {"semantic": {"threshold": "high"}}},
        ):
            with pytest.raises(ConfigError):
                backend.find_candidates([NodeType.SEMANTIC], E1, [], config)

    def test_custom_value_function_scores_are_used(self, backend: GraphBackend) -> None:
        """A Python value function decides the scores, the threshold and the order."""

        class ByConfidence:
            def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Any) -> float:
                assert isinstance(node, Semantic)
                return node.confidence

        cs = Changeset().add_nodes([_sem(i, E1, confidence=c) for i, c in [("a", 0.2), ("b", 0.9), ("c", 0.5)]])
        backend.apply_changeset(cs.add_node(_sem("d", E1, confidence=0.5)))
        config = {"function": ByConfidence(), "params": {"semantic": {"threshold": 0.5}}}
        assert _pairs(backend.find_candidates([NodeType.SEMANTIC], E1, [], config)) == [
            ("b", 0.9),
            ("c", 0.5),
            ("d", 0.5),
        ]

    def test_custom_value_function_receives_metadata_and_params(self, backend: GraphBackend) -> None:
        """The function gets the relevance, node, metadata and the type's resolved params with now."""
        seen: list[tuple[float, str, NodeMetadata | None, dict[str, Any]]] = []

        class Recorder:
            def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Any) -> float:
                seen.append((relevance, node.id, metadata, dict(params)))
                return relevance

        meta = _meta(2.0, 3)
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", E2)]).put_metadata("a", meta))
        config = {"function": Recorder(), "params": {"semantic": {"k": 2.5}}}
        backend.find_candidates([NodeType.SEMANTIC], E1, [], config, now=NOW)
        by_id = {node_id: (rel, m, p) for rel, node_id, m, p in seen}
        assert by_id["a"][0] == 1.0 and by_id["a"][1] == meta
        assert by_id["b"][0] == 0.0 and by_id["b"][1] is None
        params = by_id["a"][2]
        assert params["now"] == NOW
        assert params["k"] == 2.5
        assert params["threshold"] == 0.0 and params["top_k"] == 20 and params["gate"] == "score"
        assert params["lambda"] == pytest.approx(math.log(2) / 2160, rel=1e-12)

    @pytest.mark.parametrize("seed", [11, 12])
    def test_python_value_function_matches_the_default(self, backend: GraphBackend, seed: int) -> None:
        """The formula written as a Python function ranks and scores like the built-in default."""
        graph = random_graph(seed)
        backend.apply_changeset(graph.changeset)
        custom = {"function": ReferenceValueFunction(), "params": {}}
        for query, tags in graph.queries:
            default = backend.find_candidates(list(NodeType), query, tags, None, now=NOW, exact=True)
            python = backend.find_candidates(list(NodeType), query, tags, custom, now=NOW, exact=True)
            assert [n.id for n, _ in python] == [n.id for n, _ in default]
            assert [s for _, s in python] == pytest.approx([s for _, s in default], abs=1e-9)

    # -- the default value function -----------------------------------------

    def test_default_score_without_metadata_is_relevance(self, backend: GraphBackend) -> None:
        """No metadata: the score is exactly the relevance."""
        backend.apply_changeset(Changeset().add_nodes([_sem("a", E1), _sem("b", vec(3, 4, 0, 0))]))
        assert self._scores(backend, E1, config=None) == pytest.approx({"a": 1.0, "b": 0.6}, abs=self.score_tolerance)

    def test_recent_access_outscores_stale(self, backend: GraphBackend) -> None:
        """Of two equally relevant nodes, the one accessed more recently scores higher."""
        cs = Changeset().add_nodes([_sem("recent", E1), _sem("stale", E1)])
        backend.apply_changeset(cs.put_metadata("recent", _meta(1.0, 3)).put_metadata("stale", _meta(200.0, 3)))
        scores = self._scores(backend, E1)
        assert scores["recent"] > scores["stale"] > 0.0

    def test_frequent_access_outscores_rare(self, backend: GraphBackend) -> None:
        """Of two equally recent nodes, the one accessed more often scores higher."""
        cs = Changeset().add_nodes([_sem("frequent", E1), _sem("rare", E1)])
        backend.apply_changeset(cs.put_metadata("frequent", _meta(1.0, 20)).put_metadata("rare", _meta(1.0, 1)))
        scores = self._scores(backend, E1)
        assert scores["frequent"] > scores["rare"] > 0.0

    def test_reward_sign_orders_scores(self, backend: GraphBackend) -> None:
        """Positive average reward > neutral > negative."""
        cs = Changeset().add_nodes([_sem("pos", E1), _sem("neutral", E1), _sem("neg", E1)])
        cs.put_metadata("pos", _meta(1.0, 2, (1.0, 0.5))).put_metadata("neutral", _meta(1.0, 2, (1.0, -1.0)))
        backend.apply_changeset(cs.put_metadata("neg", _meta(1.0, 2, (-1.0, -0.5))))
        scores = self._scores(backend, E1)
        assert scores["pos"] > scores["neutral"] > scores["neg"] > 0.0

    def test_no_rewards_outscore_a_neutral_reward(self, backend: GraphBackend) -> None:
        """Never rewarded counts as factor 1.0; an average reward of 0 as 0.5."""
        cs = Changeset().add_nodes([_sem("unrewarded", E1), _sem("neutral", E1)])
        backend.apply_changeset(
            cs.put_metadata("unrewarded", _meta(1.0, 2)).put_metadata("neutral", _meta(1.0, 2, (0.0,)))
        )
        scores = self._scores(backend, E1)
        assert scores["neutral"] == pytest.approx(0.5 * scores["unrewarded"], rel=1e-9)

    def test_default_scores_match_hand_computed_values(self, backend: GraphBackend) -> None:
        """Scores on a fixed graph equal the scoring formula of docs/architecture.md worked by hand."""
        cs = Changeset().add_nodes(
            [
                _sem("a", vec(1, 0, 0, 0)),
                _sem("b", vec(3, 4, 0, 0)),
                _sem("c", vec(4, -3, 0, 0)),
                _sem("d", vec(0, 1, 0, 0)),
                _sem("e", vec(-1, 0, 0, 0)),
                _sem("f", vec(1, 0, 0, 0)),
            ]
        )
        cs.put_metadata(
            "a",
            NodeMetadata(
                created_at=NOW - timedelta(hours=10),
                access_count=10,
                last_accessed_at=NOW - timedelta(hours=2),
                cumulative_reward=1.0,
                reward_count=2,
            ),
        )
        cs.put_metadata("b", NodeMetadata(created_at=NOW - timedelta(hours=10)))
        cs.put_metadata("d", NodeMetadata(created_at=NOW - timedelta(hours=1), access_count=4))
        cs.put_metadata("f", NodeMetadata(created_at=NOW + timedelta(hours=3), access_count=2))
        backend.apply_changeset(cs)
        # λ = ln 2 / 2160 per hour (a 90-day half-life).
        # a: 1.0 × 2^(-2/2160) × 10/15 × σ(0.5);  b: 0.6 × 2^(-10/2160) × floor 0.3;
        # c: no metadata → 0.8;  f: created in the future → no decay, 2/7 < 0.3 → 0.3.
        want_a = 1.0 * 2 ** (-2 / 2160) * (10 / 15) / (1 + math.exp(-0.5))
        want_b = 0.6 * 2 ** (-10 / 2160) * 0.3
        assert (want_a, want_b) == pytest.approx((0.4147066, 0.1794233), abs=1e-7)
        got = backend.find_candidates([NodeType.SEMANTIC], vec(2, 0, 0, 0), [], None, now=NOW)
        assert [n.id for n, _ in got] == ["c", "a", "f", "b", "d", "e"]
        assert [s for _, s in got] == pytest.approx([0.8, want_a, 0.3, want_b, 0.0, 0.0], abs=self.score_tolerance)
        # custom params change the same formula: λ=0.5, k=1, floor 0, β=2.
        params = {"lambda": 0.5, "k": 1, "base_floor": 0.0, "beta": 2.0}
        got = backend.find_candidates([NodeType.SEMANTIC], E1, [], {"params": {"semantic": params}}, now=NOW)
        scores = dict(_pairs(got))
        # a: e^(-0.5·2) × 10/11 × σ(2·0.5) = 0.2444922;  f: no decay, 2/3, no rewards.
        assert scores["a"] == pytest.approx(0.2444922, abs=self.score_tolerance)
        assert scores["b"] == 0.0
        assert scores["f"] == pytest.approx(2 / 3, abs=self.score_tolerance)
        assert scores["c"] == pytest.approx(0.8, abs=self.score_tolerance)

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_random_graph_matches_the_reference(self, backend: GraphBackend, seed: int) -> None:
        """On random graphs, candidates match InMemory and an independent numpy scorer."""
        graph = random_graph(seed, n=120, dim=8)
        backend.apply_changeset(graph.changeset)
        reference = InMemory()
        reference.apply_changeset(graph.changeset)
        overrides: dict[NodeType | str, dict[str, Any]] = {t: {"top_k": 6, "threshold": 0.05} for t in NodeType}
        for params in (resolved_params(), resolved_params(overrides)):
            config = {"params": params}
            for query, tags in graph.queries:
                expected = reference_scores(graph.nodes.values(), graph.metadata, query, tags, params, NOW)
                gated = reference_gated(graph.nodes.values(), expected, query, tags, params)
                every = {"params": {t: {**p, "threshold": 0.0, "top_k": 10_000} for t, p in params.items()}}
                concatenated: list[str] = []
                for t in NodeType:
                    got = backend.find_candidates([t], query, tags, config, now=NOW, exact=True)
                    reference_all = _pairs(reference.find_candidates([t], query, tags, every, now=NOW))
                    pairs = _pairs(got)
                    threshold, top_k = params[t]["threshold"], params[t]["top_k"]
                    tol = max(1e-5, self.score_tolerance)
                    assert_selection(pairs, dict(reference_all), threshold, top_k, tol=tol, gated=gated[t])
                    assert_selection(pairs, expected[t], threshold, top_k, tol=tol, gated=gated[t])
                    for node, _ in got:
                        assert node == reference.get_node(node.id)
                    concatenated += [i for i, _ in pairs]
                everything = backend.find_candidates(list(NodeType), query, tags, config, now=NOW, exact=True)
                assert [n.id for n, _ in everything] == concatenated
