"""The `ContextBackend` contract (`hippograph.context.protocol`) on InMemory, LMDB and PostgreSQL.

Every contract test runs on the three backends; the PostgreSQL case gets its server and a repo of
its own from `pg_server.pg_store` (see `pg_server` for what happens without a server). Durability
and writers in several processes are checked on LMDB and PostgreSQL, and `range` is compared with
a sorted dict after random writes, some of them rolled back.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.backends.lmdb import LMDB
from hippograph.backends.memory import InMemory
from hippograph.context.protocol import SPACES, ContextBackend, GetsOne, KvTxn
from hippograph.errors import StorageError, ValidationError
from pg_server import pg_dsn, pg_store

__all__ = ["pg_dsn", "pg_store"]

S = "ctx_jobs"
OTHER = "ctx_nodes"
COUNTER = "ctx_counters"
KINDS = ["memory", "lmdb", "postgres"]
PERSISTENT = ["lmdb", "postgres"]

Open = Callable[[], Any]


class Boom(Exception):
    """Raised inside a write to roll it back."""


@pytest.fixture
def opener(request: pytest.FixtureRequest, tmp_path: Path, pg_store: Callable[..., Any]) -> Iterator[Open]:
    """Opens a backend of the test's kind; every call opens the same store (InMemory: a new one)."""
    kind = request.param
    opened: list[Any] = []

    def open_() -> Any:
        if kind == "postgres":
            return pg_store()  # closed, and its repo dropped, by the fixture
        backend = InMemory() if kind == "memory" else LMDB(tmp_path / "store")
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()


def _all(backend: Any, space: str = S, start: bytes = b"", stop: bytes | None = None, **kw: Any) -> list[Any]:
    return list(backend.context_read(lambda t: list(t.range(space, start, stop, **kw))))


def _fill(backend: Any, pairs: dict[bytes, bytes], space: str = S) -> None:
    def run(t: KvTxn) -> None:
        for k, v in pairs.items():
            t.put(space, k, v)

    backend.context_write(run)


def _bump(t: KvTxn) -> int:
    raw = t.get(COUNTER, b"n")
    n = (0 if raw is None else struct.unpack(">Q", raw)[0]) + 1
    t.put(COUNTER, b"n", struct.pack(">Q", n))
    return int(n)


def _count(backend: Any) -> int:
    raw = backend.context_read(lambda t: t.get(COUNTER, b"n"))
    return 0 if raw is None else int(struct.unpack(">Q", raw)[0])


# -- the contract, on every backend ----------------------------------------------------------------

every = pytest.mark.parametrize("opener", KINDS, indirect=True)


@every
def test_the_backends_claim_the_protocol(opener: Open) -> None:
    assert isinstance(opener(), ContextBackend)


@every
def test_get_put_delete_return_values(opener: Open) -> None:
    b = opener()

    def first(t: KvTxn) -> list[Any]:
        return [
            t.get(S, b"k"),
            t.put(S, b"k", b"v1"),
            t.get(S, b"k"),
            t.put(S, b"k", b"v2"),
            t.get(S, b"k"),
            t.delete(S, b"missing"),
        ]

    assert b.context_write(first) == [None, None, b"v1", None, b"v2", False]
    got = b.context_read(lambda t: t.get(S, b"k"))
    assert got == b"v2" and type(got) is bytes
    assert b.context_write(lambda t: (t.delete(S, b"k"), t.get(S, b"k"), t.delete(S, b"k"))) == (True, None, False)
    assert b.context_read(lambda t: t.get(S, b"k")) is None
    b.context_write(lambda t: t.put(S, b"empty", b""))
    assert b.context_read(lambda t: t.get(S, b"empty")) == b""


@pytest.mark.parametrize("opener", ["lmdb"], indirect=True)
def test_a_one_record_read_answers_as_a_read_of_one_get(opener: Open) -> None:
    """LMDB's `context_get` (`get_node`'s read) is `context_read` of one `get`: the value written
    last, None where nothing is (a key too long to store included), an unknown space refused."""
    b = opener()
    assert isinstance(b, GetsOne)
    keys = st.binary(min_size=1, max_size=4)

    @settings(max_examples=40, deadline=None)
    @given(
        stored=st.dictionaries(keys, st.binary(max_size=4), max_size=6),
        asked=st.lists(keys | st.just(b"") | st.just(b"k" * 600), max_size=6),
    )
    def check(stored: dict[bytes, bytes], asked: list[bytes]) -> None:
        b.context_write(lambda t: [t.delete(S, k) for k, _ in list(t.range(S))])
        _fill(b, stored)
        for key in [*stored, *asked]:
            got = b.context_get(S, key)
            assert got == b.context_read(lambda t, key=key: t.get(S, key)) == stored.get(key)
            assert got is None or type(got) is bytes
            assert b.context_get(OTHER, key) is None

    check()
    with pytest.raises(ValidationError):
        b.context_get("no_such_space", b"k")
    with pytest.raises(ValidationError):
        b.context_get(S, "k")


