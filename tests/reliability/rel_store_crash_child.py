"""Child process of the scoped-store crash matrix: runs a random stream of store operations until killed.

Usage: ``python rel_store_crash_child.py DIR SEED``. Opens
``hippograph.open_store(rel_store_crash.NAME, path=DIR, durability="sync")``,
prints ``READY``, then for every operation ``BEGIN <json descriptor>`` before
calling it and ``ACK <json result>`` after it returned (each line flushed; a
random pause of 3 to 4 ms precedes the acknowledgement, like a caller's own
work would, so some kills land after the commit and before the
acknowledgement). The descriptors are what `rel_store_crash` replays: put and
put_many items carry everything but the times, lifecycle verbs their scope
(and `now` for sweep), retract its ref.

Every text carries a token unique to the (seed, operation, item), so the parent
can tell which put wrote an entry it finds after the kill.
"""

from __future__ import annotations

import json
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from rel_store_crash import DIM, KEYS, NAME, PAUSE, SCOPES, TARGETS_OF_VERBS, WEIGHTS, run_op, token

import hippograph as hg
from hippograph.engine.checks import utcnow

_WORDS = ("peanut", "allergy", "dinner", "flight", "hotel", "budget", "meeting", "deadline", "garden", "piano")


def _item(rng: random.Random, seed: int, seq: int, j: int, scope: tuple[str, ...], key: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "scope": list(scope),
        "key": key,
        "text": f"{' '.join(rng.sample(_WORDS, 3))} {token(seed, seq, j)}",
        "value": {"seq": seq, "j": j, "tags": rng.sample(_WORDS, 2), "n": {"x": rng.randint(-5, 5) / 4, "ok": True}},
        "embedding": None,
        "importance": rng.choice((0.0, 0.25, 0.5, 1.0)),
        "pending": rng.random() < 0.25,
        "ttl": 3600.0 if rng.random() < 0.2 else None,
    }
    if rng.random() < 0.6:
        item["embedding"] = [rng.randint(-8, 8) / 8 for _ in range(DIM)]
        item["embedding"][0] = 1.0  # never the zero vector
    return item


def _relevant(kind: str, status: str, expiring: bool) -> bool:
    """Whether `kind` has work on an entry of this status and expiry."""
    if kind in ("flush", "discard"):
        return status == "pending"
    if kind == "prune":
        return status == "retracted"
    if kind == "sweep":
        return expiring
    return True


def main() -> None:
    where, seed = sys.argv[1], int(sys.argv[2])
    rng, pause = random.Random(seed), random.Random(-seed)
    store = hg.open_store(NAME, path=where, durability="sync")
    # What the store holds (the child is its only writer): whom retract may pick.
    held = store.backend.entry_read(lambda t: list(t.scan(())))
    status = {e.ref: e.status for e in held}
    expiring = {e.ref for e in held if e.expires_at is not None}
    print("READY", flush=True)
    for seq in range(1_000_000):
        kind = rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        retractable = sorted(ref for ref, s in status.items() if s != "retracted")
        if kind == "retract" and not retractable:
            kind = "put"
        op: dict[str, Any] = {"op": kind}
        if kind == "put":
            op["item"] = _item(rng, seed, seq, 0, rng.choice(SCOPES), rng.choice(KEYS))
        elif kind == "put_many":
            refs = rng.sample([(s, k) for s in SCOPES for k in KEYS], rng.randint(2, 5))
            op["items"] = [_item(rng, seed, seq, j, s, k) for j, (s, k) in enumerate(refs)]
        elif kind == "retract":
            scope, key = rng.choice(retractable)
            op["scope"], op["key"] = list(scope), key
        else:
            scope = rng.choice(TARGETS_OF_VERBS)
            aims = [ref[0] for ref in status if _relevant(kind, status[ref], ref in expiring)]
            if aims and rng.random() < 0.8:  # mostly a subtree the verb has work in
                aim = rng.choice(aims)
                scope = aim[: rng.randint(1, len(aim))]
            if kind in ("prune", "sweep", "forget") and rng.random() < 0.04:
                scope = ()  # the whole store (forget needs everything=True)
            op["scope"] = list(scope)
            if kind == "sweep":  # now, or past the expiry of every ttl this stream sets
                op["now"] = (utcnow() + timedelta(hours=2 if rng.random() < 0.5 else 0)).isoformat()
        print("BEGIN " + json.dumps(op), flush=True)
        ack = run_op(store, op)
        time.sleep(pause.uniform(*PAUSE))  # the caller's own work before it acknowledges: widens the window
        print("ACK " + json.dumps(ack), flush=True)
        if kind in ("put", "put_many"):
            for e in ack["entries"]:
                ref = (tuple(e["scope"]), e["key"])
                status[ref] = e["status"]
                (expiring.add if e["expires_at"] is not None else expiring.discard)(ref)
        else:
            for scope, key in ack["keys"]:
                ref = (tuple(scope), key)
                if kind == "flush":
                    status[ref] = "active"
                elif kind == "retract":
                    status[ref] = "retracted"
                else:
                    status.pop(ref, None)
                    expiring.discard(ref)


if __name__ == "__main__":
    main()
