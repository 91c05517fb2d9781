"""`_Cache`: this process's scoring columns for one repo, caught up from the shared change log.

Log seqs commit out of order, so the cache remembers the highest seq it applied plus the gaps below
it (seqs not visible yet) until they show up or time out; a cache that fell behind the trimmed log
or whose repo was dropped rebuilds from the snapshot instead. ``docs/postgres.md`` (Design: The
derived cache, Out-of-order sequences, Trimming the log) tells why each rule is safe.
"""

from __future__ import annotations

import time

from ...engine.checks import Embedding
from ...engine.columns import Usage
from ...engine.derived import DerivedColumns
from ...engine.rows import VectorDtype
from ...engine.vector_index import AnnConfig
from ...graph import codec
from ...graph.model import NodeType
from .._base import RWLock
from .tx import Row, _id, _Tx

_REBUILD_WINDOW = 10_000
"""A rebuilt cache treats missing seqs among the newest this many as gaps."""
_MAX_GAPS = 10_000


class _Cache(DerivedColumns[NodeType]):
    """This process's derived scoring state for one repo, and how far into the change log it is.

    ``high`` is the highest log seq applied; ``gaps`` maps each seq below it
    that was not visible yet to the monotonic time it was first noticed (see
    ``docs/postgres.md`` for why both are needed). Both advance only after the
    rows they stand for were read and applied, so a refresh that fails half-way
    (a lost connection, say) is simply redone by the next one.
    """

    def __init__(
        self, ann: AnnConfig | None, gap_timeout: float, lock: RWLock, vector_dtype: VectorDtype = "float32"
    ) -> None:
        super().__init__(NodeType, ann, lock, vector_dtype=vector_dtype)
        self.gap_timeout = gap_timeout
        self.ready = False
        self.incarnation: object = None
        self.high = 0
        self.gaps: dict[int, float] = {}
        self.rebuilds = 0

    def refresh(self, tx: _Tx, floor: int, incarnation: object) -> None:
        if (
            not self.ready
            or incarnation != self.incarnation
            or self.high < floor
            or (self.gaps and min(self.gaps) <= floor)
        ):
            self._rebuild(tx, floor, incarnation)
            return
        if self.gaps:
            rows = tx.all("log_new_and_gaps", (tx.repo, self.high, sorted(self.gaps)))
        else:
            rows = tx.all("log_new", (tx.repo, self.high))
        now = time.monotonic()
        high, gaps = self.high, dict(self.gaps)
        changed: set[bytes] = set()
        for seq, ids in rows:
            if seq > high:
                _open_gaps(gaps, high, seq, now)
                high = seq
            else:
                gaps.pop(seq, None)
            if ids:
                changed.update(bytes(k) for k in ids)
        if changed:
            keys = sorted(changed)
            loaded = _scoring_rows(tx.all("scoring_rows", (tx.repo, keys)))
            for node_id, (node_type, embedding, usage) in loaded.items():
                self.put(node_id, node_type, embedding, usage)
            for key in keys:
                node_id = _id(key)
                if node_id not in loaded:
                    self.drop(node_id)
        self.high = high
        self.gaps = {s: t for s, t in gaps.items() if now - t < self.gap_timeout}

    def _rebuild(self, tx: _Tx, floor: int, incarnation: object) -> None:
        """Everything from the snapshot; gaps among the newest log seqs are noticed now."""
        row = tx.one("log_top")
        top = 0 if row is None or row[0] is None else int(row[0])
        low = max(floor, top - _REBUILD_WINDOW)
        visible = {int(r[0]) for r in tx.all("log_seqs_above", (low,))}
        types = {bytes(k): NodeType(t) for k, t in tx.all("repo_types", (tx.repo,))}
        vecs = {bytes(k): bytes(v) for k, v in tx.all("repo_embeddings", (tx.repo,))}
        metas = {bytes(k): bytes(v) for k, v in tx.all("repo_metadata", (tx.repo,))}
        loaded = _scoring_rows([(k, t.value, vecs.get(k), metas.get(k)) for k, t in types.items()])
        self.replace((node_id, nt, embedding, usage) for node_id, (nt, embedding, usage) in loaded.items())
        now = time.monotonic()
        self.high = max(top, floor)
        self.gaps = {s: now for s in range(max(low + 1, top - _MAX_GAPS), top) if s not in visible}
        self.incarnation = incarnation
        self.ready = True
        self.rebuilds += 1


def _open_gaps(gaps: dict[int, float], high: int, seq: int, now: float) -> None:
    """Records the seqs strictly between `high` and `seq` as gaps noticed `now` (at most _MAX_GAPS in all)."""
    for missing in range(max(high + 1, seq - _MAX_GAPS), seq):
        gaps[missing] = now
    if len(gaps) > _MAX_GAPS:
        for old in sorted(gaps)[: len(gaps) - _MAX_GAPS]:
            del gaps[old]


def _scoring_rows(rows: list[Row]) -> dict[str, tuple[NodeType, Embedding | None, Usage | None]]:
    """(id, type, vec, metadata record) rows decoded, before anything in the cache changes."""
    return {
        _id(key): (
            NodeType(node_type),
            None if vec is None else codec.decode_embedding(bytes(vec)),
            None if meta is None else codec.usage_of_meta(bytes(meta)),
        )
        for key, node_type, vec, meta in rows
    }
