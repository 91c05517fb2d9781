"""The crash matrix driver: SIGKILL a child running `rel_crash_child.py`, then check the store.

The store is an LMDB directory or a PostgreSQL schema (`open_store`). After
every kill the parent replays the acknowledged operations on an `InMemory`
shadow (through the same `rel_workload.run_op` code), applies the one operation
that may have been in flight while capturing the state after each of its backend
calls, and requires the reopened store to equal one of those states exactly. On
PostgreSQL it first waits until the server has ended the killed client's
sessions: only then is the client's last transaction settled (rolled back, or
committed when its ``COMMIT`` was already on the wire). On top of that
whole-state comparison it checks the named invariants one by one, so a failure
says which promise broke:

- ``receipt``: every acknowledged ingestion's record exists with its exact receipt;
- ``partial``: a record's nodes all exist unless an acknowledged delete, decay or
  consolidation (or the in-flight one) removed them;
- ``orphan``: every node of an ingestion has that ingestion's record;
- ``link``: no link ends at a missing node or is recorded on one end only;
- ``verify``: `Repo.verify()` reports no problem;
- ``metadata``: acknowledged ``update_metadata`` records are durable;
- ``shadow``: the store equals the acknowledged prefix, possibly plus the in-flight
  operation's first k backend calls (each backend call is atomic);
- ``agree``: maintenance results the child acknowledged equal the shadow's;
- ``child``: the child died of the SIGKILL and nothing else;
- ``session``: the killed client's hold on the store ended within `SETTLE_TIMEOUT` (PostgreSQL: the
  server ended its sessions; LMDB: no reader slot of it is left and the writer lock is free).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import lmdb
from rel_workload import (
    T0,
    Recorder,
    copy_into_memory,
    diff,
    metadata_for,
    owner_of,
    receipt_from_json,
    removed_by,
    run_op,
    source_id,
    state,
    structure,
    touched_metadata,
    trajectory,
)

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.graph.fingerprint import FINGERPRINT_VERSION, fingerprint
from hippograph.testing.graphs import Snapshot

CHILD = Path(__file__).with_name("rel_crash_child.py")
KINDS = ("ingest", "batch", "delete", "meta", "reward", "decay", "consolidate")
TARGETS = (*KINDS, "anytime")
CHILD_TIMEOUT = 60.0
"""Hang guard only: a child that has not reached its kill point by then is killed and reported."""
SETTLE_TIMEOUT = 30.0
"""How long a killed client's hold on the store may outlive it (PostgreSQL notices the closed socket at once)."""
REPO = "crash"
"""The repo name of every store (a PostgreSQL store is a schema of its own, so runs never meet)."""


def child_application_name(pid: int) -> str:
    """The PostgreSQL ``application_name`` of child `pid`'s connections: how the parent finds its sessions."""
    return f"hippograph-crash-{pid}"


def open_store(spec: str, *, application_name: str = "hippograph-crash-check") -> Any:
    """The backend a store spec names: ``lmdb:<dir>`` (``sync`` durability), ``postgres:<dsn>#<schema>``,
    or ``pgserver:<dsn>#<schema>`` (the same with ``search="server"``: pgvector keeps the vectors)."""
    kind, _, where = spec.partition(":")
    if kind == "lmdb":
        return LMDB(where, durability="sync")
    if kind in ("postgres", "pgserver"):
        from hippograph.backends.postgres import Postgres

        dsn, _, schema = where.rpartition("#")
        search = "server" if kind == "pgserver" else "client"
        return Postgres(dsn, repo=REPO, schema=schema, application_name=application_name, search=search)
    raise ValueError(f"unknown store spec {spec!r}")


class Stores(Protocol):
    """Where a matrix run keeps its stores: hands out fresh ones and removes them at the end."""

    name: str

    def fresh(self, number: int) -> str: ...

    def settle(self, pid: int) -> str | None: ...

    def close(self) -> None: ...


