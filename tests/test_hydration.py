"""Recall hands back each hit's current state although backends keep assembled or decoded nodes between calls.

InMemory keeps every node it assembled with its links, LMDB the nodes it
decoded as of its cache's change counter. Whatever changes a node, its links
or its neighbours (in this instance, another instance or another process),
the next `find_candidates` must show it, and no caller may alter what the
next one gets.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.backends.lmdb import cache as lmdb_cache
from hippograph.backends.lmdb.layout import _logged_ids, _seq_key
from hippograph.backends.lmdb.txn import _Txn

QUERY = np.array([1, 0, 0, 0], np.float32)
ALL: dict[str, Any] = {"params": {"semantic": {"threshold": -1.0, "top_k": 100}}}
S = hg.EdgeType.SIBLING
M = hg.EdgeType.MEMBERSHIP


def sem(node_id: str, proposition: str = "p", x: float = 1.0) -> hg.Semantic:
    return hg.Semantic(
        id=node_id, proposition=proposition, confidence=0.5, embedding=np.array([x, 1 - x, 0.1, 0], np.float32)
    )


def hits(b: hg.GraphBackend, vf: Mapping[str, Any] | None = None) -> dict[str, hg.Node]:
    return {n.id: n for n, _ in b.find_candidates(["semantic"], QUERY, [], vf or ALL, exact=True)}


def prop(node: hg.Node) -> str:
    assert isinstance(node, hg.Semantic)
    return node.proposition


def links(node: hg.Node) -> dict[hg.EdgeType, set[str]]:
    return {e: set(ids) for e, ids in node.links.items() if ids}


def abc() -> hg.Changeset:
    return hg.Changeset().add_nodes([sem("a", x=1.0), sem("b", x=0.9), sem("c", x=0.8)])


@pytest.fixture(params=["memory", "lmdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[InMemory | LMDB]:
    b: InMemory | LMDB = InMemory() if request.param == "memory" else LMDB(tmp_path / "store")
    yield b
    b.close()


def test_added_link_shows_on_both_ends(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc())
    assert all(links(n) == {} for n in hits(backend).values())
    backend.apply_changeset(hg.Changeset().add_link("a", "b", S))
    got = hits(backend)
    assert links(got["a"]) == {S: {"b"}} and links(got["b"]) == {S: {"a"}} and links(got["c"]) == {}
    backend.apply_changeset(hg.Changeset().add_link("c", "b", M))
    assert links(hits(backend)["b"]) == {S: {"a"}, M: {"c"}}


def test_replacing_a_node_shows_its_new_state_and_drops_its_neighbours_links(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc().add_link("a", "b", S).add_link("a", "c", M))
    assert links(hits(backend)["b"]) == {S: {"a"}}
    backend.apply_changeset(hg.Changeset().add_node(sem("a", "new", x=0.5)))
    got = hits(backend)
    assert prop(got["a"]) == "new" and links(got["a"]) == {}
    assert got["a"].embedding is not None and float(got["a"].embedding[0]) == 0.5
    assert links(got["b"]) == {} and links(got["c"]) == {}


def test_deleted_node_is_gone_and_leaves_no_link_behind(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc().add_link("a", "b", S).add_link("b", "c", S))
    assert set(hits(backend)) == {"a", "b", "c"}
    backend.delete_nodes(["b"])
    got = hits(backend)
    assert set(got) == {"a", "c"}
    assert links(got["a"]) == {} and links(got["c"]) == {}


def test_rewrite_orphans_are_gone_and_their_neighbours_relinked(backend: InMemory | LMDB) -> None:
    tag = hg.Tag(id="t", label="t", embedding=np.array([1, 0, 0, 0], np.float32))
    backend.apply_changeset(abc().add_node(tag).add_link("a", "t", M).add_link("a", "b", S))
    assert links(hits(backend)["a"]) == {M: {"t"}, S: {"b"}}
    assert backend.rewrite(hg.Changeset().add_link("a", "c", S), ["b"], ["t"]) == []
    assert links(hits(backend)["a"]) == {M: {"t"}, S: {"c"}}
    backend.apply_changeset(hg.Changeset().add_node(sem("a", x=0.7)))
    assert backend.rewrite(hg.Changeset(), [], ["t"]) == ["t"]
    got = hits(backend)
    assert links(got["a"]) == {} and links(got["c"]) == {}
    assert backend.find_candidates(["tag"], QUERY, [], None) == []


class Seen:
    """Value = the node's access count: what a custom value function reads from the metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, hg.NodeMetadata | None]] = []

    def score(self, relevance: float, node: hg.Node, metadata: hg.NodeMetadata | None, p: Mapping[str, Any]) -> float:
        self.calls.append((node.id, metadata))
        return 0.0 if metadata is None else float(metadata.access_count)


