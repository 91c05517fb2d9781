"""Approximate nearest-neighbour candidates (HNSW via hnswlib), as derived data.

An `AnnIndex` mirrors one node type's embeddings. It is only ever a source of
*candidates*: every candidate is rescored exactly in Rust, and the candidate
pool grows until the ranking is certified (see `certified_scan`), so the only
error left is the HNSW graph's own neighbour recall.

Guarantees, whatever the index holds:

- labels are stable integers, never rows; a label maps back to an id only
  while that id is live in the owning `TypeIndex`, so a deleted node can
  never be returned;
- re-embedding a node marks its old label deleted and adds a new one, so an
  old vector never ranks it;
- deletions are marks, counted as ``reclaimable`` until `rebuild` compacts.

hnswlib is not safe to add to while searching: the owning backend only adds
and marks under its write lock, and searches here run under `self.lock`.

Persistence (`save`, `load`; the LMDB backend uses them): one type's index is
three files in a directory, each written to a private temporary file, fsynced
and renamed into place (mode 0600):

- ``<type>.bin``: hnswlib's own index file (deletion marks included);
- ``<type>.labels.msgpack``: ``{"labels": [...], "ids": [...]}``, the live
  label → id map (rows are not stored: they belong to the loading process's
  `TypeIndex` and are looked up there);
- ``<type>.json``, written last: `ANN_FORMAT`, the type, the store change
  ``seq`` the index reflects, dim, M, ef_construction, the hnswlib version,
  the element and live counts, and the size and SHA-256 of the other two files.

`load` trusts nothing it has not checked: the sidecar must parse and match the
current dim, parameters and hnswlib version; both files must match their
SHA-256, and hnswlib only ever reads a private copy made of exactly the bytes
that were hashed (it has crashed on unverified files). The saved ``seq`` must
equal the store's, or the store's change log must still cover the gap; then
the changed ids are re-checked against their current embeddings. Finally
every live label must map to a current id, every embedded id must be present,
and a sample of stored vectors must equal the current ones. Anything else
returns None: the caller builds afresh. Two processes saving at once can
leave a mixed set of files; the hashes reject it and the next opener rebuilds.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
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

from ..errors import ConfigError

if TYPE_CHECKING:
    from .columns import TypeIndex

try:
    import hnswlib
except ImportError:  # pragma: no cover - hnswlib is a declared dependency
    hnswlib = None

__all__ = ["ANN_FORMAT", "DEFAULT_ANN", "AnnConfig", "AnnIndex", "ann_available", "load", "save"]

ANN_FORMAT = 1
"""Version of the saved-index file set; a sidecar naming another version is never loaded."""


def ann_available() -> bool:
    return hnswlib is not None


@dataclass(frozen=True)
class AnnConfig:
    """When and how to build HNSW indexes.

    `min_nodes`: a type holding more nodes than this (counted with or without
    an embedding) uses the index; below it the exact scan is faster. `M`, `ef_construction`, `ef_search`
    are hnswlib's parameters; `ef_search` is raised to the pool size per query. The certified
    rescoring makes a small `ef_search` enough on the benchmark data (recall@20 = 1.0 at 32); raise it
    when embeddings are spread thin and the answer must match the exact path more often.
    `threads`: hnswlib's build threads (0: hnswlib's default, all cores).
    `background`: a non-exact query that finds no index answers with the exact
    scan and starts building one in a background thread, which takes no lock
    while hnswlib works (a million nodes take minutes); writes made meanwhile
    are replayed into it before queries use it. False: that query builds the
    index first, holding up the store's other callers. `build_vector_index()`
    always builds at once.
    """

    min_nodes: int = 20_000
    M: int = 16
    ef_construction: int = 100
    ef_search: int = 32
    threads: int = 0
    background: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.background, bool):
            raise ConfigError(f"AnnConfig.background must be a bool, got {self.background!r}")
        for name, most in _ANN_LIMITS.items():
            value = getattr(self, name)
            least = 0 if name == "threads" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise ConfigError(f"AnnConfig.{name} must be an int from {least} to {most}, got {value!r}")


_ANN_LIMITS = {"min_nodes": 2**62, "M": 2048, "ef_construction": 1 << 20, "ef_search": 1 << 20, "threads": 4096}
"""Upper bounds of what reaches hnswlib, whose C++ would overflow or allocate without limit beyond them."""


DEFAULT_ANN: AnnConfig | None = AnnConfig() if hnswlib is not None else None
"""The built-in backends' default: HNSW above 20k nodes of a type, when hnswlib is installed."""


