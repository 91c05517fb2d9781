"""The PostgreSQL backend beyond the conformance suite: many processes and
connections racing, freshness across processes, out-of-order change-log
sequences, log trimming, migrations, repo isolation, lost connections and
timeouts. The server comes from `pg_server`; every test uses its own repo (and,
where it touches the shared log or the schema itself, its own schema).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pg_server import pg_dsn, require_psycopg, wait_for_lock_waiter

require_psycopg()

import psycopg  # noqa: E402

import hippograph as hg  # noqa: E402
from hippograph.backends.postgres import DSN_ENV, SCHEMA_VERSION, Postgres, drop_repo, prepared  # noqa: E402
from hippograph.errors import ConfigError, StorageError, ValidationError  # noqa: E402
from hippograph.graph import codec  # noqa: E402
from hippograph.testing.conformance import KEEP_ALL  # noqa: E402
from hippograph.testing.graphs import NOW, make_node, make_record, vec  # noqa: E402

__all__ = ["pg_dsn"]

TESTS_DIR = str(Path(__file__).parent)
E1 = vec(1, 0, 0, 0)


def _sem(node_id: str, embedding: object = E1) -> hg.Node:
    return make_node(hg.NodeType.SEMANTIC, node_id, embedding)


def _hit_ids(backend: Postgres, query: object = E1) -> list[str]:
    return sorted(n.id for n, _ in backend.find_candidates([hg.NodeType.SEMANTIC], query, [], KEEP_ALL))


@pytest.fixture
def repo() -> str:
    return f"test-{uuid.uuid4().hex}"


@pytest.fixture
def open_backend(pg_dsn: str, repo: str) -> Iterator[Callable[..., Postgres]]:
    """Opens backends on the test's repo (keyword options pass through); closes them and drops the repo."""
    opened: list[Postgres] = []

    def open_(**options: Any) -> Postgres:
        options.setdefault("repo", repo)
        backend = Postgres(pg_dsn, **options)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        backend.close()
    for name in {b.repo for b in opened}:
        drop_repo(pg_dsn, repo=name, schema=opened[0].schema)


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A schema of its own (for tests of the shared change log and of migrations), dropped afterwards."""
    name = f"hg_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def admin(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection for looking behind the backend's back."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


# -- configuration ---------------------------------------------------------------------------


def test_missing_dsn_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a dsn argument and without $HIPPOGRAPH_PG_DSN there is nothing to connect to."""
    monkeypatch.delenv(DSN_ENV, raising=False)
    with pytest.raises(ConfigError, match=DSN_ENV):
        Postgres()
    with pytest.raises(ConfigError):
        Postgres("  ")


@pytest.mark.parametrize(
    "options",
    [{"repo": ""}, {"repo": "a\0b"}, {"schema": "Bad-Name"}, {"pool_size": 0}, {"statement_timeout": -1}],
    ids=["blank_repo", "nul_in_repo", "bad_schema", "empty_pool", "negative_timeout"],
)
def test_bad_options_are_config_errors(options: dict[str, Any]) -> None:
    """Options are checked before anything connects."""
    with pytest.raises(ConfigError):
        Postgres("postgresql://nobody@127.0.0.1:1/none", **options)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://user:s3cret%zzpw@h/db",
        "postgresql://user:s3cret%00pw@h/db",
        "postgresql://user:s3cretpw@[h/db",
        "host=h password='s3cretpw",
    ],
    ids=["bad_escape", "nul_escape", "ipv6", "unterminated_quote"],
)
def test_a_dsn_libpq_cannot_parse_is_refused_without_showing_its_password(dsn: str) -> None:
    """libpq quotes the offending part of a DSN, password included; the message must not carry it into logs."""
    with pytest.raises(ConfigError, match="invalid PostgreSQL DSN") as caught:
        Postgres(dsn)
    assert "s3cret" not in str(caught.value)


