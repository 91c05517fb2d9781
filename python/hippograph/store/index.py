"""The store's derived indexes: every entry of a backend held in memory by slot, with its vector in a
matrix (and its half-precision shadow, which exact scans read first: `hippograph._core.shadow_rows`),
its words in a Rust BM25 index (`hippograph._core.LexicalIndex`) and its slot under its scope.

Derived data only (docs/store.md, consistency): rebuilt from a scan of the backend, then caught up
through the backend's change counter before every read, in the snapshot the read uses, so a write
by any process is seen by the next read of every other. Entries of every status are indexed; a read
masks what it must not return (pending, retracted, expired, out of scope, filtered out) before it
ranks, so neither route returns them and a scoped read never ranks the whole store.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..engine.checks import Progress, vector_norm
from ..engine.columns import TypeColumns
from ..engine.locks import HeldLock
from ..engine.query import COSINE, calibrate, scan
from ..engine.routes import SCAN
from ..engine.rows import RowVectors, VectorDtype
from ..engine.vector_index import DEFAULT_ANN, AnnConfig
from ..errors import ConfigError
from .codec import ref_bytes
from .model import Entry, Scope, in_scope
from .protocol import EntryBackend, EntryTxn

__all__ = ["EntryIndex", "Ranked"]

Slots = npt.NDArray[np.uint32]
Ranked = tuple[list[int], list[float]]
"""Slots best first and their route scores."""


_RUN = 32
"""Most slots reserved for a scope at once: a scope's vectors lie in runs of up to this many rows."""
_PROGRESS_STEP = 4096
"""Entries between two progress reports of a rebuild."""


