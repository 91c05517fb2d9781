"""The payload fingerprint of a trajectory (docs/architecture.md, fingerprint).

Ingestion is idempotent per source: a resubmitted trajectory whose fingerprint
equals the stored one is a replay, a different one is a ``source_conflict``.
Version 1 is byte-compatible with the Elixir library: SHA-256 of Erlang's
``term_to_binary({mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata},
[deterministic, {minor_version, 2}])``, computed in Rust without Erlang; the
``source_id`` is not part of it. docs/graph-memory.md lists how metadata maps
to Erlang terms and what is refused (``IngestionError(reason="invalid_metadata")``).
"""

from __future__ import annotations

from typing import Final

from .. import _core
from ..errors import IngestionError
from .trajectory import Trajectory, _message_of, validate_trajectory

__all__ = ["FINGERPRINT_VERSION", "etf_encode", "fingerprint"]

FINGERPRINT_VERSION: Final = 1
"""Version of the digest :func:`fingerprint` computes; stored with ingestion records."""


def fingerprint(trajectory: Trajectory) -> bytes:
    """Validate ``trajectory`` and return its 32-byte version-1 fingerprint."""
    validate_trajectory(trajectory)
    steps = [(step.observation, step.action) for step in trajectory.steps]
    try:
        return _core.fingerprint_v1(trajectory.goal, steps, trajectory.metadata)
    except IngestionError as err:
        if err.source_id is not None:
            raise
        raise IngestionError(err.reason, _message_of(err), source_id=trajectory.source_id) from err


def etf_encode(term: object) -> bytes:
    """Erlang external term format of ``term`` under the mapping above (deterministic)."""
    return _core.etf_encode(term)