def test_unreachable_server_is_a_storage_error() -> None:
    """A server that does not answer fails the open with StorageError; the open gives up rather than retrying on."""
    errors: list[BaseException] = []

    def open_() -> None:
        try:
            Postgres("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)
        except BaseException as exc:  # reported to the test's thread
            errors.append(exc)

    opener = threading.Thread(target=open_, daemon=True)
    opener.start()
    opener.join(120)  # a hang guard, not a speed check
    assert not opener.is_alive(), "the open never gave up"
    assert len(errors) == 1 and isinstance(errors[0], StorageError) and "cannot connect" in str(errors[0])


# -- many processes, many connections -------------------------------------------------------

RACER = """
import json, sys, threading, time, hashlib
from datetime import UTC, datetime, timedelta
import hippograph as hg
from hippograph.backends.postgres import Postgres
from hippograph.errors import IngestionError
from hippograph.testing.graphs import vec

repo, start_at = sys.argv[1], float(sys.argv[5])
proc, threads, sources = (int(a) for a in sys.argv[2:5])
base = datetime(2024, 1, 1, tzinfo=UTC)
out, errors = [], []
with Postgres(repo=repo, pool_size=threads) as backend:
    barrier = threading.Barrier(threads)

    def work(t):
        writer = proc * threads + t
        try:
            barrier.wait()
            time.sleep(max(0.0, start_at - time.time()))
            for s in range(sources):
                source = f"src-{s:03d}"
                ids = [f"{source}/w{writer:02d}/n{i}" for i in range(2)]
                cs = hg.Changeset()
                for i, node_id in enumerate(ids):
                    embedding = vec(1, i, s, writer)
                    cs.add_node(hg.Semantic(id=node_id, proposition=source, confidence=0.5, embedding=embedding))
                cs.add_link(ids[0], ids[1], "sibling")
                payload = source + (f"/{writer}" if s % 20 == 0 else "")
                receipt = hg.IngestionReceipt(source, tuple(ids), base + timedelta(microseconds=writer))
                record = hg.IngestionRecord(source, hashlib.sha256(payload.encode()).digest(), 1, receipt)
                try:
                    outcome, got = backend.commit_ingestion(record, cs)
                    out.append([source, outcome.value, list(got.node_ids), got.stored_at.isoformat()])
                except IngestionError as exc:
                    assert exc.reason == "source_conflict", exc
                    out.append([source, "conflict", None, None])
        except BaseException as exc:
            errors.append(repr(exc))

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
print(json.dumps({"out": out, "errors": errors}))
"""


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=TESTS_DIR,
    )


def test_processes_and_connections_racing_insert_each_source_once(
    open_backend: Callable[..., Postgres], repo: str
) -> None:
    """8 processes × 4 connections commit the same 200 sources: one INSERTED each, identical receipts.

    Every 20th source carries a different payload per writer: its losers get
    `source_conflict`, the only error allowed.
    """
    processes, threads, sources = 8, 4, 200
    backend = open_backend()
    start_at = time.time() + 4.0
    children = [_child(RACER, repo, str(p), str(threads), str(sources), str(start_at)) for p in range(processes)]
    results: list[list[Any]] = []
    for child in children:
        stdout, stderr = child.communicate(timeout=240)
        assert child.returncode == 0, stderr
        report = json.loads(stdout)
        assert report["errors"] == []
        results += report["out"]
    assert len(results) == processes * threads * sources
    by_source: dict[str, list[list[Any]]] = {}
    for row in results:
        by_source.setdefault(row[0], []).append(row)
    winners: set[str] = set()
    for source, rows in by_source.items():
        inserted = [r for r in rows if r[1] == "inserted"]
        assert len(inserted) == 1, f"{source}: {len(inserted)} INSERTED"
        (won,) = inserted
        if int(source[4:]) % 20 == 0:
            assert all(r == won or r[1] == "conflict" for r in rows)
        else:
            assert all(r[2:] == won[2:] for r in rows), f"{source}: receipts differ"
        stored = backend.get_ingestion(source)
        assert stored is not None and list(stored.receipt.node_ids) == won[2]
        assert stored.receipt.stored_at.isoformat() == won[3]
        winners |= set(won[2])
    assert {n.id for n in backend.get_nodes_by_type([hg.NodeType.SEMANTIC])} == winners
    assert _hit_ids(backend) == sorted(winners)
    assert backend.stats()["links"] == sources


# -- freshness across processes ----------------------------------------------------------------

