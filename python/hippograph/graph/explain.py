"""Explaining a recall: each hit's score parts, and why a node was left out (`why_not`).

`find_candidates` fills an `Explaining` it is handed, type by type, from the columns that answered
(the Rust core's `explain_rows` runs the scans' own kernels and value function on the listed rows,
so the parts recombine to the very score the ranking used). Without one, nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import numpy as np

from .. import _core
from ..engine.checks import check_flag
from ..engine.columns import TypeColumns
from ..engine.query import F32
from ..errors import NotFoundError, StorageError
from .hits import ExplainedHit, Explanation, Reason, ValueParts, WhyNot
from .model import Node, NodeMetadata, NodeType
from .value import ResolvedConfig, TypeParams

__all__ = ["Explaining", "explain_rows", "explaining_of", "subject_score", "why_not"]

Score = Callable[[str], float]
"""A custom value function's score of one id (NaN: it gave none)."""


def explain_rows(
    columns: TypeColumns,
    ids: Sequence[str],
    node_type: NodeType,
    queries: F32,
    tp: TypeParams,
    cfg: ResolvedConfig,
    when: datetime,
    path: str,
    ranks: Sequence[int | None],
    scores: Sequence[float] | None = None,
) -> list[Explanation]:
    """Explanations of rows `ids` of `columns` (each id held there). `scores`: what a custom value
    function gave them (the default one's come from the core with the other parts)."""
    rows = np.fromiter((columns.row[i] for i in ids), np.uint32, len(ids))
    matrix, _ = columns.scanned()
    asked = queries if columns.dim else np.zeros((0, 0), np.float32)
    sims, rel, has, hours, recency, frequency, reward, score = _core.explain_rows(
        matrix, columns.norms(), asked, columns.usage(), rows, when.timestamp(), tp.core_params
    )
    if sims.shape[1] != len(queries):  # a type without embeddings: nothing is similar
        sims = np.zeros((len(ids), len(queries)), np.float32)
    _, _, access_column, rewards_column, cumulative_column = columns.usage_arrays()
    access, rewards, cumulative = (c[rows].tolist() for c in (access_column, rewards_column, cumulative_column))
    factors = zip(has.tolist(), hours.tolist(), recency.tolist(), frequency.tolist(), reward.tolist(), strict=True)
    given = score.tolist() if scores is None else [float(s) for s in scores]
    p = tp.core_params
    shared = (p.lambda_, p.k, p.base_floor, p.beta)
    name = "default" if cfg.is_default else type(cfg.function).__name__
    out = []
    for j, (node_id, relevance, similar, (held, h, rec, freq, rew)) in enumerate(
        zip(ids, rel.tolist(), sims.tolist(), factors, strict=True)
    ):
        parts = None
        if held and cfg.is_default:
            parts = ValueParts(h, int(access[j]), int(rewards[j]), cumulative[j], rec, freq, rew, *shared)
        out.append(
            Explanation(
                node_id=node_id,
                node_type=node_type,
                score=given[j],
                relevance=relevance,
                similarities=tuple(similar),
                value=parts,
                value_function=name,
                gate=tp.gate,
                threshold=tp.threshold,
                top_k=tp.top_k,
                rank=ranks[j],
                path=path,
            )
        )
    return out


def explaining_of(explain: object) -> Explaining | None:
    """A `find_candidates` call's `explain` argument as what collects the explanations (None: none)."""
    if isinstance(explain, Explaining):
        return explain
    return Explaining() if check_flag(explain, "explain") else None


