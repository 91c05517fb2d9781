"""`Postgres`: one memory shared by many processes and hosts, on PostgreSQL.

Install with ``pip install 'hippograph[postgres]'`` (psycopg 3 and psycopg-pool).
``docs/postgres.md`` is both the operator's guide and the design (layout, transactions,
retries, the derived cache and its change log, portability, forking);
``docs/architecture.md`` has the rules every backend shares. The modules: `backend`
(the `Postgres` class), `tx` (transactions and retries), `cache` (the scoring columns
caught up from the change log), `entries` (a scoped store's entries and their change
log), `schema` (tables, statements, migrations, `drop_repo`), `config` (option checks)
and `reports` (stats and storage checks).
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'hippograph[postgres]'"
    ) from exc

from .backend import Postgres
from .config import DSN_ENV
from .schema import SCHEMA_VERSION, drop_repo

__all__ = ["DSN_ENV", "SCHEMA_VERSION", "Postgres", "drop_repo"]
