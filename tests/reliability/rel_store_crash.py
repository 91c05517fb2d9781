"""The scoped-store crash matrix driver: SIGKILL a child running `rel_store_crash_child.py`, then check the store.

The store is ``hippograph.open_store(NAME, path=<dir>, durability="sync")`` on
LMDB. As in `rel_crash`, the kill is timed: the parent picks a target kind
(cycling through every store operation, plus purely random moments, which may
fall while the store is being opened), waits for the child to begin an
operation of that kind, and kills it anywhere from the call's start to a little
past its usual acknowledgement. After every kill the parent replays the
acknowledged operations on a model (the store's contents as found after the
previous kill, one ``Want`` per ref), derives what the one operation in flight
would change, reopens the store and checks the named invariants:

- ``receipt``: every acknowledged lifecycle verb (forget, flush, discard, retract,
  prune, sweep) named exactly the refs the model says it changed;
- ``durable``: every entry the acknowledged prefix leaves (every acknowledged
  put and put_many item not later removed or replaced by an acknowledged
  operation) is present with the acknowledged text, value, kind, importance,
  status, vector and expiry, unless the operation in flight changes that ref;
- ``phantom``: no entry exists that neither the acknowledged prefix nor the
  operation in flight wrote;
- ``forget``: no entry lies in the subtree of an acknowledged forget (of this
  store's whole life) that was written before that forget;
- ``atomic``: the operation in flight is all or nothing: all or none of a
  put_many's items, all or none of the refs a verb changes;
- ``shadow``: the store equals the acknowledged prefix, or the prefix plus the
  whole operation in flight (each store operation is one transaction);
- ``verify``: `hippograph.store.inspect.verify_entries` reports no problem and
  counts every entry;
- ``read``: a fresh `Store` on the reopened directory lists exactly the visible
  and pending entries, and finds a sample of them (the in-flight items among
  them) by their unique token, and finds no token the store lacks;
- ``child``: the child died of the SIGKILL and nothing else;
- ``session``: the killed child's reader slot and writer lock are gone
  (`rel_crash.LmdbStores.settle`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

import hippograph as hg
from hippograph.engine.checks import utcnow
from hippograph.store.inspect import verify_entries
from hippograph.store.model import Entry, Scope, in_scope

CHILD = Path(__file__).with_name("rel_store_crash_child.py")
NAME = "crash"
DIM = 4
SCOPES: tuple[Scope, ...] = (
    ("users", "u1"),
    ("users", "u1", "chat"),
    ("users", "u12"),  # ("users", "u1") must never reach it
    ("users", "u2", "chat", "t1"),
    ("agents", "a"),
    ("agents", "a", "s1"),
    ("agents", "b"),
)
KEYS = tuple(f"k{i}" for i in range(10))
TARGETS_OF_VERBS: tuple[Scope, ...] = tuple(sorted({s[:n] for s in SCOPES for n in range(1, len(s) + 1)}))
"""The scopes lifecycle verbs aim at: every scope written to and each of its ancestors."""
WEIGHTS = {"put": 30, "put_many": 14, "forget": 8, "flush": 10, "discard": 8, "retract": 10, "prune": 8, "sweep": 8}
KINDS = tuple(WEIGHTS)
VERBS = ("forget", "flush", "discard", "retract", "prune", "sweep")
TARGETS = (*KINDS, "anytime")
PAUSE = (0.003, 0.004)
"""The child's pause between a call's return and its acknowledgement (seconds, uniform): a caller's own work."""
CHILD_TIMEOUT = 60.0
"""Hang guard only: a child that has not reached its kill point by then is killed and reported."""
Ref = tuple[Scope, str]


def token(seed: int, seq: int, j: int) -> str:
    """The word in an item's text that names the put that wrote it (one word for the text index)."""
    return f"tok{seed}x{seq}x{j}"


def token_of(text: str) -> str:
    return text.rsplit(" ", 1)[-1]