class AnnIndex:
    """One type's HNSW graph with stable labels."""

    def __init__(self, dim: int, config: AnnConfig, capacity: int, hnsw: Any = None) -> None:
        """An empty index, or (`hnsw`) one around an hnswlib index `load` has read and verified."""
        if hnswlib is None:  # pragma: no cover
            raise ConfigError("hnswlib is not installed; approximate recall is unavailable")
        self.dim = dim
        self.config = config
        self.lock = threading.Lock()
        if hnsw is None:
            hnsw = hnswlib.Index(space="cosine", dim=dim)
            hnsw.init_index(max_elements=max(capacity, 1024), M=config.M, ef_construction=config.ef_construction)
        self.index = hnsw
        if config.threads:
            self.index.set_num_threads(config.threads)
        self.label_of: dict[str, int] = {}
        self.id_of: dict[int, str] = {}
        self.row_of_label = np.full(max(capacity, 1024), -1, np.int64)
        self.next_label = 0
        self.reclaimable = 0
        self.loaded = False
        """True when this index was read from saved files rather than built here."""
        self.persisted: tuple[int, str] | None = None
        """(store seq, SHA-256 of the .bin) of the saved files this index equals, if any."""

    def __len__(self) -> int:
        return len(self.label_of)

    def _reserve(self, extra: int) -> None:
        need = self.index.element_count + extra
        cap = self.index.get_max_elements()
        if need > cap:
            self.index.resize_index(max(need, 2 * cap))

    def add_many(self, ids: list[str], vectors: npt.NDArray[np.float32], rows: npt.NDArray[np.int64]) -> None:
        """Adds (or re-adds under a fresh label) each id's vector at its row; zero vectors are skipped."""
        norms = np.linalg.norm(vectors, axis=1) if len(ids) else np.zeros(0)
        keep = [i for i in range(len(ids)) if norms[i] > 0]
        for node_id in ids:
            self.discard(node_id)
        if not keep:
            return
        self.persisted = None
        labels = np.arange(self.next_label, self.next_label + len(keep), dtype=np.int64)
        self.next_label += len(keep)
        self._reserve(len(keep))
        self.index.add_items(np.ascontiguousarray(vectors[keep]), labels)
        if self.next_label > len(self.row_of_label):
            grown = np.full(max(self.next_label, 2 * len(self.row_of_label)), -1, np.int64)
            grown[: len(self.row_of_label)] = self.row_of_label
            self.row_of_label = grown
        self.row_of_label[labels] = rows[keep]
        for label, i in zip(labels.tolist(), keep, strict=True):
            self.label_of[ids[i]] = label
            self.id_of[label] = ids[i]

    def moved(self, node_id: str, row: int) -> None:
        """The owning index moved `node_id` to `row` (swap-remove)."""
        label = self.label_of.get(node_id)
        if label is not None:
            self.row_of_label[label] = row

    def discard(self, node_id: str) -> None:
        label = self.label_of.pop(node_id, None)
        if label is not None:
            self.persisted = None
            self.id_of.pop(label, None)
            self.row_of_label[label] = -1
            self.index.mark_deleted(label)
            self.reclaimable += 1

    def knn(self, queries: npt.NDArray[np.float32], k: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any]] | None:
        """Labels and cosine similarities of the k nearest per query, or None if hnswlib cannot answer."""
        k = min(k, len(self))
        if k == 0:
            return None
        with self.lock:
            self.index.set_ef(max(self.config.ef_search, k))
            try:
                labels, distances = self.index.knn_query(queries, k=k)
            except RuntimeError:
                return None
        return labels, 1.0 - distances

    def stats(self) -> dict[str, int]:
        return {"vectors": int(self.index.element_count), "live": len(self), "reclaimable": self.reclaimable}


_BUILD_CHUNK = 16_384
"""Rows handed to hnswlib per call while building: progress is reported between calls."""


def build(index: TypeIndex, config: AnnConfig, progress: Callable[[int, int], None] | None = None) -> AnnIndex:
    """An HNSW graph over every embedded row of `index`, reporting ``progress(rows_done, rows)``."""
    built = build_rows(list(index.ids), index.matrix(), config, progress)
    if built is None:  # pragma: no cover - only a `cancelled` callback stops a build
        raise RuntimeError("vector index build cancelled")
    return built


