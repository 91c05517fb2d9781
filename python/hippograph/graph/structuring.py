"""Structuring functions: turn a `Trajectory` into the `Changeset` to store.

`Repo.ingest` takes any ``structure(trajectory) -> Changeset``; this module
ships the plain one, `episodic`, that keeps every step as it happened: a
`Subgoal` (``<key>:goal``), per step an `Episodic` (``<key>:step:<i>``) and a
`Source` (``<key>:source:<i>``), and with ``procedures=True`` a `Procedural`
(``<key>:procedure:<i>``: when the step's observation holds, take its action).
Ids are stable and readable (``<key>`` is the source id, hashed when too long).
docs/graph-memory.md gives every field and link.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..engine.checks import utcnow
from ..errors import ValidationError
from .changeset import Changeset
from .model import EdgeType, Episodic, NodeMetadata, Procedural, Source, Subgoal
from .trajectory import Step, Trajectory, validate_trajectory

__all__ = ["MAX_KEY_BYTES", "Embed", "episodic", "node_key", "step_text"]

Embed = Callable[[list[str]], Any]
"""``embed(texts) -> array (len(texts), dim)``, e.g. `hippograph.embedding.HashingEmbedder`."""

MAX_KEY_BYTES = 480
"""Longest source id used verbatim in node ids; leaves room for ``:source:<i>``."""

_PREFIX_BYTES = 400


def node_key(source_id: str) -> str:
    """The id prefix of a source's nodes: the source id, or a hashed form when too long."""
    raw = source_id.encode("utf-8")
    if len(raw) <= MAX_KEY_BYTES:
        return source_id
    prefix = raw[:_PREFIX_BYTES].decode("utf-8", "ignore")
    return f"{prefix}~{hashlib.blake2b(raw, digest_size=16).hexdigest()}"


def step_text(step: Step) -> str:
    """The text of a step that is embedded and kept as its source's ``plain_text``."""
    return f"{step.observation}\n{step.action}"


def _embeddings(embed: Embed, texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    try:
        vectors = np.asarray(embed(texts), dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"embed() did not return a numeric array ({type(exc).__name__})") from None
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ValidationError(
            f"embed() must return an array of shape ({len(texts)}, dim) for {len(texts)} texts, got {vectors.shape}"
        )
    return vectors


def episodic(embed: Embed, *, procedures: bool = False) -> Callable[[Trajectory], Changeset]:
    """A structure function storing one subgoal, and per step an episodic and a source node
    (and a procedural node with `procedures`).

    `embed` is called once per trajectory, with the goal followed by every
    step's `step_text` (then, with `procedures`, every step's observation); an
    episodic node and its source share the step's vector. The returned function
    validates the trajectory first (raising `IngestionError` like `Repo.ingest`
    would) and raises `ValidationError` when `embed` returns something of the
    wrong shape.
    """

    def structure(trajectory: Trajectory) -> Changeset:
        validate_trajectory(trajectory)
        source_id = trajectory.source_id
        key = node_key(source_id)
        steps: Sequence[Step] = trajectory.steps
        texts = [trajectory.goal, *(step_text(s) for s in steps)]
        if procedures:
            texts += [s.observation for s in steps]
        vectors = _embeddings(embed, texts)
        now = utcnow()

        cs = Changeset()
        goal_id = f"{key}:goal"
        cs.add_node(Subgoal(id=goal_id, description=trajectory.goal, embedding=vectors[0], created_at=now))
        step_ids: list[str] = []
        for i, step in enumerate(steps):
            step_id, origin_id = f"{key}:step:{i}", f"{key}:source:{i}"
            vector = vectors[i + 1]
            cs.add_node(
                Episodic(
                    id=step_id,
                    observation=step.observation,
                    action=step.action,
                    state="",
                    subgoal=trajectory.goal,
                    reward=0.0,
                    trajectory_id=source_id,
                    embedding=vector,
                    created_at=now,
                )
            )
            cs.add_node(
                Source(
                    id=origin_id,
                    episode_id=source_id,
                    step_index=i,
                    plain_text=texts[i + 1],
                    embedding=vector,
                    created_at=now,
                )
            )
            cs.add_link(step_id, goal_id, EdgeType.HIERARCHICAL)
            cs.add_link(step_id, origin_id, EdgeType.PROVENANCE)
            step_ids.append(step_id)
            if procedures:
                procedure_id = f"{key}:procedure:{i}"
                outcome = steps[i + 1].observation if i + 1 < len(steps) else trajectory.goal
                cs.add_node(
                    Procedural(
                        id=procedure_id,
                        instruction=step.action,
                        condition=step.observation,
                        expected_outcome=outcome,
                        embedding=vectors[1 + len(steps) + i],
                        created_at=now,
                    )
                )
                cs.add_link(procedure_id, goal_id, EdgeType.HIERARCHICAL)
                cs.add_link(procedure_id, origin_id, EdgeType.PROVENANCE)
        for a, b in itertools.pairwise(step_ids):
            cs.add_link(a, b, EdgeType.SIBLING)
        for node_id in cs.node_ids:
            cs.put_metadata(node_id, NodeMetadata(created_at=now))
        return cs

    return structure