def items_of(op: dict[str, Any]) -> list[dict[str, Any]]:
    """The items a put or put_many descriptor writes."""
    return [op["item"]] if op["op"] == "put" else list(op["items"])


def run_op(store: hg.Store, op: dict[str, Any]) -> dict[str, Any]:
    """Runs one descriptor on `store`; what the child acknowledges."""
    kind = op["op"]
    if kind in ("put", "put_many"):
        items = items_of(op)
        if kind == "put":
            written = [store.put(**{**items[0], "scope": tuple(items[0]["scope"])})]
        else:
            written = store.put_many([{**it, "scope": tuple(it["scope"])} for it in items])
        return {
            "entries": [
                {
                    "scope": list(e.scope),
                    "key": e.key,
                    "status": e.status,
                    "expires_at": None if e.expires_at is None else e.expires_at.isoformat(),
                }
                for e in written
            ]
        }
    scope = tuple(op["scope"])
    if kind == "forget":
        receipt = store.forget(scope, everything=scope == ())
    elif kind == "flush":
        receipt = store.flush(scope)
    elif kind == "discard":
        receipt = store.discard(scope)
    elif kind == "retract":
        receipt = store.retract(scope, op["key"])
    elif kind == "prune":
        receipt = store.prune(scope)
    elif kind == "sweep":
        receipt = store.sweep(scope, now=datetime.fromisoformat(op["now"]))
    else:
        raise ValueError(f"unknown operation {kind!r}")
    return {"keys": [[list(s), k] for s, k in receipt.keys]}


# -- the model ---------------------------------------------------------------------------------

ANY_TIME = "some expiry"
"""The expiry of an in-flight put with a ttl: set, but at a time the parent cannot know."""


@dataclass(frozen=True)
class Want:
    """What an entry holds, times aside (except the expiry, which sweep decides by)."""

    text: str
    value: str
    kind: str
    importance: float
    status: str
    embedding: bytes | None
    expires_at: datetime | str | None

    def matches(self, got: Want | None) -> bool:
        if got is None:
            return False
        if self.expires_at == ANY_TIME:
            return got.expires_at is not None and replace(self, expires_at=None) == replace(got, expires_at=None)
        return self == got


def seen(e: Entry) -> Want:
    emb = None if e.embedding is None else np.asarray(e.embedding, np.float32).tobytes()
    value = json.dumps(e.value, sort_keys=True)
    return Want(e.text, value, e.kind, e.importance, e.status, emb, e.expires_at)


def wanted(item: dict[str, Any], expires_at: datetime | str | None) -> Want:
    emb = None if item["embedding"] is None else np.asarray(item["embedding"], np.float32).tobytes()
    value = json.dumps(item["value"], sort_keys=True)
    status = "pending" if item["pending"] else "active"
    return Want(item["text"], value, "semantic", float(item["importance"]), status, emb, expires_at)


State = dict[Ref, Want]


def same_state(want: State, got: State) -> bool:
    return want.keys() == got.keys() and all(w.matches(got[r]) for r, w in want.items())


