"""The scoped store's conformance suite on the PostgreSQL backend, and what is specific to it: writers
on several connections, the trimmed log, `drop_repo`, refs longer than an index row, the migration.

As in test_conformance_postgres.py, `make_backend(path)` maps the test's temporary path to a repo of
its own (`pg_server.repo_for`), so a reopen on the same path finds the same entries; the repo is
dropped after its test. The server comes from `pg_server`.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pg_server import OwnRepo, pg_dsn, require_psycopg

require_psycopg()

import psycopg  # noqa: E402

from hippograph.backends.postgres import SCHEMA_VERSION, Postgres, drop_repo, entries  # noqa: E402
from hippograph.backends.postgres.schema import _MIGRATIONS  # noqa: E402
from hippograph.errors import StorageError  # noqa: E402
from hippograph.store import Entry, EntryTxn, Store  # noqa: E402
from hippograph.testing import PersistentStoreConformance  # noqa: E402
from hippograph.testing.store import fake_embed  # noqa: E402

__all__ = ["TestPostgresStore", "pg_dsn"]


class TestPostgresStore(OwnRepo, PersistentStoreConformance):
    """The suite, each test on a repo of its own."""


@pytest.fixture
def open_pg(pg_dsn: str) -> Iterator[Callable[..., Postgres]]:
    """Opens backends on a repo of the test's own (keyword options pass through); closes them and
    drops their repos afterwards."""
    repo = f"test-{uuid.uuid4().hex}"
    opened: list[Postgres] = []

    def open_(**options: Any) -> Postgres:
        options.setdefault("repo", repo)
        backend = Postgres(pg_dsn, **options)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()
    for b in opened:
        drop_repo(pg_dsn, repo=b.repo, schema=b.schema)


def test_writers_on_many_connections_lose_no_update_and_log_every_change(open_pg: Callable[..., Postgres]) -> None:
    """Read-modify-write from threads on two backends (separate pools) adds up, and a store that
    catches up through the log sees every entry another wrote."""
    a, b = open_pg(pool_size=8), open_pg(pool_size=8)
    Store(a).put(("c",), "n", "", {"n": 0})
    watcher = Store(b)
    assert watcher.list(("w",)) == []

    def bump(t: EntryTxn) -> None:
        e = t.get(("c",), "n")
        assert e is not None and isinstance(e.value, dict)
        t.put(Entry(**{**e.__dict__, "value": {"n": e.value["n"] + 1}}))

    def work(backend: Postgres, who: int) -> None:
        s = Store(backend)
        for i in range(10):
            backend.entry_write(bump)
            s.put(("w", str(who)), f"k{i}", "meal")

    threads = [threading.Thread(target=work, args=(a if i % 2 else b, i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = Store(a).get(("c",), "n")
    assert got is not None and got.value == {"n": 60}
    assert len(watcher.list(("w",), limit=1000)) == 60
    assert len(watcher.search_text("meal", ("w",), limit=1000)) == 60


def test_a_store_behind_the_trimmed_log_rescans(
    open_pg: Callable[..., Postgres], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(entries, "LOG_KEEP", 3)
    backend = open_pg()
    writer, reader = Store(backend), Store(backend)
    writer.put(("s",), "first", "x")
    assert [e.key for e in reader.list(("s",))] == ["first"]
    for i in range(6):
        writer.put(("s",), f"k{i}", "x")
    writer.delete(("s",), "first")
    seq, refs = backend.entry_read(lambda t: t.changes(0))
    assert seq == 8 and refs is None
    tail = [(("s",), "k4"), (("s",), "k5"), (("s",), "first")]
    assert backend.entry_read(lambda t: t.changes(seq - 3)) == (seq, tail)
    assert sorted(e.key for e in reader.list(("s",))) == [f"k{i}" for i in range(6)]


def test_drop_repo_empties_the_entries_and_open_stores_notice(pg_dsn: str, open_pg: Callable[..., Postgres]) -> None:
    backend = open_pg()
    store = Store(backend, embed=fake_embed)
    store.put(("u",), "a", "peanut allergy")
    assert [h.entry.key for h in store.search_text("peanut")] == ["a"]
    assert drop_repo(pg_dsn, repo=backend.repo) is True
    assert store.search_text("peanut") == [] and store.list() == []
    store.put(("u",), "b", "peanut allergy")
    assert [h.entry.key for h in store.search_text("peanut")] == ["b"]


def test_refs_beyond_an_index_row_and_odd_keys(open_pg: Callable[..., Postgres]) -> None:
    """The longest valid scope (32 segments of 255 bytes), keys holding NUL; the subtree of a long
    scope excludes its siblings that share the stored prefix."""
    backend = open_pg()
    store = Store(backend)
    deep = tuple("é" * 127 + str(i % 10) for i in range(32))
    sibling = (*deep[:-1], "z" * 255)
    store.put(deep, "k\0ey", "x")
    store.put(sibling, "k" * 512, "y")
    store.put(deep[:4], "short", "z")
    assert store.get(deep, "k\0ey") is not None and store.get(sibling, "k" * 512) is not None
    assert [e.key for e in store.list(deep)] == ["k\0ey"]
    assert sorted(e.key for e in store.list(deep[:-1])) == ["k\0ey", "k" * 512]
    assert len(store.list(deep[:4])) == len(store.list(deep[:2])) == 3
    assert store.forget(deep).keys == ((deep, "k\0ey"),)
    assert store.get(sibling, "k" * 512) is not None


def test_a_read_transaction_refuses_writes(open_pg: Callable[..., Postgres]) -> None:
    backend = open_pg()
    e = Store(backend).put(("a",), "k", "x")
    with pytest.raises(StorageError):
        backend.entry_read(lambda t: t.put(e))
    with pytest.raises(StorageError):
        backend.entry_read(lambda t: t.delete(("a",), "k"))


def test_an_error_caught_inside_the_write_is_not_committed_quietly(open_pg: Callable[..., Postgres]) -> None:
    """A failed statement aborts the transaction; a function that swallows the error gets a
    StorageError rather than a COMMIT that silently rolled back."""
    backend = open_pg()
    e = Store(backend).put(("a",), "k", "x")

    def swallow(t: EntryTxn) -> None:
        t.put(Entry(**{**e.__dict__, "key": "other"}))
        assert isinstance(t, entries.PgEntryTxn)
        with contextlib.suppress(psycopg.Error):
            t.tx.conn.execute("SELECT 1/0")

    with pytest.raises(StorageError, match="nothing was written"):
        backend.entry_write(swallow)
    assert Store(backend).get(("a",), "other") is None


def test_a_version_1_schema_is_migrated_at_open(pg_dsn: str) -> None:
    schema = f"hg_test_{uuid.uuid4().hex[:12]}"
    q = f'"{schema}"'
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {q}")
            conn.execute(
                f"CREATE TABLE {q}.migrations (version integer PRIMARY KEY, description text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            )
            number, description, statements = _MIGRATIONS[0]
            for statement in statements:
                conn.execute(statement.replace("{s}", q))
            conn.execute(f"INSERT INTO {q}.migrations (version, description) VALUES (%s, %s)", (number, description))
            assert drop_repo(pg_dsn, repo="r", schema=schema) is False  # a version-1 schema has no entry tables
            backend = Postgres(pg_dsn, repo="r", schema=schema)
            try:
                Store(backend).put(("a",), "k", "x")
                assert Store(backend).get(("a",), "k") is not None
            finally:
                backend.close()
            rows = conn.execute(f"SELECT version FROM {q}.migrations ORDER BY version").fetchall()
            assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION >= 2
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {q} CASCADE")