DELETER = """
import sys, random
from hippograph.backends.postgres import Postgres
from hippograph.graph.model import NodeMetadata
from hippograph.testing.graphs import make_node, vec
import hippograph as hg
repo, seed = sys.argv[1], int(sys.argv[2])
ids = [f"n{i:03d}" for i in range(200)]
random.Random(seed).shuffle(ids)
with Postgres(repo=repo) as backend:
    for i, node_id in enumerate(ids[:150]):
        backend.delete_nodes([node_id])
        backend.update_metadata({"gone/" + node_id: NodeMetadata()})
        if i % 3 == 0:
            backend.apply_changeset(hg.Changeset().add_node(make_node("semantic", f"new{i:03d}", vec(1, 0, 0, 0))))
print("done")
"""


def test_another_process_writes_are_seen_by_the_next_query(open_backend: Callable[..., Postgres], repo: str) -> None:
    """A node added or deleted by another process shows in (or leaves) the very next find_candidates."""
    backend = open_backend()
    backend.apply_changeset(hg.Changeset().add_nodes([_sem("a"), _sem("b")]))
    assert _hit_ids(backend) == ["a", "b"]
    add = "from hippograph.backends.postgres import Postgres\nimport sys, hippograph as hg\n"
    add += "from hippograph.testing.graphs import make_node, vec\n"
    add += "with Postgres(repo=sys.argv[1]) as b:\n"
    add += "    b.apply_changeset(hg.Changeset().add_node(make_node('semantic', 'c', vec(1, 0, 0, 0))))\n"
    add += "    b.delete_nodes(['a'])\n"
    child = _child(add, repo)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    assert _hit_ids(backend) == ["b", "c"]
    assert backend.get_node("a") is None


def test_nodes_deleted_by_another_process_are_never_returned(open_backend: Callable[..., Postgres], repo: str) -> None:
    """While another process deletes nodes one by one, no query returns a node whose deletion had committed."""
    backend = open_backend()
    backend.apply_changeset(hg.Changeset().add_nodes([_sem(f"n{i:03d}", vec(1, i / 200, 0, 0)) for i in range(200)]))
    markers = [f"gone/n{i:03d}" for i in range(200)]
    child = _child(DELETER, repo, "7")
    queries = 0
    while child.poll() is None or queries == 0:
        gone = {m[5:] for m in backend.get_metadata(markers)}
        returned = set(_hit_ids(backend))
        assert not returned & gone
        queries += 1
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    survivors = {n.id for n in backend.get_nodes_by_type([hg.NodeType.SEMANTIC])}
    assert len(survivors) == 50 + 50
    assert set(_hit_ids(backend)) == survivors
    assert queries > 1


# -- the change log ------------------------------------------------------------------------------


