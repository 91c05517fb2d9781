"""Links and embeddings of the PostgreSQL schema without foreign keys (migration 7): `write_graph`
locks the nodes they reference, a trigger deletes them with their node, and no interleaving of a
writer and a deleter leaves a row behind its node. Each race is staged with a second connection
holding the lock the backend's statement must wait for."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pg_server import pg_dsn, require_psycopg, wait_for_lock_waiter

require_psycopg()

import psycopg  # noqa: E402

import hippograph as hg  # noqa: E402
from hippograph.backends.postgres import Postgres, drop_repo  # noqa: E402
from hippograph.graph import codec  # noqa: E402
from hippograph.testing.graphs import make_node, vec  # noqa: E402

__all__ = ["pg_dsn"]

SCHEMA = "hippograph"
E1 = vec(1, 0, 0, 0)


def _sem(node_id: str, embedding: object = E1) -> hg.Node:
    return make_node(hg.NodeType.SEMANTIC, node_id, embedding)


@pytest.fixture
def repo() -> str:
    return f"links-{uuid.uuid4().hex}"


@pytest.fixture
def admin(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def backend(pg_dsn: str, repo: str) -> Iterator[Postgres]:
    name = f"hg-{uuid.uuid4().hex[:8]}"
    with Postgres(pg_dsn, repo=repo, application_name=name) as opened:
        yield opened


def _rows(admin: psycopg.Connection[Any], repo: str, node_id: str) -> tuple[int, int]:
    """Links touching `node_id` (either end) and embeddings of it, as stored."""
    key = node_id.encode()
    links = admin.execute(
        f'SELECT count(*) FROM "{SCHEMA}".links WHERE repo = %s AND (a = %s OR b = %s)', (repo, key, key)
    ).fetchone()
    embeddings = admin.execute(
        f'SELECT count(*) FROM "{SCHEMA}".embeddings WHERE repo = %s AND id = %s', (repo, key)
    ).fetchone()
    assert links is not None and embeddings is not None
    return int(links[0]), int(embeddings[0])


def _waiting(admin: psycopg.Connection[Any], backend: Postgres) -> None:
    wait_for_lock_waiter(admin, backend._runner.pool.kwargs["application_name"])


def _in_background(fn: Callable[[], Any]) -> Any:
    return ThreadPoolExecutor(1).submit(fn)


def _raced(
    admin: psycopg.Connection[Any],
    backend: Postgres,
    other: psycopg.Connection[Any],
    write: Callable[[], Any],
    commits: bool,
) -> None:
    """Runs `write` on `backend` until it waits for a lock `other`'s open transaction holds, then
    ends that transaction (commit or rollback) and lets the write finish."""
    writing = _in_background(write)
    _waiting(admin, backend)
    if commits:
        other.commit()
    else:
        other.rollback()
    writing.result(timeout=30)


def test_the_schema_keeps_no_foreign_keys_to_nodes_and_deletes_follow_them(
    backend: Postgres, admin: psycopg.Connection[Any], repo: str
) -> None:
    """No foreign key references `nodes`, yet a plain `DELETE FROM nodes` (what a release before
    migration 7 sends) still takes the node's links, both directions, and its embedding along."""
    backend.apply_changeset(hg.Changeset().add_nodes([_sem("a"), _sem("b")]).add_link("a", "b", "sibling"))
    keys = admin.execute(
        "SELECT count(*) FROM pg_constraint WHERE confrelid = %s::regclass AND contype = 'f' "
        "AND conrelid IN (%s::regclass, %s::regclass)",
        (f"{SCHEMA}.nodes", f"{SCHEMA}.links", f"{SCHEMA}.embeddings"),
    ).fetchone()
    assert keys == (0,)
    assert _rows(admin, repo, "a") == (2, 1)
    admin.execute(f'DELETE FROM "{SCHEMA}".nodes WHERE repo = %s AND id = %s', (repo, b"a"))
    assert _rows(admin, repo, "a") == (0, 0)
    assert _rows(admin, repo, "b") == (0, 1)
    assert backend.verify_storage() == ([], 0)


def test_a_deleter_waiting_for_a_linking_writer_deletes_the_new_link_too(
    backend: Postgres, admin: psycopg.Connection[Any], pg_dsn: str, repo: str
) -> None:
    """A writer has linked a node the backend is deleting (its KEY SHARE lock held, its link not
    committed yet): the delete waits, and once the link commits it is deleted with the node."""
    backend.apply_changeset(hg.Changeset().add_nodes([_sem("x"), _sem("y")]))
    with psycopg.connect(pg_dsn) as writer:
        writer.execute(f'SELECT 1 FROM "{SCHEMA}".nodes WHERE repo = %s AND id = %s FOR KEY SHARE', (repo, b"x"))
        writer.execute(
            f'INSERT INTO "{SCHEMA}".links (repo, a, edge, b) VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)',
            (repo, b"x", "sibling", b"y", repo, b"y", "sibling", b"x"),
        )
        _raced(admin, backend, writer, lambda: backend.delete_nodes(["x"]), True)
    assert backend.get_node("x") is None
    assert _rows(admin, repo, "x") == (0, 0)
    y = backend.get_node("y")
    assert y is not None and not y.links
    assert backend.verify_storage() == ([], 0)


