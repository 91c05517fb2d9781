"""Value functions: how relevance and usage combine into a score (docs/architecture.md, scoring).

The default one runs in Rust over every candidate at once; any object with a
matching ``score`` method works too, called once per node (the slow path).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypedDict, runtime_checkable

from .. import _core
from ..engine.checks import check_choice, utcnow
from ..engine.query import GATES, Gate, ScanParams
from ..errors import ConfigError
from .model import Node, NodeMetadata, NodeType

__all__ = [
    "DEFAULT_LAMBDA",
    "DEFAULT_PARAMS",
    "GATES",
    "DefaultValueFunction",
    "Gate",
    "TypeParams",
    "ValueFunction",
    "ValueFunctionConfig",
    "default_config",
    "resolve_config",
]


@runtime_checkable
class ValueFunction(Protocol):
    """Scores one candidate.

    `params` are the resolved params of the node's type (defaults filled in)
    plus ``"now"``: the aware UTC datetime the query is evaluated at.

    A function that never returns more than `relevance` (for every node,
    metadata and params) may say so with a class attribute
    ``bounded_by_relevance = True``: non-exact queries on large types then
    draw candidates from the vector index and rescore them with it. Without
    the attribute they scan every row, since an unbounded function could rank
    a node the index did not offer. Declaring it for a function that exceeds
    relevance makes non-exact answers miss such nodes.
    """

    def score(
        self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Mapping[str, Any]
    ) -> float: ...


class ValueFunctionConfig(TypedDict, total=False):
    function: ValueFunction
    params: Mapping[NodeType | str, Mapping[str, Any]]


_SELECTION: dict[str, tuple[float, int, Gate]] = {
    "semantic": (0.0, 20, "score"),
    "procedural": (0.8, 10, "relevance"),
    "episodic": (0.0, 30, "score"),
    "subgoal": (0.75, 10, "relevance"),
    "tag": (0.9, 10, "relevance"),
    "source": (0.0, 50, "score"),
    "intent": (0.7, 10, "relevance"),
}
_OTHER: tuple[float, int, Gate] = (0.0, 20, "score")

DEFAULT_LAMBDA = math.log(2) / 2160
"""Decay per hour: a 90-day half-life (the score of an unused memory halves every 2,160 hours)."""

_SHARED = {"lambda": DEFAULT_LAMBDA, "k": 5.0, "base_floor": 0.3, "beta": 1.0}


def _defaults(node_type: NodeType) -> dict[str, Any]:
    threshold, top_k, gate = _SELECTION.get(node_type.value, _OTHER)
    return {"threshold": threshold, "top_k": top_k, "gate": gate, **_SHARED}


DEFAULT_PARAMS: dict[NodeType, dict[str, Any]] = {t: _defaults(t) for t in NodeType}
"""Per-type defaults. ``gate`` says what ``threshold`` is compared with: the score, or the
relevance alone (the high thresholds of procedural, subgoal, tag and intent are similarity
gates: a never-used node's score is at most 0.3 × relevance, so as score thresholds they
would never let it be recalled)."""


@dataclass(frozen=True)
class TypeParams(ScanParams):
    """Validated params of one node type; `raw` keeps every key (extra ones pass through to custom functions)."""

    raw: Mapping[str, Any]


def _number(params: Mapping[str, Any], key: str, node_type: NodeType) -> float:
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"value-function param {key!r} of type {node_type.value!r} must be a number, got {value!r}")
    return float(value)


def _type_params(node_type: NodeType, overrides: Mapping[str, Any]) -> TypeParams:
    merged = {**DEFAULT_PARAMS[node_type], **overrides}
    top_k = merged["top_k"]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k < 2**62:
        raise ConfigError(f"top_k of type {node_type.value!r} must be a non-negative int, got {top_k!r}")
    gate = merged["gate"]
    check_choice(gate, GATES, f"gate of type {node_type.value!r}", ConfigError)
    tp = TypeParams(
        threshold=_number(merged, "threshold", node_type),
        top_k=top_k,
        gate=gate,
        lam=_number(merged, "lambda", node_type),
        k=_number(merged, "k", node_type),
        base_floor=_number(merged, "base_floor", node_type),
        beta=_number(merged, "beta", node_type),
        raw=merged,
    )
    if not all(math.isfinite(v) for v in (tp.lam, tp.k, tp.base_floor, tp.beta)):
        raise ConfigError(f"lambda, k, base_floor and beta of type {node_type.value!r} must be finite")
    if tp.lam < 0 or tp.k < 0:
        raise ConfigError(f"lambda and k of type {node_type.value!r} must be >= 0")
    if not 0.0 <= tp.base_floor <= 1.0:
        # Above 1 the value could exceed relevance, which the certified vector-index path relies on.
        raise ConfigError(f"base_floor of type {node_type.value!r} must be within [0, 1], got {tp.base_floor!r}")
    return tp


class DefaultValueFunction:
    """relevance × recency × frequency × reward; never exceeds relevance.

    Backends recognise this class and run it in Rust; ``score`` is the same
    formula for one node, kept for custom backends and tests.
    """

    def score(self, relevance: float, node: Node, metadata: NodeMetadata | None, params: Mapping[str, Any]) -> float:
        if metadata is None:
            return float(relevance)
        tp = _type_params(node.node_type, {k: v for k, v in params.items() if k != "now"})
        now = params.get("now")
        return default_value(relevance, metadata, tp, now if isinstance(now, datetime) else utcnow())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DefaultValueFunction)

    def __hash__(self) -> int:
        return hash(DefaultValueFunction)


def default_value(relevance: float, metadata: NodeMetadata, tp: TypeParams, now: datetime) -> float:
    """The default value function for one node, computed by the Rust core like every scan."""
    usage = (metadata.reference_time.timestamp(), metadata.access_count, metadata.reward_count)
    return _core.default_value(relevance, *usage, metadata.cumulative_reward, now.timestamp(), tp.core_params)


@dataclass(frozen=True)
class ResolvedConfig:
    function: ValueFunction
    params: dict[NodeType, TypeParams]

    @property
    def is_default(self) -> bool:
        return isinstance(self.function, DefaultValueFunction)


def default_config() -> ValueFunctionConfig:
    return {"function": DefaultValueFunction(), "params": {}}


def resolve_config(config: ValueFunctionConfig | Mapping[str, Any] | None) -> ResolvedConfig:
    """Validates a config and fills every type's params from the defaults."""
    if config is None or (isinstance(config, Mapping) and not config):
        return _default_resolved()
    return _resolve(config)


@functools.cache
def _default_resolved() -> ResolvedConfig:
    """The default config is resolved once: it is on every recall's path."""
    return _resolve({})


def _resolve(config: ValueFunctionConfig | Mapping[str, Any]) -> ResolvedConfig:
    if not isinstance(config, Mapping):
        raise ConfigError(f"value-function config must be a mapping, got {type(config).__name__}")
    function = config.get("function") or DefaultValueFunction()
    if not callable(getattr(function, "score", None)):
        raise ConfigError(f"value function {function!r} has no callable score(relevance, node, metadata, params)")
    overrides = config.get("params") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError("value-function params must map node types to dicts")
    by_type: dict[NodeType, Mapping[str, Any]] = {}
    for key, value in overrides.items():
        try:
            node_type = NodeType(key)
        except ValueError:
            raise ConfigError(f"value-function params name unknown node type {key!r}") from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"value-function params of {node_type.value!r} must be a mapping")
        by_type[node_type] = value
    return ResolvedConfig(function, {t: _type_params(t, by_type.get(t, {})) for t in NodeType})
