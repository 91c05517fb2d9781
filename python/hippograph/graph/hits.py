"""What a recall hands back: hits, and on request what each score was made of.

`Explanation` holds the numbers the ranking itself used (the Rust core returns them from the same
kernels and value function the scans run): recombining them gives the score exactly, as
`Explanation.recombined` documents. `WhyNot` says which rule left a node out of an answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from ..engine.query import Gate
from .model import Node, NodeType

__all__ = ["ExplainedHit", "Explanation", "Hit", "Reason", "ValueParts", "WhyNot"]


@dataclass(frozen=True)
class ValueParts:
    """The default value function's factors for a node with metadata, and their inputs.

    score = relevance × recency × (frequency × reward), multiplied in that order in float64.
    """

    hours: float
    """Hours from the last access (or the creation, never accessed) to the query's `now`; never negative."""
    access_count: int
    reward_count: int
    cumulative_reward: float
    recency: float
    """exp(−lambda × hours)."""
    frequency: float
    """max(base_floor, access_count / (access_count + k))."""
    reward: float
    """1.0 without rewards, else 1 / (1 + exp(−beta × cumulative_reward / reward_count))."""
    lambda_: float
    k: float
    base_floor: float
    beta: float


@dataclass(frozen=True)
class Explanation:
    """Why a node scored what it did for one query, and how its type's rules treated it."""

    node_id: str
    node_type: NodeType
    score: float
    relevance: float
    """max(0, the best of `similarities`): what the value function was given."""
    similarities: tuple[float, ...]
    """Cosine similarity (clamped to [0, 1]) to the query, then to each tag vector in order."""
    value: ValueParts | None
    """None: the node has no metadata (its score is its relevance) or a custom value function scored it."""
    value_function: str
    """``"default"``, or the custom value function's class name."""
    gate: Gate
    threshold: float
    top_k: int
    rank: int | None
    """1-based place among its type's hits; None when it was not returned."""
    path: str
    """Which path answered the type's query: the exact scan (and why), or the certified vector index."""

    @property
    def matched(self) -> str | None:
        """The vector the relevance came from (``"query"`` or ``"tag <i>"``); None when nothing matched."""
        if not self.similarities or self.relevance <= 0.0:
            return None
        best = self.similarities.index(max(self.similarities))
        return "query" if best == 0 else f"tag {best - 1}"

    @property
    def gated(self) -> float:
        """The number the threshold is compared with: the score, or the relevance under ``gate="relevance"``."""
        return self.relevance if self.gate == "relevance" else self.score

    @property
    def passes_gate(self) -> bool:
        return self.gated >= self.threshold

    def recombined(self) -> float:
        """The score rebuilt from the parts: relevance × recency × (frequency × reward) in float64, or
        the relevance without metadata. Equal to `score` under the default value function."""
        if self.value is None:
            return self.relevance if self.value_function == "default" else self.score
        v = self.value
        return self.relevance * v.recency * (v.frequency * v.reward)

    def lines(self) -> list[str]:
        """A readable account, one fact per line."""
        sims = ", ".join(f"{'query' if i == 0 else f'tag {i - 1}'} {s:.4f}" for i, s in enumerate(self.similarities))
        out = [
            f"{self.node_id} ({self.node_type.value}): score {self.score:.6g}"
            + (f", rank {self.rank} of top_k {self.top_k}" if self.rank is not None else ", not returned"),
            f"  relevance {self.relevance:.6g} from {self.matched or 'nothing'} (similarities: {sims or 'none'})",
        ]
        v = self.value
        if v is not None:
            out.append(
                f"  value: recency {v.recency:.4g} ({v.hours:.1f} h, lambda {v.lambda_:.3g}/h) × frequency "
                f"{v.frequency:.4g} ({v.access_count} accesses, k {v.k:g}, floor {v.base_floor:g}) × reward "
                f"{v.reward:.4g} ({v.reward_count} rewards totalling {v.cumulative_reward:g})"
            )
        elif self.value_function == "default":
            out.append("  value: no metadata, score = relevance")
        else:
            out.append(f"  value: {self.value_function}.score")
        verdict = "passes" if self.passes_gate else "fails"
        out.append(f"  gate: {self.gate} {self.gated:.6g} >= threshold {self.threshold:g}: {verdict}")
        out.append(f"  path: {self.path}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Hit(NamedTuple):
    """One recalled memory; unpacks as ``node, score``."""

    node: Node
    score: float

    @property
    def explanation(self) -> Explanation | None:
        """What the score was made of (`recall(..., explain=True)`), else None."""
        return None


class ExplainedHit(Hit):
    """A hit with its explanation: unpacks as ``node, score`` and equals the same hit without one."""

    def __new__(cls, node: Node, score: float, explanation: Explanation) -> ExplainedHit:
        hit = super().__new__(cls, node, score)
        hit.__dict__["explanation"] = explanation
        return hit

    def __getnewargs__(self) -> tuple[Node, float, Explanation]:
        return self.node, self.score, self.explanation

    @property
    def explanation(self) -> Explanation:
        got: Explanation = self.__dict__["explanation"]
        return got


Reason = Literal[
    "returned", "type_not_requested", "below_threshold", "gated_out", "outranked", "not_scored", "missed_by_index"
]
"""Why a node was (not) in an answer:

- ``returned``: it was (see its rank);
- ``type_not_requested``: its type was not among those asked for;
- ``below_threshold``: its score is below its type's threshold (``gate="score"``);
- ``gated_out``: its relevance is below its type's threshold (``gate="relevance"``);
- ``outranked``: it passed the gate, but top_k hits of its type rank above it;
- ``not_scored``: a custom value function gave it no score (NaN);
- ``missed_by_index``: it would rank in the exact answer, which the non-exact path did not reach
  (``exact=True`` returns it)."""


@dataclass(frozen=True)
class WhyNot:
    """Which rule kept `node_id` out of the answer to a query, with the node's own numbers."""

    node_id: str
    reason: Reason
    detail: str
    """One sentence with the numbers that decided."""
    explanation: Explanation | None
    """The node's score parts (None when its type was not requested)."""
    outranked_by: tuple[tuple[str, float], ...] = ()
    """The hits of its type that rank above it, as ``(id, score)``, best first."""
    margin: float | None = None
    """How far it fell short: the k-th hit's score minus its score (``outranked``), or the threshold
    minus the gated number (``below_threshold``, ``gated_out``)."""

    def __str__(self) -> str:
        lines = [f"{self.node_id}: {self.reason}: {self.detail}"]
        if self.explanation is not None:
            lines += self.explanation.lines()[1:]
        return "\n".join(lines)