def build_rows(
    ids: list[str],
    matrix: npt.NDArray[np.float32],
    config: AnnConfig,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> AnnIndex | None:
    """An HNSW graph over `matrix` (row i is `ids[i]`); None when `cancelled()` turned true between chunks."""
    n = len(ids)
    ann = AnnIndex(matrix.shape[1], config, capacity=n)
    for start in range(0, n, _BUILD_CHUNK):
        if cancelled is not None and cancelled():
            return None
        stop = min(n, start + _BUILD_CHUNK)
        ann.add_many(ids[start:stop], matrix[start:stop], np.arange(start, stop, dtype=np.int64))
        if progress is not None:
            progress(stop, n)
    return ann


def replay(
    ann: AnnIndex, changed: set[str], current: tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]
) -> None:
    """Marks `changed` ids deleted in `ann` and re-adds those still held, from `current` (`TypeIndex.current`:
    ids, vectors, rows). The rows may go stale afterwards; `catch_up` fixes every row again."""
    present, vectors, rows = current
    for node_id in changed.difference(present):
        ann.discard(node_id)
    ann.add_many(present, vectors, rows)


def catch_up(index: TypeIndex, ann: AnnIndex, changed: set[str]) -> AnnIndex:
    """`ann`, built from an earlier copy of `index`'s rows, made to mirror `index` now.

    `changed` must hold every id whose vector changed or that was removed
    since the copy: their old labels are marked deleted and their current
    vectors added. Every other label's row is looked up afresh (swap-removes
    moved rows since).
    """
    replay(ann, changed, index.current(changed))
    for node_id in [i for i in ann.label_of if i not in index.row]:  # defensive: a removal not reported
        ann.discard(node_id)
    rows = np.full(len(ann.row_of_label), -1, np.int64)
    for node_id, label in ann.label_of.items():
        rows[label] = index.row[node_id]
    ann.row_of_label = rows
    return ann


ChangedSince = Callable[[int], "set[str] | None"]
Walk = Callable[[npt.NDArray[np.uint32], float, int], "list[tuple[int, float]] | None"]
"""(pool rows, relevance bound of every other row, scoring budget) → the exact top rows, or None past the budget."""


