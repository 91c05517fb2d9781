"""Saving a store's scoring columns and memory-mapping them at open (the LMDB backend keeps them
beside the store, under ``columns/``).

A save writes one *set*: a fresh directory ``columns/<token>/`` holding, per type with rows, the
ids in row order (``<type>.id_bytes.npy``, their UTF-8 bytes back to back, and
``<type>.id_ends.npy``, where each id ends) and one ``.npy`` file per column (the vectors, their
norms, the usage columns, the half-precision shadow, the tie-break keys), each with room for more
rows than it holds; then, last, ``columns/columns.json`` names the set, the store change it
reflects, the dimension, each type's row count, and every file's size and SHA-256. Files are
written privately (mode 0600), fsynced and never changed once named: a reader never sees a set
half-written, and an older set another process still maps is only removed once it is old.

`read` trusts the sidecar only after checking it and every file's size, shape and dtype; the
arrays are mapped copy-on-write (``np.load(mmap_mode="c")``, never pickle), so processes opening
one store share the pages until they write a row; ids are decoded only when asked for
(`mapped_ids.MappedIds`). The caller compares a sample of rows with the
store and replays the change log since the saved change; `verify` then hashes every file, off
the read path. docs/lmdb.md ("Saved columns") describes the whole protocol.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .files import fsync_dir, read_sidecar
from .mapped_ids import MappedIds, encode_ids
from .rows import VectorDtype

__all__ = ["COLUMNS_FORMAT", "SAVE_MIN_ROWS", "Saved", "SavedType", "read", "save", "verify"]

COLUMNS_FORMAT = 2
"""Version of the saved-columns file set; a sidecar naming another version is never read."""

SAVE_MIN_ROWS = 10_000
"""A store with fewer rows rebuilds its columns faster than it would map them: nothing is saved."""

SIDECAR = "columns.json"
_CHUNK = 1 << 22
_OLD_SET_S = 3600.0
"""Seconds after which a set no sidecar names is removed (a process may still be opening it before)."""

ARRAYS: dict[str, tuple[str, bool]] = {
    "matrix": ("<f4", True),
    "norms": ("<f4", True),
    "half": ("<u2", True),
    "residual": ("<f4", True),
    "has_meta": ("|u1", True),
    "timestamp": ("<f8", True),
    "access_count": ("<f8", True),
    "reward_count": ("<f8", True),
    "cumulative_reward": ("<f8", True),
    "rank": ("<u4", False),
}
"""Each saved column: its dtype and whether it has room for more rows (the tie-break keys do not)."""
ID_ARRAYS: dict[str, str] = {"id_bytes": "|u1", "id_ends": "<u8"}
"""The saved ids: their bytes and each id's end offset, with their dtypes."""


@dataclass
class SavedType:
    """One type's saved rows: ids in row order and its columns (mapped, copy-on-write)."""

    ids: list[str] | MappedIds
    """A list, or `MappedIds` (never written) as read."""
    arrays: dict[str, npt.NDArray[Any]]


@dataclass
class Saved:
    """A saved set as read: the store change it reflects, its types, and its files for `verify`."""

    seq: int
    types: dict[str, SavedType]
    files: dict[Path, tuple[int, str]]
    """Each file with its size and SHA-256, as the sidecar states them."""


def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest(), path.stat().st_size


def _private(path: Path) -> Any:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, "wb")