def _raw_add(conn: psycopg.Connection[Any], schema: str, repo: str, node: hg.Node) -> int:
    """What the backend's writer does, by hand: the node, its embedding, then the log row. Returns the seq."""
    key = node.id.encode()
    conn.execute(
        f'INSERT INTO "{schema}".nodes (repo, id, type, record, created_at) VALUES (%s, %s, %s, %s, %s)',
        (repo, key, node.node_type.value, codec.encode_node(node), node.created_at),
    )
    assert node.embedding is not None
    conn.execute(
        f'INSERT INTO "{schema}".embeddings (repo, id, vec) VALUES (%s, %s, %s)',
        (repo, key, codec.encode_embedding(node.embedding)),
    )
    row = conn.execute(
        f'INSERT INTO "{schema}".changes (repo, ids) VALUES (%s, %s) RETURNING seq',
        (repo, [key]),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_sequence_committed_out_of_order_is_not_missed(
    open_backend: Callable[..., Postgres], pg_dsn: str, schema: str, repo: str
) -> None:
    """seq N+1 commits before seq N: the reader sees N+1 first, keeps N as a gap, and picks N up later."""
    reader = open_backend(schema=schema)
    writer = open_backend(schema=schema)
    writer.apply_changeset(hg.Changeset().add_node(_sem("first")))
    assert _hit_ids(reader) == ["first"]
    with psycopg.connect(pg_dsn) as slow:  # a transaction holding the lower seq, uncommitted
        low = _raw_add(slow, schema, repo, _sem("late"))
        writer.apply_changeset(hg.Changeset().add_node(_sem("early")))
        assert _hit_ids(reader) == ["early", "first"]
        assert low in reader._cache.gaps
        slow.commit()
    assert _hit_ids(reader) == ["early", "first", "late"]
    assert not reader._cache.gaps


def test_a_gap_of_a_rolled_back_transaction_expires(
    open_backend: Callable[..., Postgres], pg_dsn: str, schema: str, repo: str
) -> None:
    """A seq whose transaction rolled back stops being waited for after gap_timeout."""
    reader = open_backend(schema=schema, gap_timeout=0.3)
    writer = open_backend(schema=schema)
    with psycopg.connect(pg_dsn) as aborted:
        low = _raw_add(aborted, schema, repo, _sem("never"))
        aborted.rollback()
    writer.apply_changeset(hg.Changeset().add_node(_sem("kept")))
    assert _hit_ids(reader) == ["kept"]
    assert low in reader._cache.gaps
    writer.apply_changeset(hg.Changeset().add_node(_sem("other")))
    assert _hit_ids(reader) == ["kept", "other"]
    time.sleep(0.4)
    writer.apply_changeset(hg.Changeset().add_node(_sem("more")))
    assert _hit_ids(reader) == ["kept", "more", "other"]
    assert low not in reader._cache.gaps


def test_a_reader_behind_the_trimmed_log_rebuilds(open_backend: Callable[..., Postgres], schema: str) -> None:
    """After the log is trimmed past what a reader has seen, its next query rebuilds and is exact."""
    reader = open_backend(schema=schema)
    writer = open_backend(schema=schema, log_keep=3)
    writer.apply_changeset(hg.Changeset().add_node(_sem("a")))
    assert _hit_ids(reader) == ["a"]
    rebuilds = reader._cache.rebuilds
    for i in range(10):
        writer.apply_changeset(hg.Changeset().add_node(_sem(f"b{i}")))
    writer.delete_nodes(["a"])
    assert writer.trim_log() == 0  # every entry is younger than twice gap_timeout: nothing goes
    time.sleep(0.05)
    floor = writer.trim_log(older_than=0.01)
    assert floor > reader._cache.high
    assert _hit_ids(reader) == [f"b{i}" for i in range(10)]
    assert reader._cache.rebuilds == rebuilds + 1
    assert _hit_ids(reader) == [f"b{i}" for i in range(10)]
    assert reader._cache.rebuilds == rebuilds + 1


# -- schema and repos ----------------------------------------------------------------------------


def test_concurrent_first_opens_migrate_once(pg_dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    """Eight backends opening a brand-new schema at once all succeed; each migration is recorded once."""
    barrier = threading.Barrier(8)

    def open_one(i: int) -> int | None:
        barrier.wait(timeout=30)
        with Postgres(pg_dsn, repo=f"r{i}", schema=schema) as backend:
            backend.apply_changeset(hg.Changeset().add_node(_sem(f"n{i}")))
            return backend.dimension

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(open_one, range(8))) == [4] * 8
    Postgres(pg_dsn, repo="again", schema=schema).close()
    rows = admin.execute(f'SELECT version FROM "{schema}".migrations ORDER BY version').fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_a_newer_schema_is_refused(pg_dsn: str, schema: str, admin: psycopg.Connection[Any]) -> None:
    """A schema migrated by a newer hippograph is not touched."""
    Postgres(pg_dsn, schema=schema).close()
    admin.execute(f"INSERT INTO \"{schema}\".migrations (version, description) VALUES ({SCHEMA_VERSION + 1}, 'future')")
    with pytest.raises(StorageError, match="upgrade hippograph"):
        Postgres(pg_dsn, schema=schema)


def test_a_schema_from_before_write_graph_is_migrated_with_its_data(
    pg_dsn: str, schema: str, admin: psycopg.Connection[Any]
) -> None:
    """A schema at version 3 (written before graph writes became one statement) gets `write_graph`
    at the next open; the nodes it held stay, and writes and dimension checks work on it."""
    with Postgres(pg_dsn, repo="old", schema=schema) as backend:
        backend.apply_changeset(hg.Changeset().add_node(_sem("kept")))
    for (fn,) in admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE p.proname = 'write_graph' AND n.nspname = %s",
        (schema,),
    ).fetchall():
        admin.execute(f"DROP FUNCTION {fn}")
    admin.execute(f'DELETE FROM "{schema}".migrations WHERE version >= 4')
    with Postgres(pg_dsn, repo="old", schema=schema) as backend:
        assert backend.get_node("kept") is not None
        backend.apply_changeset(hg.Changeset().add_node(_sem("new")).add_link("kept", "new", "sibling"))
        assert backend.get_node("new").linked_ids() == {"kept"}  # type: ignore[union-attr]
        wrong = _sem("wrong", [1.0, 0.0, 0.0])
        with pytest.raises(ValidationError, match="dimension 3, the store holds 4"):
            backend.apply_changeset(hg.Changeset().add_node(wrong))
        assert backend.get_node("wrong") is None
    rows = admin.execute(f'SELECT version FROM "{schema}".migrations ORDER BY version').fetchall()
    assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_two_repos_in_one_database_are_isolated(open_backend: Callable[..., Postgres]) -> None:
    """Same ids, different repos: nodes, links, metadata, records, dimension and candidates stay apart."""
    one = open_backend(repo=f"one-{uuid.uuid4().hex}")
    two = open_backend(repo=f"two-{uuid.uuid4().hex}")
    one.apply_changeset(hg.Changeset().add_nodes([_sem("a"), _sem("b")]).add_link("a", "b", "sibling"))
    two.apply_changeset(hg.Changeset().add_node(_sem("a", vec(0, 1, 0, 0, 0, 0, 0, 0))))
    one.commit_ingestion(make_record("src", node_ids=("s",)), hg.Changeset().add_node(_sem("s")))
    one.update_metadata({"a": hg.NodeMetadata(created_at=NOW, access_count=3)})
    assert (one.dimension, two.dimension) == (4, 8)
    assert _hit_ids(one) == ["a", "b", "s"]
    assert [n.id for n, _ in two.find_candidates(["semantic"], vec(0, 1, 0, 0, 0, 0, 0, 0), [], KEEP_ALL)] == ["a"]
    two_a = two.get_node("a")
    assert two_a is not None and not two_a.links
    assert two.get_ingestion("src") is None and two.get_metadata(["a"]) == {}
    two.delete_nodes(["a", "b"])
    assert _hit_ids(one) == ["a", "b", "s"]
    assert one.stats()["nodes"]["semantic"] == 3 and two.stats()["nodes"]["semantic"] == 0


