"""Key lookups through libpq's prepared statements (`backends.postgres.prepared`): the placeholder
conversion, the binary array reader against psycopg's own encoder, statements a session lost or a
table change outdated, and errors raised as a cursor would raise them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pg_server import pg_dsn, require_psycopg

require_psycopg()

import psycopg  # noqa: E402
from psycopg.adapt import PyFormat, Transformer  # noqa: E402

import hippograph as hg  # noqa: E402
from hippograph.backends.postgres import Postgres, drop_repo  # noqa: E402
from hippograph.backends.postgres.arrays import (  # noqa: E402
    bytea_array,
    float4_array,
    float8_array,
    int4,
    text_array,
    timestamptz,
    timestamptz_array,
)
from hippograph.backends.postgres.prepared import array_items, fetch, integer, native  # noqa: E402
from hippograph.testing.graphs import make_node, vec  # noqa: E402

__all__ = ["pg_dsn"]


def _binary(value: list[Any]) -> bytes:
    """`value` as psycopg sends an array parameter in binary."""
    return bytes(Transformer().get_dumper(value, PyFormat.BINARY).dump(value))


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30))
def test_bytea_arrays_read_back(items: list[bytes]) -> None:
    assert array_items(_binary(items)) == items


@given(st.lists(st.text(max_size=20).filter(lambda s: "\x00" not in s), min_size=1, max_size=30))
def test_text_arrays_read_back(items: list[str]) -> None:
    assert [bytes(b or b"").decode() for b in array_items(_binary(items))] == items


_AWARE = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-7))]),
)


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30), st.lists(st.text(max_size=20), min_size=1))
def test_byte_and_text_arrays_are_encoded_as_psycopg_encodes_them(items: list[bytes], texts: list[str]) -> None:
    assert bytea_array(items) == _binary(items)
    assert text_array([s.replace("\x00", "") for s in texts]) == _binary([s.replace("\x00", "") for s in texts])


@given(st.lists(st.floats(width=64), min_size=1, max_size=30))
def test_float8_arrays_are_encoded_as_psycopg_encodes_them(values: list[float]) -> None:
    assert float8_array(values) == _binary(values)


@given(st.lists(_AWARE, min_size=1, max_size=20))
def test_times_are_encoded_as_psycopg_encodes_them(values: list[datetime]) -> None:
    assert timestamptz_array(values) == _binary(values)
    assert timestamptz(values[0]) == bytes(Transformer().get_dumper(values[0], PyFormat.BINARY).dump(values[0]))


@given(st.integers(-(2**31), 2**31 - 1))
def test_int4_reads_back(value: int) -> None:
    assert integer(int4(value)) == value


def test_encoded_values_as_the_server_reads_them(conn: psycopg.Connection[Any]) -> None:
    """Empty arrays, and each encoder's values, decoded by the server itself."""
    query = (
        b"SELECT cardinality($1::bytea[]), cardinality($2::text[]), cardinality($3::float8[]), "
        b"cardinality($4::timestamptz[]), cardinality($5::real[]), $6::int4"
    )
    empty = [
        bytea_array([]),
        text_array([]),
        float8_array([]),
        timestamptz_array([]),
        float4_array(np.zeros(0, np.float32)),
    ]
    ((*counts, four),) = fetch(conn, b"hg_empty", query, [*empty, int4(-4)])
    assert [integer(c) for c in counts] == [0] * 5 and integer(four) == -4
    when = datetime(2026, 12, 4, 13, 40, 6, 123456, tzinfo=UTC)
    query = (
        b"SELECT array_to_string($1::text[], ','), array_to_string($2::float8[], ','), "
        b"$3::timestamptz = '2026-12-04 13:40:06.123456+00', array_to_string($4::real[], ',')"
    )
    ((texts, floats, same, reals),) = fetch(
        conn,
        b"hg_values",
        query,
        [
            text_array(["a", "bé"]),
            float8_array([0.5, -2.0]),
            timestamptz(when),
            float4_array(np.array([1.5, 3], np.float32)),
        ],
    )
    assert (texts, floats, same, reals) == (b"a,b\xc3\xa9", b"0.5,-2", b"\x01", b"1.5,3")


@given(st.integers(-(2**63), 2**63 - 1))
def test_integers_read_back(value: int) -> None:
    assert integer(value.to_bytes(8, "big", signed=True)) == value
    assert integer(None) is None


def test_null_elements_and_missing_arrays() -> None:
    assert array_items(_binary([b"a", None, b""])) == [b"a", None, b""]
    assert array_items(None) == []


def test_arrays_as_the_server_sends_them(conn: psycopg.Connection[Any]) -> None:
    query = (
        b"SELECT ARRAY[]::bytea[], ARRAY['\\x00ff'::bytea, NULL], ARRAY['a', 'b\xc3\xa9']::text[], "
        b"NULL::text[] WHERE $1::text IS NOT NULL"
    )
    ((empty, pair, texts, missing),) = fetch(conn, b"hg_arrays", query, [b"x"])
    assert array_items(empty) == [] and array_items(pair) == [b"\x00\xff", None]
    assert array_items(texts) == [b"a", "bé".encode()] and array_items(missing) == []


def test_placeholders_are_numbered_for_the_server() -> None:
    assert native("SELECT a FROM t WHERE x = %b AND y = ANY(%b) AND z LIKE 'a%%'") == (
        b"SELECT a FROM t WHERE x = $1 AND y = ANY($2) AND z LIKE 'a%'"
    )
    for query in ("SELECT %s", "SELECT %(name)b", "SELECT %t"):
        with pytest.raises(ValueError, match="only %b placeholders"):
            native(query)


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        yield c