KEYS = [b"\x00", b"a", b"a\x00", b"ab", b"b", b"b\xff", b"c", b"\x7f", b"\x80", b"\xff", b"\xff\xff"]


@every
def test_range_bounds_and_bytewise_order(opener: Open) -> None:
    b = opener()
    _fill(b, {k: b"v" + k for k in KEYS})
    ordered = sorted(KEYS)
    assert ordered[0] == b"\x00" and ordered[-1] == b"\xff\xff"  # bytewise: 0x80 and 0xff above ASCII

    def keys(start: bytes = b"", stop: bytes | None = None, reverse: bool = False) -> list[bytes]:
        return [k for k, _ in _all(b, S, start, stop, reverse=reverse)]

    assert _all(b) == [(k, b"v" + k) for k in ordered]
    cases: list[tuple[bytes, bytes | None, list[bytes]]] = [
        (b"", None, ordered),
        (b"a", b"b", [b"a", b"a\x00", b"ab"]),  # start inclusive, stop exclusive
        (b"a\x00", b"b\xff", [b"a\x00", b"ab", b"b"]),
        (b"aa", None, [b"ab", b"b", b"b\xff", b"c", b"\x7f", b"\x80", b"\xff", b"\xff\xff"]),
        (b"", b"a", [b"\x00"]),
        (b"\xff", None, [b"\xff", b"\xff\xff"]),
        (b"\xff\xff\x00", None, []),
        (b"b", b"b", []),  # empty: start == stop
        (b"c", b"a", []),  # empty: start > stop
        (b"", b"", []),
        (b"zz", b"zz\x00", []),  # nothing stored in between
    ]
    for start, stop, want in cases:
        assert keys(start, stop) == want, (start, stop)
        assert keys(start, stop, reverse=True) == want[::-1], (start, stop)


@every
def test_a_range_read_across_many_batches_and_stopped_early(opener: Open) -> None:
    b = opener()
    n = 3000
    _fill(b, {struct.pack(">I", i): struct.pack(">I", i * 7) for i in range(n)})
    up = _all(b)
    assert [k for k, _ in up] == [struct.pack(">I", i) for i in range(n)]
    assert all(v == struct.pack(">I", struct.unpack(">I", k)[0] * 7) for k, v in up)
    assert _all(b, reverse=True) == up[::-1]
    lo, hi = struct.pack(">I", 17), struct.pack(">I", 2500)
    assert _all(b, S, lo, hi) == up[17:2500]
    assert _all(b, S, lo, hi, reverse=True) == up[17:2500][::-1]

    def first_two(t: KvTxn) -> tuple[list[Any], list[Any]]:
        ahead = t.range(S, lo)
        got = list(itertools.islice(ahead, 2))
        back = t.range(S, lo, hi, reverse=True)
        last = [next(back)]
        with contextlib.suppress(AttributeError):
            ahead.close()  # type: ignore[attr-defined]
        return got, last

    assert b.context_read(first_two) == (up[17:19], [up[2499]])
    assert b.context_write(first_two) == (up[17:19], [up[2499]])


@every
def test_a_write_that_raises_leaves_nothing_written(opener: Open) -> None:
    b = opener()
    _fill(b, {b"keep": b"1", b"doomed": b"2"})
    _fill(b, {b"o": b"3"}, OTHER)
    before = (_all(b), _all(b, OTHER))

    def fail(t: KvTxn) -> None:
        t.put(S, b"new", b"x")
        t.put(S, b"keep", b"changed")
        assert t.delete(S, b"doomed") is True
        t.put(S, b"doomed", b"back")
        assert t.delete(S, b"doomed") is True
        assert t.delete(OTHER, b"o") is True
        t.put(OTHER, b"p", b"4")
        for space in SPACES:
            t.put(space, b"everywhere", b"5")
        raise Boom

    with pytest.raises(Boom):
        b.context_write(fail)
    assert (_all(b), _all(b, OTHER)) == before
    assert b.context_read(lambda t: [t.get(s, b"everywhere") for s in SPACES]) == [None] * len(SPACES)
    b.context_write(lambda t: t.put(S, b"after", b"6"))  # the backend writes on afterwards
    assert b.context_read(lambda t: (t.get(S, b"after"), t.get(S, b"new"))) == (b"6", None)


