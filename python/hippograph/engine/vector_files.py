"""Saving and loading vector indexes (the LMDB backend keeps them beside the store).

One type's index is three files in a directory, each written to a private
temporary file, fsynced and renamed into place (mode 0600): ``<type>.bin``
(the engine's own file, deletion marks included), ``<type>.labels.msgpack`` (the
live labels in increasing order and their ids, as arrays: a UTF-8 blob and each id's
end offset, matched with the rows in Rust so that a million ids cost no Python
object each; and the index's regions when it had them: their centres,
radii and each live label's region; rows belong to the loading process's
`TypeColumns`, which gets the regions back for the ids unchanged since) and,
written last, ``<type>.json``: `ANN_FORMAT`, the type, the store change the
index reflects, dim, parameters, the engine and its version, counts, and the size and
hash of the other two (the labels file's SHA-256; the root of the graph file's SHA-256 hash
tree, `files.TreeHash`, whose leaves the core hashes on rayon's threads). `load` trusts
nothing it has not checked: the core engine maps the graph file copy-on-write and
hashes that mapping itself (what it uses is what was hashed, and the pages stay
shared between the processes that open it), on a second thread while the labels
file, once its own hash matched, is parsed; hnswlib only ever reads a private copy
of exactly the bytes that were hashed; any mismatch returns None and the caller
builds afresh. docs/architecture.md lists every check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np
import numpy.typing as npt

from .. import _core
from .._core import IdTable
from ..errors import StorageError, ValidationError
from . import calibration, vector_index
from .files import TreeHash, fsync_dir, read_sidecar
from .mapped_ids import MappedIds, encode_ids
from .regions import NO_REGION, Regions
from .vector_index import AnnConfig, VectorIndex

if TYPE_CHECKING:
    from .columns import TypeColumns

__all__ = [
    "ANN_FORMAT",
    "ChangedSince",
    "Saved",
    "SavedLabels",
    "SavedRegions",
    "adopt_saved",
    "load",
    "read_saved",
    "save",
]

ANN_FORMAT = 3
"""Version of the saved-index file set; a sidecar naming another version is never loaded (version 1
listed each label and id as a msgpack item and hashed the graph file whole; 2 keeps them as arrays;
3 verifies the graph file by the root of its SHA-256 hash tree)."""

ChangedSince = Callable[[int], "set[str] | None"]
"""`changed_since(seq)`: the ids changed after store change `seq` (None: the change log no longer reaches back)."""

_CHUNK = 1 << 20
_SAMPLE = 1024


def _paths(directory: Path, name: str) -> tuple[Path, Path, Path]:
    return directory / f"{name}.bin", directory / f"{name}.labels.msgpack", directory / f"{name}.json"


_TEMP_MAX_AGE = 3600.0
"""Seconds after which a temp file is a leftover of a killed save or load, not another process's work in progress."""


def _sweep(directory: Path, name: str) -> None:
    """Removes temp files of index `name` that a killed process left (each as large as the index)."""
    cutoff = time.time() - _TEMP_MAX_AGE
    with contextlib.suppress(OSError):
        for leftover in directory.glob(f".{name}.*.tmp"):
            with contextlib.suppress(OSError):
                if leftover.stat().st_mtime < cutoff:
                    leftover.unlink()


def _temp(directory: Path, name: str) -> Path:
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")  # mode 0600
    os.close(fd)
    return Path(tmp)


def _fsync_and_hash(path: Path) -> tuple[str, int]:
    digest = TreeHash()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
        os.fsync(f.fileno())
    return digest.hexdigest(), path.stat().st_size