class LmdbStores:
    """A fresh directory per store under `base` (left to pytest's tmp_path cleanup)."""

    name = "lmdb"

    def __init__(self, base: Path) -> None:
        self.base = base
        self.current = base

    def fresh(self, number: int) -> str:
        self.current = self.base / f"store-{number:04d}"
        return f"lmdb:{self.current}"

    def settle(self, pid: int) -> str | None:
        """The killed child's hold on the store ends with it; a complaint if it does not.

        LMDB keeps a reader slot per process and a writer lock (a robust mutex)
        in ``lock.mdb``: after the kill no slot may remain under the child's pid
        once stale slots are checked, and the writer lock must be free within
        `SETTLE_TIMEOUT`. A store killed before its data file had its meta
        pages has nothing to hold (and is left untouched for the checks).
        """
        data = self.current / "data.mdb"
        if not data.is_file() or data.stat().st_size < 2 * os.sysconf("SC_PAGE_SIZE"):
            return None
        env = lmdb.open(str(self.current), create=False)
        env.reader_check()
        if re.search(rf"^\s*{pid}\s", env.readers(), re.MULTILINE):
            env.close()
            return f"LMDB still lists a reader slot of killed child {pid}"
        took = threading.Event()

        def take_writer_lock() -> None:
            with env.begin(write=True):
                took.set()

        taker = threading.Thread(target=take_writer_lock, daemon=True)
        taker.start()
        taker.join(SETTLE_TIMEOUT)
        if not took.is_set():  # the environment stays open: closing it under a blocked begin would crash
            return f"the LMDB writer lock stayed held after child {pid} was killed ({SETTLE_TIMEOUT:g} s)"
        env.close()
        return None

    def close(self) -> None:
        pass


class PostgresStores:
    """A fresh schema per store on the server at `dsn` (the first open runs the migrations); `close` drops them."""

    name = "postgres"

    def __init__(self, dsn: str, *, server_search: bool = False) -> None:
        import psycopg

        self.kind = "pgserver" if server_search else "postgres"
        if server_search:
            self.name = "postgres-server"
        self.dsn = dsn
        self.run = uuid.uuid4().hex[:12]
        self.schemas: list[str] = []
        self._admin = psycopg.connect(dsn, autocommit=True)

    def fresh(self, number: int) -> str:
        schema = f"hg_crash_{self.run}_{number:04d}"
        self.schemas.append(schema)
        return f"{self.kind}:{self.dsn}#{schema}"

    def _sessions(self, name: str) -> int:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        row = self._admin.execute(query, (name,)).fetchone()
        return 0 if row is None else int(row[0])

    def settle(self, pid: int) -> str | None:
        """Wait until the server has ended the sessions of killed child `pid`; a complaint if that took too long.

        A session's entry leaves ``pg_stat_activity`` only after its transaction was rolled back (or
        committed, if the ``COMMIT`` had been sent before the kill), so the store is final from then on.
        """
        name = child_application_name(pid)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        complaint = None
        while self._sessions(name):
            if complaint is None and time.monotonic() > deadline:
                complaint = f"{name}: the server kept the killed client's sessions for over {SETTLE_TIMEOUT:g} s"
                self._admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
                )
            time.sleep(0.002)
        return complaint

    def close(self) -> None:
        for schema in self.schemas:
            self._admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._admin.close()


@dataclass
class Figures:
    backend: str = "lmdb"
    kills: int = 0
    acknowledged: int = 0
    stores: int = 0
    seconds: float = 0.0
    in_flight: Counter[str] = field(default_factory=Counter)
    """Kind of the operation in flight at each kill ("none" between operations)."""
    outcome: Counter[str] = field(default_factory=Counter)
    """"before": the in-flight operation left no trace; "applied": it was fully applied although never
    acknowledged; "partial": some but not all of its backend calls (each atomic) were applied."""
    violations: dict[str, list[str]] = field(default_factory=dict)
    settle_max: float = 0.0
    """PostgreSQL: the longest wait for the server to end a killed client's sessions, in seconds."""

    def violate(self, kind: str, message: str) -> None:
        self.violations.setdefault(kind, []).append(message)

    def summary(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "kills": self.kills,
            "acknowledged_ops": self.acknowledged,
            "stores": self.stores,
            "seconds": round(self.seconds, 1),
            "in_flight_at_kill": dict(sorted(self.in_flight.items())),
            "in_flight_outcome": dict(sorted(self.outcome.items())),
            "violations": sum(len(v) for v in self.violations.values()),
            **(
                {"longest_session_wait_ms": round(1000 * self.settle_max, 1)}
                if self.backend.startswith("postgres")
                else {}
            ),
        }


