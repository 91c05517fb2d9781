"""What the LMDB backend checks before it trusts a store, and what `verify_storage` walks.

LMDB checksums nothing and trusts every page it reads, so a truncated or
damaged ``data.mdb`` would crash the process: opening refuses such a file, a
foreign LMDB environment, and an unknown storage format with `StorageError`
before any tree is read. Also here: creating a new store's directory 0700, and
the record-level walk behind `Repo.verify` (``docs/lmdb.md``, "Damaged files").
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import lmdb

from ... import _core
from ...errors import StorageError
from ...graph import codec
from .context import CONTEXT_DBS
from .entries import ENTRY_DBS
from .layout import _DBS, MAGIC, STORAGE_FORMAT, _logged_ids, _number, _vector_key
from .txn import _Txn

_CHECK_ATTEMPTS = 10
"""Snapshots to try when writers keep committing past the one being checked."""


def _check_data_file(path: Path, txnid: int) -> dict[str, Any] | None:
    """`_core.lmdb_check` over a read-only mapping of `path` (not LMDB's map, which trusts every page)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return _core.lmdb_check(b"", txnid)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return _core.lmdb_check(view, txnid)


def _private_dir(path: Path) -> None:
    """Creates the store directory and any missing parent 0700 (a parent such as `.hippograph/`
    lists repo names); an existing empty directory becomes a store, so it is tightened too."""
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    try:
        for directory in reversed(missing):
            directory.mkdir(mode=0o700, exist_ok=True)
        if not path.is_dir():
            raise StorageError(f"{str(path)!r} is not a directory", operation="open")
        if path.stat().st_uid == os.geteuid():
            path.chmod(0o700)
    except OSError as exc:
        raise StorageError(f"cannot create store directory {str(path)!r}: {exc}", operation="open") from None


def refuse_truncated(env: lmdb.Environment, path: Path) -> None:
    """A data file shorter than its last committed page would crash the process (SIGBUS) on read."""
    need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    have = (path / "data.mdb").stat().st_size
    if have < need:
        env.close()
        raise StorageError(f"{str(path)!r}: data.mdb is truncated ({have} of {need} bytes)", operation="open")


def refuse_damaged(env: lmdb.Environment, path: Path) -> None:
    """Checks every page before LMDB reads a tree: a damaged page would crash the process."""
    try:
        check_structure(env, path, "open")
    except StorageError:
        env.close()
        raise


def check_structure(env: lmdb.Environment, path: Path, operation: str) -> dict[str, Any]:
    """Walks every B-tree page of the store's current snapshot with `_core.lmdb_check`.

    LMDB checksums nothing and trusts the pages it reads. The read
    transaction held during the walk registers a reader, so writers in other
    processes cannot reuse the snapshot's pages meanwhile; its id names the
    meta page to check.
    """
    where = f"{str(path)!r}: data.mdb"
    for _ in range(_CHECK_ATTEMPTS):
        with env.begin() as txn:
            try:
                report = _check_data_file(path / "data.mdb", txn.id())
            except StorageError as exc:
                raise StorageError(f"{where} is corrupt: {exc}", operation=operation) from None
            except OSError as exc:
                raise StorageError(f"{where} cannot be read: {exc}", operation=operation) from None
        if report is not None:
            return report
    raise StorageError(
        f"{where} is corrupt: no meta page holds the current transaction "
        f"(or writers committed faster than {_CHECK_ATTEMPTS} checks could start)",
        operation=operation,
    )


def refuse_foreign(env: lmdb.Environment, path: Path) -> None:
    """An LMDB environment whose main database names anything but ours is someone else's."""
    with env.begin() as txn, txn.cursor() as cur:
        names = {bytes(k) for k in cur.iternext(keys=True, values=False)}
    foreign = names - {n.encode() for n in (*_DBS, *ENTRY_DBS, *CONTEXT_DBS)}
    if foreign:
        env.close()
        raise StorageError(
            f"{str(path)!r} is an LMDB environment of another application "
            f"(holds {sorted(foreign)[:3]!r}…), not a hippograph store",
            operation="open",
        )


def check_info(t: _Txn, path: Path) -> int | None:
    """The store's storage format (None: not initialised); refuses another application's file and
    an unknown format."""
    magic = t.get("info", b"magic")
    if magic is None:
        return None
    if magic != MAGIC:
        raise StorageError(f"{str(path)!r} is an LMDB file but not a hippograph store", operation="open")
    raw = t.get("info", b"format")
    version = -1 if raw is None else _number(raw, ">I", "format record")
    if version > STORAGE_FORMAT:
        raise StorageError(
            f"store {str(path)!r} has storage format {version}; this hippograph reads up to "
            f"{STORAGE_FORMAT} (upgrade hippograph)",
            operation="open",
        )
    if version < 1:
        raise StorageError(f"store {str(path)!r} has a corrupt format record", operation="open")
    return version


def storage_problems(t: _Txn) -> tuple[list[str], int]:
    """Every record decodes, embeddings have the recorded dimension, no embedding, links or log
    entry is left behind by a node that is gone. Returns (problems, ingestion records checked)."""
    problems: list[str] = []
    dim = t.dim()
    nodes = set()
    keyed: set[bytes] = set()  # nodes whose embedding, if any, is in ``emb`` under their key
    numbered: dict[bytes, bytes] = {}  # ``vectors`` key -> the key of the node naming it
    for key, data in t.items("nodes"):
        nodes.add(key)
        try:
            node_id = t.id_of(key)
            codec.decode_node(data, node_id, None, {})
            number = _core.node_vector(data)
        except StorageError as exc:
            problems.append(f"node {key.decode('utf-8', 'replace')!r}: {exc}")
            continue
        if number < 0:
            keyed.add(key)
        elif number > 0:
            if _vector_key(number) in numbered:
                problems.append(f"embedding number {number} named by two nodes")
            numbered[_vector_key(number)] = key

    def check_size(name: str, data: bytes) -> None:
        if dim is None or len(data) != 4 * dim:
            problems.append(f"embedding of {name} has {len(data)} bytes, dim {dim}")

    for key, data in t.items("emb"):
        if key not in keyed:
            problems.append(f"embedding without node: {key.decode('utf-8', 'replace')!r}")
        else:
            check_size(repr(key.decode("utf-8", "replace")), data)
    found = set()
    for key, data in t.items("vectors"):
        owner = numbered.get(key)
        if owner is None:
            problems.append(f"embedding without node: number {int.from_bytes(key, 'big')}")
        else:
            found.add(key)
            check_size(f"{owner.decode('utf-8', 'replace')!r} (number {int.from_bytes(key, 'big')})", data)
    for key in sorted(numbered.keys() - found):
        name = numbered[key].decode("utf-8", "replace")
        problems.append(f"node {name!r}: its embedding (number {int.from_bytes(key, 'big')}) is missing")
    for key, data in t.items("links"):
        if key not in nodes:
            problems.append(f"links without node: {key.decode('utf-8', 'replace')!r}")
        try:
            codec.decode_links(data)
        except StorageError as exc:
            problems.append(f"links of {key.decode('utf-8', 'replace')!r}: {exc}")
    for key, data in t.items("meta"):
        try:
            codec.decode_meta(data)
        except StorageError as exc:
            problems.append(f"metadata of {key.decode('utf-8', 'replace')!r}: {exc}")
    records = 0
    for key, data in t.items("ingest"):
        records += 1
        try:
            codec.decode_record(t.id_of(key), data)
        except StorageError as exc:
            problems.append(f"ingestion record {key.decode('utf-8', 'replace')!r}: {exc}")
    seq = t.seq()
    logged = []
    for key, data in t.items("log"):
        try:
            logged.append(_number(key, ">Q", "change log key"))
            _logged_ids(data)
        except StorageError as exc:
            problems.append(f"change log entry {key.hex()}: {exc}")
    newest = max(logged, default=seq)
    if newest != seq:
        problems.append(f"change log ends at {newest} but the change counter is {seq}")
    return problems, records