def _write_private(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _mapping(ann: VectorIndex, regions: Regions | None) -> bytes:
    """The labels file: live labels (``<u8``) and their ids (a UTF-8 blob and each id's end offset,
    as `MappedIds` reads them), with each one's region when there are regions."""
    live = sorted(ann.id_of.items())
    labels = np.array([label for label, _ in live], np.int64)
    blob, ends = encode_ids([i for _, i in live])
    doc: dict[str, Any] = {
        "labels": labels.astype("<u8").tobytes(),
        "ids": blob.tobytes(),
        "ends": ends.astype("<u8").tobytes(),
    }
    if regions is not None:
        rows = ann.row_of_label[labels] if len(labels) else np.zeros(0, np.int64)
        placed = (rows >= 0) & (rows < len(regions.of_row))
        of_label = np.full(len(labels), NO_REGION, np.uint32)
        of_label[placed] = regions.of_row[rows[placed]]
        doc["regions"] = {
            "count": len(regions.cos_radius),
            "centres": np.ascontiguousarray(regions.centres, "<f4").tobytes(),
            "cos_radius": np.ascontiguousarray(regions.cos_radius, "<f8").tobytes(),
            "of_label": of_label.astype("<u4").tobytes(),
        }
    return bytes(msgpack.packb(doc))


def save(ann: VectorIndex, directory: Path, name: str, seq: int, regions: Regions | None = None) -> bool:
    """Writes `ann` (and the rows' `regions`) as the saved index `name` reflecting store change `seq`;
    False when nothing needed writing.

    The caller guarantees `ann` reflects exactly `seq` and that nothing adds to
    it meanwhile. When the files on disk already hold this very index (saved
    or loaded, unchanged since), only the sidecar's ``seq`` is moved forward,
    and the labels file rewritten when it lacks the regions computed since.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _sweep(directory, name)
    bin_path, map_path, json_path = _paths(directory, name)
    on_disk = read_sidecar(json_path)
    if ann.persisted is not None and on_disk is not None and on_disk.get("bin_tree_sha256") == ann.persisted[1]:
        with_regions = regions is not None and on_disk.get("regions") is not True
        if on_disk.get("seq") == seq and not with_regions:
            return False
        temps = [_temp(directory, name) for _ in range(2)]
        try:
            doc = {**on_disk, "seq": seq, "calibration": _calibration_doc(ann)}
            if with_regions:
                mapping = _mapping(ann, regions)
                _write_private(temps[1], mapping)
                doc |= {"labels_sha256": hashlib.sha256(mapping).hexdigest(), "labels_bytes": len(mapping)}
                doc["regions"] = True
                os.replace(temps[1], map_path)
            _write_private(temps[0], json.dumps(doc, sort_keys=True).encode())
            os.replace(temps[0], json_path)
        finally:
            for tmp in temps:
                tmp.unlink(missing_ok=True)
        fsync_dir(directory)
        ann.persisted = (seq, ann.persisted[1])
        return True
    live = len(ann.id_of)
    mapping = _mapping(ann, regions)
    temps = [_temp(directory, name) for _ in range(3)]
    try:
        with ann.lock:
            ann.index.save_index(str(temps[0]))
            count = int(ann.index.element_count)
        bin_sha, bin_bytes = _fsync_and_hash(temps[0])
        _write_private(temps[1], mapping)
        sidecar = {
            "format": ANN_FORMAT,
            "type": name,
            "seq": seq,
            "dim": ann.dim,
            "M": ann.config.M,
            "ef_construction": ann.config.ef_construction,
            "engine": vector_index.engine_version(ann.config),
            "count": count,
            "live": live,
            "regions": regions is not None,
            "bin_tree_sha256": bin_sha,
            "bin_bytes": bin_bytes,
            "labels_sha256": hashlib.sha256(mapping).hexdigest(),
            "labels_bytes": len(mapping),
            "calibration": _calibration_doc(ann),
        }
        _write_private(temps[2], json.dumps(sidecar, sort_keys=True).encode())
        os.replace(temps[0], bin_path)
        os.replace(temps[1], map_path)
        os.replace(temps[2], json_path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    fsync_dir(directory)
    ann.persisted = (seq, bin_sha)
    return True


def _calibration_doc(ann: VectorIndex) -> dict[str, Any] | None:
    """The index's calibration as sidecar JSON (None when it was never measured)."""
    return None if ann.calibration is None else dataclasses.asdict(ann.calibration)


def _valid_sidecar(doc: dict[str, Any], name: str, dim: int, config: AnnConfig, seq: int) -> bool:
    def integer(key: str) -> bool:
        value = doc.get(key)
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    def sha(key: str) -> bool:
        value = doc.get(key)
        return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)

    return (
        all(integer(k) for k in ("format", "seq", "dim", "M", "ef_construction", "count", "live"))
        and all(integer(k) for k in ("bin_bytes", "labels_bytes"))
        and sha("bin_tree_sha256")
        and sha("labels_sha256")
        and doc["format"] == ANN_FORMAT
        and doc.get("type") == name
        and doc["dim"] == dim
        and doc["M"] == config.M
        and doc["ef_construction"] == config.ef_construction
        and doc.get("engine") == vector_index.engine_version(config)
        and doc["seq"] <= seq
        and doc["live"] <= doc["count"]
    )


@dataclass(frozen=True)
class SavedRegions:
    """Regions saved with an index: `centres`, `cos_radius`, and the region of each live label in the
    labels file's order (`NO_REGION`: none)."""

    centres: npt.NDArray[np.float32]
    cos_radius: npt.NDArray[np.float64]
    of_label: npt.NDArray[np.uint32]