HOSTILE_REPO_NAMES = ["x'; DROP TABLE hippograph.nodes; --", 'q"uote', "back\\slash", "%s %(x)s {0}", "٣ ☕ \U0001f600"]


@pytest.mark.parametrize("hostile", HOSTILE_REPO_NAMES, ids=["sql", "dquote", "backslash", "placeholders", "unicode"])
def test_repo_names_are_data_never_sql(open_backend: Callable[..., Postgres], hostile: str) -> None:
    """A repo name reaches PostgreSQL only as a bound parameter: it is stored as given and isolates as any name."""
    bystander = open_backend(repo=f"bystander-{uuid.uuid4().hex}")
    bystander.apply_changeset(hg.Changeset().add_node(_sem("kept")))
    named = open_backend(repo=f"{hostile}-{uuid.uuid4().hex}")
    named.apply_changeset(hg.Changeset().add_node(_sem("mine")))
    named.commit_ingestion(make_record("src", node_ids=("s",)), hg.Changeset().add_node(_sem("s")))
    assert _hit_ids(named) == ["mine", "s"]
    assert _hit_ids(bystander) == ["kept"]
    assert drop_repo(named.dsn, repo=named.repo, schema=named.schema)
    assert _hit_ids(bystander) == ["kept"]


@pytest.mark.parametrize(
    "schema", ["x; DROP", 'a"b', "Upper", "1abc", "a" * 64, "pg_catalog", "pg_x", "information_schema"]
)
def test_schema_names_outside_the_safe_pattern_are_refused(schema: str) -> None:
    with pytest.raises(ConfigError, match="schema"):
        Postgres("postgresql://nobody@127.0.0.1:1/none", schema=schema)


