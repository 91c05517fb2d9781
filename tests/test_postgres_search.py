"""Server-side search on PostgreSQL (``search="server"``, pgvector): the same answers as the
in-process path, vectors kept in step by every writer, and a client that holds no vectors."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from pg_server import _offers_pgvector, pg_dsn, pgvector_dsn, require_psycopg

require_psycopg()

import hippograph as hg  # noqa: E402
from hippograph.backends.postgres import Postgres, drop_repo, upkeep, vectors  # noqa: E402
from hippograph.engine.checks import utcnow  # noqa: E402
from hippograph.errors import ConfigError  # noqa: E402
from hippograph.graph.changeset import Changeset  # noqa: E402
from hippograph.graph.value import DEFAULT_LAMBDA  # noqa: E402

__all__ = ["pg_dsn", "pgvector_dsn"]

DIM = 24
NOW = utcnow()
INDEXED = hg.AnnConfig(min_nodes=1, background=False, min_speedup=0.0)
"""Every type of two nodes or more gets an index, and its pools answer whatever the exact speed."""


@pytest.fixture
def schema(pgvector_dsn: str) -> Iterator[str]:
    """A schema of the test's own: whether it keeps vectors is up to the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def open_(dsn: str, schema: str, **options: Any) -> Postgres:
    return Postgres(dsn, repo="r", schema=schema, **options)


HUBS = np.random.default_rng(0).standard_normal((12, DIM))
"""The cluster centres every test's vectors and queries gather around."""


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    return (HUBS[rng.integers(0, len(HUBS), n)] + 0.35 * rng.standard_normal((n, DIM))).astype(np.float32)


def graph(seed: int, n: int = 600) -> Changeset:
    """Semantic and episodic nodes (some without an embedding, some with usage) and tags."""
    rng = np.random.default_rng(seed)
    vecs = clustered(rng, n)
    nodes: list[hg.Node] = []
    meta: dict[str, hg.NodeMetadata] = {}
    for i in range(n):
        emb = None if i % 17 == 0 else vecs[i]
        when = NOW - timedelta(hours=float(rng.integers(0, 5000)))
        if i % 3 == 0:
            nodes.append(
                hg.Episodic(
                    id=f"e{i:04d}",
                    embedding=emb,
                    created_at=when,
                    observation=f"o{i}",
                    action="a",
                    state="s",
                    subgoal="g",
                    reward=0.0,
                    trajectory_id="t",
                )
            )
        else:
            nodes.append(
                hg.Semantic(id=f"s{i:04d}", embedding=emb, created_at=when, proposition=f"p{i}", confidence=0.5)
            )
        if i % 4 == 0:
            meta[nodes[-1].id] = hg.NodeMetadata(
                created_at=when, access_count=int(rng.integers(0, 9)), last_accessed_at=when + timedelta(hours=3)
            )
    nodes += [hg.Tag(id=f"t{i}", embedding=vecs[i], label=f"tag {i}") for i in range(0, n, 50)]
    return Changeset(additions=nodes, metadata=meta)


def answers(b: Postgres, query: np.ndarray, tags: list[np.ndarray], *, vf: Any = None, exact: bool = True) -> list:
    types = ["semantic", "episodic", "tag"]
    return [(n.id, s) for n, s in b.find_candidates(types, query, tags, vf, now=NOW, exact=exact)]


def queries(seed: int, count: int, *, far: bool = False) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """Query vectors (every other one with a tag vector) among the stored ones, or `far` from all."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        q = rng.standard_normal(DIM).astype(np.float32) if far else clustered(rng, 1)[0]
        yield q, ([clustered(rng, 1)[0]] if i % 2 else [])


def test_exact_answers_equal_the_in_process_answers(pgvector_dsn: str, schema: str) -> None:
    server, client = open_(pgvector_dsn, schema, search="server"), open_(pgvector_dsn, schema)
    try:
        server.apply_changeset(graph(1))
        for q, tags in queries(2, 12):
            assert answers(server, q, tags) == answers(client, q, tags)
            assert answers(server, q, tags, exact=False) == answers(client, q, tags)  # no index: exact scans
    finally:
        server.close()
        client.close()


def test_index_path_finds_the_exact_answer_with_exact_scores(pgvector_dsn: str, schema: str) -> None:
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        client.apply_changeset(graph(3, 3000))
        assert set(server.build_vector_index()) == {"semantic", "episodic", "tag"}
        stats = server.vector_index_stats()
        assert all(stats[t]["index"] and stats[t]["available"] for t in ("semantic", "episodic", "tag")), stats
        assert all(stats[t]["recall"] >= 0.95 for t in ("semantic", "episodic", "tag")), stats
        found = wanted = 0
        for q, tags in queries(4, 30):
            truth = dict(answers(client, q, tags))
            got = answers(server, q, tags, exact=False)
            assert len(got) == len(truth)
            assert all(s == truth[i] for i, s in got if i in truth)  # a found node has its exact score
            found += len({i for i, _ in got} & truth.keys())
            wanted += len(truth)
        assert found / wanted >= 0.95, stats
        for q, tags in queries(5, 10, far=True):  # below every calibration sample's similarity: exact
            assert answers(server, q, tags, exact=False) == answers(client, q, tags)
    finally:
        server.close()
        client.close()


def test_the_floor_is_measured_on_the_pools_not_on_a_nearest_row_search(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HNSW search for a sample's nearest row may miss it and hand back a row of another cluster.
    Calibration's floor must not follow such a miss down: it is the least best similarity of the
    samples' own pools, so queries far from every memory stay on the exact ranking."""
    from hippograph.backends.postgres.ranked import Ranked

    data = graph(3, 3000)
    stored = np.array([n.embedding for n in data.additions if n.embedding is not None], np.float64)
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    hubs = HUBS / np.linalg.norm(HUBS, axis=1, keepdims=True)
    home = np.argmax(stored @ hubs.T, axis=1)

    def missed(self: Ranked, tx: Any, node_type: hg.NodeType, dim: int, v: np.ndarray, k: int) -> list[list[float]]:
        """Stored rows, but of the cluster least like `v`: a search stuck in the wrong region."""
        wrong = int(np.argmin(hubs @ v))
        return [list(row) for row in stored[home == wrong][:k]]

    monkeypatch.setattr(Ranked, "nearest", missed)
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        client.apply_changeset(data)
        server.build_vector_index(["semantic"])
        floor = server.vector_index_stats()["semantic"]["floor"]
        for q, tags in queries(5, 10, far=True):
            best = float(np.max(stored @ (q / np.linalg.norm(q))))  # its tag, if any, is near the data
            assert floor > best, (floor, best)
            assert answers(server, q, tags, exact=False) == answers(client, q, tags)
    finally:
        server.close()
        client.close()