def test_a_lost_or_outdated_statement_is_prepared_again(conn: psycopg.Connection[Any]) -> None:
    table = f"hg_prepared_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE TEMP TABLE {table} (k bytea PRIMARY KEY, v text)")
    conn.execute(f"INSERT INTO {table} VALUES ('\\x01', 'one')")
    query = native(f"SELECT * FROM {table} WHERE k = %b")
    assert fetch(conn, b"hg_probe", query, [b"\x01"]) == [[b"\x01", b"one"]]
    conn.execute("DEALLOCATE ALL")  # what a session reset does
    assert fetch(conn, b"hg_probe", query, [b"\x01"]) == [[b"\x01", b"one"]]
    conn.execute(f"ALTER TABLE {table} ADD COLUMN w integer DEFAULT 7")  # the cached plan's row type changes
    assert fetch(conn, b"hg_probe", query, [b"\x01"]) == [[b"\x01", b"one", (7).to_bytes(4, "big")]]
    assert fetch(conn, b"hg_probe", query, [b"\x02"]) == []


def test_without_prepared_statements_the_lookup_is_sent_unnamed(conn: psycopg.Connection[Any]) -> None:
    """Behind a transaction-mode pooler (``prepare_threshold=None``) nothing is prepared by name."""
    conn.prepare_threshold = None
    query = b"SELECT $1::bytea, 'x'::text"
    assert fetch(conn, b"hg_unnamed", query, [b"\x05"]) == [[b"\x05", b"x"]]
    assert conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE name = 'hg_unnamed'").fetchone() == (0,)
    with pytest.raises(psycopg.errors.UndefinedTable):
        fetch(conn, b"hg_unnamed", b"SELECT 1 FROM hg_no_such_table WHERE x = $1", [b"x"])


BEGIN_READ = (b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",)


@pytest.mark.parametrize("named", [True, False])
def test_a_transaction_opens_with_its_first_statement(conn: psycopg.Connection[Any], named: bool) -> None:
    """`begin` travels with the statement (one pipeline): the transaction is open afterwards, and
    a statement lost meanwhile is prepared again inside a fresh one."""
    if not named:
        conn.prepare_threshold = None
    idle, open_ = psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS
    query = b"SELECT current_setting('transaction_isolation'), $1::bytea"
    assert fetch(conn, b"hg_begun", query, [b"\x01"], BEGIN_READ) == [[b"repeatable read", b"\x01"]]
    assert conn.pgconn.transaction_status == open_
    conn.execute("COMMIT")
    conn.execute("DEALLOCATE ALL")
    assert fetch(conn, b"hg_begun", query, [b"\x02"], BEGIN_READ) == [[b"repeatable read", b"\x02"]]
    assert conn.pgconn.transaction_status == open_
    conn.execute("ROLLBACK")
    assert conn.pgconn.transaction_status == idle


def test_a_transaction_opens_with_its_settings(conn: psycopg.Connection[Any]) -> None:
    """Several opening statements (a write's BEGIN and SET LOCAL) go in the same pipeline, in order."""
    begin = (b"BEGIN ISOLATION LEVEL READ COMMITTED", b"SET LOCAL idle_in_transaction_session_timeout = '1234ms'")
    query = b"SELECT current_setting('transaction_isolation'), current_setting('idle_in_transaction_session_timeout')"
    assert fetch(conn, b"hg_settings", query + b" WHERE $1::text IS NOT NULL", [b"x"], begin) == [
        [b"read committed", b"1234ms"]
    ]
    conn.execute("ROLLBACK")
    assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("0",)


def test_a_failing_first_statement_leaves_its_transaction_to_roll_back(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.DivisionByZero):
        fetch(conn, b"hg_div", b"SELECT 1 / $1::int4", [(0).to_bytes(4, "big")], BEGIN_READ)
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK")
    assert fetch(conn, b"hg_div", b"SELECT 1 / $1::int4", [(1).to_bytes(4, "big")]) == [[(1).to_bytes(4, "big")]]


def test_errors_are_psycopg_errors_with_their_sqlstate(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable):
        fetch(conn, b"hg_missing", b"SELECT 1 FROM hg_no_such_table WHERE x = $1", [b"x"])
    with pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SET statement_timeout = '50ms'")
        fetch(conn, b"hg_sleep", b"SELECT pg_sleep(1) WHERE $1::text IS NOT NULL", [b"x"])


def test_get_node_survives_a_session_reset(pg_dsn: str) -> None:
    """`DISCARD ALL` on every pooled connection drops the prepared lookups; the next reads prepare
    them again and answer as before."""
    repo = f"test-{uuid.uuid4().hex}"
    name = f"hg-{uuid.uuid4().hex[:8]}"
    backend = Postgres(pg_dsn, repo=repo, application_name=name, min_connections=2, pool_size=2)
    try:
        node = make_node(hg.NodeType.SEMANTIC, "a", vec(1, 0, 0, 0))
        backend.apply_changeset(
            hg.Changeset().add_nodes([node, make_node(hg.NodeType.SEMANTIC, "b")]).add_link("a", "b", "sibling")
        )
        first = backend.get_node("a")
        assert first is not None and first.linked_ids() == {"b"}
        for _ in range(2):
            with backend._runner.pool.connection() as pooled:
                pooled.execute("DISCARD ALL")
        again = backend.get_node("a")
        assert again is not None and again.linked_ids() == {"b"} and again.fields_dict() == first.fields_dict()
        assert again.embedding is not None and again.embedding.tolist() == [1.0, 0.0, 0.0, 0.0]
        assert backend.get_node("missing") is None
    finally:
        backend.close()
        drop_repo(pg_dsn, repo=repo)