def apply(state: State, op: dict[str, Any], ack: dict[str, Any] | None) -> tuple[State, list[Ref]]:
    """The state after `op` (acknowledged with `ack`, or in flight when None) and the refs it changes, sorted."""
    out = dict(state)
    kind = op["op"]
    if kind in ("put", "put_many"):
        items = items_of(op)
        refs = []
        for n, item in enumerate(items):
            ref = (tuple(item["scope"]), item["key"])
            if ack is not None:
                raw = ack["entries"][n]["expires_at"]
                expires: datetime | str | None = None if raw is None else datetime.fromisoformat(raw)
            else:
                expires = None if item["ttl"] is None else ANY_TIME
            out[ref] = wanted(item, expires)
            refs.append(ref)
        return out, sorted(refs)
    scope = tuple(op["scope"])
    if kind == "retract":
        ref = (scope, op["key"])
        old = out.get(ref)
        if old is None or old.status == "retracted":
            return out, []
        out[ref] = replace(old, status="retracted")
        return out, [ref]
    now = datetime.fromisoformat(op["now"]) if kind == "sweep" else None
    changed = []
    for ref, w in state.items():
        if not in_scope(ref[0], scope):
            continue
        if kind == "forget":
            hit = True
        elif kind in ("flush", "discard"):
            hit = w.status == "pending"
        elif kind == "prune":
            hit = w.status == "retracted"
        else:
            assert now is not None and w.expires_at != ANY_TIME
            hit = isinstance(w.expires_at, datetime) and w.expires_at <= now
        if hit:
            changed.append(ref)
            if kind == "flush":
                out[ref] = replace(w, status="active")
            else:
                del out[ref]
    return out, sorted(changed)


# -- the matrix ---------------------------------------------------------------------------------


@dataclass
class Figures:
    kills: int = 0
    acknowledged: int = 0
    stores: int = 0
    seconds: float = 0.0
    in_flight: Counter[str] = field(default_factory=Counter)
    """Kind of the operation in flight at each kill ("none" between operations)."""
    outcome: Counter[str] = field(default_factory=Counter)
    """"before": the in-flight operation left no trace; "applied": it was applied although never acknowledged;
    "noop": it changes nothing either way (e.g. a flush of a subtree holding nothing pending)."""
    violations: dict[str, list[str]] = field(default_factory=dict)

    def violate(self, kind: str, message: str) -> None:
        self.violations.setdefault(kind, []).append(message)

    def summary(self) -> dict[str, Any]:
        return {
            "backend": "lmdb-store",
            "kills": self.kills,
            "acknowledged_ops": self.acknowledged,
            "stores": self.stores,
            "seconds": round(self.seconds, 1),
            "in_flight_at_kill": dict(sorted(self.in_flight.items())),
            "in_flight_outcome": dict(sorted(self.outcome.items())),
            "violations": sum(len(v) for v in self.violations.values()),
        }


@dataclass
class Epoch:
    """What the parent knows about one store across the kills it survives."""

    path: Path
    state: State = field(default_factory=dict)
    """The store's contents as found after the last kill."""
    number: int = 0
    """Operations begun on this store so far (acknowledged or in flight): their order."""
    written: dict[str, int] = field(default_factory=dict)
    """Token of a put item -> number of the operation that wrote it."""
    forgets: list[tuple[int, Scope]] = field(default_factory=list)
    """(number, scope) of every acknowledged forget."""


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)


