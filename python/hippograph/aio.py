"""`AsyncRepo` and `AsyncStore`: every method of `Repo` and `Store` as a coroutine.

Each call runs on a worker thread, so a slow disk, an fsync or a large scan
never blocks the event loop; the Rust core releases the GIL while it scores,
so other tasks keep running at full speed. A call is the same call as its
synchronous twin: same arguments, same results, same typed errors.

Cancelling an awaiting task does not stop its call: the worker thread finishes
it, and a write then either commits whole or not at all, as a synchronous one
would. Await (or gather) your calls before `aclose()`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Executor
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Protocol, Self, TypeVar

from .engine.rows import VectorDtype
from .engine.vector_index import DEFAULT_ANN, AnnConfig
from .graph.protocol import GraphBackend
from .graph.repo import Repo
from .graph.repo import open_repo as _open_repo
from .graph.value import ValueFunctionConfig
from .store.protocol import EntryBackend
from .store.store import Embedder, Store
from .store.store import open_store as _open_store

__all__ = ["AsyncRepo", "AsyncStore", "open_repo", "open_store"]

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H")
H_co = TypeVar("H_co", covariant=True)
Handle = TypeVar("Handle", Repo, Store)


async def _call(executor: Executor | None, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Runs `fn` on `executor` (the loop's default when None), carrying the caller's context vars."""
    if executor is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


class _Wrapper(Protocol[H_co]):
    @property
    def _handle(self) -> H_co: ...

    @property
    def _executor(self) -> Executor | None: ...


def _off_loop(method: Callable[Concatenate[H, P], R]) -> Callable[Concatenate[_Wrapper[H], P], Coroutine[Any, Any, R]]:
    """The coroutine twin of a synchronous method: the same signature, run on a worker thread."""
    name = method.__name__

    @functools.wraps(method)
    async def twin(self: _Wrapper[H], /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound: Callable[P, R] = getattr(self._handle, name)
        return await _call(self._executor, bound, *args, **kwargs)

    return twin


class _Async(Generic[Handle]):
    """What both wrappers share: the handle, the executor, closing and ``async with``."""

    def __init__(self, handle: Handle, executor: Executor | None) -> None:
        self._handle: Handle = handle
        self._executor = executor

    async def aclose(self) -> None:
        """Closes the wrapped handle off the event loop (flushing what it holds); idempotent."""
        await _call(self._executor, self._handle.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncRepo(_Async[Repo]):
    """A `Repo` whose methods are coroutines; `repo` is the synchronous handle underneath."""

    def __init__(self, repo: Repo, *, executor: Executor | None = None) -> None:
        """`executor`: where calls run (the event loop's default executor when None)."""
        super().__init__(repo, executor)

    @property
    def repo(self) -> Repo:
        return self._handle

    ingest = _off_loop(Repo.ingest)
    ingest_many = _off_loop(Repo.ingest_many)
    recall = _off_loop(Repo.recall)
    why_not = _off_loop(Repo.why_not)
    reward = _off_loop(Repo.reward)
    forget = _off_loop(Repo.forget)
    decay = _off_loop(Repo.decay)
    repair = _off_loop(Repo.repair)
    consolidate = _off_loop(Repo.consolidate)
    flush = _off_loop(Repo.flush)
    close = _off_loop(Repo.close)
    verify = _off_loop(Repo.verify)
    stats = _off_loop(Repo.stats)
    vector_index_stats = _off_loop(Repo.vector_index_stats)
    build_vector_index = _off_loop(Repo.build_vector_index)
    reclaim_vector_index = _off_loop(Repo.reclaim_vector_index)


class AsyncStore(_Async[Store]):
    """A `Store` whose methods are coroutines; `store` is the synchronous handle underneath."""

    def __init__(self, store: Store, *, executor: Executor | None = None) -> None:
        """`executor`: where calls run (the event loop's default executor when None)."""
        super().__init__(store, executor)

    @property
    def store(self) -> Store:
        return self._handle

    put = _off_loop(Store.put)
    put_many = _off_loop(Store.put_many)
    update = _off_loop(Store.update)
    delete = _off_loop(Store.delete)
    flush = _off_loop(Store.flush)
    discard = _off_loop(Store.discard)
    forget = _off_loop(Store.forget)
    retract = _off_loop(Store.retract)
    prune = _off_loop(Store.prune)
    sweep = _off_loop(Store.sweep)
    get = _off_loop(Store.get)
    list = _off_loop(Store.list)
    search = _off_loop(Store.search)
    search_text = _off_loop(Store.search_text)
    search_vector = _off_loop(Store.search_vector)
    list_scopes = _off_loop(Store.list_scopes)
    refresh = _off_loop(Store.refresh)
    close = _off_loop(Store.close)
    stats = _off_loop(Store.stats)
    vector_index_stats = _off_loop(Store.vector_index_stats)
    build_vector_index = _off_loop(Store.build_vector_index)


async def open_repo(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: GraphBackend | None = None,
    value_function: ValueFunctionConfig | Mapping[str, Any] | None = None,
    durability: Literal["sync", "fast"] = "sync",
    flush_interval: float = 1.0,
    executor: Executor | None = None,
) -> AsyncRepo:
    """`hippograph.open_repo` off the event loop (opening may read the whole store)."""
    repo = await _call(
        executor,
        _open_repo,
        name,
        path=path,
        backend=backend,
        value_function=value_function,
        durability=durability,
        flush_interval=flush_interval,
    )
    return AsyncRepo(repo, executor=executor)


async def open_store(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    backend: EntryBackend | None = None,
    embed: Embedder | None = None,
    durability: Literal["sync", "fast"] = "sync",
    ann: AnnConfig | None = DEFAULT_ANN,
    vector_dtype: VectorDtype = "float32",
    executor: Executor | None = None,
) -> AsyncStore:
    """`hippograph.open_store` off the event loop (opening may read the whole store)."""
    store = await _call(
        executor,
        _open_store,
        name,
        path=path,
        backend=backend,
        embed=embed,
        durability=durability,
        ann=ann,
        vector_dtype=vector_dtype,
    )
    return AsyncStore(store, executor=executor)