class Confidence:
    """relevance × confidence: never above relevance, but it does not say so."""

    def score(self, relevance: float, node: hg.Node, metadata: hg.NodeMetadata | None, p: Mapping[str, Any]) -> float:
        return relevance * float(getattr(node, "confidence", 1.0))


class BoundedConfidence(Confidence):
    bounded_by_relevance = True


@pytest.mark.parametrize("function", [Confidence(), BoundedConfidence()], ids=["unbounded", "bounded"])
def test_custom_value_functions_answer_as_in_process(pgvector_dsn: str, schema: str, function: Any) -> None:
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        server.apply_changeset(graph(5, 400))
        server.build_vector_index()
        vf = {"function": function, "params": {"semantic": {"threshold": 0.1, "top_k": 7}}}
        for q, tags in queries(6, 6):
            assert answers(server, q, tags, vf=vf, exact=False) == answers(client, q, tags, vf=vf)
    finally:
        server.close()
        client.close()


def test_zero_scores_fill_up_in_id_order(pgvector_dsn: str, schema: str) -> None:
    b = open_(pgvector_dsn, schema, search="server")
    try:
        axis = np.eye(DIM, dtype=np.float32)
        nodes = [hg.Semantic(id=f"n{i}", embedding=axis[i % 2], proposition="p", confidence=1.0) for i in range(6)]
        nodes += [hg.Semantic(id="a", proposition="bare", confidence=1.0)]
        b.apply_changeset(Changeset(additions=nodes))
        got = b.find_candidates(["semantic"], axis[0], [], None, now=NOW)
        assert [(n.id, s) for n, s in got] == [
            ("n0", 1.0),
            ("n2", 1.0),
            ("n4", 1.0),
            ("a", 0.0),
            ("n1", 0.0),
            ("n3", 0.0),
            ("n5", 0.0),
        ]
    finally:
        b.close()


def test_a_writer_that_opened_before_the_vectors_sends_them(pgvector_dsn: str, schema: str) -> None:
    early = open_(pgvector_dsn, schema)
    try:
        axis = np.eye(DIM, dtype=np.float32)
        early.apply_changeset(
            Changeset(additions=[hg.Semantic(id="old", embedding=axis[0], proposition="p", confidence=1.0)])
        )
        server = open_(pgvector_dsn, schema, search="server")  # creates the vectors, copies "old"
        try:
            early.apply_changeset(
                Changeset(additions=[hg.Semantic(id="new", embedding=axis[1], proposition="p", confidence=1.0)])
            )
            for node_id, q in (("old", axis[0]), ("new", axis[1])):
                got = server.find_candidates(["semantic"], q, [], {"params": {"semantic": {"threshold": 0.5}}}, now=NOW)
                assert [n.id for n, _ in got] == [node_id]
        finally:
            server.close()
    finally:
        early.close()


def test_vectors_follow_rewrites_and_deletes(pgvector_dsn: str, schema: str) -> None:
    b = open_(pgvector_dsn, schema, search="server")
    try:
        axis = np.eye(DIM, dtype=np.float32)
        gate = {"params": {"semantic": {"threshold": 0.5}, "tag": {"threshold": 0.5}}}
        b.apply_changeset(
            Changeset(additions=[hg.Semantic(id="x", embedding=axis[0], proposition="p", confidence=1.0)])
        )
        b.apply_changeset(Changeset(additions=[hg.Tag(id="x", embedding=axis[0], label="now a tag")]))
        assert [n.id for n, _ in b.find_candidates(["semantic"], axis[0], [], gate)] == []
        assert [n.id for n, _ in b.find_candidates(["tag"], axis[0], [], gate)] == ["x"]
        b.apply_changeset(Changeset(additions=[hg.Tag(id="x", label="no vector")]))
        assert [n.id for n, _ in b.find_candidates(["tag"], axis[0], [], gate)] == []
        b.apply_changeset(Changeset(additions=[hg.Tag(id="x", embedding=axis[1], label="moved")]))
        assert [n.id for n, _ in b.find_candidates(["tag"], axis[1], [], gate)] == ["x"]
        b.delete_nodes(["x"])
        assert b.find_candidates(["tag"], axis[1], [], gate) == []
    finally:
        b.close()


def test_a_server_side_client_loads_no_vectors(pgvector_dsn: str, schema: str) -> None:
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        server.apply_changeset(graph(7, 300))
        server.build_vector_index()
        for q, tags in queries(8, 5):
            assert answers(server, q, tags, exact=False)
        assert server._cache.rebuilds == 0
        assert all(len(c) == 0 for c in server._cache.columns.values())
    finally:
        server.close()