@every
def test_a_write_sees_its_own_writes(opener: Open) -> None:
    b = opener()
    _fill(b, {b"a": b"1", b"c": b"3", b"e": b"5"})

    def run(t: KvTxn) -> list[Any]:
        t.put(S, b"b", b"2")
        t.put(S, b"c", b"33")
        t.delete(S, b"e")
        t.put(S, b"f", b"6")
        seen = [t.get(S, b"b"), t.get(S, b"c"), t.get(S, b"e")]
        return [seen, list(t.range(S)), list(t.range(S, b"b", b"f", reverse=True))]

    seen, up, down = b.context_write(run)
    assert seen == [b"2", b"33", None]
    assert up == [(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"f", b"6")]
    assert down == [(b"c", b"33"), (b"b", b"2")]
    assert _all(b) == up


@every
def test_a_read_transaction_refuses_writes(opener: Open) -> None:
    b = opener()
    _fill(b, {b"k": b"v"})
    with pytest.raises(StorageError):
        b.context_read(lambda t: t.put(S, b"k", b"w"))
    with pytest.raises(StorageError):
        b.context_read(lambda t: t.put(S, b"new", b"w"))
    with pytest.raises(StorageError):
        b.context_read(lambda t: t.delete(S, b"k"))
    assert _all(b) == [(b"k", b"v")]


@every
def test_spaces_are_independent(opener: Open) -> None:
    b = opener()

    def run(t: KvTxn) -> None:
        for i, space in enumerate(SPACES):
            t.put(space, b"k", space.encode())
            t.put(space, bytes([i + 1]), b"own")

    b.context_write(run)
    for i, space in enumerate(SPACES):
        assert _all(b, space) == sorted([(b"k", space.encode()), (bytes([i + 1]), b"own")])
    assert b.context_write(lambda t: t.delete(S, b"k")) is True
    assert b.context_read(lambda t: (t.get(S, b"k"), t.get(OTHER, b"k"))) == (None, OTHER.encode())


@every
def test_arguments_are_checked(opener: Open) -> None:
    b = opener()
    _fill(b, {b"k": b"v"})
    for bad in (
        lambda t: t.put("nope", b"k", b"v"),
        lambda t: t.get("nope", b"k"),
        lambda t: t.range("nope"),
        lambda t: t.put(S, b"", b"v"),
        lambda t: t.put(S, b"x" * 512, b"v"),
        lambda t: t.put(S, "k", b"v"),
        lambda t: t.put(S, b"k", "v"),
        lambda t: t.get(S, "k"),
    ):
        with pytest.raises(ValidationError):
            b.context_write(bad)
    assert _all(b) == [(b"k", b"v")]
    b.context_write(lambda t: t.put(S, b"x" * 511, b"longest"))
    # Keys no backend stores are simply absent; bounds of any length work.
    long_ = b"x" * 600
    assert b.context_write(lambda t: (t.get(S, long_), t.delete(S, long_), t.get(S, b""), t.delete(S, b""))) == (
        None,
        False,
        None,
        False,
    )
    assert [k for k, _ in _all(b, S, b"x" * 511)] == [b"x" * 511]
    assert [k for k, _ in _all(b, S, long_)] == []
    assert [k for k, _ in _all(b, S, b"", long_, reverse=True)] == [b"x" * 511, b"k"]
    assert [k for k, _ in _all(b, S, b"", b"x" * 511, reverse=True)] == [b"k"]
    assert [k for k, _ in _all(b, S, b"x" * 510 + b"w", long_)] == [b"x" * 511]