def test_custom_value_function_sees_current_metadata(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc())
    seen = Seen()
    vf = {"function": seen, "params": {"semantic": {"threshold": 0.5}}}

    def ranked() -> list[tuple[str, float]]:
        return [(n.id, s) for n, s in backend.find_candidates(["semantic"], QUERY, [], vf, exact=True)]

    assert ranked() == []
    assert sorted(seen.calls) == [("a", None), ("b", None), ("c", None)]
    backend.update_metadata({"b": hg.NodeMetadata(access_count=3), "c": hg.NodeMetadata(access_count=1)})
    assert ranked() == [("b", 3.0), ("c", 1.0)]
    backend.update_metadata({"c": hg.NodeMetadata(access_count=7)})
    assert ranked() == [("c", 7.0), ("b", 3.0)]
    backend.delete_metadata(["c"])
    assert ranked() == [("b", 3.0)]


def test_default_value_function_follows_metadata_changes(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(hg.Changeset().add_nodes([sem("a", x=1.0), sem("b", x=1.0)]))
    old = hg.NodeMetadata(created_at=hg.NodeMetadata().created_at.replace(year=2000))
    backend.update_metadata({"a": old, "b": old})
    top = backend.find_candidates(["semantic"], QUERY, [], {"params": {"semantic": {"top_k": 1}}}, exact=True)
    assert [n.id for n, _ in top] == ["a"]  # a tie: by id
    backend.update_metadata({"b": hg.NodeMetadata(access_count=50)})
    top = backend.find_candidates(["semantic"], QUERY, [], {"params": {"semantic": {"top_k": 1}}}, exact=True)
    assert [n.id for n, _ in top] == ["b"]


def test_hits_equal_get_node_and_are_shared_read_only(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc().add_link("a", "b", S))
    first, again = hits(backend), hits(backend)
    for node_id, node in first.items():
        assert node == backend.get_node(node_id) == again[node_id]
    mutable = first["a"].links
    with pytest.raises(TypeError):
        mutable[M] = frozenset({"c"})  # type: ignore[index]
    for change in (mutable.clear, lambda: mutable.pop(S), lambda: mutable.update({M: frozenset()})):  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            change()
    assert links(hits(backend)["a"]) == {S: {"b"}}
    assert links(backend.get_node("a")) == {S: {"b"}}  # type: ignore[arg-type]


def test_shared_nodes_pickle_and_copy_as_plain_nodes(backend: InMemory | LMDB) -> None:
    backend.apply_changeset(abc().add_link("a", "b", S))
    node = hits(backend)["a"]
    for other in (pickle.loads(pickle.dumps(node)), copy.deepcopy(node)):
        assert other == node and type(other.links) is dict
        assert isinstance(other.links, dict)
        other.links[M] = frozenset({"c"})  # the copy is the caller's own
    assert links(hits(backend)["a"]) == {S: {"b"}}


# -- LMDB: the change log names both ends of a link edit, and other writers --------------------


def logged(b: LMDB) -> tuple[int, list[str]]:
    """The store's change counter and the ids its last change-log entry names."""

    def read(t: _Txn) -> tuple[int, list[str]]:
        seq = t.seq()
        raw = t.get("log", _seq_key(seq))
        return seq, [] if raw is None else _logged_ids(raw)

    return b._read(read)


def test_lmdb_logs_both_ends_of_every_link_edit(tmp_path: Path) -> None:
    with LMDB(tmp_path / "store") as b:
        b.apply_changeset(abc())
        seq, _ = logged(b)
        b.apply_changeset(hg.Changeset().add_link("a", "b", S))
        assert logged(b) == (seq + 1, ["a", "b"])
        b.apply_changeset(hg.Changeset().add_link("b", "a", S))  # already there: nothing changes
        assert logged(b)[0] == seq + 1
        b.apply_changeset(hg.Changeset().add_link("c", "b", M))
        assert logged(b) == (seq + 2, ["b", "c"])
        b.apply_changeset(hg.Changeset().add_node(sem("b", "new")))  # drops b's links: a and c change too
        assert logged(b) == (seq + 3, ["a", "b", "c"])
        b.apply_changeset(hg.Changeset().add_link("a", "c", S))
        b.delete_nodes(["c"])
        assert logged(b) == (seq + 5, ["a", "c"])


def test_lmdb_write_by_another_instance_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with LMDB(path) as reader, LMDB(path) as writer:
        writer.apply_changeset(abc())
        assert all(links(n) == {} for n in hits(reader).values())
        writer.apply_changeset(hg.Changeset().add_link("a", "b", S))
        got = hits(reader)
        assert links(got["a"]) == {S: {"b"}} and links(got["b"]) == {S: {"a"}}
        writer.apply_changeset(hg.Changeset().add_node(sem("b", "replaced")))
        got = hits(reader)
        assert prop(got["b"]) == "replaced" and links(got["a"]) == {} and links(got["b"]) == {}
        writer.delete_nodes(["c"])
        assert set(hits(reader)) == {"a", "b"}


def test_lmdb_write_by_another_process_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with LMDB(path) as reader:
        reader.apply_changeset(abc().add_link("a", "b", S))
        assert links(hits(reader)["b"]) == {S: {"a"}}
        child = textwrap.dedent(
            """
            import sys
            import numpy as np
            import hippograph as hg
            from hippograph.backends import LMDB
            with LMDB(sys.argv[1]) as w:
                w.apply_changeset(hg.Changeset().add_link("c", "b", "membership"))
                w.apply_changeset(hg.Changeset().add_node(
                    hg.Semantic(id="a", proposition="moved", confidence=0.5, embedding=np.ones(4, np.float32))
                ))
                w.delete_nodes(["c"])
            """
        )
        done = subprocess.run([sys.executable, "-c", child, str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        got = hits(reader)
        assert set(got) == {"a", "b"}
        assert prop(got["a"]) == "moved" and links(got["a"]) == {} and links(got["b"]) == {}


def test_lmdb_rebuild_past_the_change_log_drops_kept_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hippograph.backends.lmdb import layout

    monkeypatch.setattr(layout, "LOG_KEEP", 2)
    path = tmp_path / "store"
    with LMDB(path) as reader, LMDB(path) as writer:
        writer.apply_changeset(abc())
        assert links(hits(reader)["a"]) == {}
        writer.apply_changeset(hg.Changeset().add_link("a", "b", S))
        for i in range(4):
            writer.apply_changeset(hg.Changeset().add_node(sem(f"x{i}", x=0.1)))
        assert links(hits(reader)["a"]) == {S: {"b"}}


def test_lmdb_older_snapshot_reads_its_own_state_and_keeps_nothing(tmp_path: Path) -> None:
    """A reader behind the cache decodes from its snapshot and adds nothing the cache would serve later."""
    with LMDB(tmp_path / "store") as b:
        b.apply_changeset(abc())
        hits(b)
        old_seq = b._cache.seq
        with b._env.begin() as old:
            b.apply_changeset(hg.Changeset().add_link("a", "b", S).add_node(sem("c", "new", x=0.8)))
            assert links(hits(b)["a"]) == {S: {"b"}}
            b._cache._nodes.clear()
            with b._cache_lock.read():
                got = b._cache.hydrate(_Txn(old, b._dbs), old_seq, ["a", "c"], True)
            assert links(got["a"][0]) == {} and prop(got["c"][0]) == "p"
            assert not b._cache._nodes
        now = hits(b)
        assert links(now["a"]) == {S: {"b"}} and prop(now["c"]) == "new"


def test_lmdb_kept_nodes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lmdb_cache, "NODES_KEPT", 5)
    with LMDB(tmp_path / "store") as b:
        b.apply_changeset(hg.Changeset().add_nodes([sem(f"n{i:02d}", x=i / 20) for i in range(20)]))
        assert len(hits(b)) == 20
        assert len(b._cache._nodes) == 5
        b.apply_changeset(hg.Changeset().add_link("n00", "n19", S))
        got = hits(b)
        assert links(got["n00"]) == {S: {"n19"}} and links(got["n19"]) == {S: {"n00"}}
        assert len(b._cache._nodes) == 5


def test_threads_recalling_during_writes_see_each_node_whole_and_never_older_than_acknowledged(
    backend: InMemory | LMDB,
) -> None:
    """Node `a` at version k is linked to `b{k}` alone: a hit mixing versions, or older than the
    last acknowledged write, would be a stale kept node."""
    import threading

    backend.apply_changeset(hg.Changeset().add_nodes([sem("a", "0"), *(sem(f"b{k}", x=0.2) for k in range(41))]))
    backend.apply_changeset(hg.Changeset().add_link("a", "b0", S))
    acknowledged = [0]
    errors: list[str] = []
    stop = threading.Event()

    def recall() -> None:
        while not stop.is_set():
            floor = acknowledged[0]
            node = hits(backend)["a"]
            version = int(prop(node))
            if version < floor or links(node) != {S: {f"b{version}"}}:
                errors.append(f"version {version} (acknowledged {floor}) with links {links(node)}")

    threads = [threading.Thread(target=recall) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for k in range(1, 41):
            backend.apply_changeset(hg.Changeset().add_node(sem("a", str(k))).add_link("a", f"b{k}", S))
            acknowledged[0] = k
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert prop(hits(backend)["a"]) == "40"