def test_a_dropped_repo_reads_empty_in_a_process_that_has_it_open(
    open_backend: Callable[..., Postgres], pg_dsn: str, repo: str
) -> None:
    """drop_repo removes everything of one repo; an open backend's cache notices and can write again."""
    backend = open_backend()
    backend.commit_ingestion(make_record("src", node_ids=("a",)), hg.Changeset().add_node(_sem("a")))
    assert _hit_ids(backend) == ["a"]
    assert drop_repo(pg_dsn, repo=repo) is True
    assert _hit_ids(backend) == []
    assert backend.get_ingestion("src") is None and backend.dimension is None
    backend.apply_changeset(hg.Changeset().add_node(_sem("b", vec(1, 0))))
    assert _hit_ids(backend, vec(1, 0)) == ["b"]
    assert drop_repo(pg_dsn, repo=f"never-{uuid.uuid4().hex}") is False


def test_racing_first_embeddings_fix_one_dimension(open_backend: Callable[..., Postgres]) -> None:
    """Writers racing to store the first embedding with dimensions 3 and 4: one dimension wins everywhere."""
    backends = [open_backend() for _ in range(4)]
    barrier = threading.Barrier(8)

    def first(i: int) -> int | None:
        barrier.wait(timeout=30)
        dim = 3 + i % 2
        try:
            backends[i % 4].apply_changeset(hg.Changeset().add_node(_sem(f"n{i}", vec(*([1.0] * dim)))))
        except ValidationError:
            return None
        return dim

    with ThreadPoolExecutor(8) as pool:
        dims = list(pool.map(first, range(8)))
    won = {d for d in dims if d is not None}
    assert len(won) == 1
    (dim,) = won
    assert backends[0].dimension == dim
    stored = backends[0].get_nodes_by_type(["semantic"])
    assert len(stored) == dims.count(dim)
    assert {n.embedding.shape[0] for n in stored if n.embedding is not None} == {dim}


def test_concurrent_metadata_increments_add_up(open_backend: Callable[..., Postgres]) -> None:
    """modify_metadata from several connections (and pools) never loses an increment."""
    backends = [open_backend() for _ in range(4)]
    backends[0].apply_changeset(hg.Changeset().add_node(_sem("a")))

    def bump(i: int) -> None:
        for _ in range(25):
            backends[i].modify_metadata(["a", "ghost"], lambda _, m: (m or hg.NodeMetadata()).record_access(NOW))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(bump, range(4)))
    assert backends[0].get_metadata(["a", "ghost"])["a"].access_count == 100


def test_repo_api_runs_on_postgres(open_backend: Callable[..., Postgres]) -> None:
    """Ingest, recall, reward, decay, forget, verify and stats through `Repo` on this backend."""
    from hippograph.embedding import HashingEmbedder
    from hippograph.graph.structuring import episodic

    embed = HashingEmbedder(dim=64)
    trajectory = hg.Trajectory(
        source_id="run-1",
        goal="fix the build",
        steps=[hg.Step("cargo build fails: missing serde", "add serde"), hg.Step("build passes", "run tests")],
    )
    with hg.open_repo("pg", backend=open_backend()) as repo:
        receipt = repo.ingest(trajectory, structure=episodic(embed))
        assert repo.ingest(trajectory, structure=episodic(embed)) == receipt
        hits = repo.recall(embed(["build fails missing serde"])[0], types=["episodic"])
        assert hits
        repo.reward([hits[0].node.id], 1.0)
        repo.flush()
        assert repo.stats().nodes["episodic"] == 2
        assert repo.verify().ok
        repo.decay(threshold=0.0)
        summary = repo.forget("run-1")
        assert set(summary.deleted_ids) <= set(receipt.node_ids)
        assert repo.stats().ingestion_records == 0
        assert repo.stats().nodes["episodic"] == 0


# -- lost connections and timeouts ---------------------------------------------------------------


def _terminate(admin: psycopg.Connection[Any], application_name: str) -> int:
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (application_name,)
    ).fetchall()
    return len(rows)


def test_reads_survive_terminated_connections(
    open_backend: Callable[..., Postgres], admin: psycopg.Connection[Any]
) -> None:
    """After every pooled connection is killed server-side, reads and writes retry on fresh ones."""
    name = f"hg-{uuid.uuid4().hex[:8]}"
    backend = open_backend(application_name=name, min_connections=3, pool_size=3)
    backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    assert _hit_ids(backend) == ["a"]
    assert _terminate(admin, name) >= 1
    assert backend.get_node("a") is not None
    assert _hit_ids(backend) == ["a"]
    assert _terminate(admin, name) >= 1
    backend.apply_changeset(hg.Changeset().add_node(_sem("b")))
    assert _hit_ids(backend) == ["a", "b"]