def _read_regions(got: object, dim: int, live: int) -> SavedRegions | None:
    """The regions of a labels file (None: it has none); ValueError when they are malformed."""
    if got is None:
        return None
    if not isinstance(got, dict):
        raise ValueError("regions")
    count, centres, radius, of_label = (got.get(k) for k in ("count", "centres", "cos_radius", "of_label"))
    if type(count) is not int or count < 1:
        raise ValueError("regions count")
    if not (isinstance(centres, bytes) and isinstance(radius, bytes) and isinstance(of_label, bytes)):
        raise ValueError("regions arrays")
    if len(centres) != 4 * count * dim or len(radius) != 8 * count or len(of_label) != 4 * live:
        raise ValueError("regions sizes")
    out = SavedRegions(
        np.frombuffer(centres, "<f4").reshape(count, dim).astype(np.float32),
        np.frombuffer(radius, "<f8").astype(np.float64),
        np.frombuffer(of_label, "<u4").astype(np.uint32),
    )
    in_range = (out.of_label < count) | (out.of_label == NO_REGION)
    if not (np.isfinite(out.centres).all() and np.isfinite(out.cos_radius).all() and in_range.all()):
        raise ValueError("regions values")
    return out


@dataclass(frozen=True)
class SavedLabels:
    """A labels file's contents: the i-th live label and its id (`table` finds an id's position), and
    the saved regions (if any)."""

    labels: npt.NDArray[np.int64]
    ids: MappedIds
    table: IdTable
    regions: SavedRegions | None


def _array(value: object, dtype: str, count: int) -> npt.NDArray[Any]:
    """`count` items of `dtype` packed in `value` (bytes); ValueError otherwise."""
    width = np.dtype(dtype).itemsize
    if not isinstance(value, bytes) or len(value) != width * count:
        raise ValueError("array size")
    return np.frombuffer(value, dtype)


def _read_mapping(path: Path, doc: dict[str, Any]) -> SavedLabels | None:
    """The verified labels file, its labels increasing and in range, its ids distinct."""
    raw = _labels_bytes(path, doc)
    return None if raw is None else _parse_mapping(raw, doc)


def _labels_bytes(path: Path, doc: dict[str, Any]) -> bytes | None:
    """The labels file's bytes when their size and SHA-256 are the sidecar's."""
    try:
        with path.open("rb") as f:
            raw = f.read(doc["labels_bytes"] + 1)
    except OSError:
        return None
    if len(raw) != doc["labels_bytes"] or hashlib.sha256(raw).hexdigest() != doc["labels_sha256"]:
        return None
    return raw


