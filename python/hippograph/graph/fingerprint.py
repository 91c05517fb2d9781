"""The payload fingerprint of a trajectory (DESIGN §5).

Ingestion is idempotent per source: a resubmitted trajectory whose fingerprint
equals the stored one is a replay, a different one is a ``source_conflict``. The
fingerprint is therefore a pure function of the payload and is byte-compatible
with the Elixir library: version 1 is SHA-256 of Erlang's
``term_to_binary({mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata},
[deterministic, {minor_version, 2}])``, computed in Rust without Erlang. The
``source_id`` is not part of it.

Metadata maps to Erlang terms by exact type (subclasses are refused, because a
``str`` enum or a ``numpy.float64`` is ambiguous across languages; convert them
explicitly first):

========================  =========================================
Python                    Erlang
========================  =========================================
``str``                   binary (UTF-8)
``bytes``                 binary
``bool``                  atom ``true`` / ``false``
``None``                  atom ``nil``
``int``                   integer, any size
``float``                 float (NaN and infinities refused)
:class:`~hippograph.atom.Atom`  atom
``list``                  list (bytes 0..255 become a "string")
``tuple``                 tuple
``dict``                  map, keys in Erlang's deterministic order
========================  =========================================

Anything else, nesting deeper than 512 levels, more than 4 Mi values, an
encoding over 256 MiB, or two keys that become equal once mapped (``"a"`` and
``b"a"``, ``True`` and ``Atom("true")``) raises
``IngestionError(reason="invalid_metadata")``.
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