def _lock_node(conn: psycopg.Connection[Any], schema: str, repo: str, node_id: str) -> None:
    conn.execute(
        f'SELECT 1 FROM "{schema}".nodes WHERE repo = %s AND id = %s FOR UPDATE',
        (repo, node_id.encode()),
    )


def test_a_write_whose_connection_dies_before_commit_is_retried_once(
    open_backend: Callable[..., Postgres], admin: psycopg.Connection[Any], pg_dsn: str, repo: str
) -> None:
    """A write killed mid-transaction certainly did not commit: it is retried and applied exactly once."""
    name = f"hg-{uuid.uuid4().hex[:8]}"
    backend = open_backend(application_name=name)
    backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    replacement = make_node(hg.NodeType.SEMANTIC, "a", vec(0, 1, 0, 0), proposition="replaced")
    with psycopg.connect(pg_dsn) as locker:
        _lock_node(locker, "hippograph", repo, "a")
        writing = ThreadPoolExecutor(1).submit(
            backend.commit_ingestion, make_record("src", node_ids=("a",)), hg.Changeset().add_node(replacement)
        )
        wait_for_lock_waiter(admin, name)
        assert _terminate(admin, name) >= 1
        locker.rollback()
    outcome, _ = writing.result(timeout=30)
    assert outcome is hg.Outcome.INSERTED
    assert backend.get_node("a") == replacement
    assert len(backend.get_nodes_by_type(["semantic"])) == 1


def test_a_statement_timeout_is_a_storage_error_and_writes_nothing(
    open_backend: Callable[..., Postgres], pg_dsn: str, repo: str
) -> None:
    """A write stuck behind a lock longer than statement_timeout fails with StorageError and is rolled back."""
    backend = open_backend(statement_timeout=0.5)
    backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    with psycopg.connect(pg_dsn) as locker:
        _lock_node(locker, "hippograph", repo, "a")
        with pytest.raises(StorageError, match="timed out"):
            backend.apply_changeset(hg.Changeset().add_node(_sem("b")).add_node(_sem("a", vec(0, 1, 0, 0))))
        locker.rollback()
    assert backend.get_node("b") is None
    node = backend.get_node("a")
    assert node is not None and node.embedding is not None and node.embedding.tobytes() == E1.tobytes()


@pytest.fixture
def commit_answer_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next COMMIT is executed, then its answer is 'lost' (as if the connection died right after)."""
    real = prepared.command
    armed = [True]

    def command(conn: psycopg.Connection[Any], text: bytes) -> None:
        real(conn, text)
        if text == b"COMMIT" and armed[0]:
            armed[0] = False
            raise psycopg.OperationalError("server closed the connection unexpectedly (simulated)")

    monkeypatch.setattr(prepared, "command", command)


def test_commit_ingestion_resolves_a_lost_commit_answer(
    open_backend: Callable[..., Postgres], commit_answer_lost: None
) -> None:
    """When COMMIT's answer is lost, commit_ingestion finds its own claim and still reports INSERTED."""
    backend = open_backend()
    record = make_record("src", node_ids=("a",))
    assert backend.commit_ingestion(record, hg.Changeset().add_node(_sem("a"))) == (hg.Outcome.INSERTED, record.receipt)
    assert backend.get_ingestion("src") == record
    again = make_record("src", node_ids=("a",), stored_at=NOW + timedelta(seconds=1))
    assert backend.commit_ingestion(again, hg.Changeset())[0] is hg.Outcome.EXISTING


def test_other_writes_report_a_lost_commit_answer(
    open_backend: Callable[..., Postgres], commit_answer_lost: None
) -> None:
    """Any other write whose COMMIT answer is lost raises StorageError saying the outcome is unknown."""
    backend = open_backend()
    with pytest.raises(StorageError, match="may or may not"):
        backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    assert backend.get_node("a") is not None  # it had committed


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with the pool's threads running
def test_a_forked_child_is_refused(open_backend: Callable[..., Postgres]) -> None:
    """Pooled connections belong to the parent: a call in a forked child raises StorageError."""
    backend = open_backend()
    backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            backend.get_node("a")
            os.write(write, b"no error")
        except StorageError:
            os.write(write, b"refused")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 64) == b"refused"
    assert backend.get_node("a") is not None