def _parse_mapping(raw: bytes, doc: dict[str, Any]) -> SavedLabels | None:
    try:
        mapping = msgpack.unpackb(raw, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if not isinstance(mapping, dict) or not isinstance(blob := mapping.get("ids"), bytes):
        return None
    live, count = doc["live"], doc["count"]
    try:
        labels = _array(mapping.get("labels"), "<u8", live)
        ends = _array(mapping.get("ends"), "<u8", live)
        regions = _read_regions(mapping.get("regions"), doc["dim"], live)
    except ValueError:
        return None
    # Offsets stepping through the whole blob: every id lies inside it (`MappedIds`, `IdTable`).
    if (int(ends[-1]) if live else 0) != len(blob) or (ends[1:] < ends[:-1]).any():
        return None
    if (live and int(labels[-1]) >= count) or (labels[1:] <= labels[:-1]).any():  # saved in increasing order
        return None
    ids = MappedIds(np.frombuffer(blob, np.uint8), ends.astype(np.uint64))
    try:
        table = IdTable(*ids.arrays)
    except ValueError:  # an id listed twice
        return None
    return SavedLabels(labels.astype(np.int64), ids, table, regions)


def _verified_copy(
    src: Path, directory: Path, name: str, size: int, expected: str, cancelled: Callable[[], bool] | None = None
) -> Path | None:
    """A private copy of `src` made of exactly the bytes hashed, when they match `expected`; else None
    (also when `cancelled()` turns true between chunks)."""
    try:
        tmp = _temp(directory, name)
    except OSError:  # a read-only store directory: copy elsewhere
        fd, other = tempfile.mkstemp(prefix=f"hippograph-{name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(other)
    digest = TreeHash()
    total = 0
    try:
        with src.open("rb") as f, tmp.open("wb") as out:
            while total <= size and (chunk := f.read(_CHUNK)):
                if cancelled is not None and cancelled():
                    total = -1
                    break
                total += len(chunk)
                digest.update(chunk)
                out.write(chunk)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    if total != size or digest.hexdigest() != expected:
        tmp.unlink(missing_ok=True)
        return None
    return tmp


@dataclass(frozen=True)
class Saved:
    """A saved index read and verified from its files, not yet checked against a store's rows."""

    hnsw: Any
    doc: dict[str, Any]
    mapping: SavedLabels


def read_saved(
    directory: Path, name: str, dim: int, config: AnnConfig, seq: int, cancelled: Callable[[], bool] | None = None
) -> Saved | None:
    """The saved index `name` as its engine reads it, after its sidecar (saved at most at `seq`), sizes and
    SHA-256 passed (no store access: the expensive part of `load`, which a background thread runs
    without any lock); None as well when `cancelled()` turns true while the file is copied."""
    if not vector_index.ann_available(config) or dim == 0:
        return None
    bin_path, map_path, json_path = _paths(directory, name)
    doc = read_sidecar(json_path)
    if doc is None or not _valid_sidecar(doc, name, dim, config, seq):
        return None
    if config.engine == "core":
        return _read_core(bin_path, map_path, doc, dim)
    mapping = _read_mapping(map_path, doc)
    if mapping is None:
        return None
    copy = _verified_copy(bin_path, directory, name, doc["bin_bytes"], doc["bin_tree_sha256"], cancelled)
    if copy is None:
        return None
    try:
        hnsw = vector_index.hnsw_index(dim, config, 0)
        hnsw.load_index(str(copy))
    except (RuntimeError, ValueError, MemoryError):
        return None
    finally:
        copy.unlink(missing_ok=True)
    if hnsw.element_count != doc["count"] or hnsw.dim != dim:
        return None
    return Saved(hnsw, doc, mapping)


def _read_core(bin_path: Path, map_path: Path, doc: dict[str, Any], dim: int) -> Saved | None:
    """The core's graph, mapped and hashed in Rust on a second thread while this one parses the labels
    file (once its hash matched: no graph is opened beside a damaged labels file)."""
    raw = _labels_bytes(map_path, doc)
    if raw is None:
        return None
    opened: list[Any] = []
    failed: list[BaseException] = []

    def open_graph() -> None:
        try:
            opened.append(_core.Hnsw.open(bin_path, doc["bin_tree_sha256"]))
        except (ValueError, OSError, StorageError):
            pass
        except BaseException as exc:  # re-raised below, where `read_saved` was called
            failed.append(exc)

    worker = threading.Thread(target=open_graph, name="hippograph-index-open", daemon=True)
    worker.start()
    try:
        mapping = _parse_mapping(raw, doc)
    finally:
        worker.join()
    if failed:
        raise failed[0]
    if mapping is None or not opened or opened[0].element_count != doc["count"] or opened[0].dim != dim:
        return None
    return Saved(opened[0], doc, mapping)


def adopt_saved(
    columns: TypeColumns, config: AnnConfig, saved: Saved, seq: int, changed_since: ChangedSince
) -> VectorIndex | None:
    """`saved` brought up to store change `seq` for `columns` (caller holds `columns` still), or None."""
    if saved.doc["seq"] > seq or saved.hnsw.dim != columns.dim:
        return None
    changed = set() if saved.doc["seq"] == seq else changed_since(saved.doc["seq"])
    if changed is None:
        return None
    return _adopt(columns, config, saved.hnsw, saved.doc, saved.mapping, changed)


def load(
    columns: TypeColumns, config: AnnConfig, directory: Path, name: str, seq: int, changed_since: ChangedSince
) -> VectorIndex | None:
    """The saved index `name` brought up to store change `seq` for `columns`, or None (build afresh instead).

    `changed_since(s)` returns the ids changed after store change `s` (up to
    `seq`), or None when the change log no longer reaches back that far (then
    the files are not even read). Every check is described in the module
    docstring; an engine only reads a file whose SHA-256 matched.
    """
    if not vector_index.ann_available(config) or columns.dim == 0:
        return None
    doc = read_sidecar(_paths(directory, name)[2])
    if doc is None or not _valid_sidecar(doc, name, columns.dim, config, seq):
        return None
    changed = set() if doc["seq"] == seq else changed_since(doc["seq"])
    if changed is None:
        return None
    saved = read_saved(directory, name, columns.dim, config, seq)
    if saved is None or saved.doc["seq"] != doc["seq"]:  # replaced meanwhile by another process's save
        return None
    return adopt_saved(columns, config, saved, seq, lambda since: changed)


def _adopt(
    columns: TypeColumns,
    config: AnnConfig,
    hnsw: Any,
    doc: dict[str, Any],
    mapping: SavedLabels,
    changed: set[str],
) -> VectorIndex | None:
    """Wraps a verified graph, replays `changed` ids and checks it against `columns`; None on mismatch.
    Saved regions go back to `columns` (when it has none) for the ids unchanged since.

    Saved ids meet rows as arrays (`IdTable`): no object per id is made here."""
    count, labels = doc["count"], mapping.labels
    row_ids = encode_ids(columns.ids)
    at_row = mapping.table.positions(*row_ids)  # per row: its id's position in the labels file
    n = len(at_row)
    row_of = np.full(len(labels), -1, np.int64)  # per saved id: its row (-1: none)
    listed = np.flatnonzero(at_row >= 0)
    row_of[at_row[listed]] = listed
    if np.count_nonzero(row_of >= 0) != len(listed):  # two rows of one id
        return None
    embedded = columns.norms()[:n] > 0
    stale = row_of < 0  # saved ids whose row is gone or has no vector
    stale[~stale] = ~embedded[row_of[~stale]]
    changed_rows, changed_saved = _changed_masks(changed, row_ids, mapping)
    if (stale & ~changed_saved).any() or (embedded & (at_row < 0) & ~changed_rows).any():
        return None
    ann = VectorIndex(columns.dim, config, capacity=max(count, n), hnsw=hnsw)
    ann.next_label = count
    ann.reclaimable = count - len(labels)
    ann.persisted = (doc["seq"], doc["bin_tree_sha256"])  # until the replay below changes anything
    calibration.restore(doc.get("calibration"), ann)
    # A changed id keeps its label only while its stored vector is still its current one;
    # the unchanged ones are sampled (a foreign or mismatched store fails here).
    recheck = np.flatnonzero(changed_saved & ~stale)
    unchanged = np.flatnonzero(~changed_saved)
    probe = np.concatenate([recheck, unchanged[:: max(1, len(unchanged) // _SAMPLE)]])
    keep = ~stale
    if len(probe):
        try:
            same = ann.holds(labels[probe].tolist(), columns.vectors(row_of[probe]))
        except (RuntimeError, ValidationError):  # a label live in the labels file, marked deleted in the graph
            return None
        if not same[len(recheck) :].all():
            return None
        keep[recheck[~same[: len(recheck)]]] = False
    dropped = labels[~keep]
    with ann.lock:
        for label in dropped.tolist():
            ann.index.mark_deleted(label)
    if len(dropped):
        ann.persisted = None
        ann.changes += len(dropped)
        ann.reclaimable += len(dropped)
    kept = bool(keep.all())
    ann.adopt_labels(mapping.ids if kept else itertools.compress(mapping.ids, keep.tolist()), labels[keep])
    ann.row_of_label[labels[keep]] = row_of[keep]
    covered = np.zeros(n, np.bool_)
    covered[row_of[keep]] = True
    missing = np.flatnonzero(embedded & ~covered)
    if len(missing):
        ann.add_many([columns.ids[r] for r in missing.tolist()], columns.vectors(missing), missing)
    ann.loaded = True
    if mapping.regions is not None and columns.regions is None:
        columns.regions = _regions_for(n, mapping.regions, row_of, changed_saved)
    return ann


def _changed_masks(
    changed: set[str], row_ids: tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]], saved: SavedLabels
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which rows, and which saved ids, are among `changed`."""
    if not changed:
        return np.zeros(len(row_ids[1]), np.bool_), np.zeros(len(saved.labels), np.bool_)
    table = IdTable(*encode_ids(list(changed)))
    return table.positions(*row_ids) >= 0, table.positions(*saved.ids.arrays) >= 0


def _regions_for(
    rows: int, saved: SavedRegions, row_of: npt.NDArray[np.int64], changed: npt.NDArray[np.bool_]
) -> Regions:
    """The saved regions over `rows` rows (`row_of`: each saved id's row, -1 for none): an id keeps its
    region only if its vector has not changed since the save (a changed or new row starts in none,
    as after any write)."""
    of_row = np.full(rows, NO_REGION, np.uint32)
    keep = (saved.of_label != NO_REGION) & ~changed & (row_of >= 0)
    of_row[row_of[keep]] = saved.of_label[keep]
    return Regions(saved.centres, saved.cos_radius, of_row)