def certified_scan(
    index: TypeIndex, ann: AnnIndex, queries: npt.NDArray[np.float32], top_k: int, threshold: float, walk: Walk
) -> list[tuple[int, float]] | None:
    """Top rows by exact score from ANN candidate pools, or None when the exact scan must answer.

    Why the answer is exact (up to the HNSW graph's own neighbour recall): a
    row outside the pool has relevance at most `bound`, the smallest
    similarity the ANN returned per query vector (maximised over them). `walk`
    scores the pool and every other row whose value could still reach the
    k-th best under that bound (see `hippograph_core::certified`). When that
    takes more than an eighth of the type, a deeper pool (a lower bound) is
    cheaper; past a quarter of the type the exact scan is. When too few rows
    score above zero while the threshold admits zero, the remaining slots
    belong to zero-score rows in id order, which only the exact scan
    enumerates: None.
    """
    n = len(index.ids)
    pool = max(top_k, 16)  # per query vector; the walk makes a deeper first pool rarely worth its search cost
    while True:
        found = ann.knn(queries, pool)
        if found is None:
            return None
        labels, sims = found
        exhausted = labels.shape[1] >= len(ann)
        hits = ann.row_of_label[labels.ravel().astype(np.int64)]
        rows = np.unique(hits[hits >= 0]).astype(np.uint32)
        # Float noise between hnswlib's and the Rust core's cosine is far below this margin.
        bound = 0.0 if exhausted else max(0.0, float(sims[:, -1].max())) + 1e-6
        got = walk(rows, bound, max(n // 8, 1))
        if got is not None:
            return None if len(got) < top_k and threshold <= 0.0 else got
        if exhausted or 4 * pool > n // 4:
            return None
        pool *= 4


# -- persistence ----------------------------------------------------------------------------

_SIDECAR_MAX = 1 << 16
_CHUNK = 1 << 20
_SAMPLE = 1024


def _paths(directory: Path, name: str) -> tuple[Path, Path, Path]:
    return directory / f"{name}.bin", directory / f"{name}.labels.msgpack", directory / f"{name}.json"


def _hnswlib_version() -> str:
    try:
        return importlib.metadata.version("hnswlib")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - built from source without metadata
        return "unknown"


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
    digest = hashlib.sha256()
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


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(_SIDECAR_MAX + 1)
        if len(raw) > _SIDECAR_MAX:
            return None
        doc = json.loads(raw)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def save(ann: AnnIndex, directory: Path, name: str, seq: int) -> bool:
    """Writes `ann` as the saved index `name` reflecting store change `seq`; False when nothing needed writing.

    The caller guarantees `ann` reflects exactly `seq` and that nothing adds to
    it meanwhile. When the files on disk already hold this very index (saved
    or loaded, unchanged since), only the sidecar's ``seq`` is moved forward.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _sweep(directory, name)
    bin_path, map_path, json_path = _paths(directory, name)
    on_disk = _read_sidecar(json_path)
    if ann.persisted is not None and on_disk is not None and on_disk.get("bin_sha256") == ann.persisted[1]:
        if on_disk.get("seq") == seq:
            return False
        tmp = _temp(directory, name)
        try:
            _write_private(tmp, json.dumps({**on_disk, "seq": seq}, sort_keys=True).encode())
            os.replace(tmp, json_path)
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(directory)
        ann.persisted = (seq, ann.persisted[1])
        return True
    live = sorted(ann.id_of.items())
    mapping = msgpack.packb({"labels": [label for label, _ in live], "ids": [i for _, i in live]})
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
            "hnswlib": _hnswlib_version(),
            "count": count,
            "live": len(live),
            "bin_sha256": bin_sha,
            "bin_bytes": bin_bytes,
            "labels_sha256": hashlib.sha256(mapping).hexdigest(),
            "labels_bytes": len(mapping),
        }
        _write_private(temps[2], json.dumps(sidecar, sort_keys=True).encode())
        os.replace(temps[0], bin_path)
        os.replace(temps[1], map_path)
        os.replace(temps[2], json_path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    _fsync_dir(directory)
    ann.persisted = (seq, bin_sha)
    return True


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
        and sha("bin_sha256")
        and sha("labels_sha256")
        and doc["format"] == ANN_FORMAT
        and doc.get("type") == name
        and doc["dim"] == dim
        and doc["M"] == config.M
        and doc["ef_construction"] == config.ef_construction
        and doc.get("hnswlib") == _hnswlib_version()
        and doc["seq"] <= seq
        and doc["live"] <= doc["count"]
    )


def _read_mapping(path: Path, doc: dict[str, Any]) -> tuple[list[int], list[str]] | None:
    try:
        with path.open("rb") as f:
            raw = f.read(doc["labels_bytes"] + 1)
    except OSError:
        return None
    if len(raw) != doc["labels_bytes"] or hashlib.sha256(raw).hexdigest() != doc["labels_sha256"]:
        return None
    try:
        mapping = msgpack.unpackb(raw, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if not isinstance(mapping, dict):
        return None
    labels, ids = mapping.get("labels"), mapping.get("ids")
    if not isinstance(labels, list) or not isinstance(ids, list) or not len(labels) == len(ids) == doc["live"]:
        return None
    if not all(isinstance(i, str) for i in ids) or len(set(ids)) != len(ids):
        return None
    count = doc["count"]
    if not all(type(label) is int and 0 <= label < count for label in labels) or len(set(labels)) != len(labels):
        return None
    return labels, ids


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
    digest = hashlib.sha256()
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


def _unit(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    v = vectors.astype(np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


@dataclass(frozen=True)
class Saved:
    """A saved index read and verified from its files, not yet checked against a store's rows."""

    hnsw: Any
    doc: dict[str, Any]
    mapping: tuple[list[int], list[str]]


def read_saved(
    directory: Path, name: str, dim: int, config: AnnConfig, seq: int, cancelled: Callable[[], bool] | None = None
) -> Saved | None:
    """The saved index `name` as hnswlib reads it, after its sidecar (saved at most at `seq`), sizes and
    SHA-256 passed (no store access: the expensive part of `load`, which a background thread runs
    without any lock); None as well when `cancelled()` turns true while the file is copied."""
    if hnswlib is None or dim == 0:
        return None
    bin_path, map_path, json_path = _paths(directory, name)
    doc = _read_sidecar(json_path)
    if doc is None or not _valid_sidecar(doc, name, dim, config, seq):
        return None
    mapping = _read_mapping(map_path, doc)
    if mapping is None:
        return None
    copy = _verified_copy(bin_path, directory, name, doc["bin_bytes"], doc["bin_sha256"], cancelled)
    if copy is None:
        return None
    try:
        hnsw = hnswlib.Index(space="cosine", dim=dim)
        hnsw.load_index(str(copy))
    except (RuntimeError, ValueError, MemoryError):
        return None
    finally:
        copy.unlink(missing_ok=True)
    if hnsw.element_count != doc["count"] or hnsw.dim != dim:
        return None
    return Saved(hnsw, doc, mapping)


def adopt_saved(
    index: TypeIndex, config: AnnConfig, saved: Saved, seq: int, changed_since: ChangedSince
) -> AnnIndex | None:
    """`saved` brought up to store change `seq` for `index` (caller holds `index` still), or None."""
    if saved.doc["seq"] > seq or saved.hnsw.dim != index.dim:
        return None
    changed = set() if saved.doc["seq"] == seq else changed_since(saved.doc["seq"])
    if changed is None:
        return None
    return _adopt(index, config, saved.hnsw, saved.doc, saved.mapping, changed)


def load(
    index: TypeIndex, config: AnnConfig, directory: Path, name: str, seq: int, changed_since: ChangedSince
) -> AnnIndex | None:
    """The saved index `name` brought up to store change `seq` for `index`, or None (build afresh instead).

    `changed_since(s)` returns the ids changed after store change `s` (up to
    `seq`), or None when the change log no longer reaches back that far (then
    the files are not even read). Every check is described in the module
    docstring; hnswlib only reads a file whose SHA-256 matched.
    """
    if hnswlib is None or index.dim == 0:
        return None
    doc = _read_sidecar(_paths(directory, name)[2])
    if doc is None or not _valid_sidecar(doc, name, index.dim, config, seq):
        return None
    changed = set() if doc["seq"] == seq else changed_since(doc["seq"])
    if changed is None:
        return None
    saved = read_saved(directory, name, index.dim, config, seq)
    if saved is None or saved.doc["seq"] != doc["seq"]:  # replaced meanwhile by another process's save
        return None
    return adopt_saved(index, config, saved, seq, lambda since: changed)


def _adopt(
    index: TypeIndex,
    config: AnnConfig,
    hnsw: Any,
    doc: dict[str, Any],
    mapping: tuple[list[int], list[str]],
    changed: set[str],
) -> AnnIndex | None:
    """Wraps a verified hnswlib index, replays `changed` ids and checks it against `index`; None on mismatch."""
    labels, ids = mapping
    count = doc["count"]
    ann = AnnIndex(index.dim, config, capacity=max(count, len(index)), hnsw=hnsw)
    if config.threads:
        hnsw.set_num_threads(config.threads)
    ann.next_label = count
    ann.reclaimable = count - len(labels)
    ann.label_of = dict(zip(ids, labels, strict=True))
    ann.id_of = dict(zip(labels, ids, strict=True))
    ann.persisted = (doc["seq"], doc["bin_sha256"])  # until the replay below changes anything
    embedded = {index.ids[r] for r in np.flatnonzero(index.norms() > 0).tolist()}
    stale = [i for i in ids if i not in embedded]
    if not set(stale) <= changed or not (embedded - ann.label_of.keys()) <= changed:
        return None
    # A changed id keeps its label only while its stored vector is still its current one;
    # the unchanged ones are sampled (a foreign or mismatched store fails here).
    recheck = [i for i in ids if i in changed and i in embedded]
    unchanged = [i for i in ids if i not in changed]
    sample = unchanged[:: max(1, len(unchanged) // _SAMPLE)]
    for node_id in stale:
        ann.discard(node_id)
    if recheck or sample:
        probe = recheck + sample
        try:
            stored = np.asarray(hnsw.get_items([ann.label_of[i] for i in probe]), np.float32)
        except RuntimeError:  # a label the graph does not hold (live in the map, marked deleted)
            return None
        current = _unit(index.matrix()[[index.row[i] for i in probe]])
        same = np.all(np.abs(_unit(stored) - current) <= 1e-5, axis=1)
        if not same[len(recheck) :].all():
            return None
        for node_id, ok in zip(recheck, same[: len(recheck)].tolist(), strict=True):
            if not ok:
                ann.discard(node_id)
    rows = np.full(len(ann.row_of_label), -1, np.int64)
    for node_id, label in ann.label_of.items():
        rows[label] = index.row[node_id]
    ann.row_of_label = rows
    missing = sorted(embedded - ann.label_of.keys(), key=index.row.__getitem__)
    if missing:
        at = np.array([index.row[i] for i in missing], np.int64)
        ann.add_many(missing, index.matrix()[at], at)
    ann.loaded = True
    return ann