class EntryIndex:
    """One backend's entries as slots: `entries[slot]`, vectors in `matrix`, words in `lexical`; the
    vectors of active entries also in `columns`, whose HNSW index (`hippograph.engine`) answers
    unrestricted vector searches once the store outgrows `AnnConfig.min_nodes`."""

    def __init__(self, ann: AnnConfig | None = DEFAULT_ANN, vector_dtype: VectorDtype = "float32") -> None:
        self.lock = threading.RLock()
        self.ann = ann
        self.columns = TypeColumns(ann, HeldLock(self.lock), vector_dtype=vector_dtype)
        self.expiring = 0
        """Active entries with an expiry: an unrestricted search asks the vector index for as many more."""
        self.seq = -1
        self.entries: list[Entry | None] = []
        self.refs: list[bytes] = []
        """Per slot, the ref as bytes that sort like (scope, key): the tie-break."""
        self.slot_of: dict[tuple[Scope, str], int] = {}
        self.free: list[int] = []
        """Slots no scope holds (their scope emptied): taken before the matrix grows."""
        self._spare: dict[Scope, list[int]] = {}
        """Per scope, slots reserved for its next entries (`_take_slot`)."""
        self.scopes: dict[Scope, set[int]] = {}
        self._arrays: dict[Scope, Slots] = {}
        self._under: dict[Scope, list[Scope]] = {}
        """Per subtree asked for, the scopes in it: kept until a scope is added or emptied."""
        self.dim: int | None = None
        self.vectors = RowVectors(vector_dtype)
        """Per slot, the vector and its norm (`hippograph.engine.rows`): in float32 with the unit
        vector in f16 and its bound beside it, which an exact scan reads first, then only the rows
        near its k-th best in f32; or the f16 unit vectors alone."""
        self.active = np.zeros(0, bool)
        self.expires = np.zeros(0, np.float64)
        self.lexical = _core.LexicalIndex()
        self.hidden = 0
        """Entries reads may not return whatever the scope: not active, or with an expiry."""
        self._unsynced: dict[str, int | None] = {}
        """Row ids of `columns` whose entry changed since the columns last caught up: the slot now
        holding its vector, or None (no active vector: out of the columns). `columns` feeds only the
        vector index of unrestricted searches, so a write leaves it to the next such search
        (`sync_columns`) instead of paying for it."""

    # -- keeping up with the backend ------------------------------------------------------------

    def refresh(self, backend: EntryBackend, progress: Progress | None = None) -> None:
        """Catches up with every write committed so far (by any process); a rebuild from a scan
        reports ``progress("index entries", done, total)``."""
        with self.lock:
            since = self.seq

            def read(t: EntryTxn) -> tuple[int, list[tuple[tuple[Scope, str], Entry | None]] | None, list[Entry]]:
                seq, refs = t.changes(since)
                if seq == since:
                    return seq, [], []
                if refs is None or since < 0:
                    return seq, None, list(t.scan(()))
                return seq, [(ref, t.get(*ref)) for ref in refs], []

            seq, changed, everything = backend.entry_read(read)
            if changed is None:
                self._reset()
                for start in range(0, len(everything), _PROGRESS_STEP):
                    self.set_many(everything[start : start + _PROGRESS_STEP])
                    if progress is not None:
                        progress("index entries", min(start + _PROGRESS_STEP, len(everything)), len(everything))
                self.vectors.settle(len(self.entries))
            else:
                for ref, got in changed:
                    if got is None:
                        self.remove(ref)
                    else:
                        self.set(got)
            self.seq = seq

    def take_own(self, before: int, after: int, written: Iterable[Entry]) -> None:
        """Indexes a write this process just committed, from its own entries, when the index stood
        at the counter that write started from: nothing else changed in between. Otherwise, or while
        a search holds the index (a writer never waits for one), the next read catches up by the log."""
        if after <= before or not self.lock.acquire(blocking=False):
            return
        try:
            if self.seq == before:
                self.set_many(list(written))
                self.seq = after
        finally:
            self.lock.release()

    def _reset(self) -> None:
        self.close()
        self.__init__(self.ann, self.vectors.dtype)  # type: ignore[misc]

    def close(self) -> None:
        for thread in self.columns.close_background_builds():
            thread.join()

    def _grow(self, need: int) -> None:
        cap = len(self.active)
        if need <= cap:
            return
        new = max(need, 2 * cap, 64)
        self.vectors.grow(new)
        self.active = np.concatenate([self.active, np.zeros(new - cap, bool)])
        self.expires = np.concatenate([self.expires, np.zeros(new - cap, np.float64)])

    def _take_slot(self, scope: Scope) -> int:
        """A slot for a new entry of `scope`: one the scope holds in reserve, else one of an emptied
        scope, else a run reserved for it at the end (as long as the scope already is, up to `_RUN`),
        so a scope's vectors lie in a few contiguous runs and a scoped search reads them as such."""
        spare = self._spare.get(scope)
        if spare:
            return spare.pop()
        if self.free:
            return self.free.pop()
        size = min(_RUN, max(1, len(self.scopes.get(scope, ()))))
        start = len(self.entries)
        self.entries.extend([None] * size)
        self.refs.extend([b""] * size)
        self._grow(start + size)
        if size > 1:
            self._spare[scope] = list(range(start + size - 1, start, -1))  # popped lowest first
        return start

    def set(self, e: Entry) -> None:
        """Indexes `e` at its ref, replacing what was there."""
        self.set_many([e])

    def set_many(self, entries: list[Entry]) -> None:
        """`set` of each entry in turn, their vectors written to the matrix in one step (also when an
        entry is refused midway: those before it stand, as after one `set` each)."""
        placed: dict[int, tuple[npt.NDArray[np.float32], float]] = {}  # by slot: the latest vector
        try:
            for e in entries:
                slot, norm = self._placed(e)
                if norm is None or e.embedding is None:
                    placed.pop(slot, None)  # cleared: an earlier vector of the batch is gone too
                else:
                    placed[slot] = (e.embedding, norm)
        finally:
            rows = list(placed)
            got = [placed[r] for r in rows]
            self.vectors.put_rows(rows, [v for v, _ in got], [n for _, n in got], len(self.entries))

    def _placed(self, e: Entry) -> tuple[int, float | None]:
        """Everything of `set` but the vector's row: the slot, and the vector's norm (None: no vector,
        the slot cleared)."""
        slot = self.slot_of.get(e.ref)
        if slot is None:
            slot = self._take_slot(e.scope)
            self.refs[slot] = ref_bytes(e.scope, e.key)
            self._grow(slot + 1)
            self.slot_of[e.ref] = slot
            if e.scope not in self.scopes:
                self.scopes[e.scope] = set()
                self._under.clear()
            self.scopes[e.scope].add(slot)
            self._arrays.pop(e.scope, None)
        else:
            self._forget_counts(self.entries[slot])
        self.entries[slot] = e
        self.hidden += self._hides(e)
        self.expiring += e.status == "active" and e.expires_at is not None
        self.active[slot] = e.status == "active"
        self.expires[slot] = np.inf if e.expires_at is None else e.expires_at.timestamp()
        norm = None
        if e.embedding is None:
            self._clear_vector(slot)
        else:
            if self.dim is None:
                self.dim = len(e.embedding)
                self.vectors.set_dim(self.dim)
            if len(e.embedding) != self.dim:  # the store refuses this before writing; another writer did not
                raise ConfigError(f"entry {e.key!r:.80} has dimension {len(e.embedding)}; the store's is {self.dim}")
            norm = vector_norm(e.embedding)
        self._unsynced[self.refs[slot].decode()] = slot if e.status == "active" and norm else None
        self.lexical.set(slot, e.text)
        return slot, norm

    def _clear_vector(self, slot: int) -> None:
        """Slot `slot` holds no vector: every scan, the shadow's bounds included, scores it 0."""
        self.vectors.clear(slot)

    @staticmethod
    def _hides(e: Entry | None) -> bool:
        return e is not None and (e.status != "active" or e.expires_at is not None)

    def _forget_counts(self, e: Entry | None) -> None:
        self.hidden -= self._hides(e)
        self.expiring -= e is not None and e.status == "active" and e.expires_at is not None

    def remove(self, ref: tuple[Scope, str]) -> None:
        slot = self.slot_of.pop(ref, None)
        if slot is None:
            return
        self._forget_counts(self.entries[slot])
        self._unsynced[self.refs[slot].decode()] = None
        self.entries[slot] = None
        members = self.scopes[ref[0]]
        members.discard(slot)
        self._arrays.pop(ref[0], None)
        self.active[slot] = False
        self._clear_vector(slot)
        self.lexical.remove(slot)
        if members:  # the scope's next entry takes the slot back
            self._spare.setdefault(ref[0], []).append(slot)
        else:
            del self.scopes[ref[0]]
            self._under.clear()
            self.free += [slot, *self._spare.pop(ref[0], ())]

    # -- what a read may see --------------------------------------------------------------------

    def _members(self, scope: Scope) -> Slots:
        """The slots filed exactly under `scope`, sorted, as an array kept until that scope changes."""
        got = self._arrays.get(scope)
        if got is None:
            got = np.fromiter(self.scopes[scope], np.uint32, len(self.scopes[scope]))
            got.sort()
            got.flags.writeable = False  # shared by every search of the scope
            self._arrays[scope] = got
        return got

    def scopes_under(self, scope: Scope) -> list[Scope]:
        """The scopes holding entries at `scope` or below it."""
        got = self._under.get(scope)
        if got is None:
            got = self._under[scope] = [sc for sc in self.scopes if in_scope(sc, scope)]
        return got

    def in_scope(self, scope: Scope) -> Slots:
        """The slots at `scope` or below it, sorted."""
        parts = [self._members(sc) for sc in self.scopes_under(scope)]
        if len(parts) == 1:
            return parts[0]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint32)

    def candidates(
        self, scope: Scope, now: datetime, keep: Callable[[Entry], bool] | None, include_pending: bool = False
    ) -> Slots | None:
        """The slots a read may return, or None for "every live slot" (nothing hidden, no scope, no
        filter), which lets each route skip the mask."""
        if keep is None and self.hidden == 0 and not include_pending and self._everything(scope):
            return None
        slots = self.in_scope(scope)
        if self.hidden:
            if include_pending:
                statuses = np.array([self.entries[s].status != "retracted" for s in slots.tolist()], bool)
                slots = slots[statuses & (self.expires[slots] > now.timestamp())]
            else:
                slots = slots[self.active[slots] & (self.expires[slots] > now.timestamp())]
        if keep is not None:
            entries = self.entries
            slots = np.array([s for s in slots.tolist() if keep(entries[s])], np.uint32)
        return slots  # sorted: a subset of `in_scope`'s, in its order

    # -- the two routes -------------------------------------------------------------------------

    def ranked_text(self, query: str, allowed: Slots | None, k: int) -> Ranked:
        """The best `k` slots by BM25, ties by (scope, key)."""
        if k <= 0 or (allowed is not None and not len(allowed)):
            return [], []
        docs, scores = self.lexical.search(query, k, allowed)
        return self._cut(docs.tolist(), scores.tolist(), k)

    def unrestricted(self, scope: Scope, keep: object, include_pending: bool = False) -> bool:
        """Every active entry may be returned, expired ones aside (the subtree holds every entry)."""
        return keep is None and not include_pending and self.hidden == self.expiring and self._everything(scope)

    def _everything(self, scope: Scope) -> bool:
        """The subtree holds every entry of the store (the root, or one prefix over all the scopes:
        a scope is listed only while it holds an entry)."""
        return not scope or len(self.scopes_under(scope)) == len(self.scopes)

    def ranked_vector(
        self,
        vector: npt.NDArray[np.float32],
        allowed: Slots | None,
        k: int,
        now: datetime | None = None,
        route: list[str] | None = None,
    ) -> Ranked:
        """The best `k` slots by cosine (only those above 0), ties by (scope, key); `route` receives
        the path that ranked them (`hippograph.engine.routes`).

        With `now` (the caller found the search `unrestricted`), it goes through the engine's scan,
        which answers from the calibrated HNSW index when there is one (certified candidates,
        recall stated in `vector_stats`), asking for as many more as there are entries that may
        have expired by `now`, which it then drops.
        """
        if k <= 0 or self.dim is None:
            return [], []
        if now is not None and self.expiring <= 4 * k and self.sync_columns().wants_vector_index():
            got = self._scanned(vector, k + self.expiring, now, route)
            if got is not None:
                return got[0][:k], got[1][:k]
        if allowed is not None and not len(allowed):  # a zero vector needs no test: nothing scores above 0
            return [], []
        query = np.ascontiguousarray(vector[None, :], np.float32)
        if route is not None:
            route.append(SCAN)
        # One Rust call scores the rows (only the allowed ones when restricted; a scope's rows are
        # read where they are) through their shadow, then in f32 only those that may reach the
        # best k, and keeps the best k with their ties: the exact answer, no numpy pass over n.
        n = len(self.entries)
        matrix, shadow = self.vectors.scanned(n)
        norms = self.vectors.norms(n)
        if shadow is None:  # float16: the rows are the unit vectors
            rows, sims = _core.top_relevance(matrix, norms, query, k, allowed)
        else:
            rows, sims = _core.top_relevance_shadowed(matrix, norms, *shadow, query, k, allowed)
        return self._cut(rows.tolist(), sims.tolist(), k)

    def _scanned(
        self, vector: npt.NDArray[np.float32], depth: int, now: datetime, route: list[str] | None = None
    ) -> Ranked | None:
        params = dataclasses.replace(COSINE, top_k=depth)
        found = scan(self.columns, np.ascontiguousarray(vector[None, :], np.float32), params, now.timestamp(),
                     approximate=True, route=route)  # fmt: skip
        at = now.timestamp()
        slots: list[int] = []
        scores: list[float] = []
        for rid, score in found:
            slot = self.slot_of.get(_ref_of(rid))
            if slot is None or self.expires[slot] <= at:
                continue
            slots.append(slot)
            scores.append(min(1.0, float(score)))
        return slots, scores

    def build_vector_index(self, now: datetime) -> bool:
        """Builds and measures the HNSW index of the active entries' vectors now (recall@10, the
        default limit); True when this call built it."""
        built = self.sync_columns().build_vector_index()
        ann = self.columns.ann
        if ann is not None and ann.needs_calibration():
            with self.columns.calibrating:
                calibrate(self.columns, ann, dataclasses.replace(COSINE, top_k=10), now.timestamp())
        return built

    def vector_stats(self) -> dict[str, Any]:
        return self.sync_columns().vector_index_stats()

    def sync_columns(self) -> TypeColumns:
        """`columns` caught up with every entry changed since (the caller holds `lock`)."""
        changed, self._unsynced = self._unsynced, {}
        for rid, slot in changed.items():
            if slot is None:
                self.columns.remove(rid)
            else:
                self.columns.upsert(rid, self.vectors.vectors(len(self.entries), [slot])[0], None)
        return self.columns

    def _cut(self, slots: list[int], scores: list[float], k: int) -> Ranked:
        """The best `k` by score, ties by (scope, key). Only the entries tied with the k-th score
        compete for the last places, so a crowd of equal scores costs one partial selection."""
        if not slots:
            return [], []
        refs = self.refs
        if len(slots) <= 2 * k:  # the usual case: a plain sort of a few
            order = sorted(zip(slots, scores, strict=True), key=lambda p: (-p[1], refs[p[0]]))[:k]
            return [p[0] for p in order], [p[1] for p in order]
        by_score: dict[float, list[int]] = {}
        for s, v in zip(slots, scores, strict=True):
            by_score.setdefault(v, []).append(s)
        out_slots: list[int] = []
        out_scores: list[float] = []
        for v in sorted(by_score, reverse=True):
            room = k - len(out_slots)
            if room <= 0:
                break
            group = by_score[v]
            chosen = (
                sorted(group, key=refs.__getitem__)
                if len(group) <= room
                else heapq.nsmallest(room, group, key=refs.__getitem__)
            )
            out_slots += chosen
            out_scores += [v] * len(chosen)
        return out_slots, out_scores

    def stats(self) -> dict[str, Any]:
        live = len(self.slot_of)
        return {
            "entries": live,
            "scopes": len(self.scopes),
            "dim": self.dim,
            "embedded": int((self.vectors.norms(len(self.entries)) > 0).sum()),
            "indexed_words_avg": round(self.lexical.average_length(), 2),
            "change_counter": self.seq,
        }


def _ref_of(rid: str) -> tuple[Scope, str]:
    """The (scope, key) a row id of `columns` stands for (`codec.ref_bytes`, decoded)."""
    head, _, key = rid.partition("\0\0") if not rid.startswith("\0") else ("", "", rid[1:])
    return (tuple(head.split("\0")) if head else ()), key