def test_drop_repo_drops_its_indexes(pgvector_dsn: str, schema: str) -> None:
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    server.apply_changeset(graph(9, 100))
    server.build_vector_index()
    server.close()
    count = f"SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema}' AND indexname LIKE 'hg_hnsw_%'"
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        assert conn.execute(count).fetchone() == (6,)  # cosine and value-weighted, per type
        assert drop_repo(pgvector_dsn, repo="r", schema=schema)
        assert conn.execute(count).fetchone() == (0,)


def test_wide_vectors_are_searched_exactly(pgvector_dsn: str, schema: str) -> None:
    """pgvector indexes at most 2000 dimensions: wider stores are answered by exact server scans."""
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        rng = np.random.default_rng(10)
        vecs = rng.standard_normal((30, 2100)).astype(np.float32)
        server.apply_changeset(
            Changeset(
                additions=[
                    hg.Semantic(id=f"w{i}", embedding=v, proposition="p", confidence=1.0) for i, v in enumerate(vecs)
                ]
            )
        )
        assert server.build_vector_index() == []
        q = rng.standard_normal(2100).astype(np.float32)
        got = server.find_candidates(["semantic"], q, [], None, now=NOW)
        assert [(n.id, s) for n, s in got] == [
            (n.id, s) for n, s in client.find_candidates(["semantic"], q, [], None, now=NOW)
        ]
    finally:
        server.close()
        client.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"search": "remote"}, "search must be"),
        ({"search": "server", "server_ef_search": 0}, "server_ef_search"),
        ({"search": "server", "server_ef_search": 1001}, "server_ef_search"),
    ],
)
def test_options_are_checked_before_connecting(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Postgres("postgresql://nobody@127.0.0.1:1/none", **options)


def test_server_search_needs_pgvector(pg_dsn: str) -> None:
    """On a server without pgvector, ``search="server"`` is refused with ConfigError; with it, it opens."""
    repo = f"r{uuid.uuid4().hex[:12]}"
    if _offers_pgvector(pg_dsn):
        Postgres(pg_dsn, repo=repo, search="server").close()
        drop_repo(pg_dsn, repo=repo)
    else:
        with pytest.raises(ConfigError, match="pgvector"):
            Postgres(pg_dsn, repo=repo, search="server")
        drop_repo(pg_dsn, repo=repo)


def test_verify_checks_the_server_side_vectors(pgvector_dsn: str, schema: str) -> None:
    server = open_(pgvector_dsn, schema, search="server")
    try:
        server.apply_changeset(graph(11, 60))
        assert server.verify_storage()[0] == []
        table = f'"{schema}".vectors'
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {table} WHERE id = %s", (b"s0001",))
            conn.execute(f"UPDATE {table} SET type = 'tag' WHERE id = %s", (b"s0002",))
            conn.execute(f"UPDATE {table} SET vec = array_fill(0.5::real, ARRAY[{DIM}]) WHERE id = %s", (b"s0004",))
            valued = f'"{schema}".valued'
            conn.execute(f"DELETE FROM {valued} WHERE id = %s", (b"s0005",))
            conn.execute(f"UPDATE {valued} SET val = NULL WHERE id = %s", (b"s0008",))  # s0008 has usage
            conn.execute(f'ALTER TABLE "{schema}".metadata DISABLE TRIGGER USER')  # the usage alone changes
            conn.execute(f'UPDATE "{schema}".metadata SET accesses = accesses + 1 WHERE id = %s', (b"s0016",))
        assert sorted(server.verify_storage()[0]) == [
            "embedding of 's0001' has no server-side vector",
            "server-side vector of 's0002' is filed as 'tag', the node is 'semantic'",
            "server-side vector of 's0004' differs from its embedding",
            "server-side vector of 's0005' has no value-weighted vector",
            "usage columns of 's0016' disagree with its metadata",
            "value-weighted vector of 's0008' disagrees with its vector and usage",
            "value-weighted vector of 's0016' disagrees with its vector and usage",
        ]
    finally:
        server.close()


def test_a_running_process_builds_the_index_a_grown_type_needs(pgvector_dsn: str, schema: str) -> None:
    """In the background (the default), at open and again when a search finds the re-check due."""
    server = open_(pgvector_dsn, schema, search="server", ann=hg.AnnConfig(min_nodes=50))
    try:
        assert not server.vector_index_stats()["semantic"]["index"]
        server.apply_changeset(graph(12, 200))
        builder = server._builder
        assert builder is not None
        builder.next_check = 0.0  # due now rather than in five minutes
        q, tags = next(queries(13, 1))
        before = answers(server, q, tags, exact=False)
        assert builder.thread is not None
        builder.thread.join(timeout=120)
        stats = server.vector_index_stats()["semantic"]
        assert stats["index"] and stats["recall"] is not None
        assert answers(server, q, tags, exact=False) == before  # small and clustered: the same answer
    finally:
        server.close()


def test_a_writer_of_the_previous_release_is_refused_where_vectors_are_kept(pgvector_dsn: str, schema: str) -> None:
    """Its `write_graph` signature sends no vectors: refused (HG002), nothing written."""
    open_(pgvector_dsn, schema, search="server").close()
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                f'SELECT * FROM "{schema}".write_graph(%s, NULL, NULL, NULL, NULL, 4, ARRAY[%s]::bytea[], '
                "ARRAY['semantic'], ARRAY[%s]::bytea[], ARRAY[now()], ARRAY[%s]::bytea[], ARRAY[%s]::bytea[], "
                "'{}', '{}', '{}', '{}', '{}', '{}', '{}')",
                ("r", b"old", b"record", b"old", np.ones(4, "<f4").tobytes()),
            )
        assert caught.value.sqlstate == "HG002"
        assert conn.execute(f'SELECT count(*) FROM "{schema}".nodes').fetchone() == (0,)


