"""The public conformance suite against the PostgreSQL backend answering queries in the server
(``search="server"``, pgvector): once with exact server scans (every type below ``min_nodes``, as
small test stores are), once with an HNSW index for every type of two nodes or more, so that the
certified pools of the index path answer the suite's queries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pg_server import VECTOR_DSN_ENV, pgvector_dsn, repo_for, require_psycopg

require_psycopg()

import hippograph as hg  # noqa: E402
from hippograph.backends.postgres import Postgres, drop_repo  # noqa: E402
from hippograph.testing import BackendConformance  # noqa: E402

__all__ = ["TestServerExact", "TestServerIndexed", "pgvector_dsn"]


class TestServerExact(BackendConformance):
    reopen = True
    shared = True

    @pytest.fixture(autouse=True)
    def _isolated_repo(self, pgvector_dsn: str, store_path: Path) -> Iterator[None]:
        yield
        drop_repo(pgvector_dsn, repo=repo_for(store_path))

    def make_backend(self, path: Path) -> Postgres:
        return Postgres(os.environ[VECTOR_DSN_ENV], repo=repo_for(path), pool_size=20, search="server")


class _IndexedFirst(Postgres):
    """Builds the HNSW index of every type holding two nodes or more before each query, so the
    suite's queries go through the index path."""

    def find_candidates(self, types: Any, *args: Any, **kwargs: Any) -> Any:
        self.build_vector_index()
        return super().find_candidates(types, *args, **kwargs)


class TestServerIndexed(TestServerExact):
    def make_backend(self, path: Path) -> Postgres:
        ann = hg.AnnConfig(min_nodes=1, background=False)
        return _IndexedFirst(os.environ[VECTOR_DSN_ENV], repo=repo_for(path), pool_size=20, search="server", ann=ann)