@every
def test_a_transaction_used_after_its_function_returned_refuses(opener: Open) -> None:
    b = opener()
    _fill(b, {b"a": b"1", b"b": b"2"})
    kept: list[Any] = []
    b.context_read(lambda t: kept.extend([t, t.range(S)]))
    t, it = kept
    with pytest.raises(StorageError):
        t.get(S, b"a")
    with pytest.raises(StorageError):
        next(it)
    kept.clear()
    b.context_write(lambda t: kept.append(t))
    with pytest.raises(StorageError):
        kept[0].put(S, b"late", b"x")
    assert _all(b) == [(b"a", b"1"), (b"b", b"2")]


@every
def test_threads_writing_at_once_lose_no_update(opener: Open) -> None:
    """Read-modify-write from several threads adds up; writes that raise (every fifth) count for
    nothing, also when they share a commit with others (LMDB's group commit)."""
    b = opener()
    failed = [0]
    lock = threading.Lock()

    def work() -> None:
        for i in range(40):

            def step(t: KvTxn, fail: bool = i % 5 == 4) -> None:
                _bump(t)
                if fail:
                    raise Boom

            try:
                b.context_write(step)
            except Boom:
                with lock:
                    failed[0] += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert failed[0] == 4 * 8
    assert _count(b) == 4 * 40 - failed[0]


@every
def test_random_writes_and_ranges_match_a_sorted_dict(opener: Open) -> None:
    b = opener()
    alphabet = st.sampled_from([0x00, 0x01, 0x61, 0x62, 0x7F, 0x80, 0xFF])
    keys = st.lists(alphabet, min_size=1, max_size=3).map(bytes)
    bounds = st.lists(alphabet, max_size=3).map(bytes)
    ops = st.lists(st.tuples(st.booleans(), keys, st.binary(max_size=3)), max_size=20)
    batches = st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=4)
    queries = st.lists(st.tuples(bounds, st.none() | bounds, st.booleans()), min_size=1, max_size=6)

    def expect(model: dict[bytes, bytes], lo: bytes, hi: bytes | None, reverse: bool) -> list[tuple[bytes, bytes]]:
        got = [(k, model[k]) for k in sorted(model) if k >= lo and (hi is None or k < hi)]
        return got[::-1] if reverse else got

    def writer(model: dict[bytes, bytes], batch: list[Any], fail: bool, query: Any) -> Callable[[KvTxn], Any]:
        """Applies `batch` (checking each delete's answer and one range against the model as it
        goes); returns the model after it, or raises when `fail`."""

        def run(t: KvTxn) -> dict[bytes, bytes]:
            staged = dict(model)
            for put, k, v in batch:
                if put:
                    t.put(S, k, v)
                    staged[k] = v
                else:
                    assert t.delete(S, k) == (staged.pop(k, None) is not None)
            lo, hi, reverse = query
            assert list(t.range(S, lo, hi, reverse=reverse)) == expect(staged, lo, hi, reverse)
            if fail:
                raise Boom
            return staged

        return run

    @settings(max_examples=40, deadline=None)
    @given(batches=batches, queries=queries)
    def check(batches: list[tuple[list[Any], bool]], queries: list[Any]) -> None:
        b.context_write(lambda t: [t.delete(S, k) for k, _ in list(t.range(S))])
        model: dict[bytes, bytes] = {}
        for batch, fail in batches:
            run = writer(model, batch, fail, queries[0])
            if fail:
                with pytest.raises(Boom):
                    b.context_write(run)
            else:
                model = b.context_write(run)
        for lo, hi, reverse in queries:
            assert _all(b, S, lo, hi, reverse=reverse) == expect(model, lo, hi, reverse)

    check()


# -- durability and processes: LMDB and PostgreSQL ---------------------------------------------------


@pytest.mark.parametrize("opener", PERSISTENT, indirect=True)
def test_data_survives_closing_and_reopening(opener: Open) -> None:
    b = opener()
    _fill(b, {b"a": b"1", b"b": b"2"})
    _fill(b, {b"x": b"9"}, OTHER)
    b.context_write(lambda t: t.delete(S, b"a"))
    b.close()
    again = opener()
    assert _all(again) == [(b"b", b"2")] and _all(again, OTHER) == [(b"x", b"9")]


def _increment_in_child(kind: str, where: str, dsn: str | None, n: int, barrier: Any) -> None:
    if kind == "lmdb":
        backend: Any = LMDB(where)
    else:
        from hippograph.backends.postgres import Postgres

        backend = Postgres(dsn, repo=where, pool_size=2)
    try:
        barrier.wait(timeout=300)
        for _ in range(n):
            backend.context_write(_bump)
    finally:
        backend.close()