def expected_weight(meta: hg.NodeMetadata) -> float:
    """The default value function's factor at `vectors.VALUE_REFERENCE`, as the server computes it."""
    ref = meta.created_at if meta.last_accessed_at is None else meta.last_accessed_at
    hours = (ref.timestamp() - vectors.VALUE_REFERENCE) / 3600
    usage = max(0.3, meta.access_count / (meta.access_count + 5))
    reward = 1.0 if meta.reward_count == 0 else 1 / (1 + math.exp(-meta.cumulative_reward / meta.reward_count))
    return math.exp(DEFAULT_LAMBDA * hours) * usage * reward


def weighted_rows(dsn: str, schema: str, current: bool = True) -> dict[str, tuple[str, np.ndarray | None]]:
    """Each node's weighted vector: its current one (a reweighed row's where it has one), or with
    `current` false the one its value-weighted index holds."""
    val = "coalesce(c.val, w.val)" if current else "w.val"
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT w.id, w.type, ({val})::real[] FROM "{schema}".valued w LEFT JOIN "{schema}".reweighed c '
            "ON c.repo = w.repo AND c.id = w.id WHERE w.repo = %s",
            ("r",),
        ).fetchall()
    return {bytes(k).decode(): (t, None if v is None else np.asarray(v, np.float32)) for k, t, v in rows}


def settled(dsn: str, schema: str) -> None:
    """Every pending row of the test's repo indexed (usage of a pending row rewrites it in place)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        upkeep.settle(conn, schema, "r", wait=True)


def reweighed_ids(dsn: str, schema: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(f'SELECT id FROM "{schema}".reweighed WHERE repo = %s', ("r",)).fetchall()
    return {bytes(k).decode() for (k,) in rows}


def test_weighted_vectors_follow_every_write(pgvector_dsn: str, schema: str) -> None:
    """Each embedded node's unit vector times its default-value weight; NULL without metadata."""
    b = open_(pgvector_dsn, schema, search="server")
    try:
        rng = np.random.default_rng(21)
        vecs = rng.standard_normal((4, DIM)).astype(np.float32)
        old = NOW - timedelta(days=400)
        meta = {
            "a": hg.NodeMetadata(created_at=old),
            "b": hg.NodeMetadata(
                created_at=old, access_count=7, last_accessed_at=NOW, cumulative_reward=1.5, reward_count=2
            ),
        }
        b.apply_changeset(
            Changeset(
                additions=[
                    hg.Semantic(id="a", embedding=vecs[0], proposition="p", confidence=1.0),
                    hg.Semantic(id="b", embedding=vecs[1], proposition="p", confidence=1.0),
                    hg.Tag(id="c", embedding=vecs[2], label="no metadata"),
                    hg.Tag(id="d", label="no vector"),
                ],
                metadata=meta,
            )
        )

        def check(expected: dict[str, tuple[str, np.ndarray, hg.NodeMetadata | None]]) -> None:
            got = weighted_rows(pgvector_dsn, schema)
            assert got.keys() == expected.keys()
            for node_id, (node_type, vec, m) in expected.items():
                assert got[node_id][0] == node_type
                if m is None:
                    assert got[node_id][1] is None
                else:
                    want = vec / np.linalg.norm(vec) * expected_weight(m)
                    np.testing.assert_allclose(got[node_id][1], want, rtol=1e-5)

        check(
            {"a": ("semantic", vecs[0], meta["a"]), "b": ("semantic", vecs[1], meta["b"]), "c": ("tag", vecs[2], None)}
        )
        settled(pgvector_dsn, schema)
        indexed = weighted_rows(pgvector_dsn, schema, current=False)
        used = hg.NodeMetadata(created_at=old, access_count=3, last_accessed_at=NOW)
        b.update_metadata({"a": used, "c": meta["a"]})
        check(
            {"a": ("semantic", vecs[0], used), "b": ("semantic", vecs[1], meta["b"]), "c": ("tag", vecs[2], meta["a"])}
        )
        # Usage that raised a's weight left its indexed row alone (no index insert, no dead version);
        # c's first metadata gave it its weight in place.
        assert reweighed_ids(pgvector_dsn, schema) == {"a"}
        np.testing.assert_array_equal(weighted_rows(pgvector_dsn, schema, current=False)["a"][1], indexed["a"][1])
        # Usage that lowers a weight rewrites the indexed row (it would sit above its score): a's, back
        # below what the index held, ends its reweighed row.
        shunned = hg.NodeMetadata(created_at=old, cumulative_reward=-4.0, reward_count=1)
        b.update_metadata({"a": shunned})
        check(
            {
                "a": ("semantic", vecs[0], shunned),
                "b": ("semantic", vecs[1], meta["b"]),
                "c": ("tag", vecs[2], meta["a"]),
            }
        )
        assert reweighed_ids(pgvector_dsn, schema) == set()
        settled(pgvector_dsn, schema)  # the lowered weight, pending, goes into the index
        b.update_metadata({"a": used})
        assert reweighed_ids(pgvector_dsn, schema) == {"a"}
        assert b.verify_storage()[0] == []
        b.delete_metadata(["b"])
        b.apply_changeset(Changeset(additions=[hg.Tag(id="a", embedding=vecs[3], label="moved")]))
        check({"a": ("tag", vecs[3], used), "b": ("semantic", vecs[1], None), "c": ("tag", vecs[2], meta["a"])})
        assert reweighed_ids(pgvector_dsn, schema) == set()  # a's new vector took its current weight
        b.apply_changeset(Changeset(additions=[hg.Tag(id="c", label="vector dropped")]))
        b.delete_nodes(["b"])
        check({"a": ("tag", vecs[3], used)})
    finally:
        b.close()


