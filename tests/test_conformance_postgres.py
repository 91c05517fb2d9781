"""The public conformance suite against the PostgreSQL backend, every capability on.

`make_backend(path)` maps the test's temporary path to a repo name of its own
(`pg_server.repo_for`), so every test starts from an empty repo, a reopen on
the same path finds the same data, and the spawned children of the shared
tests open the same repo. The server comes from `pg_server` (an existing DSN,
or a throwaway cluster); each repo is dropped after its test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_server import DSN_ENV, pg_dsn, repo_for, require_psycopg

require_psycopg()

from hippograph.backends.postgres import Postgres, drop_repo  # noqa: E402
from hippograph.testing import BackendConformance  # noqa: E402

__all__ = ["TestPostgres", "pg_dsn"]


class TestPostgres(BackendConformance):
    reopen = True
    shared = True

    @pytest.fixture(autouse=True)
    def _isolated_repo(self, pg_dsn: str, store_path: Path) -> Iterator[None]:
        """Runs before `backend` (autouse): skip or fail without a server; drop the repo afterwards."""
        yield
        drop_repo(pg_dsn, repo=repo_for(store_path))

    def make_backend(self, path: Path) -> Postgres:
        return Postgres(os.environ[DSN_ENV], repo=repo_for(path), pool_size=20)
