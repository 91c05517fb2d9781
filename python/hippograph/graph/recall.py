"""Recall over graph memory: the `find_candidates` query of the `GraphBackend` contract.

Each backend keeps one `TypeColumns` per node type (or builds them on the fly
with `score_nodes`) and calls `find_candidates`, which validates the query,
resolves the value-function config, scans each requested type on the engine
(`hippograph.engine.query`) and hydrates the winners into nodes. A node the
store no longer holds is skipped and the type is scanned again for more, so a
stale cache can never surface a node the store lost. `usage_of` maps a node's
metadata onto the engine's usage columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from ..engine import routes
from ..engine.checks import Progress, as_datetime, check_flag, check_progress, utcnow
from ..engine.columns import TypeColumns, Usage
from ..engine.query import F32, F64, RowValues, calibrate, prepare_queries, scan
from .explain import Explaining, subject_score
from .model import Node, NodeMetadata, NodeType, as_node_types
from .value import ResolvedConfig, TypeParams, ValueFunctionConfig, resolve_config

__all__ = ["Hydrate", "build_vector_indexes", "find_candidates", "python_values", "score_nodes", "usage_of"]


class Hydrate(Protocol):
    """Loads the nodes among `ids`; an id it cannot load is left out.

    Their metadata only when `metadata` is true (None in its place otherwise):
    only a custom value function reads it, and loading it is most of what
    hydrating a hit costs in a store that decodes records.
    """

    def __call__(self, ids: list[str], metadata: bool) -> Mapping[str, tuple[Node, NodeMetadata | None]]: ...


def usage_of(meta: NodeMetadata | None) -> Usage | None:
    """A node's metadata as the default value function's usage columns."""
    if meta is None:
        return None
    return (meta.reference_time.timestamp(), float(meta.access_count), float(meta.reward_count), meta.cumulative_reward)


def python_values(cfg: ResolvedConfig, tp: TypeParams, now: datetime, hydrate: Hydrate) -> RowValues:
    """A custom value function called once per node (the slow path)."""
    params = {**tp.raw, "now": now}

    def values(ids: list[str], relevance: F32) -> F64:
        loaded = hydrate(ids, True)
        out = np.full(len(ids), np.nan, np.float64)
        for r, node_id in enumerate(ids):
            got = loaded.get(node_id)
            if got is not None:
                out[r] = float(cfg.function.score(float(relevance[r]), got[0], got[1], params))
        return out

    return values


def find_candidates(
    columns: Mapping[NodeType, TypeColumns],
    types: Sequence[NodeType | str],
    query: object,
    tags: Iterable[object],
    value_function: ValueFunctionConfig | Mapping[str, Any] | None,
    now: datetime | None,
    dim: int | None,
    hydrate: Hydrate,
    *,
    exact: bool = True,
    explain: Explaining | None = None,
) -> list[tuple[Node, float]]:
    """The `GraphBackend.find_candidates` query over a backend's columns.

    An id `hydrate` cannot load does not count toward top_k (the type is
    scanned again for more), so a stale cache never surfaces a lost node.
    With `explain`, the hits are `ExplainedHit`s and `explain` collects the rest.
    """
    wanted = as_node_types(types)
    exact = check_flag(exact, "exact")
    queries = prepare_queries(query, tags, dim)
    when = utcnow() if now is None else as_datetime(now, "now")
    cfg = resolve_config(value_function)
    bounded = cfg.is_default or getattr(cfg.function, "bounded_by_relevance", False) is True
    out: list[tuple[Node, float]] = []
    seen: set[str] = set()
    for at, node_type in enumerate(wanted, 1):
        type_columns = columns.get(node_type)
        if type_columns is None:
            continue
        tp = cfg.params[node_type]
        values = None if cfg.is_default else python_values(cfg, tp, when, hydrate)
        ask = tp.top_k
        route: list[str] | None = None if explain is None else []
        while True:
            params = tp if ask == tp.top_k else dataclasses.replace(tp, top_k=ask)
            approximate = bounded and not exact
            now_s = when.timestamp()
            scanned = scan(type_columns, queries, params, now_s, values, approximate=approximate, route=route)
            picked = [(i, s) for i, s in scanned if i not in seen] if seen else scanned
            loaded = hydrate([i for i, _ in picked], False)
            live = [(got[0], s) for i, s in picked if (got := loaded.get(i)) is not None]
            if len(live) == len(picked) or len(scanned) < ask:
                break
            ask += len(picked) - len(live)
        hits = live[: tp.top_k]
        if explain is not None:
            path = route[-1] if route else routes.EXACT
            path = routes.UNBOUNDED if not bounded and not exact else path
            score = None
            if values is not None:
                score = subject_score(type_columns, queries, cfg, tp, when, lambda i: hydrate([i], True).get(i))
            hits = list(explain.type_answered(type_columns, node_type, hits, queries, tp, cfg, when, path, score))
        out += hits
        if at < len(wanted):  # a type listed twice answers its nodes once
            seen.update([node.id for node, _ in hits])
    return out


def build_vector_indexes(
    columns: Mapping[NodeType, TypeColumns], types: object, progress: Progress | None
) -> list[str]:
    """Builds (and calibrates) the vector index of every requested type (None: all) that uses one and
    lacks it; the types built."""
    progress = check_progress(progress)
    built: list[str] = []
    for node_type in list(NodeType) if types is None else as_node_types(types):

        def report(done: int, total: int, phase: str = f"vector index {node_type.value}") -> None:
            if progress is not None:
                progress(phase, done, total)

        type_columns = columns[node_type]
        if type_columns.build_vector_index(report):
            built.append(node_type.value)
        ann = type_columns.ann
        if ann is not None and ann.needs_calibration():  # measured now, not by the first query
            with type_columns.calibrating:
                calibrate(type_columns, ann, resolve_config(None).params[node_type], utcnow().timestamp())
    return built


def score_nodes(
    load: Callable[[NodeType], Iterable[tuple[Node, NodeMetadata | None]]],
    types: Sequence[NodeType | str],
    query: object,
    tags: Iterable[object],
    value_function: ValueFunctionConfig | Mapping[str, Any] | None,
    *,
    now: datetime | None = None,
    dimension: int | None = None,
    explain: Explaining | None = None,
) -> list[tuple[Node, float]]:
    """`find_candidates` over nodes supplied by `load(node_type)`, for backends that keep no columns.

    `dimension` is the store's embedding dimension (None when it holds no
    embedding yet); queries of another dimension are a `ValidationError`.
    """
    wanted = as_node_types(types)
    columns: dict[NodeType, TypeColumns] = {}
    loaded: dict[str, tuple[Node, NodeMetadata | None]] = {}
    for node_type in dict.fromkeys(wanted):
        type_columns = TypeColumns()
        for node, meta in load(node_type):
            type_columns.upsert(node.id, node.embedding, usage_of(meta))
            loaded[node.id] = (node, meta)
        columns[node_type] = type_columns

    def hydrate(ids: list[str], metadata: bool) -> dict[str, tuple[Node, NodeMetadata | None]]:
        return {i: loaded[i] for i in ids if i in loaded}

    return find_candidates(columns, wanted, query, tags, value_function, now, dimension, hydrate, explain=explain)
