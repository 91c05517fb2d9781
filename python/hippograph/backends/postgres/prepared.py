"""Key lookups through libpq's prepared-statement calls, with raw binary values in and out.

A single-row read is one round trip, yet the cursor layer (adapting each parameter, loading each
column, its own statement cache) costs a third as much again. A statement run here is prepared once
per connection under its own name (or sent unnamed with its parameters where the connection's
``prepare_threshold`` is None, as behind a transaction-mode pooler). Its parameters are sent as they
are (text as UTF-8, bytea as bytes) and its columns come back as bytes: the caller decodes what it
reads (`array_items` for arrays). The call blocks in libpq with the GIL released;
``statement_timeout`` bounds it as it bounds every statement.
"""

from __future__ import annotations

import re
import select
import struct
import weakref
from collections.abc import Sequence
from typing import Any, cast

import psycopg
from psycopg import errors, pq

__all__ = ["array_items", "command", "fetch", "integer", "native"]

_PREPARED: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = weakref.WeakKeyDictionary()
"""The names prepared on each open connection (a replaced connection starts with none)."""

_STALE = frozenset({"26000", "0A000"})
"""No such prepared statement (a session reset dropped it); its cached plan no longer fits a
changed table: prepared again, once."""

_PLACEHOLDER = re.compile(r"%(.)")
_HEAD = struct.Struct("!iiI")
_DIM = struct.Struct("!ii")
_SIZE = struct.Struct("!i")


def native(query: str) -> bytes:
    """`query` with psycopg's ``%b`` placeholders numbered as the server's ``$n``."""
    count = 0

    def number(m: re.Match[str]) -> str:
        nonlocal count
        if m.group(1) == "%":
            return "%"
        if m.group(1) != "b":
            raise ValueError(f"only %b placeholders run as prepared statements: {query!r:.80}")
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, query).encode("utf-8")


def fetch(
    conn: psycopg.Connection[Any],
    name: bytes,
    query: bytes,
    params: Sequence[bytes | None],
    begin: Sequence[bytes] = (),
) -> list[list[bytes | None]]:
    """The rows of statement `name` (`query`, prepared on `conn` the first time) for `params`, in
    autocommit or inside the connection's open transaction; with `begin`, that transaction's first
    statements (``BEGIN ...``, then any ``SET LOCAL``) go in the same round trip, pipelined. A None
    parameter is NULL. Raises psycopg's errors, as a cursor would."""
    pgconn = conn.pgconn
    formats = [1] * len(params)
    unnamed = conn.prepare_threshold is None  # prepared statements turned off (a transaction-mode pooler)
    prepared = _PREPARED.setdefault(conn, set())
    for attempt in (1, 2):
        if not unnamed and name not in prepared:
            _check(conn, pgconn.prepare(name, query))
            prepared.add(name)
        if begin:
            *opened, result = _pipelined(conn, begin, name, query, params, unnamed)
            for done in opened:
                _check(conn, done)
        elif unnamed:
            result = pgconn.exec_params(query, params, param_formats=formats, result_format=1)
        else:
            # libpq sends a None as NULL, as exec_params' stub says; exec_prepared's leaves it out
            result = pgconn.exec_prepared(name, cast("Sequence[bytes]", params), param_formats=formats, result_format=1)
        if result.status == pq.ExecStatus.TUPLES_OK:
            return _rows(result)
        state = result.error_field(pq.DiagnosticField.SQLSTATE)
        if attempt == 1 and not unnamed and state is not None and state.decode() in _STALE:
            prepared.discard(name)
            if begin:  # the transaction it opened failed with the statement: start again
                _check(conn, pgconn.exec_(b"ROLLBACK"))
            if state.decode() == "0A000":
                _check(conn, pgconn.exec_(b"DEALLOCATE " + name))
            continue
        _check(conn, result)
    raise AssertionError("unreachable")  # pragma: no cover


def _pipelined(
    conn: psycopg.Connection[Any],
    begin: Sequence[bytes],
    name: bytes,
    query: bytes,
    params: Sequence[bytes | None],
    unnamed: bool,
) -> list[pq.abc.PGresult]:
    """The `begin` statements and the statement sent together (libpq's pipeline mode): their results."""
    pgconn = conn.pgconn
    formats = [1] * len(params)
    wanted = len(begin) + 1
    results: list[pq.abc.PGresult] = []
    pgconn.enter_pipeline_mode()
    try:
        for statement in begin:
            pgconn.send_query_params(statement, None)
        if unnamed:
            pgconn.send_query_params(query, params, param_formats=formats, result_format=1)
        else:
            pgconn.send_query_prepared(name, params, param_formats=formats, result_format=1)
        pgconn.pipeline_sync()
        while pgconn.flush():
            select.select([], [pgconn.socket], [])
        while True:
            while pgconn.is_busy():  # wait here, where the GIL is released; get_result would hold it
                select.select([pgconn.socket], [], [])
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                if pgconn.status != pq.ConnStatus.OK:
                    break
                continue
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            if len(results) < wanted:
                results.append(result)
    finally:
        if pgconn.status == pq.ConnStatus.OK:
            pgconn.exit_pipeline_mode()
    if len(results) < wanted:
        raise psycopg.OperationalError(pgconn.get_error_message().strip() or "the connection to the server was lost")
    return results


def command(conn: psycopg.Connection[Any], text: bytes) -> None:
    """Runs `text` (statements without parameters: BEGIN, COMMIT, ROLLBACK) as one simple query."""
    _check(conn, conn.pgconn.exec_(text))


def _rows(result: pq.abc.PGresult) -> list[list[bytes | None]]:
    return [[result.get_value(r, c) for c in range(result.nfields)] for r in range(result.ntuples)]


def _check(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> None:
    if conn.pgconn.status != pq.ConnStatus.OK:  # the connection broke: the runner replaces it
        message = conn.pgconn.get_error_message().strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    if result.status == pq.ExecStatus.FATAL_ERROR:
        raise errors.error_from_result(result, encoding=conn.info.encoding)


def integer(value: bytes | None) -> int | None:
    """An integer column (``int2``, ``int4``, ``int8``) in binary format (NULL: None)."""
    return None if value is None else int.from_bytes(value, "big", signed=True)


def array_items(value: bytes | None) -> list[bytes | None]:
    """The elements of a one-dimensional array in PostgreSQL's binary format (NULL: none)."""
    if value is None:
        return []
    ndim, _, _ = _HEAD.unpack_from(value, 0)
    if ndim == 0:
        return []
    if ndim != 1:
        raise ValueError(f"expected a one-dimensional array, got {ndim} dimensions")
    count, _ = _DIM.unpack_from(value, _HEAD.size)
    pos = _HEAD.size + _DIM.size
    items: list[bytes | None] = []
    for _ in range(count):
        (size,) = _SIZE.unpack_from(value, pos)
        pos += _SIZE.size
        if size < 0:
            items.append(None)
        else:
            items.append(value[pos : pos + size])
            pos += size
    return items