def test_random_concurrent_workload_keeps_links_consistent(open_backend: Callable[..., Postgres]) -> None:
    """Threads adding, linking, replacing and deleting at random leave every link mirrored between live nodes."""
    backends = [open_backend() for _ in range(3)]
    ids = [f"n{i:02d}" for i in range(30)]
    backends[0].apply_changeset(hg.Changeset().add_nodes([_sem(i) for i in ids]))

    def churn(seed: int) -> None:
        rng = random.Random(seed)
        backend = backends[seed % 3]
        for _ in range(60):
            a, b = rng.sample(ids, 2)
            roll = rng.random()
            if roll < 0.5:
                backend.apply_changeset(hg.Changeset().add_link(a, b, rng.choice(list(hg.EdgeType))))
            elif roll < 0.7:
                backend.delete_nodes([a])
            elif roll < 0.9:
                backend.apply_changeset(hg.Changeset().add_node(_sem(a)).add_link(a, b, "sibling"))
            else:
                backend.rewrite(hg.Changeset(), [b], [a])

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(churn, range(6)))
    nodes = {n.id: n for n in backends[1].get_nodes_by_type(["semantic"])}
    for node in nodes.values():
        for edge, others in node.links.items():
            for other in others:
                assert other in nodes
                assert node.id in nodes[other].links[edge]
    assert set(_hit_ids(backends[2])) == set(nodes)
    assert backends[2].verify_storage() == ([], 0)


def test_a_growing_repo_refreshes_the_planner_statistics_of_its_tables(
    open_backend: Callable[..., Postgres], schema: str, pg_dsn: str
) -> None:
    backend = open_backend(schema=schema)

    def analysed() -> int:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT analyze_count FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'nodes'", (schema,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    cs = hg.Changeset()
    for i in range(400):
        cs.add_node(_sem(f"n{i:04d}"))
    backend.apply_changeset(cs)
    assert backend._statistics.runs == 0  # below the first threshold
    cs = hg.Changeset()
    for i in range(400, 600):
        cs.add_node(_sem(f"n{i:04d}"))
    backend.apply_changeset(cs)
    backend._statistics.close()  # waits for the refresh the write started
    assert backend._statistics.runs == 1
    deadline = time.monotonic() + 10  # the statistics collector reports the count a little later
    while analysed() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert analysed() >= 1
    backend.apply_changeset(cs)  # 200 rows again: 800 written, the next refresh waits for 1,200
    assert backend._statistics.runs == 1


def test_a_table_that_fills_late_gets_its_own_refresh(
    open_backend: Callable[..., Postgres], schema: str, pg_dsn: str
) -> None:
    """Links written after a bulk load of nodes reach their own threshold: their empty-table plans
    would otherwise stay cached until the whole store doubled again."""
    backend = open_backend(schema=schema)
    refreshed: list[list[str]] = []
    analyze = backend._statistics._analyze
    backend._statistics._analyze = lambda tables: (refreshed.append(list(tables)), analyze(tables))
    cs = hg.Changeset()
    for i in range(1200):
        cs.add_node(_sem(f"n{i:04d}"))
    backend.apply_changeset(cs)
    backend._statistics.close()
    assert refreshed and "links" not in refreshed[-1] and "nodes" in refreshed[-1]
    cs = hg.Changeset()
    for i in range(0, 1200, 4):  # 300 links, each stored in both directions: 600 rows
        cs.add_link(f"n{i:04d}", f"n{i + 1:04d}", "sibling")
    backend.apply_changeset(cs)
    backend._statistics.close()
    assert refreshed[-1] == ["links"]

    def analysed(table: str) -> int:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT analyze_count FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s", (schema, table)
            ).fetchone()
        return 0 if row is None else int(row[0])

    deadline = time.monotonic() + 10  # the statistics collector reports the count a little later
    while analysed("links") == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert analysed("links") >= 1
