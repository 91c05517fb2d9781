"""An LMDB store of storage format 1 (each embedding in ``emb`` under its node's key, node records
``[created_us, fields]``) reads the same in this version: opened read-only as it is, opened for
writing marked format 2, its nodes moving their embeddings to ``vectors`` as they are written
again, nothing lost and nothing left behind."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

import hippograph as hg
from hippograph import _core
from hippograph.backends import LMDB
from hippograph.backends.lmdb import layout
from hippograph.graph.model import NodeType

DIM = 8


def _nodes(n: int, seed: int) -> list[hg.Node]:
    rng = np.random.default_rng(seed)
    return [
        hg.Semantic(
            id=f"s{i:03d}",
            proposition=f"fact {i}",
            confidence=0.9,
            embedding=rng.standard_normal(DIM).astype(np.float32),
        )
        for i in range(n)
    ] + [hg.Tag(id="bare", label="no embedding")]


def _as_format_1(path: Path) -> None:
    """Rewrites the store as format 1 held it."""
    backend = LMDB(path, durability="fast")
    dbs, env = backend._dbs, backend._env
    with env.begin(write=True) as txn:
        for key, data in list(txn.cursor(db=dbs["nodes"])):
            head, (created, number, fields) = data[:2], msgpack.unpackb(data[2:], strict_map_key=False)
            if number is not None:
                vector = txn.pop(layout._vector_key(number), db=dbs["vectors"])
                txn.put(key, vector, db=dbs["emb"])
            txn.put(key, head + msgpack.packb([created, fields]), db=dbs["nodes"])
        txn.delete(b"vectors_next", db=dbs["info"])
        txn.put(b"format", struct.pack(">I", 1), db=dbs["info"])
        txn.drop(dbs["vectors"], delete=True)  # format 1 had no such database
    backend.close()


def _stored(backend: LMDB, ids: list[str]) -> dict[str, hg.Node]:
    return {i: n for i in ids if (n := backend.get_node(i)) is not None}


def _format(backend: LMDB) -> int:
    return int(backend._read(lambda t: struct.unpack(">I", t.get("info", b"format"))[0]))


def _answers(backend: LMDB, nodes: list[hg.Node]) -> list[list[str]]:
    return [
        [n.id for n, _ in backend.find_candidates([NodeType.SEMANTIC], q.embedding, [], None, exact=True)][:5]
        for q in nodes[:5]
    ]


def test_a_format_1_store_reads_the_same_and_moves_its_embeddings_as_nodes_are_written(tmp_path: Path) -> None:
    path = tmp_path / "store"
    nodes = _nodes(30, seed=1)
    backend = LMDB(path, durability="fast")
    backend.apply_changeset(hg.Changeset().add_nodes(nodes))
    before = _answers(backend, nodes)
    backend.close()
    _as_format_1(path)

    readonly = LMDB(path, readonly=True)
    assert _format(readonly) == 1, "a read-only open leaves the format alone"
    assert _stored(readonly, [n.id for n in nodes]) == {n.id: n for n in nodes}
    assert _answers(readonly, nodes) == before
    assert readonly.verify_storage()[0] == []
    readonly.close()

    backend = LMDB(path, durability="fast")
    assert _format(backend) == layout.STORAGE_FORMAT == 2
    assert _stored(backend, [n.id for n in nodes]) == {n.id: n for n in nodes}
    moved = [hg.Semantic(id=n.id, proposition="again", confidence=0.5, embedding=n.embedding) for n in nodes[:10]]
    backend.apply_changeset(hg.Changeset().add_nodes(moved))
    backend.delete_nodes([n.id for n in nodes[10:15]])
    kept = moved + nodes[15:]
    assert _stored(backend, [n.id for n in kept]) == {n.id: n for n in kept}
    assert _stored(backend, [n.id for n in nodes[10:15]]) == {}
    with backend._env.begin() as txn:
        assert txn.stat(backend._dbs["emb"])["entries"] == 15, "the nodes never written again keep theirs"
        assert txn.stat(backend._dbs["vectors"])["entries"] == 10
        numbers = {_core.node_vector(txn.get(layout._key(n.id), db=backend._dbs["nodes"])) for n in moved}
        assert numbers == set(range(1, 11))
    assert backend.verify_storage()[0] == []
    backend.close()
    reopened = LMDB(path, durability="fast")
    assert _stored(reopened, [n.id for n in kept]) == {n.id: n for n in kept}
    reopened.close()


def test_verify_names_an_embedding_left_behind_and_one_missing(tmp_path: Path) -> None:
    backend = LMDB(tmp_path / "store", durability="fast")
    backend.apply_changeset(hg.Changeset().add_nodes(_nodes(3, seed=2)))
    with backend._env.begin(write=True) as txn:
        txn.delete(layout._vector_key(2), db=backend._dbs["vectors"])
        txn.put(layout._vector_key(99), b"\x00" * 4 * DIM, db=backend._dbs["vectors"])
        txn.put(b"s000", b"\x00" * 4 * DIM, db=backend._dbs["emb"])
    problems, _ = backend.verify_storage()
    assert "node 's001': its embedding (number 2) is missing" in problems
    assert "embedding without node: number 99" in problems
    assert "embedding without node: 's000'" in problems
    backend.close()


def test_a_read_only_handle_that_predates_the_upgrade_refuses_numbered_embeddings(tmp_path: Path) -> None:
    """Another process upgrades the store and writes a node again while a read-only handle, opened
    on format 1 before the ``vectors`` database existed, stays open: reading that node's embedding
    is a `StorageError` asking to reopen, never the node without its embedding."""
    path = tmp_path / "store"
    nodes = _nodes(4, seed=3)
    backend = LMDB(path, durability="fast")
    backend.apply_changeset(hg.Changeset().add_nodes(nodes))
    backend.close()
    _as_format_1(path)
    readonly = LMDB(path, readonly=True)
    try:
        assert readonly.get_node("s000") == nodes[0]
        writer = (
            "import sys, numpy as np, hippograph as hg\n"
            "from hippograph.backends import LMDB\n"
            "b = LMDB(sys.argv[1], durability='fast')\n"
            "b.apply_changeset(hg.Changeset().add_node(hg.Semantic(id='s000', proposition='again', "
            "confidence=0.5, embedding=np.ones(8, np.float32))))\n"
            "b.close()\n"
        )
        subprocess.run([sys.executable, "-c", writer, str(path)], check=True, timeout=120)
        assert readonly.get_node("s001") == nodes[1], "a node still keyed reads as before"
        with pytest.raises(hg.StorageError, match="open it again"):
            readonly.get_node("s000")
    finally:
        readonly.close()
    reopened = LMDB(path, readonly=True)
    got = reopened.get_node("s000")
    assert got is not None and got.embedding is not None and np.array_equal(got.embedding, np.ones(DIM, np.float32))
    reopened.close()