@pytest.mark.parametrize("delete_commits", [True, False])
def test_a_link_to_a_node_being_deleted_waits_for_the_delete(
    backend: Postgres, admin: psycopg.Connection[Any], pg_dsn: str, repo: str, delete_commits: bool
) -> None:
    """A write linking its new node to one another transaction is deleting waits for that
    transaction: the node gone, the link is not written and the new node stands alone; the delete
    rolled back, the link is written both ways."""
    backend.apply_changeset(hg.Changeset().add_node(_sem("x")))
    with psycopg.connect(pg_dsn) as deleter:
        deleter.execute(f'DELETE FROM "{SCHEMA}".nodes WHERE repo = %s AND id = %s', (repo, b"x"))
        _raced(
            admin,
            backend,
            deleter,
            lambda: backend.apply_changeset(hg.Changeset().add_node(_sem("new")).add_link("new", "x", "sibling")),
            delete_commits,
        )
    new, x = backend.get_node("new"), backend.get_node("x")
    assert new is not None
    if delete_commits:
        assert not new.links and x is None
        assert _rows(admin, repo, "x") == (0, 0)
    else:
        assert x is not None and x.links == {hg.EdgeType.SIBLING: frozenset({"new"})}
        assert new.links == {hg.EdgeType.SIBLING: frozenset({"x"})}
    assert backend.verify_storage() == ([], 0)


@pytest.mark.parametrize("other_commits", [True, False])
def test_a_new_node_another_writer_is_inserting_is_put_once(
    backend: Postgres, admin: psycopg.Connection[Any], pg_dsn: str, repo: str, other_commits: bool
) -> None:
    """Two writers put the same new node: the backend's insert waits for the other's; if that one
    commits, the backend's write runs again as a re-put (its version wins, the other's links go);
    if it rolls back, the insert goes through."""
    backend.apply_changeset(hg.Changeset().add_node(_sem("y")))
    other = make_node(hg.NodeType.SEMANTIC, "n", vec(0, 1, 0, 0), proposition="other")
    with psycopg.connect(pg_dsn) as writer:
        writer.execute(
            f'INSERT INTO "{SCHEMA}".nodes (repo, id, type, record, created_at) VALUES (%s, %s, %s, %s, now())',
            (repo, b"n", "semantic", codec.encode_node(other)),
        )
        writer.execute(
            f'INSERT INTO "{SCHEMA}".links (repo, a, edge, b) VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)',
            (repo, b"n", "hierarchical", b"y", repo, b"y", "hierarchical", b"n"),
        )
        mine = _sem("n")
        _raced(
            admin,
            backend,
            writer,
            lambda: backend.apply_changeset(hg.Changeset().add_node(mine).add_link("n", "y", "sibling")),
            other_commits,
        )
    assert backend.get_node("n") == make_node(hg.NodeType.SEMANTIC, "n", E1, links={hg.EdgeType.SIBLING: {"y"}})
    assert _rows(admin, repo, "n") == (2, 1)
    assert backend.verify_storage() == ([], 0)


def test_a_re_put_node_loses_its_old_links_and_embedding(
    backend: Postgres, admin: psycopg.Connection[Any], repo: str
) -> None:
    backend.apply_changeset(
        hg.Changeset()
        .add_nodes([_sem("a"), _sem("b"), _sem("c")])
        .add_link("a", "b", "sibling")
        .add_link("c", "a", "sibling")
    )
    bare = make_node(hg.NodeType.SEMANTIC, "a", None)
    backend.apply_changeset(hg.Changeset().add_node(bare).add_link("a", "c", "hierarchical"))
    assert _rows(admin, repo, "a") == (2, 0)
    a, b = backend.get_node("a"), backend.get_node("b")
    assert a is not None and a.links == {hg.EdgeType.HIERARCHICAL: frozenset({"c"})}
    assert b is not None and not b.links
    assert backend.verify_storage() == ([], 0)