def around_one_centre(rng: np.random.Generator, n: int = 2000) -> tuple[np.ndarray, list[hg.Node]]:
    """A centre and `n` semantic nodes around it, alike in similarity: usage decides their order."""
    centre = rng.standard_normal(DIM).astype(np.float32)
    vecs = centre + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
    nodes: list[hg.Node] = [
        hg.Semantic(id=f"s{i:04d}", embedding=v, proposition="p", confidence=1.0) for i, v in enumerate(vecs)
    ]
    return centre, nodes


def served_around_one_centre(
    dsn: str, schema: str, seed: int, days: tuple[float, float]
) -> tuple[Postgres, Postgres, np.random.Generator, np.ndarray, list[hg.Node], dict[str, hg.NodeMetadata]]:
    """A server-search store and a client-search one over `around_one_centre`'s nodes, each written
    `days` (a range) before `NOW`, the HNSW indexes built at the calibration's first depth (top_k);
    the generator goes on from there."""
    server, client = open_(dsn, schema, search="server", ann=INDEXED), open_(dsn, schema)
    try:
        rng = np.random.default_rng(seed)
        centre, nodes = around_one_centre(rng)
        meta = {n.id: hg.NodeMetadata(created_at=NOW - timedelta(days=float(rng.uniform(*days)))) for n in nodes}
        client.apply_changeset(Changeset(additions=nodes, metadata=meta))
        server.build_vector_index()
        assert server.vector_index_stats()["semantic"]["depth"] == 20
    except BaseException:
        server.close()
        client.close()
        raise
    return server, client, rng, centre, nodes, meta


def test_weighted_pools_hold_the_nodes_usage_lifts(pgvector_dsn: str, schema: str) -> None:
    """Where every node is alike in similarity and usage decides, the value-weighted index hands out
    the best-scored nodes at a pool depth of top_k; the cosine index's nearest nodes would not. The
    few nodes without metadata (scored by relevance alone, so they lead) are found beside them."""
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        rng = np.random.default_rng(22)
        centre, nodes = around_one_centre(rng)
        meta = {
            n.id: hg.NodeMetadata(
                created_at=NOW - timedelta(days=float(rng.uniform(0, 720))), access_count=int(rng.integers(0, 30))
            )
            for i, n in enumerate(nodes)
            if i % 200
        }
        client.apply_changeset(Changeset(additions=nodes, metadata=meta))
        server.build_vector_index()
        stats = server.vector_index_stats()["semantic"]
        assert stats["available"] and stats["depth"] == 20, stats  # the calibration's first depth: top_k
        assert stats["pools"] == "value-weighted" and 0.0 < stats["floor"] <= 1.0, stats
        found = wanted = 0
        for _ in range(20):
            q = (centre + 0.3 * rng.standard_normal(DIM)).astype(np.float32)
            truth = dict(answers(client, q, [])[:20])
            got = [(i, s) for i, s in answers(server, q, [], exact=False) if i.startswith("s")]
            assert all(s == truth[i] for i, s in got if i in truth)
            found += len({i for i, _ in got} & truth.keys())
            wanted += len(truth)
            assert {i for i in truth if i not in meta} <= {i for i, _ in got}
        assert found / wanted >= 0.95
    finally:
        server.close()
        client.close()


def test_rows_stamped_after_now_do_not_crowd_the_pools(pgvector_dsn: str, schema: str) -> None:
    """A query "as of" a time before later writes: rows whose usage is stamped after `now` score as
    if used now, far below their weight in the value-weighted index, so they would fill every pool
    and push the best rows out. Such pools are not trusted; the answers are the exact ones."""
    server, client, rng, centre, _, _ = served_around_one_centre(pgvector_dsn, schema, 23, (0, 720))
    try:
        later = Changeset()
        for i, v in enumerate(centre + 0.9 * rng.standard_normal((60, DIM)).astype(np.float32)):
            later.add_node(hg.Semantic(id=f"later{i:02d}", embedding=v, proposition="p", confidence=1.0))
            later.put_metadata(f"later{i:02d}", hg.NodeMetadata(created_at=NOW + timedelta(days=540)))
        client.apply_changeset(later)
        for _ in range(10):
            q = (centre + 0.3 * rng.standard_normal(DIM)).astype(np.float32)
            assert answers(server, q, [], exact=False) == answers(client, q, [])
    finally:
        server.close()
        client.close()