class Explaining:
    """What `find_candidates` collects when asked to explain: the explained hits, each type's path,
    and, for `why_not`, the explanation of `subject` (a node id) and the hits of its type."""

    def __init__(self, subject: str | None = None) -> None:
        self.subject_id = subject
        self.subject: Explanation | None = None
        self.rivals: list[tuple[str, float]] = []
        self.paths: dict[NodeType, str] = {}
        self.answered: set[str] = set()

    def type_answered(
        self,
        columns: TypeColumns,
        node_type: NodeType,
        hits: list[tuple[Node, float]],
        queries: F32,
        tp: TypeParams,
        cfg: ResolvedConfig,
        when: datetime,
        path: str,
        score: Score | None,
    ) -> list[ExplainedHit]:
        """`hits` (one type's, best first) with their explanations; `score`: a custom value
        function's score of the subject, when it is a row of `columns` and not a hit."""
        again = node_type in self.paths  # listed twice: the first listing answered its nodes
        self.paths.setdefault(node_type, path)
        ids = [node.id for node, _ in hits]
        scores = None if cfg.is_default else [s for _, s in hits]
        explained = explain_rows(columns, ids, node_type, queries, tp, cfg, when, path, range(1, len(ids) + 1), scores)
        self.answered.update(ids)
        subject = self.subject_id
        if subject is not None and not again and subject in columns.row:
            if subject in ids:
                self.subject = explained[ids.index(subject)]
            else:
                given = None if score is None else [score(subject)]
                alone = explain_rows(columns, [subject], node_type, queries, tp, cfg, when, path, [None], given)
                self.subject = alone[0]
            self.rivals = [(i, s) for i, (_, s) in zip(ids, hits, strict=True)]
        return [ExplainedHit(node, s, e) for (node, s), e in zip(hits, explained, strict=True)]


Loaded = tuple[Node, NodeMetadata | None]


def subject_score(
    columns: TypeColumns,
    queries: F32,
    cfg: ResolvedConfig,
    tp: TypeParams,
    when: datetime,
    load: Callable[[str], Loaded | None],
) -> Score:
    """A custom value function's score of a row of `columns` (the node `why_not` asks about), as the
    scan's per-node call computes one: its relevance from the scans' own function, its node and
    metadata from `load`."""

    def score(node_id: str) -> float:
        loaded = load(node_id)
        if loaded is None:
            return float("nan")
        rows = np.array([columns.row[node_id]], np.uint32)
        matrix, _ = columns.scanned()
        rel = float(_core.relevance_of_rows(matrix, columns.norms(), queries, rows)[0]) if columns.dim else 0.0
        return float(cfg.function.score(rel, loaded[0], loaded[1], {**tp.raw, "now": when}))

    return score


def why_not(node: Node, wanted: Sequence[NodeType], explaining: Explaining, cfg: ResolvedConfig, exact: bool) -> WhyNot:
    """The rule that kept `node` out of the answer `explaining` collected (or that it was returned)."""
    e = explaining.subject
    if node.node_type not in wanted:
        asked = ", ".join(t.value for t in wanted)
        detail = f"its type {node.node_type.value} was not asked for ({asked})"
        return WhyNot(node.id, "type_not_requested", detail, None)
    if e is None:  # its type's columns hold every node the store held when the query ran
        raise NotFoundError("node", node.id, f"node {node.id!r} was not in the store the query read")
    tp = cfg.params[node.node_type]
    if node.id in explaining.answered:
        return WhyNot(node.id, "returned", f"returned at rank {e.rank} with score {e.score:.6g}", e)
    if np.isnan(e.score):
        return WhyNot(node.id, "not_scored", f"{e.value_function}.score gave no score (NaN)", e)
    if not e.passes_gate:
        what = "score" if e.gate == "score" else "relevance"
        reason: Reason = "below_threshold" if e.gate == "score" else "gated_out"
        detail = f"its {what} {e.gated:.6g} is below the {node.node_type.value} threshold {tp.threshold:g}"
        return WhyNot(node.id, reason, detail, e, margin=tp.threshold - e.gated)
    rivals = explaining.rivals
    if tp.top_k == 0:
        return WhyNot(node.id, "outranked", f"top_k of {node.node_type.value} is 0", e)
    if len(rivals) >= tp.top_k:
        kth_id, kth = rivals[tp.top_k - 1]
        if e.score < kth or (e.score == kth and node.id > kth_id):
            detail = f"score {e.score:.6g} ranks below hit {tp.top_k} of {node.node_type.value}, {kth_id} ({kth:.6g})"
            return WhyNot(node.id, "outranked", detail, e, tuple(rivals), kth - e.score)
    place = "displace the last hit" if len(rivals) >= tp.top_k else "fill a free slot"
    detail = f"score {e.score:.6g} would {place} in the exact answer; {e.path}"
    if exact:  # the exact scan returns every such node: its answer and these numbers disagree
        raise StorageError(
            f"the exact answer left out {node.id!r}, which passes its gate: {detail}", operation="why_not"
        )
    return WhyNot(node.id, "missed_by_index", detail, e, tuple(rivals))