def test_verify_reports_links_and_embeddings_without_their_node(
    backend: Postgres, admin: psycopg.Connection[Any], repo: str
) -> None:
    backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
    admin.execute(
        f'INSERT INTO "{SCHEMA}".links (repo, a, edge, b) VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)',
        (repo, b"a", "sibling", b"ghost", repo, b"ghost", "sibling", b"a"),
    )
    admin.execute(
        f'INSERT INTO "{SCHEMA}".embeddings (repo, id, vec) VALUES (%s, %s, %s)',
        (repo, b"ghost", codec.encode_embedding(E1)),
    )
    problems, _ = backend.verify_storage()
    assert any("'ghost'" in p and "no node" in p for p in problems)
    assert any("embedding of 'ghost'" in p for p in problems)


def test_a_write_waiting_for_a_lock_leaves_other_threads_running(
    pg_dsn: str, repo: str, admin: psycopg.Connection[Any]
) -> None:
    """A write whose BEGIN and first statement went together (one pipeline) and that waits for a
    row lock waits with the interpreter lock released: this thread sees it waiting. Were the lock
    held, this thread would run again only once the write gave up (its statement timeout)."""
    name = f"hg-{uuid.uuid4().hex[:8]}"
    with Postgres(pg_dsn, repo=repo, application_name=name, statement_timeout=5.0) as backend:
        backend.apply_changeset(hg.Changeset().add_node(_sem("a")))
        with psycopg.connect(pg_dsn) as locker:
            locker.execute(f'SELECT 1 FROM "{SCHEMA}".nodes WHERE repo = %s AND id = %s FOR UPDATE', (repo, b"a"))
            writing = _in_background(
                lambda: backend.apply_changeset(hg.Changeset().add_node(_sem("a", vec(0, 1, 0, 0))))
            )
            _waiting(admin, backend)
            locker.rollback()
        writing.result(timeout=30)
        a = backend.get_node("a")
        assert a is not None and a.embedding is not None and a.embedding[1] == 1.0


def test_a_delete_outside_read_committed_is_refused(
    backend: Postgres, admin: psycopg.Connection[Any], pg_dsn: str, repo: str
) -> None:
    """Under REPEATABLE READ a deleter's snapshot could miss a link committed while it waited, so
    the trigger refuses the delete (SQLSTATE HG003) and nothing changes."""
    backend.apply_changeset(hg.Changeset().add_nodes([_sem("a"), _sem("b")]).add_link("a", "b", "sibling"))
    with psycopg.connect(pg_dsn) as deleter:
        deleter.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(psycopg.Error, match="READ COMMITTED") as raised:
            deleter.execute(f'DELETE FROM "{SCHEMA}".nodes WHERE repo = %s AND id = %s', (repo, b"a"))
        assert raised.value.sqlstate == "HG003"
    assert _rows(admin, repo, "a") == (2, 1)


def test_drop_repo_deletes_in_read_committed_whatever_the_default(
    backend: Postgres, admin: psycopg.Connection[Any], pg_dsn: str, repo: str
) -> None:
    backend.apply_changeset(hg.Changeset().add_nodes([_sem("a"), _sem("b")]).add_link("a", "b", "sibling"))
    strict = pg_dsn + ("&" if "?" in pg_dsn else "?") + "options=-c%20default_transaction_isolation%3Dserializable"
    assert drop_repo(strict, repo=repo)
    assert _rows(admin, repo, "a") == (0, 0) and _rows(admin, repo, "b") == (0, 0)


def test_large_writes_put_and_re_put_like_small_ones(
    backend: Postgres, admin: psycopg.Connection[Any], repo: str
) -> None:
    """Past 64 nodes and link rows a write runs as `write_graph_rows` (plans made for its arrays):
    the same rows as the small path, new and re-put nodes alike, on every call of a session."""
    ids = [f"n{i:03d}" for i in range(120)]
    for round_ in range(7):  # past the five calls after which PL/pgSQL may cache generic plans
        cs = hg.Changeset().add_nodes(
            [
                _sem(i, vec(1, round_, 0, 0)) if k % 3 else make_node(hg.NodeType.SEMANTIC, i, None)
                for k, i in enumerate(ids)
            ]
        )
        for k, i in enumerate(ids):
            cs.add_link(i, ids[(k + 1 + round_) % len(ids)], "sibling")
        backend.apply_changeset(cs)
        node = backend.get_node("n001")
        assert node is not None and node.links == {
            hg.EdgeType.SIBLING: frozenset({ids[(2 + round_) % len(ids)], ids[(len(ids) - round_) % len(ids)]})
        }
        assert node.embedding is not None and node.embedding[1] == round_
        assert backend.get_node("n000").embedding is None  # type: ignore[union-attr]
        assert backend.verify_storage() == ([], 0)
    links = admin.execute(f'SELECT count(*) FROM "{SCHEMA}".links WHERE repo = %s', (repo,)).fetchone()
    assert links == (2 * len(ids),)
