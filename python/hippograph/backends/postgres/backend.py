"""`Postgres`: the `GraphBackend` contract on PostgreSQL, shared by any number of processes and hosts.

The class checks its options (`config`), migrates the schema (`schema`) and opens the connection
pool, runs every call as one transaction through `tx._Runner`, and answers queries from its
`cache._Cache`, brought up to date from the change log in the query's own snapshot. A scoped
store's entries go through `entries.PgEntryTxn`, in transactions of the same runner.
``docs/postgres.md`` is the operator's guide and the design.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from ...context.protocol import KvTxn
from ...engine.checks import Progress, check_choice, check_flag, check_id, check_progress
from ...engine.rows import VectorDtype, check_vector_dtype
from ...engine.vector_index import DEFAULT_ANN, AnnConfig, check_ann
from ...errors import ConfigError, StorageError
from ...graph import codec
from ...graph.changeset import Changeset, check_changeset
from ...graph.explain import Explaining, explaining_of
from ...graph.model import (
    ORPHAN_TYPES,
    EdgeType,
    IngestionReceipt,
    IngestionRecord,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    as_edge_type,
    as_node_types,
)
from ...graph.protocol import Ingestion, existing_receipt
from ...graph.recall import find_candidates
from ...graph.value import ValueFunctionConfig
from ...store.protocol import EntryTxn
from .._base import (
    DerivedBackend,
    RWLock,
    check_ids,
    check_metadata_updates,
    check_record,
    commit_each_source_once,
)
from . import prepared, vectors
from .arrays import register as register_arrays
from .builder import IndexBuilder, Settler, connector
from .cache import _Cache
from .config import _check_repo, _positive_int, _resolve_dsn, _seconds, _where
from .context import PgKvTxn
from .entries import PgEntryTxn
from .reports import _counts, _problems
from .schema import _check_schema, _migrate, _sql_map
from .search import ServerSearch
from .statistics import Refresher
from .tx import Conn, Shared, _id, _key, _Retry, _Runner, _Tx, _Write

__all__ = ["Postgres"]

T = TypeVar("T")

_TRIM_EVERY = 1024
"""A writer whose log seq is a multiple of this trims the log afterwards."""


class Postgres(DerivedBackend):
    """The `GraphBackend` contract on PostgreSQL, shared by any number of processes and hosts; also
    an `EntryBackend`, holding a scoped store's entries in the same repo (`hippograph.Store`), and
    a `ContextBackend`, holding a context store's spaces there.

    `dsn`: a libpq connection string or URI; when None, ``$HIPPOGRAPH_PG_DSN``
    (neither → `ConfigError`). `repo`: the memory to use in that database
    (several live side by side). `schema`: where the tables live (created when
    missing). `pool_size`/`min_connections`: the connection pool's bounds;
    `timeout`: seconds to wait for a pooled connection. `connect_timeout` and
    `statement_timeout` (seconds; None leaves the server's setting) bound a
    dead server and a stuck statement. `retries`: attempts after a
    serialization failure, deadlock or safe-to-retry connection loss.
    `gap_timeout`: how long a change-log seq may stay invisible before the
    cache stops waiting for it (see ``docs/postgres.md``). `log_keep`: log
    entries kept by trimming. `ann`: HNSW settings of the in-process index,
    as for `LMDB`. `application_name` labels the connections in
    ``pg_stat_activity``; `connect_kwargs` go to libpq as they are.
    `search`: "client" scores in this process from its cached columns; "server" has PostgreSQL
    with pgvector rank (`server_ef_search`: pgvector's ``hnsw.ef_search``), so this process
    holds no vectors (``docs/postgres.md``, Server-side search).
    """

    _fork_label = "PostgreSQL backend"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        repo: str = "default",
        schema: str = "hippograph",
        pool_size: int = 10,
        min_connections: int = 1,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        statement_timeout: float | None = 60.0,
        retries: int = 10,
        gap_timeout: float = 30.0,
        log_keep: int = 100_000,
        ann: AnnConfig | None = DEFAULT_ANN,
        application_name: str = "hippograph",
        connect_kwargs: Mapping[str, Any] | None = None,
        search: str = "client",
        server_ef_search: int = 40,
        vector_dtype: VectorDtype = "float32",
    ) -> None:
        self.dsn = _resolve_dsn(dsn)
        self.repo = _check_repo(repo)
        self.schema = _check_schema(schema)
        self._pool_size = _positive_int("pool_size", pool_size)
        min_size = _positive_int("min_connections", min_connections)
        if min_size > self._pool_size:
            raise ConfigError(f"min_connections ({min_size}) exceeds pool_size ({self._pool_size})")
        self._timeout = _seconds("timeout", timeout, allow_none=False) or 30.0
        connect = _seconds("connect_timeout", connect_timeout, allow_none=False) or 10.0
        stmt = _seconds("statement_timeout", statement_timeout, allow_none=True)
        self._gap_timeout = _seconds("gap_timeout", gap_timeout, allow_none=False) or 30.0
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {retries!r}")
        self._log_keep = _positive_int("log_keep", log_keep)
        check_choice(search, ("client", "server"), "search", ConfigError)
        self._ef_search = _positive_int("server_ef_search", server_ef_search)
        if self._ef_search > 1000:
            raise ConfigError(f"server_ef_search must be at most 1000 (pgvector's limit), got {server_ef_search!r}")
        self._ann = ann = check_ann(ann)
        self._search: ServerSearch | None = None  # set at open when search == "server"
        self._shared = Shared()
        self._builder: IndexBuilder | None = None
        self._settler: Settler | None = None
        self._sql = _sql_map(self.schema)
        self._pid = os.getpid()
        self._cache_lock = RWLock()
        self._cache = self._derived = _Cache(ann, self._gap_timeout, self._cache_lock, check_vector_dtype(vector_dtype))
        self._trim_lock = threading.Lock()
        self._where = _where(self.dsn)
        kwargs: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(connect)),
            "application_name": application_name,
            **(connect_kwargs or {}),
            "autocommit": True,  # transactions are explicit: BEGIN ... COMMIT
        }
        settings = []
        if stmt is not None:
            settings.append(f"SET statement_timeout = '{math.ceil(stmt * 1000)}ms'")
        # READ COMMITTED whatever the server's default: a node's deleter then sees, in `drop_links`, the
        # links committed while it waited for the node's row (docs/postgres.md, Transactions).
        write_begin = (
            b"BEGIN ISOLATION LEVEL READ COMMITTED",
            f"SET LOCAL idle_in_transaction_session_timeout = '{math.ceil(self._gap_timeout * 500)}ms'".encode(),
        )

        if search == "server":
            settings += [f"SET hnsw.ef_search = {self._ef_search}", "SET hnsw.iterative_scan = relaxed_order"]

        def configure(conn: Conn) -> None:
            register_arrays(conn)
            for statement in settings:
                conn.execute(statement)

        self._open_and_migrate(kwargs, configure, server=search == "server")
        self._connect = connector(self.dsn, kwargs, configure)
        self._pool: psycopg_pool.ConnectionPool[Conn] = psycopg_pool.ConnectionPool(
            self.dsn,
            kwargs=kwargs,
            min_size=min_size,
            max_size=self._pool_size,
            open=False,
            configure=configure,
            timeout=self._timeout,
            name=f"hippograph:{self.repo}",
        )
        self._runner = _Runner(
            self._pool,
            self.repo,
            self._sql,
            timeout=self._timeout,
            retries=retries,
            where=self._where,
            write_begin=write_begin,
            shared=self._shared,
        )
        self._statistics = Refresher(
            lambda tables: self._read("analyze", lambda tx: [tx.run(f"analyze_{t}") for t in tables], snapshot=False)
        )
        try:
            self._pool.open(wait=True, timeout=max(self._timeout, connect))
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {self._where}: {exc}", operation="open") from None
        if self._search is not None:
            try:
                self._prepare_server_search(kwargs, configure)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                self._pool.close()
                raise StorageError(f"cannot prepare server-side search: {exc}", operation="open") from None

    # -- opening ---------------------------------------------------------------------------

    def _open_and_migrate(self, kwargs: Mapping[str, Any], configure: Callable[[Conn], None], server: bool) -> None:
        """Connects once (for a clear error when the server is unreachable), migrates, registers the
        repo; `server`: makes the schema keep vectors in the server (`vectors.enable`)."""
        try:
            conn: Conn = psycopg.connect(self.dsn, **kwargs)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL at {self._where}: {exc}", operation="open") from None
        try:
            with conn:
                configure(conn)
                _migrate(conn, self.schema)
                if server:
                    self._search = ServerSearch(self.schema, self.repo, vectors.enable(conn, self.schema))
                conn.execute(self._sql["register"], (self.repo,))
                self._shared.vectors = vectors.kept(conn, self.schema)
        except psycopg.Error as exc:
            raise StorageError(f"cannot prepare schema {self.schema!r}: {exc}", operation="open") from None

    # -- transactions ----------------------------------------------------------------------

    def _transaction(
        self,
        operation: str,
        fn: Callable[[_Tx], T],
        *,
        write: bool,
        snapshot: bool = True,
        resolves_doubt: bool = False,
    ) -> T:
        """Runs `fn` in one transaction, retrying what is safe to retry (see `_Runner.run`)."""
        self._guard(operation)
        return self._runner.run(operation, fn, write=write, snapshot=snapshot, resolves_doubt=resolves_doubt)

    def _read(self, operation: str, fn: Callable[[_Tx], T], *, snapshot: bool = True) -> T:
        return self._transaction(operation, fn, write=False, snapshot=snapshot)

    def _write(
        self, operation: str, fn: Callable[[_Write], T], *, resolves_doubt: bool = False, one_write: bool = False
    ) -> T:
        """`fn` in one write transaction, its change logged. `one_write`: `fn` writes with one
        `_Write.apply` (which logs the change itself) and otherwise only reads; when the write also
        `resolves_doubt`, that statement runs alone in autocommit, one round trip in all. Otherwise a
        dead pooled connection is found by BEGIN, before anything is sent, and replaced."""
        seq: list[int | None] = [None]
        written: list[Counter[str]] = [Counter()]
        single = one_write and resolves_doubt

        def run(tx: _Tx) -> T:
            w = _Write(tx, one_write)
            result = fn(w)
            w.finish()
            seq[0], written[0] = w.seq, w.rows
            return result

        self._guard(operation)
        result = self._runner.run(operation, run, write=True, resolves_doubt=resolves_doubt, single=single)
        self._statistics.wrote(written[0])
        if self._shared.vectors:
            self._settle()
        if seq[0] is not None and seq[0] % _TRIM_EVERY == 0:
            with contextlib.suppress(StorageError):  # housekeeping: the next trigger tries again
                self.trim_log()
        return result

    def _settle(self) -> None:
        """Wakes the thread that indexes the rows writes leave pending (`builder.Settler`)."""
        if self._settler is None:
            self._settler = Settler(self.schema, self.repo, self._connect, f"hippograph-settle:{self.repo}")
        self._settler.nudge()

    # -- scoped-store entries ----------------------------------------------------------------

    def entry_write(self, fn: Callable[[EntryTxn], T]) -> T:
        """`EntryBackend.entry_write`: one transaction holding the repo's entry counter lock, its
        change-log row included. `fn` runs again if the transaction is retried."""

        return self.entry_write_counted(fn)[0]

    def entry_write_counted(self, fn: Callable[[EntryTxn], T]) -> tuple[T, int, int]:
        """`store.protocol.CountsWrites`: `entry_write` and the counter before and after."""

        def run(tx: _Tx) -> tuple[T, int, int]:
            et = PgEntryTxn(tx, True)
            et.lock()
            result = fn(et)
            et.finish()
            return result, et.before, et.after

        return self._transaction("entry_write", run, write=True)

    def entry_read(self, fn: Callable[[EntryTxn], T]) -> T:
        """`EntryBackend.entry_read`: one REPEATABLE READ READ ONLY transaction (one snapshot)."""
        return self._read("entry_read", lambda tx: fn(PgEntryTxn(tx, False)))

    # -- context store spaces ----------------------------------------------------------------

    def context_write(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_write`: one transaction holding the repo's context lock, so context
        writers on every connection and host run one after another. `fn` runs again if the
        transaction is retried."""

        def run(tx: _Tx) -> T:
            kt = PgKvTxn(tx, True)
            kt.lock()
            try:
                result = fn(kt)
                kt.finish()
                return result
            finally:
                kt.live = False

        return self._transaction("context_write", run, write=True)

    def context_read(self, fn: Callable[[KvTxn], T]) -> T:
        """`ContextBackend.context_read`: one REPEATABLE READ READ ONLY transaction (one snapshot)."""

        def run(tx: _Tx) -> T:
            kt = PgKvTxn(tx, False)
            try:
                return fn(kt)
            finally:
                kt.live = False

        return self._read("context_read", run)

    # -- writes ----------------------------------------------------------------------------

    @staticmethod
    def _encode_meta(updates: Mapping[str, NodeMetadata]) -> dict[str, bytes]:
        return {node_id: codec.encode_meta(meta) for node_id, meta in updates.items()}

    def apply_changeset(self, cs: Changeset) -> None:
        self._guard("apply_changeset")
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)
        self._write("apply_changeset", lambda w: w.apply(cs, encoded), one_write=True)

    def delete_nodes(self, ids: Iterable[str]) -> None:
        self._guard("delete_nodes")
        wanted = check_ids(ids)
        self._write("delete_nodes", lambda w: w.delete_nodes(wanted))

    def update_metadata(self, updates: Mapping[str, NodeMetadata]) -> None:
        self._guard("update_metadata")
        encoded = self._encode_meta(check_metadata_updates(updates))
        self._write("update_metadata", lambda w: w.put_meta(encoded), one_write=True)

    def delete_metadata(self, ids: Iterable[str]) -> None:
        self._guard("delete_metadata")
        wanted = check_ids(ids)
        self._write("delete_metadata", lambda w: w.delete_meta(wanted))

    def modify_metadata(
        self, ids: Iterable[str], fn: Callable[[str, NodeMetadata | None], NodeMetadata | None]
    ) -> None:
        """Read-modify-write the metadata of existing nodes in one transaction.

        The nodes' rows are locked first (in id order), so concurrent callers
        on any host queue per node and their increments add up; `fn` may run
        again when the transaction is retried.
        """
        self._guard("modify_metadata")
        wanted = check_ids(ids)

        def run(w: _Write) -> None:
            keys = sorted({_key(i) for i in wanted})
            if not keys:
                return
            live = {_id(r[0]) for r in w.tx.all("lock_nodes", (w.tx.repo, keys))}
            current = {_id(k): codec.decode_meta(bytes(v)) for k, v in w.tx.all("get_meta", (w.tx.repo, keys))}
            updates: dict[str, NodeMetadata] = {}
            for node_id in wanted:
                if node_id in live and node_id not in updates:
                    new = fn(node_id, current.get(node_id))
                    if new is not None:
                        updates[node_id] = new
            w.put_meta(self._encode_meta(check_metadata_updates(updates)))

        self._write("modify_metadata", run)

    def rewrite(self, cs: Changeset, delete_ids: Iterable[str], orphan_candidates: Iterable[str]) -> list[str]:
        """Maintenance in one transaction: delete nodes with their metadata, apply
        `cs`, then delete the tag and intent nodes among `orphan_candidates`
        left without links (with their metadata). Returns the orphans deleted.

        Candidates are locked before their links are counted, so a concurrent
        writer cannot link to an orphan that is about to go.
        """
        self._guard("rewrite")
        doomed = check_ids(delete_ids)
        candidates = sorted(set(check_ids(orphan_candidates)))
        check_changeset(cs, None)
        encoded = self._encode_meta(cs.metadata)

        def run(w: _Write) -> list[str]:
            w.delete_nodes(doomed)
            w.delete_meta(doomed)
            w.apply(cs, encoded)
            if not candidates:
                return []
            keys = [_key(c) for c in candidates]
            kinds = {_id(k): NodeType(t) for k, t in w.tx.all("lock_nodes", (w.tx.repo, keys))}
            linked = {_id(r[0]) for r in w.tx.all("linked_any", (w.tx.repo, keys))}
            orphans = [c for c in candidates if kinds.get(c) in ORPHAN_TYPES and c not in linked]
            w.delete_nodes(orphans)
            w.delete_meta(orphans)
            return orphans

        return self._write("rewrite", run)

    def commit_ingestion(self, record: IngestionRecord, cs: Changeset) -> tuple[Outcome, IngestionReceipt]:
        self._guard("commit_ingestion")
        check_record(record, cs, None)
        step = self._ingestion_step(record, cs, secrets.token_bytes(16))
        return self._write("commit_ingestion", step, resolves_doubt=True, one_write=True)

    def commit_ingestions(self, items: Sequence[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
        """`CommitsIngestions`: one transaction, its ids logged in one change-log row."""
        self._guard("commit_ingestions")

        def commit(unique: list[Ingestion]) -> list[tuple[Outcome, IngestionReceipt]]:
            token = secrets.token_bytes(16)  # one call's: its sources are distinct, so each claim is told apart
            steps = [self._ingestion_step(record, cs, token) for record, cs in unique]
            return self._write("commit_ingestions", lambda w: [step(w) for step in steps], resolves_doubt=True)

        return commit_each_source_once(items, commit)

    def _ingestion_step(
        self, record: IngestionRecord, cs: Changeset, token: bytes
    ) -> Callable[[_Write], tuple[Outcome, IngestionReceipt]]:
        """The compare-and-set of one source inside a write transaction: a claim row carrying the
        call's `token`, so a retry after an unanswered commit knows its own claim."""
        encoded_meta = self._encode_meta(cs.metadata)
        encoded_record = codec.encode_record(record)
        key = _key(record.source_id)

        def step(w: _Write) -> tuple[Outcome, IngestionReceipt]:
            if w.apply(cs, encoded_meta, (key, encoded_record, token, record.receipt.stored_at)):
                w.rows["ingestion"] += 1
                return Outcome.INSERTED, record.receipt
            row = w.tx.one("get_record", (w.tx.repo, key))
            if row is None:  # forgotten between our claim and this read: claim again
                raise _Retry
            stored = codec.decode_record(record.source_id, bytes(row[0]))
            if bytes(row[1]) == token:  # an earlier attempt of this call committed, unanswered
                return Outcome.INSERTED, stored.receipt
            return Outcome.EXISTING, existing_receipt(stored, record.payload_digest, record.fingerprint_version)

        return step

    def delete_ingestion(self, source_id: str) -> bool:
        self._guard("delete_ingestion")
        key = _key(check_id(source_id, "source_id"))
        return self._write("delete_ingestion", lambda w: w.tx.one("del_record", (w.tx.repo, key)) is not None)

    def trim_log(self, *, older_than: float | None = None) -> int:
        """Deletes change-log entries beyond the newest `log_keep` that are older
        than `older_than` seconds (default: twice `gap_timeout`); returns the log
        floor afterwards.

        Writers call it now and then by themselves; readers that were further
        behind rebuild their cache. The log is shared by every repo of the
        schema. An `older_than` below every process's `gap_timeout` may trim the
        entry of a transaction still committing, which a reader would then miss.
        """
        self._guard("trim_log")
        age = 2 * self._gap_timeout if older_than is None else older_than
        if isinstance(age, bool) or not isinstance(age, (int, float)) or not age >= 0:
            raise ConfigError(f"older_than must be a number of seconds >= 0, got {older_than!r}")

        def run(tx: _Tx) -> int:
            state = tx.one("state", (tx.repo,))
            floor = 0 if state is None else int(state[0])
            top_row = tx.one("log_top")
            top = 0 if top_row is None or top_row[0] is None else int(top_row[0])
            if top - self._log_keep <= floor:
                return floor
            row = tx.one("trim_cut", (top - self._log_keep, float(age)))
            if row is None or row[0] is None or int(row[0]) <= floor:
                return floor
            cut = int(row[0])
            if tx.one("trim_floor", (cut, cut)) is None:  # someone else trimmed further
                state = tx.one("state", (tx.repo,))
                return floor if state is None else int(state[0])
            tx.run("trim_delete", (cut,))
            return cut

        with self._trim_lock:
            return self._transaction("trim_log", run, write=True)

    # -- reads -----------------------------------------------------------------------------

    def _refreshed(self, tx: _Tx) -> int | None:
        """Brings the cache up to the transaction's snapshot; returns the repo's dimension."""
        rows = tx.fetch("state", (tx.repo.encode(),))  # the read's first statement: its BEGIN goes along
        seq, dim, created = rows[0] if rows else (None, None, None)
        with self._cache_lock.write():
            self._cache.refresh(tx, prepared.integer(seq) or 0, created)
        return prepared.integer(dim)

    def _prepare_server_search(self, kwargs: Mapping[str, Any], configure: Callable[[Conn], None]) -> None:
        """Notes the repo's HNSW indexes and builds (and calibrates) the ones it lacks: at once when
        ``ann.background`` is false, else in a background thread (`builder.IndexBuilder`), which
        `find_candidates` starts again from time to time; searches meanwhile answer as before."""
        search = self._search
        assert search is not None
        ann = self._ann
        with self._pool.connection() as conn:
            search.prepare(conn, ann if ann is None or not ann.background else None)
        if ann is not None and ann.background:
            self._builder = IndexBuilder(search, ann, connector(self.dsn, kwargs, configure), f"hippograph:{self.repo}")
            self._builder.start()
        self._settle()  # rows an earlier process left pending

    def build_vector_index(
        self, types: Iterable[NodeType | str] | None = None, progress: Progress | None = None
    ) -> list[str]:
        """With ``search="server"``, builds the server's HNSW indexes (types holding more than
        ``ann.min_nodes`` nodes); otherwise the in-process indexes."""
        if self._search is None:
            return super().build_vector_index(types, progress)
        self._guard("build_vector_index")
        wanted = list(NodeType) if types is None else as_node_types(types)
        check_progress(progress)
        try:
            with self._pool.connection() as conn:
                built = self._search.prepare(conn, self._ann, wanted)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StorageError(f"{type(exc).__name__}: {exc}", operation="build_vector_index") from None
        return [t.value for t in built]

    def vector_index_stats(self) -> dict[str, dict[str, Any]]:
        if self._search is None:
            return super().vector_index_stats()
        self._guard("vector_index_stats")
        try:
            with self._pool.connection() as conn:
                self._search.prepare(conn, None)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StorageError(f"{type(exc).__name__}: {exc}", operation="vector_index_stats") from None
        return self._search.stats()

    explains_answers = True
    """`find_candidates` takes ``explain=`` (`hippograph.graph.protocol.ExplainsAnswers`)."""

    def find_candidates(
        self,
        types: Sequence[NodeType | str],
        query: object,
        tags: Iterable[object],
        value_function: ValueFunctionConfig | Mapping[str, Any] | None,
        *,
        now: datetime | None = None,
        exact: bool = False,
        explain: bool | Explaining = False,
    ) -> list[tuple[Node, float]]:
        """`GraphBackend.find_candidates`; with `explain`, each hit is an `ExplainedHit`."""
        self._guard("find_candidates")
        explaining, exact = explaining_of(explain), check_flag(exact, "exact")
        search = self._search
        if search is not None:
            if self._builder is not None:
                self._builder.due()

            def served(tx: _Tx) -> list[tuple[Node, float]]:
                return search.find_candidates(
                    tx, types, query, tags, value_function, now, tx.dim(), exact=exact, explain=explaining
                )

            return self._read("find_candidates", served)

        def run(tx: _Tx) -> list[tuple[Node, float]]:
            dim = self._refreshed(tx)

            def hydrate(ids: list[str], metadata: bool) -> dict[str, tuple[Node, NodeMetadata | None]]:
                return tx.nodes(ids, with_meta=metadata)

            with self._cache_lock.read():
                columns = self._cache.columns
                return find_candidates(
                    columns, types, query, tags, value_function, now, dim, hydrate, exact=exact, explain=explaining
                )

        return self._read("find_candidates", run)

    def _refresh(self, operation: str) -> None:
        self._read(operation, self._refreshed)

    def get_node(self, node_id: str) -> Node | None:
        self._guard("get_node")
        check_id(node_id)

        def run(tx: _Tx) -> Node | None:
            got = tx.nodes([node_id]).get(node_id)
            return None if got is None else got[0]

        return self._read("get_node", run, snapshot=False)  # one statement: its own snapshot

    def get_linked_nodes(self, ids: Iterable[str], edge_type: EdgeType | str | None = None) -> list[Node]:
        self._guard("get_linked_nodes")
        wanted = sorted({_key(i) for i in check_ids(ids)})
        edge = None if edge_type is None else as_edge_type(edge_type)

        def run(tx: _Tx) -> list[Node]:
            if not wanted:
                return []
            if edge is None:
                rows = tx.all("neighbours", (tx.repo, wanted))
            else:
                rows = tx.all("neighbours_by_edge", (tx.repo, wanted, edge.value))
            found = tx.nodes(_id(r[0]) for r in rows)
            return [found[i][0] for i in sorted(found)]

        return self._read("get_linked_nodes", run)

    def get_nodes_by_type(self, types: Iterable[NodeType | str]) -> list[Node]:
        self._guard("get_nodes_by_type")
        wanted = list(dict.fromkeys(as_node_types(types)))

        def run(tx: _Tx) -> list[Node]:
            if not wanted:
                return []
            ids = [_id(r[0]) for r in tx.all("ids_of_types", (tx.repo, [t.value for t in wanted]))]
            by_type: dict[NodeType, list[Node]] = {t: [] for t in wanted}
            for node, _ in tx.nodes(ids).values():
                by_type[node.node_type].append(node)
            return [n for t in wanted for n in sorted(by_type[t], key=lambda n: n.id)]

        return self._read("get_nodes_by_type", run)

    def get_metadata(self, ids: Iterable[str]) -> dict[str, NodeMetadata]:
        self._guard("get_metadata")
        keys = sorted({_key(i) for i in check_ids(ids)})

        def run(tx: _Tx) -> dict[str, NodeMetadata]:
            if not keys:
                return {}
            return {_id(k): codec.decode_meta(bytes(v)) for k, v in tx.all("get_meta", (tx.repo, keys))}

        return self._read("get_metadata", run, snapshot=False)

    def get_ingestion(self, source_id: str) -> IngestionRecord | None:
        self._guard("get_ingestion")
        key = _key(check_id(source_id, "source_id"))

        def run(tx: _Tx) -> IngestionRecord | None:
            rows = tx.fetch("get_record", (tx.repo.encode(), key))
            return codec.decode_record(source_id, rows[0][0]) if rows and rows[0][0] is not None else None

        return self._read("get_ingestion", run, snapshot=False)

    @property
    def dimension(self) -> int | None:
        self._guard("dimension")
        return self._read("dimension", lambda tx: tx.dim(), snapshot=False)

    def stats(self) -> dict[str, Any]:
        """Counts for `Repo.stats`: nodes per type, links, records, metadata, dimension.

        ``disk_bytes`` is None: the tables are shared by every repo of the schema.
        """
        self._guard("stats")
        return self._read("stats", _counts)

    def verify_storage(self) -> tuple[list[str], int]:
        """Storage-level checks for `Repo.verify`: every record decodes, every
        embedding has the recorded dimension and belongs to a node, and every link has its mirror and
        starts at a node (so, with its mirror, ends at one).
        Returns (problems, ingestion records checked).
        """
        self._guard("verify")
        return self._read("verify", _problems)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._builder is not None:
                self._builder.close()
            if self._settler is not None:
                self._settler.close()
            self._cache.close()
            self._statistics.close()
            if os.getpid() == self._pid:
                self._pool.close()