@dataclass
class Epoch:
    """What the parent knows about one store across the kills it survives."""

    spec: str
    """The store, as `open_store` takes it."""
    shadow: InMemory = field(default_factory=lambda: InMemory(ann=None))
    receipts: dict[str, hg.IngestionReceipt] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    meta: dict[str, int] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    next_index: int = 0


def _spawn(spec: str, seed: int, first: int, errors: Path) -> subprocess.Popen[str]:
    with errors.open("w") as err:
        return subprocess.Popen(
            [sys.executable, str(CHILD), spec, str(seed), str(first)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)


def _run_child(
    epoch: Epoch, seed: int, target: str, rng: random.Random, errors: Path, latency: dict[str, float]
) -> tuple[list[str], int, int]:
    """Start a child, kill it at the chosen moment, return its complete output lines, exit status and pid."""
    proc = _spawn(epoch.spec, seed, epoch.next_index, errors)
    assert proc.stdout is not None
    guard = threading.Timer(CHILD_TIMEOUT, _kill, (proc,))
    guard.start()
    if target == "anytime":  # a purely random moment, which may fall while the store is being opened
        threading.Timer(rng.uniform(0.0, 0.5), _kill, (proc,)).start()
    warm = rng.randint(0, 8)
    seen = 0
    lines: list[str] = []
    begun: tuple[str, float] | None = None
    while True:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ACK ") and begun is not None:
            kind, at = begun
            latency[kind] = 0.8 * latency.get(kind, 0.01) + 0.2 * (time.perf_counter() - at)
        elif target != "anytime" and line.startswith("BEGIN "):
            seen += 1
            kind = json.loads(line[6:])["op"]
            begun = (kind, time.perf_counter())
            if seen > warm and kind == target:
                # Anywhere from the call's start to a little past its usual acknowledgement.
                time.sleep(rng.uniform(0.0, 1.2 * latency.get(kind, 0.01)))
                _kill(proc)
                break
    rest, _ = proc.communicate()
    guard.cancel()
    lines += rest.splitlines(keepends=True)
    return [x.rstrip("\n") for x in lines if x.endswith("\n")], proc.returncode, proc.pid


def _parse(lines: list[str]) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], dict[str, Any] | None]:
    acked: list[tuple[dict[str, Any], dict[str, Any]]] = []
    pending: dict[str, Any] | None = None
    for line in lines:
        if line.startswith("BEGIN "):
            assert pending is None, "two operations in flight"
            pending = json.loads(line[6:])
        elif line.startswith("ACK "):
            assert pending is not None, "acknowledgement without an operation"
            acked.append((pending, json.loads(line[4:])))
            pending = None
    return acked, pending


def _note_ids(epoch: Epoch, op: dict[str, Any]) -> None:
    """Widen the ids and sources every state comparison covers by those `op` names."""
    if op["op"] in ("ingest", "batch"):
        for i in [op["i"]] if op["op"] == "ingest" else op["is"]:
            epoch.sources.add(source_id(i))
            epoch.ids |= set(structure(trajectory(i)).node_ids)
    elif op["op"] == "meta":
        epoch.ids.add(op["id"])


def _replay_ingest(
    epoch: Epoch, figures: Figures, backend: Any, op: dict[str, Any], ack: dict[str, Any] | None
) -> None:
    _note_ids(epoch, op)
    t = trajectory(op["i"])
    sid = t.source_id
    cs = structure(t)
    if ack is None:  # in flight: its stored_at is unknown, so states are compared without it
        receipt = hg.IngestionReceipt(sid, cs.node_ids, T0)
    else:
        receipt = receipt_from_json(ack["receipt"])
        known = epoch.receipts.setdefault(sid, receipt)
        if known != receipt:
            figures.violate("receipt", f"{sid}: a replay was acknowledged with {receipt}, the first with {known}")
    stored = backend.get_ingestion(sid)
    if stored is None:
        backend.commit_ingestion(hg.IngestionRecord(sid, fingerprint(t), FINGERPRINT_VERSION, receipt), cs)
    elif ack is not None and stored.receipt != receipt:
        figures.violate("receipt", f"{sid}: acknowledged {receipt}, the shadow holds {stored.receipt}")


