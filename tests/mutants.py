"""Deliberately broken variants of the reference `InMemory` backend.

Each class overrides one method to break one promise of the `GraphBackend`
contract, the way a hand-written backend plausibly gets it wrong. The
conformance suite must reject every one of them (tests/test_mutations.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from hippograph.backends import InMemory
from hippograph.backends._base import check_ids, check_record
from hippograph.engine.query import prepare_queries
from hippograph.graph.changeset import Changeset
from hippograph.graph.model import (
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
)
from hippograph.graph.value import ValueFunctionConfig, resolve_config

Hits = list[tuple[Node, float]]
Config = ValueFunctionConfig | Mapping[str, Any] | None


class ReturnsCallersReceipt(InMemory):
    """On EXISTING, answers with the receipt the caller brought instead of the stored one."""

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        outcome, _ = super().commit_ingestion(record, cs)
        return outcome, record.receipt


class AppliesChangesetOnExisting(InMemory):
    """On EXISTING, writes the duplicate changeset anyway."""

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        outcome, receipt = super().commit_ingestion(record, cs)
        if outcome is Outcome.EXISTING:
            self.apply_changeset(cs)
        return outcome, receipt


class ComparesDigestOnly(InMemory):
    """Treats a stored record as equal when the digests match, whatever the fingerprint version."""

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        with self._lock.write():
            check_record(record, cs, self._dim)
            stored = self._records.get(record.source_id)
            if stored is not None and stored.payload_digest == record.payload_digest:
                return Outcome.EXISTING, stored.receipt
        return super().commit_ingestion(record, cs)


class ChecksThenCommits(InMemory):
    """Compare-and-set done as read-then-write: the check and the insert are separate steps."""

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        check_record(record, cs, None)
        if self.get_ingestion(record.source_id) is None:
            time.sleep(0.05)  # another writer commits the same source in here
            with self._lock.write():
                self._apply(cs, check_record(record, cs, self._dim))
                self._records[record.source_id] = record
            return Outcome.INSERTED, record.receipt
        return super().commit_ingestion(record, cs)


class DeletesIngestionRecords(InMemory):
    """delete_nodes also drops the ingestion records whose receipts name a deleted node."""

    def delete_nodes(self, ids: Iterable[str]) -> None:
        wanted = set(check_ids(ids))
        super().delete_nodes(wanted)
        with self._lock.write():
            for source_id, record in list(self._records.items()):
                if wanted & set(record.receipt.node_ids):
                    del self._records[source_id]


class KeepsProvenanceLinksOnDelete(InMemory):
    """delete_nodes cleans the survivors' links of every edge type but provenance."""

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self._check_open("delete_nodes")
        wanted = check_ids(ids)
        with self._lock.write():
            for node_id in wanted:
                node = self._nodes.pop(node_id, None)
                if node is None:
                    continue
                for edge, others in self._links.pop(node_id, {}).items():
                    if edge is EdgeType.PROVENANCE:
                        continue
                    for other in others:
                        self._links.get(other, {}).get(edge, set()).discard(node_id)
                self._derived.drop(node_id)


class AppliesAdditionsBeforeValidating(InMemory):
    """apply_changeset writes the additions one by one before the whole changeset is checked."""

    def apply_changeset(self, cs: Changeset) -> None:
        for node in getattr(cs, "additions", []):
            if isinstance(node, Node):
                super().apply_changeset(Changeset(additions=[node]))
        super().apply_changeset(cs)


class IgnoresTagVectors(InMemory):
    """find_candidates validates the tag vectors, then ranks by the query alone."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Config,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> Hits:
        prepare_queries(query, tags, self._dim)
        return super().find_candidates(types, query, [], value_function, now=now, exact=exact)


class ExclusiveThreshold(InMemory):
    """find_candidates drops a node whose score equals the threshold (score > threshold) in score-gated types."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Config,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> Hits:
        hits = super().find_candidates(types, query, tags, value_function, now=now, exact=exact)
        params = resolve_config(value_function).params
        return [(n, s) for n, s in hits if params[n.node_type].gate != "score" or s > params[n.node_type].threshold]


class TiesByIdDescending(InMemory):
    """find_candidates orders equal scores by id descending."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Config,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> Hits:
        hits = super().find_candidates(types, query, tags, value_function, now=now, exact=exact)
        out: Hits = []
        for _, block in itertools.groupby(hits, key=lambda hit: hit[0].node_type):
            by_id_descending = sorted(block, key=lambda hit: hit[0].id, reverse=True)
            out += sorted(by_id_descending, key=lambda hit: -hit[1])
        return out


class RepeatsNodesAcrossTypes(InMemory):
    """find_candidates queries type by type and concatenates without dropping repeats."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Config,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> Hits:
        tags = list(tags)
        out: Hits = []
        for node_type in types:
            out += super().find_candidates([node_type], query, tags, value_function, now=now, exact=exact)
        return out


class LinkedNodesUnordered(InMemory):
    """get_linked_nodes returns the neighbours in descending id order."""

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        return super().get_linked_nodes(ids, edge_type)[::-1]


class MergesMetadataUpdates(InMemory):
    """update_metadata merges the custom dict into the stored record instead of replacing it."""

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        stored = self.get_metadata(list(updates)) if isinstance(updates, Mapping) else {}
        merged = {
            node_id: dataclasses.replace(meta, custom={**stored[node_id].custom, **meta.custom})
            if node_id in stored and isinstance(meta, NodeMetadata)
            else meta
            for node_id, meta in updates.items()
        }
        super().update_metadata(merged)


class ReadsAfterClose(InMemory):
    """find_candidates keeps answering after close()."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: Config,
        *,
        now: datetime | None = None,
        exact: bool = False,
    ) -> Hits:
        closed, self._closed = self._closed, False
        try:
            return super().find_candidates(types, query, tags, value_function, now=now, exact=exact)
        finally:
            self._closed = closed


class CommitsBatchItemByItem(InMemory):
    """`commit_ingestions` as a loop of single commits: a conflict late in the batch leaves the
    earlier items stored."""

    def commit_ingestions(
        self, items: Sequence[tuple[IngestionRecord, Changeset]]
    ) -> list[tuple[Outcome, IngestionReceipt]]:
        return [self.commit_ingestion(record, cs) for record, cs in items]


class AnswersRepeatsWithTheirOwnReceipt(InMemory):
    """`commit_ingestions` answers a source listed again with the receipt that item brought."""

    def commit_ingestions(
        self, items: Sequence[tuple[IngestionRecord, Changeset]]
    ) -> list[tuple[Outcome, IngestionReceipt]]:
        got = super().commit_ingestions(items)
        return [(outcome, record.receipt) for (outcome, _), (record, _) in zip(got, items, strict=True)]


MUTANTS: dict[str, type[InMemory]] = {
    cls.__name__: cls
    for cls in (
        ReturnsCallersReceipt,
        AppliesChangesetOnExisting,
        ComparesDigestOnly,
        ChecksThenCommits,
        DeletesIngestionRecords,
        KeepsProvenanceLinksOnDelete,
        AppliesAdditionsBeforeValidating,
        IgnoresTagVectors,
        ExclusiveThreshold,
        TiesByIdDescending,
        RepeatsNodesAcrossTypes,
        LinkedNodesUnordered,
        MergesMetadataUpdates,
        ReadsAfterClose,
        CommitsBatchItemByItem,
        AnswersRepeatsWithTheirOwnReceipt,
    )
}