def test_usage_that_lifts_rows_reaches_the_pools_without_touching_the_index(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows whose usage lifts them above every other keep their indexed weight (no index insert);
    the pools rank them from the reweighed rows, so answers stay the exact ones. A fold once they
    grow many writes them into the index, rebuilt, and the answers stay the same."""
    server, client, rng, centre, nodes, meta = served_around_one_centre(pgvector_dsn, schema, 25, (360, 720))
    try:
        settled(pgvector_dsn, schema)
        indexed = weighted_rows(pgvector_dsn, schema, current=False)
        lifted = {nodes[int(i)].id for i in rng.choice(len(nodes), 100, replace=False)}
        client.update_metadata(
            {i: hg.NodeMetadata(created_at=meta[i].created_at, access_count=20, last_accessed_at=NOW) for i in lifted}
        )
        assert reweighed_ids(pgvector_dsn, schema) == lifted
        assert all(
            np.array_equal(weighted_rows(pgvector_dsn, schema, current=False)[i][1], indexed[i][1]) for i in lifted
        )
        # A query vector and a tag vector of other lengths: scores take their cosines, not their products.
        probes = [
            (
                (centre + 0.3 * rng.standard_normal(DIM)).astype(np.float32),
                [(6.0 * (centre + 0.5 * rng.standard_normal(DIM))).astype(np.float32)],
            )
            for _ in range(10)
        ]
        for q, tags in probes:
            got = answers(server, q, tags, exact=False)
            assert got == answers(client, q, tags)
            assert {i for i, _ in got if i.startswith("s")} <= lifted  # the lifted rows lead every answer
        monkeypatch.setattr(upkeep, "FOLD_LEAST", 50)
        monkeypatch.setattr(upkeep, "FOLD_CHUNK", 16)  # several transactions
        leftover = vectors.value_index_name("r", hg.NodeType.SEMANTIC, DIM) + "_ccnew"
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:  # as a rebuild that died leaves it
            conn.execute(f'CREATE INDEX "{leftover}" ON "{schema}".valued (repo)')
        server.build_vector_index()  # a fold is due: 100 rows wait
        assert reweighed_ids(pgvector_dsn, schema) == set()
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            assert leftover not in vectors.existing_indexes(conn, schema, "r")
        now_indexed = weighted_rows(pgvector_dsn, schema, current=False)
        assert not any(np.array_equal(now_indexed[i][1], indexed[i][1]) for i in lifted)
        assert server.vector_index_stats()["semantic"]["pools"] == "value-weighted"
        for q, tags in probes:
            assert answers(server, q, tags, exact=False) == answers(client, q, tags)
        assert server.verify_storage()[0] == []
    finally:
        server.close()
        client.close()


def test_a_fold_while_usage_changes_loses_no_weight(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Usage writers keep raising (and lowering) weights of the rows a fold writes: each node's current
    weighted vector ends as its usage makes it, and no indexed one above its reweighed one."""
    server, client = open_(pgvector_dsn, schema, search="server", ann=INDEXED), open_(pgvector_dsn, schema)
    try:
        rng = np.random.default_rng(26)
        _, nodes = around_one_centre(rng, 1000)
        meta = {n.id: hg.NodeMetadata(created_at=NOW - timedelta(days=float(rng.uniform(360, 720)))) for n in nodes}
        client.apply_changeset(Changeset(additions=nodes, metadata=meta))
        server.build_vector_index()
        ids = [n.id for n in nodes[:300]]
        client.update_metadata({i: hg.NodeMetadata(created_at=meta[i].created_at, access_count=5) for i in ids})
        assert len(reweighed_ids(pgvector_dsn, schema)) == 300
        monkeypatch.setattr(upkeep, "FOLD_LEAST", 50)
        monkeypatch.setattr(upkeep, "FOLD_CHUNK", 8)
        errors: list[BaseException] = []
        done = threading.Event()

        def used(reward: float) -> Any:
            def change(_: str, m: hg.NodeMetadata | None) -> hg.NodeMetadata | None:
                if m is None:
                    return None
                return dataclasses.replace(
                    m,
                    access_count=m.access_count + 1,
                    cumulative_reward=m.cumulative_reward + reward,
                    reward_count=m.reward_count + 1,
                )

            return change

        def use() -> None:
            picks = np.random.default_rng(27)
            try:
                while not done.is_set():
                    chosen = [ids[int(k)] for k in picks.choice(len(ids), 10, replace=False)]
                    client.modify_metadata(chosen, used(float(picks.uniform(-3, 3))))
                    rounds.release()
            except BaseException as exc:  # reported below
                errors.append(exc)
                rounds.release()

        rounds = threading.Semaphore(0)
        writer = threading.Thread(target=use)
        writer.start()
        try:
            assert rounds.acquire(timeout=60)  # writing before the fold starts
            server.build_vector_index()
            while rounds.acquire(blocking=False):
                pass
            assert rounds.acquire(timeout=60)  # and after it ends
        finally:
            done.set()
            writer.join(timeout=60)
        assert errors == []
        assert server.verify_storage()[0] == []
    finally:
        server.close()
        client.close()


def test_a_schema_enabled_by_an_earlier_release_gains_its_weighted_vectors(pgvector_dsn: str, schema: str) -> None:
    b = open_(pgvector_dsn, schema, search="server")
    b.apply_changeset(graph(23, 120))
    b.close()
    before = weighted_rows(pgvector_dsn, schema)
    assert len(before) > 100
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:  # as the earlier release left it
        s = f'"{schema}"'
        conn.execute(f"DROP TABLE {s}.reweighed, {s}.valued")
        conn.execute(f"DROP FUNCTION {s}.hg_valued_of_vector() CASCADE")
        conn.execute(f"DROP FUNCTION {s}.hg_valued_of_usage() CASCADE")
        conn.execute(f"DROP FUNCTION {s}.hg_valued, {s}.hg_weight, {s}.hg_heavier")
    b = open_(pgvector_dsn, schema, search="server")
    try:
        after = weighted_rows(pgvector_dsn, schema)
        assert after.keys() == before.keys()
        for node_id, (node_type, vec) in before.items():
            assert after[node_id][0] == node_type
            assert (vec is None) == (after[node_id][1] is None)
            if vec is not None:
                np.testing.assert_array_equal(after[node_id][1], vec)
    finally:
        b.close()


def test_a_schema_weighted_by_an_earlier_release_gains_its_reweighed_rows(pgvector_dsn: str, schema: str) -> None:
    """An earlier release wrote usage into the weighted rows themselves; opening adds the reweighed
    rows and their triggers, and usage from then on leaves the indexed rows alone."""
    b = open_(pgvector_dsn, schema, search="server")
    b.apply_changeset(graph(24, 40))
    b.close()
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:  # as that release left it
        conn.execute(f'DROP TABLE "{schema}".reweighed')
        conn.execute(f'DROP FUNCTION "{schema}".hg_heavier')
    b = open_(pgvector_dsn, schema, search="server")
    try:
        settled(pgvector_dsn, schema)  # indexed rows, not pending ones
        indexed = weighted_rows(pgvector_dsn, schema, current=False)
        b.update_metadata({"s0004": hg.NodeMetadata(created_at=NOW, access_count=9, last_accessed_at=NOW)})
        assert reweighed_ids(pgvector_dsn, schema) == {"s0004"}
        after = weighted_rows(pgvector_dsn, schema, current=False)
        np.testing.assert_array_equal(after["s0004"][1], indexed["s0004"][1])
        assert b.verify_storage()[0] == []
    finally:
        b.close()


def index_options(dsn: str, schema: str) -> dict[str, list[str]]:
    """The repo's HNSW indexes by name suffix (`_s`, `_ws`; an earlier release's `_w`, `_v` or the
    type's dimension), with their options."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname LIKE 'hg_hnsw_%%semantic%%'",
            (schema,),
        ).fetchall()
    return {name.rsplit("_", 1)[1]: sorted(options or []) for name, options in rows}


def test_the_value_weighted_index_is_denser_and_replaces_an_earlier_releases(pgvector_dsn: str, schema: str) -> None:
    """Its graph links twice the neighbours (an inner-product graph needs them to reach every row). A
    repo indexed by an earlier release keeps its sparse value-weighted index serving until the denser
    one is built, which then takes its place."""
    ann = hg.AnnConfig(min_nodes=1, background=False, min_speedup=0.0, M=8, ef_construction=40)
    server = open_(pgvector_dsn, schema, search="server", ann=ann)
    try:
        server.apply_changeset(graph(31, 300))
        server.build_vector_index(["semantic"])
        assert index_options(pgvector_dsn, schema) == {
            "s": ["ef_construction=40", "m=8"],
            "ws": ["ef_construction=80", "m=16"],
        }
        assert vectors.value_graph(64, 100) == (100, 200) and vectors.value_graph(60, 600) == (100, 1000)
        assert vectors.value_graph(16, 20) == (32, 64)  # ef_construction at least twice m
        # As an earlier release left it: the value-weighted index under its old name, built sparse.
        dense = vectors.value_index_name("r", hg.NodeType.SEMANTIC, DIM)
        sparse = vectors.earlier_value_index_names("r", hg.NodeType.SEMANTIC, DIM)[1]
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            conn.execute(f'DROP INDEX "{schema}"."{dense}"')
            conn.execute(
                f'CREATE INDEX "{sparse}" ON "{schema}".valued USING hnsw ((val::vector({DIM})) vector_ip_ops) '
                f"WITH (m = 8, ef_construction = 40) WHERE repo = 'r' AND type = 'semantic'"
            )
    finally:
        server.close()
    reader = open_(pgvector_dsn, schema, search="server", ann=None)  # builds nothing
    try:
        assert reader.vector_index_stats()["semantic"]["pools"] == "value-weighted"
        assert set(index_options(pgvector_dsn, schema)) == {"s", "v"}
    finally:
        reader.close()
    server = open_(pgvector_dsn, schema, search="server", ann=ann)
    try:
        assert index_options(pgvector_dsn, schema) == {
            "s": ["ef_construction=40", "m=8"],
            "ws": ["ef_construction=80", "m=16"],
        }
        assert server.vector_index_stats()["semantic"]["pools"] == "value-weighted"
        q, tags = next(queries(3, 1))
        assert answers(server, q, tags, exact=False)
    finally:
        server.close()


def pending_rows(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT (SELECT count(*) FROM "{schema}".vectors WHERE pending) '
            f'+ (SELECT count(*) FROM "{schema}".valued WHERE pending)'
        ).fetchone()
    return int(row[0]) if row else 0


def test_writes_land_pending_answered_exactly_until_they_settle(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write into an indexed type inserts no HNSW element: its rows are pending, which every pool
    scans exactly beside its index lists, until `settle` inserts them into the indexes."""
    from hippograph.backends.postgres import builder

    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        server.apply_changeset(graph(41, 600))
        server.build_vector_index(["semantic", "episodic"])
        assert pending_rows(pgvector_dsn, schema) == 0
        monkeypatch.setattr(builder.Settler, "nudge", lambda self: None)  # nothing settles meanwhile
        rng = np.random.default_rng(42)
        cs = Changeset()
        late = clustered(rng, 40)
        for j, vec in enumerate(late):
            cs.add_node(hg.Semantic(id=f"late{j:02d}", embedding=vec, proposition="p", confidence=1.0))
            cs.put_metadata(f"late{j:02d}", hg.NodeMetadata(created_at=NOW, access_count=50 + j, last_accessed_at=NOW))
        server.apply_changeset(cs)
        assert pending_rows(pgvector_dsn, schema) == 80  # the vectors and their weighted rows: no index insert
        for q, tags in queries(43, 10):
            assert answers(server, q, tags, exact=False) == answers(server, q, tags)
        found = 0
        for j, q in enumerate(late[:10]):
            got = answers(server, q, [], exact=False)
            assert got == answers(server, q, [])
            found += f"late{j:02d}" in {i for i, _ in got}
        assert found > 5  # pending rows answer
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            assert upkeep.settle(conn, schema, "r") == 80
        assert pending_rows(pgvector_dsn, schema) == 0
        for q, tags in queries(43, 10):
            assert answers(server, q, tags, exact=False) == answers(server, q, tags)
        assert server.verify_storage()[0] == []
    finally:
        server.close()


def test_the_settler_waits_for_a_pause_in_writes_at_most_its_longest(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows a write leaves pending settle in the background once writes pause, and no later than
    `Settler.LONGEST` after the write that woke it, however long the pause it waits for."""
    from hippograph.backends.postgres import builder

    monkeypatch.setattr(builder.Settler, "QUIET", 3600.0)
    monkeypatch.setattr(builder.Settler, "LONGEST", 0.2)
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        server.apply_changeset(graph(71, 200))
        server.build_vector_index(["semantic"])
        rng = np.random.default_rng(72)
        cs = Changeset()
        for j, vec in enumerate(clustered(rng, 5)):
            cs.add_node(hg.Semantic(id=f"burst{j}", embedding=vec, proposition="p", confidence=1.0))
        server.apply_changeset(cs)
        deadline = time.monotonic() + 60.0  # bounds the wait for the background thread, not its speed
        while pending_rows(pgvector_dsn, schema) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending_rows(pgvector_dsn, schema) == 0
    finally:
        server.close()


def test_settle_clears_every_type_in_chunks_that_resume_where_the_last_ended(
    pgvector_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending rows of two types, more than a chunk holds: one `settle` clears all of them, counts
    each once, and the answers stay the exact ones."""
    from hippograph.backends.postgres import builder

    monkeypatch.setattr(builder.Settler, "nudge", lambda self: None)
    monkeypatch.setattr(upkeep, "SETTLE_CHUNK", 3)
    monkeypatch.setattr(upkeep, "SETTLE_MOST", 7)
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        server.build_vector_index(["semantic", "episodic"])
        server.apply_changeset(graph(61, 300))
        waiting = pending_rows(pgvector_dsn, schema)
        assert waiting > 2 * 7  # rows of both tables and types, in many chunks
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            assert upkeep.settle(conn, schema, "r") == waiting
            assert upkeep.settle(conn, schema, "r") == 0
        assert pending_rows(pgvector_dsn, schema) == 0
        for q, tags in queries(62, 10):
            assert answers(server, q, tags, exact=False) == answers(server, q, tags)
    finally:
        server.close()


def test_a_schema_with_the_earlier_pending_index_gains_the_keyed_one(pgvector_dsn: str, schema: str) -> None:
    """The release before listed pending rows by (repo, type) alone; opening replaces that index with
    the one keyed by id that `settle` walks, and writes still settle."""
    open_(pgvector_dsn, schema, search="server").close()
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        s = f'"{schema}"'
        for table in ("vectors", "valued"):
            conn.execute(f"DROP INDEX {s}.{table}_pending_key")
            conn.execute(f"CREATE INDEX {table}_pending ON {s}.{table} (repo, type) WHERE pending")
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
            names = {
                name
                for (name,) in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname LIKE '%%pending%%'",
                    (schema,),
                ).fetchall()
            }
        assert names == {"vectors_pending_key", "valued_pending_key"}
        server.apply_changeset(graph(63, 60))
        settled(pgvector_dsn, schema)
        assert pending_rows(pgvector_dsn, schema) == 0
    finally:
        server.close()


def test_a_schema_without_pending_rows_is_upgraded_in_place(pgvector_dsn: str, schema: str) -> None:
    """As the release before the pending segment left it (no ``pending`` columns, indexes over every
    row under their earlier names): opening adds the columns, the earlier indexes serve meanwhile,
    writes land pending, and the next index check builds the new indexes and drops the old ones."""
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    server.apply_changeset(graph(51, 600))
    server.build_vector_index(["semantic"])
    server.close()
    cosine, (weighted, _) = (
        vectors.earlier_index_names("r", hg.NodeType.SEMANTIC, DIM)[0],
        vectors.earlier_value_index_names("r", hg.NodeType.SEMANTIC, DIM),
    )
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        s = f'"{schema}"'
        conn.execute(f"ALTER TABLE {s}.vectors DROP COLUMN pending CASCADE")
        conn.execute(f"ALTER TABLE {s}.valued DROP COLUMN pending CASCADE")
        conn.execute(f"DROP FUNCTION {s}.hg_pending() CASCADE")
        conn.execute(
            f'CREATE INDEX "{cosine}" ON {s}.vectors USING hnsw ((vec::vector({DIM})) vector_cosine_ops) '
            "WHERE repo = 'r' AND type = 'semantic'"
        )
        conn.execute(
            f'CREATE INDEX "{weighted}" ON {s}.valued USING hnsw ((val::vector({DIM})) vector_ip_ops) '
            "WITH (m = 32, ef_construction = 200) WHERE repo = 'r' AND type = 'semantic'"
        )
    assert set(index_options(pgvector_dsn, schema)) == {str(DIM), "w"}
    reader = open_(pgvector_dsn, schema, search="server", ann=None)  # builds nothing
    try:
        stats = reader.vector_index_stats()["semantic"]
        assert stats["index"] and stats["available"]
        rng = np.random.default_rng(52)
        cs = Changeset()
        for j, vec in enumerate(clustered(rng, 9)):
            cs.add_node(hg.Semantic(id=f"new{j}", embedding=vec, proposition="p", confidence=1.0))
            cs.put_metadata(f"new{j}", hg.NodeMetadata(created_at=NOW))
        reader.apply_changeset(cs)
        for q, tags in queries(53, 10):
            assert answers(reader, q, tags, exact=False) == answers(reader, q, tags)
        assert reader.verify_storage()[0] == []
    finally:
        reader.close()
    server = open_(pgvector_dsn, schema, search="server", ann=INDEXED)
    try:
        assert set(index_options(pgvector_dsn, schema)) == {"s", "ws"}
        assert pending_rows(pgvector_dsn, schema) == 0
        for q, tags in queries(53, 10):
            assert answers(server, q, tags, exact=False) == answers(server, q, tags)
    finally:
        server.close()
