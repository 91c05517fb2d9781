"""`Repo`: exactly-once ingestion, recall bookkeeping, reward, forget, stats, open_repo.

Every test runs against the reference backend and LMDB.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.embedding import HashingEmbedder
from hippograph.graph.structuring import episodic
from hippograph.testing.graphs import make_node, snapshot

DIM = 16
NOW = datetime(2031, 5, 4, 12, 30, tzinfo=UTC)
embed = HashingEmbedder(DIM)
SUBGOALS_ONLY: dict[str, Any] = {"params": {"subgoal": {"threshold": 0.0}}}


def trajectory(source_id: str = "run-1", goal: str = "fix the failing build", steps: int = 2) -> hg.Trajectory:
    return hg.Trajectory(
        source_id=source_id,
        goal=goal,
        steps=[hg.Step(f"{goal}: observation {i}", f"action {i}") for i in range(steps)],
        metadata={"agent": "tester"},
    )


class Structure:
    """A structure function that counts its calls and can run a hook first."""

    def __init__(self, hook: Callable[[], None] | None = None) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        self._hook = hook
        self._inner = episodic(embed)

    def __call__(self, t: hg.Trajectory) -> hg.Changeset:
        with self._lock:
            self.calls += 1
        if self._hook is not None:
            self._hook()
        return self._inner(t)


def vector(text: str) -> npt.NDArray[np.float32]:
    return embed.embed_one(text)


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[hg.GraphBackend]:
    store: hg.GraphBackend = InMemory() if request.param == "memory" else LMDB(tmp_path / "store", durability="fast")
    yield store
    store.close()


@pytest.fixture
def repo(backend: hg.GraphBackend) -> Iterator[hg.Repo]:
    r = hg.Repo(backend, flush_interval=0)
    yield r
    r.close()


def state(repo: hg.Repo, *sources: str) -> object:
    return snapshot(repo.backend, sources=sources)


# -- ingestion ---------------------------------------------------------------


def test_ingest_returns_a_receipt_listing_the_additions_in_order(repo: hg.Repo) -> None:
    t = trajectory()
    receipt = repo.ingest(t, Structure())
    assert receipt.source_id == "run-1"
    assert receipt.node_ids == episodic(embed)(t).node_ids
    assert all(repo.backend.get_node(i) is not None for i in receipt.node_ids)


def test_reingest_returns_the_identical_receipt_without_structuring(repo: hg.Repo) -> None:
    structure = Structure()
    first = repo.ingest(trajectory(), structure)
    again = repo.ingest(trajectory(), structure)
    assert again == first
    assert structure.calls == 1


def test_conflicting_payload_raises_source_conflict(repo: hg.Repo) -> None:
    repo.ingest(trajectory(goal="first goal"), Structure())
    with pytest.raises(hg.IngestionError) as err:
        repo.ingest(trajectory(goal="another goal"), Structure())
    assert err.value.reason == "source_conflict"
    assert err.value.source_id == "run-1"


def test_conflicting_payload_leaves_the_store_untouched(repo: hg.Repo) -> None:
    repo.ingest(trajectory(goal="first goal"), Structure())
    before = state(repo, "run-1")
    structure = Structure()
    with pytest.raises(hg.IngestionError):
        repo.ingest(trajectory(goal="another goal"), structure)
    assert state(repo, "run-1") == before
    assert structure.calls == 0


def test_ingest_many_answers_in_input_order_and_structures_each_new_source_once(repo: hg.Repo) -> None:
    stored = repo.ingest(trajectory("run-0"), Structure())
    structure = Structure()
    batch = [trajectory("run-1"), trajectory("run-0"), trajectory("run-2", goal="tidy the docs"), trajectory("run-1")]
    receipts = repo.ingest_many(batch, structure)
    assert [r.source_id for r in receipts] == ["run-1", "run-0", "run-2", "run-1"]
    assert receipts[1] == stored
    assert receipts[3] == receipts[0]
    assert structure.calls == 2
    for t, r in zip(batch, receipts, strict=True):
        assert r.node_ids == episodic(embed)(t).node_ids
        assert all(repo.backend.get_node(i) is not None for i in r.node_ids)
    assert repo.ingest_many(batch, structure) == receipts  # again: the stored receipts, nothing structured
    assert structure.calls == 2
    assert repo.ingest(trajectory("run-2", goal="tidy the docs"), structure) == receipts[2]


@pytest.mark.parametrize("where", ["stored", "in_batch"])
def test_ingest_many_with_a_conflict_stores_none_of_the_batch(repo: hg.Repo, where: str) -> None:
    repo.ingest(trajectory("run-0"), Structure())
    before = state(repo, "run-0", "run-1", "run-2")
    clash = trajectory("run-0", goal="another goal") if where == "stored" else trajectory("run-1", goal="other")
    with pytest.raises(hg.IngestionError) as err:
        repo.ingest_many([trajectory("run-1"), trajectory("run-2"), clash], Structure())
    assert (err.value.reason, err.value.source_id) == ("source_conflict", clash.source_id)
    assert state(repo, "run-0", "run-1", "run-2") == before


def test_ingest_many_stores_nothing_when_a_structure_call_fails(repo: hg.Repo) -> None:
    calls: list[str] = []

    def structure(t: hg.Trajectory) -> hg.Changeset:
        calls.append(t.source_id)
        if t.source_id == "run-2":
            raise RuntimeError("the structuring model is down")
        return episodic(embed)(t)

    with pytest.raises(RuntimeError, match="model is down"):
        repo.ingest_many([trajectory("run-1"), trajectory("run-2")], structure)
    assert calls == ["run-1", "run-2"]
    assert repo.backend.get_ingestion("run-1") is None
    assert repo.backend.get_nodes_by_type(list(hg.NodeType)) == []


@pytest.mark.parametrize(
    "bad",
    [lambda: "run-1", lambda: trajectory(), lambda: [trajectory(), "run-2"], lambda: 7],
    ids=["str", "one_trajectory", "not_a_trajectory", "not_iterable"],
)
def test_ingest_many_refuses_bad_input_and_stores_nothing(repo: hg.Repo, bad: Callable[[], Any]) -> None:
    with pytest.raises(hg.ValidationError):
        repo.ingest_many(bad(), Structure())
    assert repo.backend.get_ingestion("run-1") is None
    assert repo.backend.get_nodes_by_type(list(hg.NodeType)) == []


def test_reingest_after_nodes_were_deleted_returns_the_original_receipt(repo: hg.Repo) -> None:
    first = repo.ingest(trajectory(), Structure())
    repo.backend.delete_nodes(first.node_ids)
    structure = Structure()
    assert repo.ingest(trajectory(), structure) == first
    assert structure.calls == 0


def test_reingest_after_nodes_were_deleted_recreates_nothing(repo: hg.Repo) -> None:
    first = repo.ingest(trajectory(), Structure())
    repo.backend.delete_nodes(first.node_ids)
    repo.ingest(trajectory(), Structure())
    assert all(repo.backend.get_node(i) is None for i in first.node_ids)


def test_concurrent_ingests_of_one_source_structure_once_and_share_the_receipt(repo: hg.Repo) -> None:
    threads = 16
    start = threading.Barrier(threads)
    structure = Structure(hook=lambda: time.sleep(0.2))  # keep the first call in flight while others arrive
    receipts: list[hg.IngestionReceipt] = []
    errors: list[BaseException] = []

    def worker() -> None:
        start.wait()
        try:
            receipts.append(repo.ingest(trajectory(), structure))
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert errors == []
    assert structure.calls == 1
    assert len(receipts) == threads
    assert len(set(receipts)) == 1


def test_a_different_payload_for_an_in_flight_source_fails_at_once(repo: hg.Repo) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(timeout=30)

    result: list[hg.IngestionReceipt] = []
    first = threading.Thread(target=lambda: result.append(repo.ingest(trajectory(goal="one"), Structure(hold))))
    first.start()
    try:
        assert entered.wait(timeout=30)
        with pytest.raises(hg.IngestionError) as err:
            repo.ingest(trajectory(goal="two"), Structure())
        assert err.value.reason == "source_conflict"
        assert not release.is_set()  # refused while the first ingestion was still running
    finally:
        release.set()
        first.join()
    assert result[0].source_id == "run-1"


@pytest.mark.parametrize(
    ("reason", "bad"),
    [
        ("invalid_source_id", hg.Trajectory("   ", "goal", [hg.Step("o", "a")])),
        ("invalid_goal", hg.Trajectory("bad-1", " ", [hg.Step("o", "a")])),
        ("invalid_metadata", hg.Trajectory("bad-1", "goal", [hg.Step("o", "a")], {"when": object()})),
        ("invalid_steps", hg.Trajectory("bad-1", "goal", [])),
        ("invalid_step", hg.Trajectory("bad-1", "goal", [hg.Step(1, "a")])),  # type: ignore[arg-type]
    ],
)
def test_a_rejected_trajectory_writes_nothing(repo: hg.Repo, reason: str, bad: hg.Trajectory) -> None:
    repo.ingest(trajectory(), Structure())
    before = state(repo, "run-1", "bad-1", "   ")
    structure = Structure()
    with pytest.raises(hg.IngestionError) as err:
        repo.ingest(bad, structure)
    assert err.value.reason == reason
    assert structure.calls == 0
    assert state(repo, "run-1", "bad-1", "   ") == before


def test_structure_returning_a_non_changeset_is_a_validation_error(repo: hg.Repo) -> None:
    def broken(t: hg.Trajectory) -> hg.Changeset:
        return [hg.Tag(id="t", label="x")]  # type: ignore[return-value]

    before = state(repo, "run-1")
    with pytest.raises(hg.ValidationError, match="Changeset"):
        repo.ingest(trajectory(), broken)
    assert state(repo, "run-1") == before


def test_ingest_works_after_structure_returned_a_non_changeset(repo: hg.Repo) -> None:
    with pytest.raises(hg.ValidationError):
        repo.ingest(trajectory(), lambda t: None)  # type: ignore[arg-type, return-value]
    structure = Structure()
    receipt = repo.ingest(trajectory(), structure)
    assert structure.calls == 1
    assert repo.backend.get_ingestion("run-1") is not None
    assert receipt.source_id == "run-1"


def test_an_exception_from_structure_propagates_and_writes_nothing(repo: hg.Repo) -> None:
    class Boom(Exception):
        pass

    def failing(t: hg.Trajectory) -> hg.Changeset:
        raise Boom("model unavailable")

    before = state(repo, "run-1")
    with pytest.raises(Boom):
        repo.ingest(trajectory(), failing)
    assert state(repo, "run-1") == before


def test_ingest_works_after_structure_raised(repo: hg.Repo) -> None:
    def failing(t: hg.Trajectory) -> hg.Changeset:
        raise RuntimeError("model unavailable")

    with pytest.raises(RuntimeError):
        repo.ingest(trajectory(), failing)
    structure = Structure()
    repo.ingest(trajectory(), structure)
    assert structure.calls == 1
    assert repo.backend.get_ingestion("run-1") is not None


# -- forget ------------------------------------------------------------------


@pytest.fixture
def tagged(repo: hg.Repo) -> tuple[hg.IngestionReceipt, hg.IngestionReceipt]:
    """Two ingestions; 'tag:private' is linked only to run-1, 'tag:shared' to both."""
    repo.backend.apply_changeset(
        hg.Changeset()
        .add_node(hg.Tag(id="tag:private", label="private"))
        .add_node(hg.Tag(id="tag:shared", label="shared"))
        .put_metadata("tag:private", hg.NodeMetadata())
        .put_metadata("tag:shared", hg.NodeMetadata())
    )

    def with_tags(*tags: str) -> Callable[[hg.Trajectory], hg.Changeset]:
        def structure(t: hg.Trajectory) -> hg.Changeset:
            cs = episodic(embed)(t)
            for tag in tags:
                cs.add_link(f"{t.source_id}:step:0", tag, hg.EdgeType.MEMBERSHIP)
            return cs

        return structure

    one = repo.ingest(trajectory("run-1"), with_tags("tag:private", "tag:shared"))
    two = repo.ingest(trajectory("run-2", goal="clean the csv"), with_tags("tag:shared"))
    return one, two


def test_forget_removes_exactly_the_ingestions_nodes(
    repo: hg.Repo, tagged: tuple[hg.IngestionReceipt, hg.IngestionReceipt]
) -> None:
    one, two = tagged
    summary = repo.forget("run-1")
    assert summary.deleted_ids == one.node_ids
    assert all(repo.backend.get_node(i) is None for i in one.node_ids)
    assert all(repo.backend.get_node(i) is not None for i in two.node_ids)


def test_forget_removes_the_metadata_of_the_ingestions_nodes(
    repo: hg.Repo, tagged: tuple[hg.IngestionReceipt, hg.IngestionReceipt]
) -> None:
    one, two = tagged
    repo.forget("run-1")
    assert repo.backend.get_metadata(one.node_ids) == {}
    assert set(repo.backend.get_metadata(two.node_ids)) == set(two.node_ids)


def test_forget_removes_orphaned_tags_and_keeps_shared_ones(
    repo: hg.Repo, tagged: tuple[hg.IngestionReceipt, hg.IngestionReceipt]
) -> None:
    summary = repo.forget("run-1")
    assert summary.orphan_ids == ("tag:private",)
    assert repo.backend.get_node("tag:private") is None
    assert repo.backend.get_metadata(["tag:private"]) == {}
    shared = repo.backend.get_node("tag:shared")
    assert shared is not None
    assert shared.linked_ids() == {"run-2:step:0"}


def test_forget_removes_the_ingestion_record(
    repo: hg.Repo, tagged: tuple[hg.IngestionReceipt, hg.IngestionReceipt]
) -> None:
    repo.forget("run-1")
    assert repo.backend.get_ingestion("run-1") is None
    assert repo.backend.get_ingestion("run-2") is not None


def test_ingest_after_forget_inserts_again(repo: hg.Repo) -> None:
    first = repo.ingest(trajectory(), Structure())
    repo.forget("run-1")
    structure = Structure()
    again = repo.ingest(trajectory(), structure)
    assert structure.calls == 1
    assert again.node_ids == first.node_ids
    assert all(repo.backend.get_node(i) is not None for i in again.node_ids)


def test_forget_of_an_unknown_source_raises_not_found(repo: hg.Repo) -> None:
    with pytest.raises(hg.NotFoundError) as err:
        repo.forget("never-ingested")
    assert (err.value.resource, err.value.id) == ("ingestion", "never-ingested")


# -- recall bookkeeping, reward ----------------------------------------------


def test_recall_finds_fresh_procedures_subgoals_tags_and_intents_with_the_default_config(repo: hg.Repo) -> None:
    """Relevance-gated types are recalled on first use, so they can ever gain the accesses that rank them."""
    gated = [hg.NodeType.PROCEDURAL, hg.NodeType.SUBGOAL, hg.NodeType.TAG, hg.NodeType.INTENT]
    cs = hg.Changeset()
    for node_type in gated:
        node = make_node(node_type, f"{node_type.value}-1", [1.0, 0.2, 0.0, 0.0])
        cs.add_node(node).put_metadata(node.id, hg.NodeMetadata(created_at=NOW))
    repo.backend.apply_changeset(cs)
    hits = repo.recall([1.0, 0.0, 0.0, 0.0], types=gated, now=NOW)
    assert [h.node.id for h in hits] == [f"{t.value}-1" for t in gated]
    repo.flush()
    assert all(m.access_count == 1 for m in repo.backend.get_metadata([h.node.id for h in hits]).values())
    score_gated = {"params": {t: {"gate": "score"} for t in gated}}
    assert repo.recall([1.0, 0.0, 0.0, 0.0], types=gated, value_function=score_gated, now=NOW) == []


def test_recall_records_an_access_on_the_returned_nodes(repo: hg.Repo) -> None:
    t = trajectory()
    repo.ingest(t, Structure())
    hits = repo.recall(vector(t.goal), types=[hg.NodeType.SUBGOAL], value_function=SUBGOALS_ONLY, now=NOW)
    repo.flush()
    assert [h.node.id for h in hits] == ["run-1:goal"]
    meta = repo.backend.get_metadata(["run-1:goal"])["run-1:goal"]
    assert (meta.access_count, meta.last_accessed_at) == (1, NOW)


def test_recall_leaves_nodes_it_did_not_return_alone(repo: hg.Repo) -> None:
    t = trajectory()
    receipt = repo.ingest(t, Structure())
    others = [i for i in receipt.node_ids if i != "run-1:goal"]
    before = repo.backend.get_metadata(others)
    repo.recall(vector(t.goal), types=[hg.NodeType.SUBGOAL], value_function=SUBGOALS_ONLY, now=NOW)
    repo.flush()
    assert repo.backend.get_metadata(others) == before


def test_repeated_recalls_accumulate_accesses(repo: hg.Repo) -> None:
    t = trajectory()
    repo.ingest(t, Structure())
    later = NOW.replace(hour=18)
    for when in (NOW, NOW, later):
        repo.recall(vector(t.goal), types=[hg.NodeType.SUBGOAL], value_function=SUBGOALS_ONLY, now=when)
    repo.flush()
    meta = repo.backend.get_metadata(["run-1:goal"])["run-1:goal"]
    assert (meta.access_count, meta.last_accessed_at) == (3, later)


def test_accesses_flushed_separately_add_up(repo: hg.Repo) -> None:
    t = trajectory()
    repo.ingest(t, Structure())
    for _ in range(2):
        repo.recall(vector(t.goal), types=[hg.NodeType.SUBGOAL], value_function=SUBGOALS_ONLY, now=NOW)
        repo.flush()
    assert repo.backend.get_metadata(["run-1:goal"])["run-1:goal"].access_count == 2


def test_pending_accesses_are_written_on_close(tmp_path: Path) -> None:
    t = trajectory()
    with hg.Repo(LMDB(tmp_path / "store"), flush_interval=0) as repo:
        repo.ingest(t, Structure())
        repo.recall(vector(t.goal), types=[hg.NodeType.SUBGOAL], value_function=SUBGOALS_ONLY, now=NOW)
    with LMDB(tmp_path / "store") as reopened:
        meta = reopened.get_metadata(["run-1:goal"])["run-1:goal"]
    assert (meta.access_count, meta.last_accessed_at) == (1, NOW)


def test_reward_updates_the_running_reward(repo: hg.Repo) -> None:
    receipt = repo.ingest(trajectory(), Structure())
    step = receipt.node_ids[1]
    repo.reward([step], 1.0)
    repo.reward(step, -0.5)
    meta = repo.backend.get_metadata([step])[step]
    assert (meta.cumulative_reward, meta.reward_count, meta.avg_reward) == (0.5, 2, 0.25)


def test_reward_leaves_other_nodes_alone(repo: hg.Repo) -> None:
    receipt = repo.ingest(trajectory(), Structure())
    repo.reward([receipt.node_ids[1]], 1.0)
    others = repo.backend.get_metadata(receipt.node_ids[2:])
    assert all(m.reward_count == 0 for m in others.values())


def test_a_non_finite_reward_is_refused(repo: hg.Repo) -> None:
    receipt = repo.ingest(trajectory(), Structure())
    with pytest.raises(hg.ValidationError):
        repo.reward([receipt.node_ids[1]], float("nan"))


# -- stats -------------------------------------------------------------------


def test_stats_count_nodes_links_records_and_metadata(repo: hg.Repo) -> None:
    repo.ingest(trajectory(steps=2), Structure())
    s = repo.stats()
    assert s.nodes["subgoal"] == 1
    assert s.nodes["episodic"] == 2
    assert s.nodes["source"] == 2
    assert s.total_nodes == 5
    assert s.links == 2 + 2 + 1
    assert s.ingestion_records == 1
    assert s.metadata == 5
    assert s.dimension == DIM


def test_stats_of_an_empty_repo_are_zero(repo: hg.Repo) -> None:
    s = repo.stats()
    assert (s.total_nodes, s.links, s.ingestion_records, s.dimension) == (0, 0, 0, None)


# -- open_repo ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "   ", "a/b", "..", ".", ".hidden", "a\\b"])
def test_open_repo_refuses_names_that_are_not_plain_directory_names(name: str, tmp_path: Path) -> None:
    with pytest.raises(hg.ValidationError):
        hg.open_repo(name, path=tmp_path / "store")


def test_open_repo_defaults_to_dot_hippograph_slash_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with hg.open_repo("agent-7", flush_interval=0) as repo:
        repo.ingest(trajectory(), Structure())
    assert (tmp_path / ".hippograph" / "agent-7" / "data.mdb").is_file()


def test_a_default_store_symlinked_out_of_the_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".hippograph").mkdir()
    (tmp_path / ".hippograph" / "agent").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(hg.ValidationError, match="symlink"):
        hg.open_repo("agent", flush_interval=0)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_default_store_symlinked_inside_the_root_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".hippograph" / "real").mkdir(parents=True)
    (tmp_path / ".hippograph" / "alias").symlink_to(tmp_path / ".hippograph" / "real")
    with hg.open_repo("alias", flush_interval=0) as repo:
        repo.ingest(trajectory(), Structure())
    assert (tmp_path / ".hippograph" / "real" / "data.mdb").is_file()


def test_a_receipt_survives_reopening_the_repo(tmp_path: Path) -> None:
    with hg.open_repo("agent", path=tmp_path / "store", flush_interval=0) as repo:
        first = repo.ingest(trajectory(), Structure())
    structure = Structure()
    with hg.open_repo("agent", path=tmp_path / "store", flush_interval=0) as repo:
        assert repo.ingest(trajectory(), structure) == first
    assert structure.calls == 0
