"""Stubs of the Rust extension. Arrays are numpy; matrices are C-contiguous, row-major."""

import os
from collections.abc import Callable
from mmap import mmap
from typing import Any, Literal, final

import numpy as np
import numpy.typing as npt

Rows = npt.NDArray[np.float32] | npt.NDArray[np.uint16]
"""Stored rows as scans take them: float32, or each row's unit vector in float16 as its bit
patterns (uint16; the columns' ``vector_dtype="float16"``), whose relevance is its dot product
with the unit query."""

def row_norms(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Euclidean norm of every row (computed once when rows are written)."""

def vector_norm(vector: npt.NDArray[np.float32]) -> float:
    """Euclidean norm of one vector, summed in float64 (`row_norms` uses the same sum)."""

def float_list_f32(value: object) -> npt.NDArray[np.float32] | None:
    """A list or tuple of floats and ints (no bools) as a new float32 array, converted as numpy
    converts it; None for anything else (the caller's general conversion judges it)."""

def relevance(
    matrix: Rows, norms: npt.NDArray[np.float32], queries: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """max(0, max over query rows of cos(query, row)) for every stored row; GIL released."""

def relevance_of_rows(
    matrix: Rows,
    norms: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    rows: npt.NDArray[np.uint32],
) -> npt.NDArray[np.float32]:
    """`relevance` of the listed rows only, in their order (a row past the matrix: ValidationError);
    GIL released."""

def top_relevance(
    matrix: Rows,
    norms: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    k: int,
    rows: npt.NDArray[np.uint32] | None = None,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]:
    """The best `k` rows (of all, or of the listed `rows`) by positive relevance, and every row tied
    with the k-th, unordered: (rows, relevances). GIL released."""

def shadow_rows(matrix: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]]:
    """Each row as its unit vector in float16 (bit patterns) and the distance from the unit row to it
    (rounded up): the shadow `top_relevance_shadowed` reads. A zero row stays zero, residual 0."""

def top_relevance_shadowed(
    matrix: npt.NDArray[np.float32],
    norms: npt.NDArray[np.float32],
    half: npt.NDArray[np.uint16],
    residual: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    k: int,
    rows: npt.NDArray[np.uint32] | None = None,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]:
    """`top_relevance`'s answer, exactly, reading the shadow of every row (`shadow_rows` of `matrix`,
    kept in step with it) and the f32 rows only of those whose bounds reach the k-th best. GIL released."""

def select_top(
    scores: npt.NDArray[np.float64], threshold: float, top_k: int, rank: npt.NDArray[np.uint32] | None = None
) -> npt.NDArray[np.int64]:
    """Indices of the best top_k scores >= threshold, best first, ties by rank (or index)."""

@final
class ValueParams:
    """Parameters of the default value function: decay `lambda_` per hour, `k` (the access count at
    which frequency reaches one half), `base_floor` (least frequency factor) and reward steepness
    `beta`. Frozen; equal params compare and hash equal."""

    def __init__(self, lambda_: float, k: float, base_floor: float, beta: float) -> None: ...
    @property
    def lambda_(self) -> float: ...
    @property
    def k(self) -> float: ...
    @property
    def base_floor(self) -> float: ...
    @property
    def beta(self) -> float: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Selection:
    """What a scan keeps: at most `top_k` rows, best first, whose score (gate "score") or relevance
    (gate "relevance") is >= `threshold`. Another gate is a ValidationError. Frozen; hashable."""

    def __init__(self, threshold: float, gate: Literal["score", "relevance"], top_k: int) -> None: ...
    @property
    def threshold(self) -> float: ...
    @property
    def gate(self) -> Literal["score", "relevance"]: ...
    @property
    def top_k(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

@final
class UsageColumns:
    """The usage columns the default value function reads, one entry per stored row: has_meta (0: the
    row scores its relevance), timestamp (unix seconds of the last use or of creation), access_count,
    reward_count and cumulative_reward.

    Holds the arrays themselves (no copy): writes to them are seen by later calls, each of which
    borrows them read-only while it runs. Arrays must be 1-D, C-contiguous and of equal length
    (ValidationError otherwise); replace the bundle when the arrays are replaced or resized.
    """

    def __init__(
        self,
        has_meta: npt.NDArray[np.uint8],
        timestamp: npt.NDArray[np.float64],
        access_count: npt.NDArray[np.float64],
        reward_count: npt.NDArray[np.float64],
        cumulative_reward: npt.NDArray[np.float64],
    ) -> None: ...
    @property
    def has_meta(self) -> npt.NDArray[np.uint8]: ...
    @property
    def timestamp(self) -> npt.NDArray[np.float64]: ...
    @property
    def access_count(self) -> npt.NDArray[np.float64]: ...
    @property
    def reward_count(self) -> npt.NDArray[np.float64]: ...
    @property
    def cumulative_reward(self) -> npt.NDArray[np.float64]: ...
    def __len__(self) -> int: ...

def explain_rows(
    matrix: Rows,
    norms: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    usage: UsageColumns,
    rows: npt.NDArray[np.uint32],
    now: float,
    params: ValueParams,
) -> tuple[
    npt.NDArray[np.float32],
    npt.NDArray[np.float32],
    npt.NDArray[np.bool_],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
]:
    """What the listed rows' default-value scores are made of, from the scans' own kernels and value
    function: each query vector's similarity (`rows × queries`; their maximum is the relevance),
    the relevance, whether the row has metadata, and (NaN without) hours, recency, frequency and
    reward; then the score (= relevance × recency × (frequency × reward), or the relevance). A row
    past the matrix: ValidationError. GIL released."""

def scan_default(
    matrix: Rows,
    norms: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    usage: UsageColumns,
    rank: npt.NDArray[np.uint32] | None,
    now: float,
    params: ValueParams,
    selection: Selection,
    shadow: tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Relevance, default value function and selection in one pass, at unix time `now`; ties by
    `rank` (or row). With `shadow` (`shadow_rows` of the matrix, a row's residual +inf where its
    shadow is stale) the f32 rows are read only where they may reach the answer: the same answer.
    GIL released."""

def default_values(
    relevance: npt.NDArray[np.float32], usage: UsageColumns, now: float, params: ValueParams
) -> npt.NDArray[np.float64]:
    """The default value function over precomputed relevances; GIL released."""

def default_value(
    relevance: float,
    timestamp: float,
    access_count: float,
    reward_count: float,
    cumulative_reward: float,
    now: float,
    params: ValueParams,
) -> float:
    """The default value function of one row that has usage metadata."""

def usage_order(usage: UsageColumns, params: ValueParams) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64]]:
    """Rows sorted by their time-independent usage bound (largest first), and the bounds; GIL released."""

def merge_usage_order(
    rows: npt.NDArray[np.uint32],
    keys: npt.NDArray[np.float64],
    stale: npt.NDArray[np.uint32],
    usage: UsageColumns,
    params: ValueParams,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64]]:
    """A usage order with its stale rows (changed, added or moved) re-keyed and merged in; rows past
    the end dropped. One pass instead of a full sort; GIL released."""

def certified_walk(
    matrix: Rows,
    norms: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    usage: UsageColumns,
    rank: npt.NDArray[np.uint32] | None,
    now: float,
    params: ValueParams,
    selection: Selection,
    pool: npt.NDArray[np.uint32],
    bound: float,
    order: npt.NDArray[np.uint32],
    order_keys: npt.NDArray[np.float64],
    stale: npt.NDArray[np.uint32],
    budget: int,
    regions: tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64], npt.NDArray[np.uint32] | None] | None = None,
    shadow: tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None:
    """Exact top_k over `pool` and every row that could beat it given `bound` (the relevance
    of any row outside the pool), walking `order` and re-checking
    `stale` rows; None when more than `budget` rows beyond the pool would need scoring.
    `regions`: each row's region (past the end of the bounds: none), each region's relevance
    bound (a tighter bound per row), and optionally the region at each position of `order` (read
    in order; for a row not in `stale` its region or none). `shadow`: the rows' half-precision
    shadow and residuals, read first once the top_k is full (the same answer, fewer f32 rows
    read). A value-weighted pool is walked with its score bounds by `Hnsw.valued_walk`. GIL released."""

def region_bounds(
    centres: npt.NDArray[np.float32],
    radius: npt.NDArray[np.float64],
    queries: npt.NDArray[np.float32],
    slack: float,
) -> npt.NDArray[np.float64]:
    """Per region (unit `centres`, angular `radius`), the largest relevance any member can have for
    any of `queries`, plus `slack`, clamped to [0, 1]; all zero for all-zero queries. GIL released."""

def etf_encode(term: object) -> bytes:
    """Erlang term_to_binary(term, [deterministic, {minor_version, 2}]) under the fingerprint's mapping.

    Exact types only: str/bytes -> binary, bool -> atom, None -> nil, int, float (finite),
    hippograph.Atom -> atom, list, tuple, dict -> map (keys in Erlang map-key order).
    Raises IngestionError(reason="invalid_metadata") for anything else, nesting deeper
    than 512, more than 4 Mi values or 256 MiB, or keys that collide once mapped.
    GIL released while encoding large terms.
    """

def fingerprint_v1(goal: str, steps: list[tuple[str, str]], metadata: dict[Any, Any]) -> bytes:
    """SHA-256 (32 bytes) of {mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata} in ETF.

    Checks only what encoding needs: invalid_goal (not a str), invalid_metadata (not
    exactly a dict, or outside the mapping), invalid_steps (not a list), invalid_step
    (not a 2-tuple of str). Blank goals and empty steps are left to validate_trajectory.
    GIL released while encoding and hashing large trajectories.
    """

def consolidation_pairs(
    matrix: npt.NDArray[np.float32],
    norms: npt.NDArray[np.float32],
    members: npt.NDArray[np.uint32],
    offsets: npt.NDArray[np.uint64],
    threshold: float,
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.float32]]:
    """Greedy best-partner pairs (a < b, cosine > threshold) of rows sharing a group.

    Groups are CSR: group g holds rows members[offsets[g]:offsets[g + 1]]. Each row
    is in at most one returned pair; best cosine first, ties by (a, b). GIL released.
    """

def similar_pairs(
    matrix: npt.NDArray[np.float32], norms: npt.NDArray[np.float32], threshold: float
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.float32]]:
    """Every pair of rows (a < b) with cosine above `threshold`, most similar first, ties by (a, b);
    zero rows never pair. GIL released."""

class IdTable:
    """Distinct ids (a UTF-8 blob and each id's end offset, copied) that finds where other ids sit
    among them without an object per id; ValueError when offsets leave their blob or an id repeats.
    GIL released."""

    def __init__(self, blob: npt.NDArray[np.uint8], ends: npt.NDArray[np.uint64]) -> None: ...
    def __len__(self) -> int: ...
    def positions(self, blob: npt.NDArray[np.uint8], ends: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """For each of these ids, its position in the table, or -1."""

def lmdb_check(data: bytes | mmap, txnid: int | None = None) -> dict[str, Any] | None:
    """Structural check of an LMDB data file (bytes or an mmap of data.mdb); GIL released.

    Walks the snapshot whose meta page holds `txnid` (default: the newest):
    every page of the free tree, the main tree and each named database.
    Returns meta_page, txnid, page_size, last_page, pages and databases
    ({name: entries}); None when no meta page holds `txnid`, or damage was seen
    after that meta page changed (a writer committed: retry with a new snapshot);
    StorageError naming the page and what is wrong on damage.
    """

def context_keyword_scan(
    pairs: list[tuple[bytes, bytes]], needle: str, start: int, limit: int, layers: tuple[bool, bool, bool]
) -> tuple[list[tuple[str, str | None, str, str, str | None, str | None, str | None, bool, str] | int], int]:
    """The keyword search's verdicts on a context node range's (key, record) pairs from `start`,
    until `limit` are matches or undecided: per match, its `TreeNode` fields (a layer not in
    `layers` None); per record only decoding can decide (odd types, non-ASCII text without a
    proven match, garbage), its index. And the index after the last pair read. `needle`: casefolded."""

def context_document(
    txn: Any,
    dbs: tuple[Any, Any, Any, Any, Any, Any, Any, Any],
    segments: list[str],
    content: str,
    abstract_: str | None,
    overview: str | None,
    jobs: list[tuple[str, bytes]],
    now_us: int,
    max_attempts: int,
) -> int | None:
    """A context `put_document` with its jobs ((kind, the payload's msgpack)) planned by the core
    and written in py-lmdb write transaction `txn` (`dbs`: the handles of nodes, vectors, counters,
    jobs, job queue, job due, job URIs and job state): the revision written, or None when the Python path
    must write it (nothing written then). The records are those the Python path writes, byte for
    byte."""

def context_job_claim(
    txn: Any, dbs: tuple[Any, Any, Any, Any, Any, Any, Any, Any], kinds: list[str], now_us: int
) -> tuple[int, bytes | None] | None:
    """Claims the runnable job of one of `kinds` due first (then lowest id) in py-lmdb write
    transaction `txn` (`dbs` as `context_job_move` takes them): (its id, its record afterwards),
    (0, None) when none is due, or None when the Python path must decide (nothing written then)."""

def context_job_move(
    txn: Any,
    dbs: tuple[Any, Any, Any, Any, Any, Any, Any, Any],
    job_id: int,
    step: Literal["claim", "complete"],
    now_us: int,
) -> bytes | None:
    """Claims ("claim": running, one more attempt) or completes ("complete") job `job_id` in py-lmdb
    write transaction `txn` (`dbs` as `context_document` takes them, then the job-state handle): the
    job's record afterwards, or None when the Python path must decide (nothing written then).
    ValidationError for any other `step`."""

class Gate:
    """Many readers or one writer; a waiting writer goes before new readers. A reader that need
    not wait enters without releasing the GIL; any wait releases it."""

    def __init__(self) -> None: ...
    def reader(self) -> GateReader:
        """A context manager that enters as a reader (one object serves every `with`)."""
    def writer(self) -> GateWriter:
        """A context manager that enters as the writer."""
    def held(self) -> tuple[int, bool, int]:
        """Readers inside, whether the writer is, writers waiting."""

class GateReader:
    def __enter__(self) -> None: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> None: ...

class GateWriter:
    def __enter__(self) -> None: ...
    def __exit__(self, exc_type: object, exc: object, tb: object) -> None: ...

class LexicalIndex:
    """BM25 inverted index (k1 1.2, b 0.75) over documents numbered by the caller.

    Words are UAX #29 Unicode words, lowercased on both sides. Collection
    statistics describe exactly the live documents. Readers search concurrently
    with the GIL released; a writer waits for them.
    """

    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def set(self, doc: int, text: str) -> None:
        """Indexes `text` as document `doc`, replacing what it held."""
    def remove(self, doc: int) -> bool:
        """Forgets document `doc`; False when it was not indexed."""
    def average_length(self) -> float:
        """Mean token count of the live documents (0 when there are none)."""
    def explain(self, query: str, doc: int) -> tuple[list[tuple[str, float, int, float]], int, float] | None:
        """What `doc`'s BM25 score for `query` is made of: ``(word, idf, tf, weight)`` per query word it
        holds, in the order `search` adds them (their float32 sum is its score), the document's
        length in words and the score; None for a document the index does not hold."""

    def search(
        self, query: str, k: int, allowed: npt.NDArray[np.uint32] | None = None
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]:
        """Documents matching a word of `query` and their BM25 scores, best first (ties by
        document number): the best `k` and any tied with the k-th, only among `allowed` when given."""

def word_tokens(text: str) -> list[str]:
    """The lowercased Unicode words of `text`, as `LexicalIndex` sees them."""

def plain_changeset(
    additions: object, links: object, metadata: object, dim: int | None, shapes: tuple[type, type, type, int]
) -> tuple[bool, int | None]:
    """`check_changeset`'s common case in one call: `(True, dimension after)` when every part has
    the plain shape (`shapes`: the node, metadata and edge classes, the id byte limit), finite
    embeddings of one dimension included; `(False, None)` for anything else, left to the caller."""

def log_pruned(next: int, log_keep: int) -> tuple[int, int]:
    """The change-log entries `(first, last)`, inclusive (none when `first > last`), the write of
    entry `next` deletes to keep the newest `log_keep`: a run of `log_keep // 64` (1 to 64) at
    once, so most writes leave the log's first pages alone."""

def node_vector(data: bytes) -> int:
    """Where the embedding of a stored node record is: its number in the `vectors` database (from
    1), 0 for none, -1 for a record written before numbers (its embedding, if any, in `emb` under
    the node's key). `StorageError` for a record that does not decode."""

GraphModel = tuple[
    dict[Any, tuple[int, tuple[str, ...]]],
    dict[Any, int],
    type,
    Any,
    Callable[[Any], int],
    Callable[[Any], bytes],
    Callable[[object], Any],
]
"""What `GraphWrite` reads the graph model by (`hippograph.backends.lmdb.txn.MODEL`): each node type's
code and field names, each edge type's code, the `datetime` class and `UTC`, and the Python
`to_us`, `encode_meta` and `as_edge_type` for what it does not convert itself."""

@final
class GraphWrite:
    """One LMDB write transaction of graph memory, planned in one pass: records encoded, links
    merged with the stored ones on both ends. `read(db_code, key)` returns the stored value as of
    the start of the write (db codes index the backend's database list); nothing is written
    before `finish`. Corrupt stored records raise `StorageError`."""

    def __init__(self, read: Callable[[int, bytes], bytes | None]) -> None: ...
    @staticmethod
    def in_lmdb(txn: Any, dbs: list[Any]) -> GraphWrite:
        """A write that reads py-lmdb transaction `txn` itself (`txn.get(key, None, dbs[code])`),
        with no Python call in between."""
    def put_changeset(
        self, additions: list[Any], links: list[Any], metadata: dict[str, Any], model: GraphModel
    ) -> None:
        """A checked changeset's additions (a node put again loses its links on both ends), then
        each addition's own links and the changeset's links (both ways, when both ends exist
        and differ), then its metadata records. Datetimes in UTC and metadata of plain values are
        converted natively; anything else through the Python conversions `model` names."""
    def put_metadata(self, metadata: dict[str, Any], model: GraphModel) -> None:
        """Puts the record of each `{id: NodeMetadata}`."""
    def exists(self, node_id: str) -> bool: ...
    def delete_node(self, node_id: str) -> None:
        """Deletes a node with its links on both ends; its metadata stays."""
    def delete_meta(self, node_id: str) -> None: ...
    def is_orphan(self, node_id: str, orphan_codes: list[int]) -> bool:
        """Whether the node is of one of `orphan_codes` and has no link left."""
    def finish(
        self, stored_dim: int | None, new_dim: int | None, seq: int, log_keep: int
    ) -> tuple[list[tuple[int, list[tuple[bytes, bytes]]]], list[tuple[int, bytes]]]:
        """The final values of every key the write touches (links, the first dimension, the
        change counter `seq + 1` and its change-log entry included): the puts by database,
        `(db_code, [(key, value)])` in key order, and the deletes, `(db_code, key)`."""

@final
class Hnsw:
    """The core's approximate index: an HNSW graph over codes of unit vectors (f16, or one byte
    per dimension scaled from a sample), with the
    method names of the hnswlib index it stands in for. Ids are dense and added in order; deleted
    ids still route searches but are never returned. A saved graph is opened mapped copy-on-write
    and verified, so processes that open the same file share its pages."""

    def __init__(
        self,
        dim: int,
        m: int,
        ef_construction: int,
        sample: npt.NDArray[np.float32],
        seed: int = ...,
        codes: Literal["f16", "i8"] = "f16",
    ) -> None:
        """An empty index; `sample` (rows of `dim` floats like those to come) sets the i8 code scales.
        ValidationError for any other `codes`."""
    @staticmethod
    def open(path: str | os.PathLike[str], tree_sha256: str | None = None) -> Hnsw:
        """The index saved at `path`, after its bytes matched `tree_sha256` (the root of their SHA-256
        hash tree, `hippograph.engine.files.TreeHash`); ValueError when it is not an index file or not
        the expected one."""
    @property
    def dim(self) -> int: ...
    @property
    def element_count(self) -> int:
        """Ids added so far, deleted ones included."""
    @property
    def max_error(self) -> float:
        """The most a reported similarity differs from the exact cosine."""
    def error_split(self, most: int) -> tuple[float, npt.NDArray[np.uint32], int]:
        """The error bound all but at most `most` ids keep, those ids (scored exactly instead), and
        how many ids it covers (every id below that count; an add still running covers its ids
        once it returns)."""
    @property
    def memory_bytes(self) -> int:
        """Bytes of codes and links the index addresses (mapped or owned)."""
    def get_max_elements(self) -> int: ...
    def resize_index(self, size: int) -> None: ...
    def set_ef(self, ef: int) -> None: ...
    def set_num_threads(self, threads: int) -> None: ...
    def add_items(self, data: npt.NDArray[np.float32], ids: npt.NDArray[np.int64], num_threads: int = -1) -> None:
        """Adds `data` under `ids`, which must continue the ids given so far."""
    def mark_deleted(self, label: int) -> None: ...
    def knn_query(
        self, data: npt.NDArray[np.float32], k: int = 1
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """Labels and cosine distances (1 − similarity) of the `k` nearest per query row;
        RuntimeError when fewer than `k` live ids are found."""
    def get_items(self, ids: list[int]) -> npt.NDArray[np.float32]:
        """The decoded unit vectors of `ids`."""
    def holds(self, ids: npt.NDArray[np.uint32], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.bool_]:
        """Per id, whether `vectors[i]` encodes to exactly the codes stored for `ids[i]`."""
    def valued_walk(
        self,
        queries: npt.NDArray[np.float32],
        ef: int,
        ceiling: float,
        error: float,
        row_of_label: npt.NDArray[np.int64],
        live: int,
        keys: npt.NDArray[np.float64],
        key_stale: npt.NDArray[np.uint32],
        most: float,
        floor: float,
        matrix: Rows,
        norms: npt.NDArray[np.float32],
        usage: UsageColumns,
        rank: npt.NDArray[np.uint32] | None,
        now: float,
        params: ValueParams,
        selection: Selection,
        pending: npt.NDArray[np.uint32],
        order: npt.NDArray[np.uint32],
        order_keys: npt.NDArray[np.float64],
        stale: npt.NDArray[np.uint32],
        shadow: tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]] | None = None,
    ) -> tuple[float, tuple[list[int], list[float]] | None]:
        """The rows of largest relevance × value, by a search weighted with each row's value factor at
        `now`, finished by the certified walk over them in the same call (GIL released once): the
        largest code similarity the search found, and the exact top rows and their scores (best
        first), or None when the pool does not certify them or that similarity is below `floor`.
        `row_of_label[l]`: the row of id `l` (negative: none); `live`: how many ids stand for a
        row. `ceiling`: nodes are explored while similarity × ceiling could still enter. `error`: the
        most a code similarity differs from the exact cosine for a row outside the pool (scaled by
        the largest value factor). `keys` (`usage_order`'s keys laid out by row) and `key_stale`
        (rows whose keys are out of date) let a visited row's factor cost one read; `most`: no
        row's factor at `now` exceeds it. From `matrix` on, the walk's arguments as
        `certified_walk` takes them; `pending` (rows the graph does not hold) are read in full."""
    def similarity_walk(
        self,
        queries: npt.NDArray[np.float32],
        ef: int,
        first: int,
        error: float,
        row_of_label: npt.NDArray[np.int64],
        live: int,
        floor: float,
        matrix: Rows,
        norms: npt.NDArray[np.float32],
        usage: UsageColumns,
        rank: npt.NDArray[np.uint32] | None,
        now: float,
        params: ValueParams,
        selection: Selection,
        pending: npt.NDArray[np.uint32],
        order: npt.NDArray[np.uint32],
        order_keys: npt.NDArray[np.float64],
        stale: npt.NDArray[np.uint32],
        regions: tuple[npt.NDArray[np.uint32], npt.NDArray[np.float64], npt.NDArray[np.uint32] | None] | None = None,
        shadow: tuple[npt.NDArray[np.uint16], npt.NDArray[np.float32]] | None = None,
    ) -> tuple[float, tuple[list[int], list[float]] | None]:
        """The similarity search and the certified walk over what it found, in rounds, in one call
        (GIL released once): each round takes the `first` (then four times as many) nearest ids per
        query vector at depth `ef`, bounds every other row by the largest last similarity plus
        `error`, and walks those rows and `pending` with a budget of an eighth of the rows. Returns
        the first round's largest similarity, and the exact top rows and their scores (best first),
        or None when the exact scan must answer (that similarity below `floor`, no round certified,
        fewer live ids found than asked). `row_of_label` and `live` as `valued_walk` takes them;
        from `matrix` on, the walk's arguments as `certified_walk` takes them."""
    def save_index(self, path: str | os.PathLike[str]) -> None:
        """Writes the index to a new file at `path` (the caller fsyncs and renames it)."""