@pytest.mark.parametrize("opener", PERSISTENT, indirect=True)
def test_two_processes_incrementing_one_counter_lose_nothing(opener: Open, tmp_path: Path) -> None:
    b = opener()
    b.context_write(lambda t: t.put(COUNTER, b"n", struct.pack(">Q", 0)))
    if isinstance(b, LMDB):
        kind, where, dsn = "lmdb", str(tmp_path / "store"), None
    else:
        kind, where, dsn = "postgres", b.repo, b.dsn
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    children = [ctx.Process(target=_increment_in_child, args=(kind, where, dsn, 200, barrier)) for _ in range(2)]
    for child in children:
        child.start()
    try:
        for child in children:
            child.join(600)
        assert [child.exitcode for child in children] == [0, 0]
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    assert _count(b) == 400


# -- specific to one backend ---------------------------------------------------------------------------


@pytest.mark.parametrize("opener", ["lmdb"], indirect=True)
def test_an_lmdb_store_older_than_the_spaces_opens_read_only(opener: Open, tmp_path: Path) -> None:
    """A store written before the context databases existed, opened read-only, reads as empty."""
    opener().close()
    env = lmdb.open(str(tmp_path / "store"), max_dbs=64)
    with env.begin(write=True) as txn:
        for space in SPACES:
            txn.drop(env.open_db(space.encode(), txn=txn), delete=True)
    with env.begin() as txn, txn.cursor() as cur:
        assert not {bytes(k) for k in cur.iternext(values=False)} & {s.encode() for s in SPACES}
    env.close()
    ro = LMDB(tmp_path / "store", readonly=True)
    try:
        assert ro.context_read(lambda t: (t.get(S, b"k"), list(t.range(S)), list(t.range(S, reverse=True)))) == (
            None,
            [],
            [],
        )
        assert ro.context_get(S, b"k") is None
        with pytest.raises(StorageError):
            ro.context_write(lambda t: t.put(S, b"k", b"v"))
    finally:
        ro.close()
    rw = opener()  # opened for writing, the store gains them
    rw.context_write(lambda t: t.put(S, b"k", b"v"))
    assert _all(rw) == [(b"k", b"v")]


@pytest.mark.parametrize("opener", ["postgres"], indirect=True)
def test_postgres_refuses_to_commit_after_a_failed_statement_and_drop_repo_empties_the_spaces(opener: Open) -> None:
    import psycopg

    from hippograph.backends.postgres import drop_repo
    from hippograph.backends.postgres.context import PgKvTxn

    b = opener()
    _fill(b, {b"k": b"v"})

    def swallow(t: KvTxn) -> None:
        t.put(S, b"other", b"x")
        assert isinstance(t, PgKvTxn)
        with contextlib.suppress(psycopg.Error):
            t.tx.conn.execute("SELECT 1/0")

    with pytest.raises(StorageError, match="nothing was written"):
        b.context_write(swallow)
    assert _all(b) == [(b"k", b"v")]
    drop_repo(b.dsn, repo=b.repo, schema=b.schema)
    assert _all(b) == []
    b.context_write(lambda t: t.put(S, b"again", b"1"))
    assert _all(b) == [(b"again", b"1")]


@pytest.mark.parametrize("opener", ["postgres"], indirect=True)
def test_a_postgres_range_stopped_early_reads_no_further_batch(opener: Open) -> None:
    from hippograph.backends.postgres.context import PgKvTxn

    b = opener()
    _fill(b, {struct.pack(">I", i): b"v" for i in range(500)})

    def run(t: KvTxn) -> tuple[int, int, int]:
        assert isinstance(t, PgKvTxn)
        statements = [0]
        fetch = t.tx.all

        def counted(*args: Any) -> Any:
            statements[0] += 1
            return fetch(*args)

        t.tx.all = counted  # type: ignore[method-assign]
        it = t.range(S, reverse=True)
        assert next(it)[0] == struct.pack(">I", 499)
        one = statements[0]
        assert sum(1 for _ in itertools.islice(it, 40)) == 40
        some = statements[0]
        assert sum(1 for _ in it) == 459
        return one, some, statements[0]

    one, some, everything = b.context_read(run)
    assert one == 1 and some == 2 and everything > some  # 41 rows: batches of 16 and 32