def save(
    types: Mapping[str, SavedType], directory: Path, seq: int, dim: int, vector_dtype: VectorDtype = "float32"
) -> None:
    """Writes `types` as the set reflecting store change `seq` and names it in the sidecar, with
    the precision of its vectors (``float16``: the unit rows in ``half``, a matrix of width 0)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = f"{seq:016x}-{secrets.token_hex(6)}"
    target = directory / token
    target.mkdir(mode=0o700)
    files: dict[str, dict[str, Any]] = {}
    try:
        for name, saved in types.items():
            blob, ends = encode_ids(saved.ids)
            columns = {column: (saved.arrays[column], dtype) for column, (dtype, _) in ARRAYS.items()}
            columns |= {"id_bytes": (blob, ID_ARRAYS["id_bytes"]), "id_ends": (ends, ID_ARRAYS["id_ends"])}
            for column, (values, dtype) in columns.items():
                with _private(target / f"{name}.{column}.npy") as f:
                    np.save(f, np.ascontiguousarray(values, dtype=dtype))  # numbers: never pickled
                    f.flush()
                    os.fsync(f.fileno())
            for path in sorted(target.glob(f"{name}.*")):
                sha, size = _sha256(path)
                files[path.name] = {"bytes": size, "sha256": sha}
        fsync_dir(target)
        sidecar = {
            "format": COLUMNS_FORMAT,
            "seq": seq,
            "dim": dim,
            "vector_dtype": vector_dtype,
            "set": token,
            "types": {name: len(saved.ids) for name, saved in types.items()},
            "files": files,
        }
        tmp = directory / f".{token}.json.tmp"
        with _private(tmp) as f:
            f.write(json.dumps(sidecar, sort_keys=True).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / SIDECAR)
        fsync_dir(directory)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    _sweep(directory, token)


def _sweep(directory: Path, keep: str) -> None:
    """Removes sets (and sidecar temp files) no sidecar names once they are old."""
    cutoff = time.time() - _OLD_SET_S
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.name in (keep, SIDECAR):
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def saved_seq(directory: Path) -> int | None:
    """The store change the current set reflects (None: no readable sidecar)."""
    doc = read_sidecar(directory / SIDECAR)
    seq = None if doc is None else doc.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _valid(doc: dict[str, Any], dim: int, latest: int, kinds: set[str], vector_dtype: VectorDtype) -> bool:
    def count(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    types, files = doc.get("types"), doc.get("files")
    return (
        doc.get("format") == COLUMNS_FORMAT
        and count(doc.get("seq"))
        and doc["seq"] <= latest
        and doc.get("dim") == dim
        and doc.get("vector_dtype", "float32") == vector_dtype  # sets saved before the option hold float32
        and isinstance(doc.get("set"), str)
        and "/" not in doc["set"]
        and not doc["set"].startswith(".")
        and isinstance(types, dict)
        and set(types) <= kinds
        and all(count(v) for v in types.values())
        and isinstance(files, dict)
        and all(
            isinstance(v, dict) and count(v.get("bytes")) and isinstance(v.get("sha256"), str) for v in files.values()
        )
    )


def read(
    directory: Path, latest: int, dim: int, kinds: set[str], vector_dtype: VectorDtype = "float32"
) -> Saved | None:
    """The current set if its sidecar and every file pass the checks that cost no hashing (the
    saved change at most `latest`, the dimension `dim` and `vector_dtype`, known types, sizes, shapes, dtypes, id
    offsets in order and within the bytes; that the ids are distinct is checked when the caller
    first maps ids to rows); None otherwise. Hashes are left to `verify`."""
    doc = read_sidecar(directory / SIDECAR)
    if doc is None or not _valid(doc, dim, latest, kinds, vector_dtype):
        return None
    where = directory / doc["set"]
    stated = {where / name: (int(v["bytes"]), str(v["sha256"])) for name, v in doc["files"].items()}
    try:
        if any(path.stat().st_size != size for path, (size, _) in stated.items()):
            return None
        types: dict[str, SavedType] = {}
        for name, rows in doc["types"].items():
            ids = _mapped_ids(where, name, rows, stated)
            if ids is None:
                return None
            arrays: dict[str, npt.NDArray[Any]] = {}
            for column, (dtype, roomy) in ARRAYS.items():
                path = where / f"{name}.{column}.npy"
                if path not in stated:
                    return None
                # numpy refuses pickled objects by default. A plain view of the mapping: a slice of
                # `np.memmap` runs Python code (its `__getitem__`), a microsecond on every read.
                arr = np.load(path, mmap_mode="c").view(np.ndarray)
                width = {"matrix": 0 if vector_dtype == "float16" else dim, "half": dim}.get(column)
                shape_ok = arr.ndim == (1 if width is None else 2) and (width is None or arr.shape[1] == width)
                length_ok = arr.shape[0] >= rows if roomy else arr.shape[0] == rows
                if arr.dtype != np.dtype(dtype) or not shape_ok or not length_ok:
                    return None
                arrays[column] = arr
            if len({a.shape[0] for c, a in arrays.items() if ARRAYS[c][1]}) != 1:
                return None
            types[name] = SavedType(ids, arrays)
    except (OSError, ValueError):
        return None
    if len(stated) != sum(len(ID_ARRAYS) + len(ARRAYS) for _ in types):
        return None
    return Saved(int(doc["seq"]), types, stated)


def _mapped_ids(where: Path, name: str, rows: int, stated: Mapping[Path, object]) -> MappedIds | None:
    """A type's saved ids, mapped, if both files are stated, typed and sized for `rows` ids whose
    offsets never go back and end at the last byte."""
    got = {}
    for column, dtype in ID_ARRAYS.items():
        path = where / f"{name}.{column}.npy"
        if path not in stated:
            return None
        arr = np.load(path, mmap_mode="c")
        if arr.dtype != np.dtype(dtype) or arr.ndim != 1:
            return None
        got[column] = arr
    blob, ends = got["id_bytes"], got["id_ends"]
    if len(ends) != rows or (rows and (int(ends[-1]) != len(blob) or bool((ends[1:] < ends[:-1]).any()))):
        return None
    return MappedIds(blob, ends)


def verify(saved: Saved, cancelled: Callable[[], bool] = lambda: False) -> bool:
    """Whether every file still hashes to what the sidecar states (True also when cancelled)."""
    for path, (size, sha) in saved.files.items():
        if cancelled():
            return True
        try:
            got, got_size = _sha256(path)
        except OSError:
            return False
        if got != sha or got_size != size:
            return False
    return True
