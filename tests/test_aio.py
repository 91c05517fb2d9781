"""`hippograph.aio`: every method of `Repo` and `Store` as a coroutine that runs off the event loop."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hippograph as hg
from hippograph import aio
from hippograph.backends import InMemory
from hippograph.embedding import HashingEmbedder
from hippograph.errors import StorageError, ValidationError
from hippograph.graph.structuring import episodic
from loop_witness import LoopWitness

DIM = 16
NOW = datetime(2031, 5, 4, 12, 30, tzinfo=UTC)
embed = HashingEmbedder(DIM)


def embed_texts(texts: Sequence[str]) -> Any:
    return np.stack([embed.embed_one(t) for t in texts])


def trajectory(source_id: str, goal: str) -> hg.Trajectory:
    return hg.Trajectory(source_id=source_id, goal=goal, steps=[hg.Step(f"{goal}: look", "act")])


def public_methods(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}


@pytest.mark.parametrize(("sync", "wrapper"), [(hg.Repo, aio.AsyncRepo), (hg.Store, aio.AsyncStore)])
def test_every_public_method_has_a_coroutine_twin_with_the_same_parameters(sync: type, wrapper: type) -> None:
    missing = public_methods(sync) - public_methods(wrapper)
    assert not missing, f"{wrapper.__name__} lacks {sorted(missing)}"
    for name in public_methods(sync):
        twin = getattr(wrapper, name)
        assert inspect.iscoroutinefunction(twin), name
        assert inspect.signature(twin).parameters.keys() == inspect.signature(getattr(sync, name)).parameters.keys()
        assert twin.__doc__ == getattr(sync, name).__doc__


def test_async_repo_answers_as_the_sync_repo_does() -> None:
    structure = episodic(embed)

    async def run() -> None:
        async with aio.AsyncRepo(hg.Repo(InMemory(), flush_interval=0)) as repo:
            twin = hg.Repo(InMemory(), flush_interval=0)
            for i, goal in enumerate(("fix the build", "plan a trip", "water the plants")):
                receipt = await repo.ingest(trajectory(f"run-{i}", goal), structure)
                assert receipt.node_ids == twin.ingest(trajectory(f"run-{i}", goal), structure).node_ids
            query = embed.embed_one("fix the build")
            got = await repo.recall(query, now=NOW, exact=True)
            want = twin.recall(query, now=NOW, exact=True)
            assert [h.node.id for h in got] == [h.node.id for h in want]  # ingestion times differ by a hair
            assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-3)
            summary = await repo.forget("run-1")
            assert summary.deleted_ids and summary == twin.forget("run-1")
            assert (await repo.stats()).nodes == twin.stats().nodes
            twin.close()

    asyncio.run(run())


def test_async_store_answers_as_the_sync_store_does(tmp_path: Path) -> None:
    async def run() -> None:
        store = await aio.open_store("mem", path=tmp_path / "s", embed=embed_texts, durability="fast")
        async with store:
            await store.put(("u", "1"), "a", "the cat sat on the mat")
            await store.put_many([{"scope": ("u", "2"), "key": "b", "text": "a dog chased the cat"}])
            hits = await store.search(("u",), text="cat")
            assert {h.entry.key for h in hits} == {"a", "b"}
            assert hits == store.store.search(("u",), text="cat")
            assert (await store.get(("u", "1"), "a")) is not None
            receipt = await store.forget(("u", "2"))
            assert receipt.keys == ((("u", "2"), "b"),)
            assert [e.key for e in await store.list(("u",))] == ["a"]
        with pytest.raises(StorageError):
            store.store.get(("u", "1"), "a")

    asyncio.run(run())


def test_typed_errors_come_through_the_await_and_nothing_is_written() -> None:
    async def run() -> None:
        store = aio.AsyncStore(hg.Store(InMemory(), embed=embed_texts))
        with pytest.raises(ValidationError):
            await store.put(("u",), "", "a key must not be empty")
        with pytest.raises(ValidationError):
            await store.put_many([{"scope": ("u",), "key": "ok", "text": "x"}, {"scope": ("u",), "text": "no key"}])
        assert await store.list(()) == []
        repo = aio.AsyncRepo(hg.Repo(InMemory(), flush_interval=0))
        with pytest.raises(ValidationError):
            await repo.recall(np.zeros(DIM + 1, dtype=np.float32), types=["no such type"])
        assert (await repo.stats()).total_nodes == 0
        await repo.aclose()
        await store.aclose()

    asyncio.run(run())


def test_a_slow_recall_and_a_slow_search_do_not_block_the_event_loop() -> None:
    """The backend read and the embedder wait until the loop has ticked (see `LoopWitness`)."""
    witness = LoopWitness()

    class SlowGraph(InMemory):
        def find_candidates(self, *args: Any, **kwargs: Any) -> Any:
            witness.wait()
            return super().find_candidates(*args, **kwargs)

    def slow_embed(texts: Sequence[str]) -> Any:
        witness.wait()
        return embed_texts(texts)

    async def run() -> None:
        repo = aio.AsyncRepo(hg.Repo(SlowGraph(), flush_interval=0))
        await repo.ingest(trajectory("run-1", "fix the build"), episodic(embed))
        hits = await witness.during(repo.recall(embed.embed_one("fix the build"), exact=True))
        assert hits
        store = aio.AsyncStore(hg.Store(InMemory(), embed=slow_embed))
        await witness.during(store.put(("u",), "k", "apple pie"))
        assert (await witness.during(store.search(("u",), text="apple")))[0].entry.key == "k"
        await repo.aclose()
        await store.aclose()

    asyncio.run(run())
    assert witness.proven
    assert len(witness.waited) >= 3


def test_calls_run_on_the_executor_given_and_carry_the_callers_context() -> None:
    request = contextvars.ContextVar("request", default="none")
    seen: list[tuple[str, str]] = []

    def noting_embed(texts: Sequence[str]) -> Any:
        seen.append((threading.current_thread().name, request.get()))
        return embed_texts(texts)

    async def run(executor: ThreadPoolExecutor | None) -> None:
        request.set("req-7")
        store = aio.AsyncStore(hg.Store(InMemory(), embed=noting_embed), executor=executor)
        await store.put(("u",), "k", "apple")
        await store.aclose()

    with ThreadPoolExecutor(1, thread_name_prefix="hippograph-test") as pool:
        asyncio.run(run(pool))
    asyncio.run(run(None))
    assert seen[0] == ("hippograph-test_0", "req-7")
    assert seen[1][1] == "req-7" and not seen[1][0].startswith("hippograph-test")


def test_concurrent_writes_and_reads_from_many_tasks_all_land(tmp_path: Path) -> None:
    async def run() -> None:
        async with await aio.open_store("many", path=tmp_path / "s", embed=embed_texts) as store:
            keys = [f"k{i}" for i in range(40)]
            writes = [store.put(("u", str(i % 4)), k, f"note number {i}") for i, k in enumerate(keys)]
            reads = [store.search_text("note", ("u",), limit=5) for _ in range(10)]
            results = await asyncio.gather(*writes, *reads)
            assert all(isinstance(r, hg.Entry) for r in results[: len(keys)])
            assert sorted(e.key for e in await store.list(("u",), limit=100)) == sorted(keys)
        async with await aio.open_store("many", path=tmp_path / "s", embed=embed_texts) as again:
            assert len(await again.list(("u",), limit=100)) == len(keys)

    asyncio.run(run())


def test_open_repo_opens_lmdb_off_the_loop_and_closes_with_async_with(tmp_path: Path) -> None:
    async def run() -> None:
        async with await aio.open_repo("r", path=tmp_path / "r", durability="fast") as repo:
            await repo.ingest(trajectory("run-1", "fix the build"), episodic(embed))
        with pytest.raises(StorageError):
            repo.repo.recall(embed.embed_one("x"))
        async with await aio.open_repo("r", path=tmp_path / "r") as again:
            assert (await again.stats()).total_nodes > 0

    asyncio.run(run())
