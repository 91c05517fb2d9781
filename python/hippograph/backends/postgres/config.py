"""Checks of the backend's options: the DSN (from the argument or ``$HIPPOGRAPH_PG_DSN``), the repo
name and the numeric settings, each failing with a `ConfigError` that never quotes a password
(messages end up in logs)."""

from __future__ import annotations

import math
import os
import re
from typing import Final

import psycopg
import psycopg.conninfo

from ...errors import ConfigError

__all__ = ["DSN_ENV"]

DSN_ENV: Final = "HIPPOGRAPH_PG_DSN"
"""The environment variable read when no DSN is passed."""

_MAX_REPO_BYTES = 255


def _resolve_dsn(dsn: str | None) -> str:
    value = dsn if dsn is not None else os.environ.get(DSN_ENV)
    if not value or not value.strip():
        raise ConfigError(f"no PostgreSQL DSN: pass Postgres(dsn=...) or set {DSN_ENV}")
    try:
        psycopg.conninfo.conninfo_to_dict(value)
    except psycopg.Error as exc:
        raise ConfigError(f"invalid PostgreSQL DSN: {_without_secrets(str(exc).strip(), value)}") from None
    return value


_SECRETS = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)|://[^:/@]*:([^@/]*)@|[?&]password=([^&]*)")


def _without_secrets(message: str, dsn: str) -> str:
    """libpq's parse error with any password of `dsn` blanked out: messages end up in logs."""
    for match in _SECRETS.finditer(dsn):
        for secret in match.groups():
            for form in {secret, secret.strip("'")} if secret else ():
                if form:
                    message = message.replace(form, "***")
    return message


def _where(dsn: str) -> str:
    """host:port/dbname of a DSN, for messages (never the password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:  # pragma: no cover - validated before
        return "?"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _check_repo(repo: object) -> str:
    if not isinstance(repo, str) or not repo.strip():
        raise ConfigError(f"repo must be a non-blank str, got {repo!r}")
    if "\0" in repo:
        raise ConfigError(f"repo name {repo!r} must not contain NUL")
    try:
        size = len(repo.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(f"repo name {repo!r} is not valid UTF-8") from None
    if size > _MAX_REPO_BYTES:
        raise ConfigError(f"repo name {repo[:40]!r}… is longer than {_MAX_REPO_BYTES} bytes")
    return repo


def _seconds(name: str, value: object, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"{name} must be a positive number of seconds{' or None' if allow_none else ''}, got {value!r}"
        )
    return float(value)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value