def _replay_batch(epoch: Epoch, figures: Figures, backend: Any, op: dict[str, Any], ack: dict[str, Any] | None) -> None:
    """`Repo.ingest_many` on the shadow: the sources not yet stored in one `commit_ingestions` (one
    candidate state after it, none between its items)."""
    _note_ids(epoch, op)
    items: dict[str, tuple[hg.IngestionRecord, hg.Changeset]] = {}
    for n, i in enumerate(op["is"]):
        t = trajectory(i)
        sid, cs = t.source_id, structure(t)
        if ack is None:  # in flight: stored_at unknown, compared blanked
            receipt = hg.IngestionReceipt(sid, cs.node_ids, T0)
        else:
            receipt = receipt_from_json(ack["receipts"][n])
            known = epoch.receipts.setdefault(sid, receipt)
            if known != receipt:
                figures.violate("receipt", f"{sid}: a batch was acknowledged with {receipt}, the first with {known}")
        stored = backend.get_ingestion(sid)
        if stored is None:
            items.setdefault(sid, (hg.IngestionRecord(sid, fingerprint(t), FINGERPRINT_VERSION, receipt), cs))
        elif ack is not None and stored.receipt != receipt:
            figures.violate("receipt", f"{sid}: acknowledged {receipt}, the shadow holds {stored.receipt}")
    if items:
        backend.commit_ingestions(list(items.values()))


def _replay(epoch: Epoch, figures: Figures, backend: Any, op: dict[str, Any], ack: dict[str, Any] | None) -> None:
    """Apply one operation to the shadow (`backend`), as the child did."""
    if op["op"] == "ingest":
        _replay_ingest(epoch, figures, backend, op, ack)
        return
    if op["op"] == "batch":
        _replay_batch(epoch, figures, backend, op, ack)
        return
    _note_ids(epoch, op)
    ours = run_op(hg.Repo(backend, flush_interval=0), op)
    if ack is not None and ours != ack:
        figures.violate("agree", f"{op}: the child acknowledged {ack}, InMemory computed {ours}")


def _comparable(snap: Snapshot, loose: set[str]) -> Snapshot:
    """`snap` with the stored_at of the sources `loose` (an unacknowledged ingestion's) blanked."""
    if not any(snap.records.get(sid) is not None for sid in loose):
        return snap
    records = dict(snap.records)
    for sid in loose:
        r = records.get(sid)
        if r is not None:
            receipt = hg.IngestionReceipt(r.source_id, r.receipt.node_ids, T0)
            records[sid] = hg.IngestionRecord(r.source_id, r.payload_digest, r.fingerprint_version, receipt)
    return Snapshot(snap.nodes, snap.metadata, records)


def _check_invariants(
    epoch: Epoch, figures: Figures, actual: Snapshot, in_flight: dict[str, Any] | None, label: str
) -> None:
    nodes = actual.nodes
    for sid, receipt in epoch.receipts.items():
        record = actual.records.get(sid)
        if record is None or record.receipt != receipt:
            figures.violate("receipt", f"{label}: {sid} acknowledged {receipt}, store holds {record}")
    may_vanish = set(epoch.removed)
    if in_flight is not None and in_flight["op"] in ("delete", "decay", "consolidate"):
        may_vanish |= set(in_flight.get("ids", [])) if in_flight["op"] == "delete" else set(epoch.ids)
    for sid, record in actual.records.items():
        if record is None:
            continue
        missing = [i for i in record.receipt.node_ids if i not in nodes and i not in may_vanish]
        if missing:
            figures.violate("partial", f"{label}: {sid} is missing {missing} that nothing deleted")
    for node_id in nodes:
        if actual.records.get(owner_of(node_id)) is None:
            figures.violate("orphan", f"{label}: node {node_id!r} exists without its ingestion record")
    for node in nodes.values():
        for edge, others in node.links.items():
            for other in others:
                peer = nodes.get(other)
                if peer is None or node.id not in peer.links.get(edge, ()):
                    figures.violate("link", f"{label}: {edge.value} link {node.id!r} -> {other!r} dangles")
    for node_id, k in epoch.meta.items():
        if actual.metadata.get(node_id) != metadata_for(k):
            figures.violate("metadata", f"{label}: acknowledged metadata #{k} of {node_id!r} is not durable")