class _Lines:
    """The child's stdout line by line, read unbuffered so `ahead` can tell whether it printed more."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def ahead(self) -> bool:
        return b"\n" in self.buf or bool(select.select([self.fd], [], [], 0)[0])

    def readline(self) -> str:
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                rest, self.buf = self.buf, b""
                return rest.decode()
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode() + "\n"


def _run_child(
    path: Path, seed: int, target: str, rng: random.Random, errors: Path, latency: dict[str, float]
) -> tuple[list[str], int, int]:
    """Start a child, kill it at the chosen moment, return its complete output lines, exit status and pid."""
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(path), str(seed)], stdout=subprocess.PIPE, stderr=err, bufsize=0
        )
    assert proc.stdout is not None
    out = _Lines(proc.stdout.fileno())
    guard = threading.Timer(CHILD_TIMEOUT, _kill, (proc,))
    guard.start()
    if target == "anytime":  # a purely random moment, which may fall while the store is being opened
        threading.Timer(rng.uniform(0.0, 0.7), _kill, (proc,)).start()
    warm = rng.randint(0, 8)
    seen_ops = 0
    lines: list[str] = []
    begun: tuple[str, float] | None = None
    while True:
        line = out.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ACK ") and begun is not None:
            kind, at = begun
            latency[kind] = 0.8 * latency.get(kind, 0.004) + 0.2 * (time.perf_counter() - at)
        elif target != "anytime" and line.startswith("BEGIN "):
            seen_ops += 1
            kind = json.loads(line[6:])["op"]
            begun = (kind, time.perf_counter())
            # A child that already printed more is past this call: wait for its next call of the kind.
            if seen_ops > warm and kind == target and not out.ahead():
                # Half the kills anywhere in the call, half in the child's pause after it returned (after
                # the commit, before the acknowledgement): the pause is PAUSE long, the rest is the call.
                call = max(latency.get(kind, 0.004) - sum(PAUSE) / 2, 0.0005)
                time.sleep(rng.uniform(0.0, call) if rng.random() < 0.5 else call + rng.uniform(0.0, PAUSE[0]))
                _kill(proc)
                break
    while line:
        line = out.readline()
        lines.append(line)
    proc.wait()
    guard.cancel()
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


def _note(epoch: Epoch, op: dict[str, Any], acknowledged: bool) -> None:
    """Give `op` its number; remember which put wrote which token and every acknowledged forget."""
    epoch.number += 1
    if op["op"] in ("put", "put_many"):
        for item in items_of(op):
            epoch.written[token_of(item["text"])] = epoch.number
    elif op["op"] == "forget" and acknowledged:
        epoch.forgets.append((epoch.number, tuple(op["scope"])))


def _actual(store: hg.Store) -> tuple[State, list[Entry]]:
    entries = store.backend.entry_read(lambda t: list(t.scan(())))
    return {e.ref: seen(e) for e in entries}, entries


def _show(ref: Ref) -> str:
    return "/".join((*ref[0], ref[1]))


def _check(
    epoch: Epoch,
    figures: Figures,
    store: hg.Store,
    before: State,
    after: State | None,
    in_flight: dict[str, Any] | None,
    touched: list[Ref],
    label: str,
    rng: random.Random,
) -> State:
    actual, entries = _actual(store)
    count, problems = verify_entries(store.backend)
    if problems or count != len(actual):
        figures.violate("verify", f"{label}: {count} entries checked of {len(actual)}: {problems}")

    states = [before] if after is None else [before, after]
    matched = [i for i, s in enumerate(states) if same_state(s, actual)]
    if not matched:
        missing = sorted(_show(r) for r in before.keys() - actual.keys())
        extra = sorted(_show(r) for r in actual.keys() - before.keys())
        differ = sorted(_show(r) for r in before.keys() & actual.keys() if not before[r].matches(actual[r]))
        figures.violate(
            "shadow",
            f"{label}: in flight {in_flight}; vs the prefix: missing {missing}, extra {extra}, differ {differ}",
        )
    elif in_flight is not None:
        figures.outcome["noop" if len(matched) == 2 else "before" if matched == [0] else "applied"] += 1

    moving = set(touched)
    for ref, want in before.items():
        if ref not in moving and not want.matches(actual.get(ref)):
            figures.violate("durable", f"{label}: {_show(ref)}: acknowledged {want}, the store holds {actual.get(ref)}")
    for ref in actual.keys() - before.keys() - moving:
        figures.violate("phantom", f"{label}: {_show(ref)} exists but nothing acknowledged or in flight wrote it")

    for e in entries:
        number = epoch.written.get(token_of(e.text))
        if number is None:
            figures.violate("phantom", f"{label}: {_show(e.ref)} holds text no put wrote: {e.text!r}")
            continue
        for at, scope in epoch.forgets:
            if in_scope(e.scope, scope) and number < at:
                figures.violate(
                    "forget",
                    f"{label}: {_show(e.ref)} (written by op {number}) survived the forget of {scope} (op {at})",
                )

    if after is not None and touched:
        as_after = [
            r
            for r in touched
            if (r in after and after[r].matches(actual.get(r))) or (r not in after and r not in actual)
        ]
        as_before = [
            r
            for r in touched
            if (r in before and before[r].matches(actual.get(r))) or (r not in before and r not in actual)
        ]
        if len(as_after) != len(touched) and len(as_before) != len(touched):
            figures.violate(
                "atomic", f"{label}: {in_flight['op'] if in_flight else ''} in flight: "
                f"{len(as_after)} of {len(touched)} refs as after it, {len(as_before)} as before"
            )  # fmt: skip

    now = utcnow()
    readable = sorted(
        e.ref for e in entries if e.status != "retracted" and (e.expires_at is None or e.expires_at > now)
    )
    listed = [e.ref for e in store.list((), include_pending=True, order="key", limit=1 << 20)]
    if listed != readable:
        figures.violate("read", f"{label}: list() gives {len(listed)} refs, the store holds {len(readable)} readable")
    probes = {token_of(e.text) for e in rng.sample(entries, min(4, len(entries)))}
    if in_flight is not None and in_flight["op"] in ("put", "put_many"):
        probes |= {token_of(item["text"]) for item in items_of(in_flight)}
    for tok in sorted(probes):
        found = {h.entry.ref for h in store.search_text(tok, limit=5)}
        expect = {e.ref for e in entries if token_of(e.text) == tok and e.visible(now)}
        if found != expect:
            figures.violate("read", f"{label}: searching {tok!r} finds {found}, expected {expect}")
    return actual


def _round(epoch: Epoch, figures: Figures, stores: Any, seed: int, target: str, rng: random.Random, errors: Path,
           latency: dict[str, float]) -> None:  # fmt: skip
    lines, status, pid = _run_child(epoch.path, seed, target, rng, errors, latency)
    label = f"kill {figures.kills} (seed {seed}, target {target})"
    figures.kills += 1
    if status != -signal.SIGKILL:
        figures.violate("child", f"{label}: child exited with {status}: {errors.read_text()[-2000:]}")
    complaint = stores.settle(pid)
    if complaint is not None:
        figures.violate("session", f"{label}: {complaint}")
    acked, in_flight = _parse(lines)
    figures.acknowledged += len(acked)
    figures.in_flight["none" if in_flight is None else in_flight["op"]] += 1

    state = epoch.state
    for op, ack in acked:
        _note(epoch, op, True)
        state, changed = apply(state, op, ack)
        if op["op"] in VERBS:
            got = sorted((tuple(s), k) for s, k in ack["keys"])
            if got != changed:
                figures.violate(
                    "receipt", f"{label}: {op} acknowledged {[_show(r) for r in got]}, "
                    f"the acknowledged prefix says {[_show(r) for r in changed]}"
                )  # fmt: skip
    after: State | None = None
    touched: list[Ref] = []
    if in_flight is not None:
        _note(epoch, in_flight, False)
        after, touched = apply(state, in_flight, None)

    if not (epoch.path / "data.mdb").exists():  # killed before the store was created: nothing to check
        return
    with hg.open_store(NAME, path=epoch.path, durability="sync") as store:
        epoch.state = _check(epoch, figures, store, state, after, in_flight, touched, label, rng)


def run_matrix(base: Path, kills: int, *, seed: int, per_store: int) -> Figures:
    """`kills` SIGKILLs, cycling the kill target through every store operation and random moments."""
    from rel_crash import LmdbStores

    figures = Figures()
    rng = random.Random(seed)
    started = time.perf_counter()
    stores = LmdbStores(base)
    epoch: Epoch | None = None
    errors = base / "child-stderr.txt"
    latency: dict[str, float] = {}
    for n in range(kills):
        if epoch is None or n % per_store == 0:
            figures.stores += 1
            stores.fresh(figures.stores)
            epoch = Epoch(stores.current)
        _round(epoch, figures, stores, seed * 1_000_003 + n, TARGETS[n % len(TARGETS)], rng, errors, latency)
    figures.seconds = time.perf_counter() - started
    return figures
