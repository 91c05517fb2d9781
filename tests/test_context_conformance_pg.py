"""The context store's conformance suite on the PostgreSQL backend.

As in test_store_conformance_pg.py, `make_backend(path)` maps the test's temporary path to a repo of
its own (`pg_server.repo_for`), so a reopen on the same path finds the same spaces; the repo is
dropped after its test. The server comes from `pg_server`.
"""

from __future__ import annotations

from pathlib import Path

from pg_server import OwnRepo, pg_dsn, repo_for, require_psycopg

require_psycopg()

from hippograph.backends.postgres import Postgres, drop_repo  # noqa: E402
from hippograph.context import ContextStore  # noqa: E402
from hippograph.testing import PersistentContextConformance  # noqa: E402
from hippograph.testing.context import EMBED, embed_pending, v  # noqa: E402

__all__ = ["TestPostgresContext", "pg_dsn"]


class TestPostgresContext(OwnRepo, PersistentContextConformance):
    """The suite, each test on a repo of its own."""


def _store_with_one_vector(backend: Postgres) -> ContextStore:
    """A context store whose document "u/a" is embedded as v(1) and found by it."""
    store = ContextStore(backend, document_jobs=[EMBED])
    store.put_document("u/a", "peanuts")
    embed_pending(store, {"u/a": v(1)})
    assert [h.uri for h in store.search_vector(v(1))] == ["u/a"]
    return store


def test_drop_repo_empties_the_context_and_open_stores_notice(pg_dsn: str, tmp_path: Path) -> None:
    """An open store's vector cache must not outlive the repo it was read from: after the drop, a
    document written again at the same URI is ranked on its new vector, not on the dropped one."""
    backend = Postgres(pg_dsn, repo=repo_for(tmp_path))
    try:
        store = _store_with_one_vector(backend)
        assert drop_repo(pg_dsn, repo=backend.repo) is True
        assert store.get_node("u/a") is None and store.search_vector(v(1)) == []
        store.put_document("u/a", "travel")
        embed_pending(store, {"u/a": v(0, 1)})
        assert [h.uri for h in store.search_vector(v(0, 1))] == ["u/a"]
        assert [(h.uri, h.score) for h in store.search_vector(v(1))] == [("u/a", 0.0)]  # the new vector's cosine
    finally:
        backend.close()


def test_drop_repo_unseen_by_an_idle_store(pg_dsn: str, tmp_path: Path) -> None:
    """The same, for a store that does not search between the drop and the new vector."""
    backend = Postgres(pg_dsn, repo=repo_for(tmp_path))
    try:
        store = _store_with_one_vector(backend)
        drop_repo(pg_dsn, repo=backend.repo)
        writer = ContextStore(backend, document_jobs=[EMBED])
        writer.put_document("u/a", "travel")
        embed_pending(writer, {"u/a": v(0, 1)})
        assert [h.uri for h in store.search_vector(v(0, 1))] == ["u/a"]
        assert [(h.uri, h.score) for h in store.search_vector(v(1))] == [("u/a", 0.0)]  # the new vector's cosine
    finally:
        backend.close()