def _settle(epoch: Epoch, acked: list[tuple[dict[str, Any], dict[str, Any]]], in_flight: dict[str, Any] | None) -> None:
    """Fold this round's acknowledged operations into the expectations carried to the next round."""
    for op, ack in acked:
        touched = touched_metadata(op, ack) or set()
        for node_id in touched:
            epoch.meta.pop(node_id, None)
        if op["op"] == "meta":
            epoch.meta[op["id"]] = op["k"]
        epoch.removed |= removed_by(op, ack)
    if in_flight is not None:
        touched = touched_metadata(in_flight, None)
        if touched is None:
            epoch.meta.clear()
        else:
            for node_id in touched:
                epoch.meta.pop(node_id, None)


def _round(
    stores: Stores,
    epoch: Epoch,
    figures: Figures,
    seed: int,
    target: str,
    rng: random.Random,
    errors: Path,
    latency: dict[str, float],
) -> None:
    lines, status, pid = _run_child(epoch, seed, target, rng, errors, latency)
    label = f"kill {figures.kills} (seed {seed}, target {target})"
    figures.kills += 1
    if status != -signal.SIGKILL:
        figures.violate("child", f"{label}: child exited with {status}: {errors.read_text()[-2000:]}")
    waited = time.perf_counter()
    complaint = stores.settle(pid)
    figures.settle_max = max(figures.settle_max, time.perf_counter() - waited)
    if complaint is not None:
        figures.violate("session", f"{label}: {complaint}")
    acked, in_flight = _parse(lines)
    figures.acknowledged += len(acked)
    figures.in_flight["none" if in_flight is None else in_flight["op"]] += 1

    for op, ack in acked:
        _replay(epoch, figures, epoch.shadow, op, ack)
    written = [i for op, _ in acked for i in ([op["i"]] if op["op"] == "ingest" else op.get("is", []))]
    epoch.next_index = max([epoch.next_index - 1, *written]) + 1
    _settle(epoch, acked, in_flight)

    loose: set[str] = set()
    if in_flight is not None:
        _note_ids(epoch, in_flight)
    candidates = [state(epoch.shadow, epoch.ids, epoch.sources)]
    if in_flight is not None:
        if in_flight["op"] in ("ingest", "batch"):
            listed = [in_flight["i"]] if in_flight["op"] == "ingest" else in_flight["is"]
            loose = {source_id(i) for i in listed}
            epoch.next_index = max(epoch.next_index, *(i + 1 for i in listed))
        shadow = epoch.shadow
        recorder = Recorder(shadow, lambda: candidates.append(state(shadow, epoch.ids, epoch.sources)))
        _replay(epoch, figures, recorder, in_flight, None)

    with open_store(epoch.spec) as store:
        actual = state(store, epoch.ids, epoch.sources)
        report = hg.Repo(store, flush_interval=0).verify()
        if not report.ok:
            figures.violate("verify", f"{label}: {list(report.problems)}")
        _check_invariants(epoch, figures, actual, in_flight, label)
        seen = _comparable(actual, loose)
        matches = [i for i, c in enumerate(candidates) if _comparable(c, loose) == seen]
        if not matches:
            figures.violate("shadow", f"{label}: in flight {in_flight}; {diff(candidates[-1], actual)}")
        elif in_flight is not None:
            k = matches[-1]
            figures.outcome["before" if k == 0 else "applied" if k == len(candidates) - 1 else "partial"] += 1
        for record in actual.records.values():
            if record is not None:
                epoch.removed |= {i for i in record.receipt.node_ids if i not in actual.nodes}
        epoch.shadow = copy_into_memory(store, epoch.ids, epoch.sources)


def run_matrix(stores: Stores, base: Path, kills: int, *, seed: int, per_store: int) -> Figures:
    """`kills` SIGKILLs, cycling the kill target through every operation kind and random moments.

    `base` holds the child's stderr; the stores come from `stores`, which is closed at the end.
    """
    figures = Figures(backend=stores.name)
    rng = random.Random(seed)
    started = time.perf_counter()
    epoch: Epoch | None = None
    errors = base / "child-stderr.txt"
    latency: dict[str, float] = {}
    try:
        for n in range(kills):
            if epoch is None or n % per_store == 0:
                figures.stores += 1
                epoch = Epoch(stores.fresh(figures.stores))
            _round(stores, epoch, figures, seed * 1_000_003 + n, TARGETS[n % len(TARGETS)], rng, errors, latency)
    finally:
        stores.close()
    figures.seconds = time.perf_counter() - started
    return figures
