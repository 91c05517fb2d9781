"""Worker process of the scoped-store concurrency test: a writer, the forgetter or a reader.

Usage: ``python rel_store_concurrency_child.py DIR ROLE INDEX COUNT SEED STOP``.
Opens ``hippograph.open_store(NAME, path=DIR)``, prints ``READY``, waits for a
line on stdin (so every role starts at once), then:

- ``writer``: `COUNT` puts, one at a time: most into a key of its own under
  `SHARED` (at three depths), some re-puts of one of its earlier keys there,
  some into `KEPT` (a sibling subtree no forget touches, whose name starts
  like `SHARED`'s);
- ``forgetter``: ``forget(SHARED)`` after a random pause, again and again,
  until the file `STOP` exists and it has done at least `COUNT`;
- ``reader``: ``list(())`` (one snapshot of the whole store) after a random
  pause, until `STOP` exists and it has read at least `COUNT` times.

Every operation is printed as one JSON line once it returned, with monotonic
start and end times (CLOCK_MONOTONIC is system-wide, so they compare across
processes). An exception is printed as ``{"error": ...}`` and ends the process
with status 1.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import hippograph as hg

NAME = "concurrency"
SHARED = ("shared",)
KEPT = ("shared2",)
DIM = 4


def writer(store: hg.Store, w: int, count: int, rng: random.Random) -> None:
    mine: list[tuple[tuple[str, ...], str]] = []
    for n in range(count):
        roll = rng.random()
        scope: tuple[str, ...]
        if roll < 0.15:
            scope, key = (*KEPT, f"w{w}"), f"w{w}-{n}"
        elif roll < 0.25 and mine:
            scope, key = rng.choice(mine)
        else:
            scope = rng.choice([SHARED, (*SHARED, f"w{w}"), (*SHARED, f"w{w}", "deep")])
            key = f"w{w}-{n}"
            mine.append((scope, key))
        tok = f"w{w}n{n}"
        embedding = [1.0, rng.random(), rng.random(), 0.5] if rng.random() < 0.5 else None
        started = time.monotonic()
        store.put(scope, key, f"memo {tok}", {"w": w, "n": n}, embedding=embedding)
        emit({"role": "put", "w": w, "n": n, "scope": list(scope), "key": key, "tok": tok, "t0": started})


def forgetter(store: hg.Store, count: int, rng: random.Random, stop: Path) -> None:
    k = 0
    while k < count or not stop.exists():
        time.sleep(rng.uniform(0.0, 0.015))
        started = time.monotonic()
        receipt = store.forget(SHARED)
        k += 1
        emit({"role": "forget", "k": k, "keys": [[list(s), key] for s, key in receipt.keys], "t0": started})


def reader(store: hg.Store, count: int, rng: random.Random, stop: Path) -> None:
    done = 0
    while done < count or not stop.exists():
        time.sleep(rng.uniform(0.0, 0.005))
        started = time.monotonic()
        listed = store.list((), order="key", limit=1 << 20)
        done += 1
        seen = [[list(e.scope), e.key, e.text.split()[-1]] for e in listed]
        emit({"role": "read", "entries": seen, "t0": started})


def emit(line: dict[str, Any]) -> None:
    line["t1"] = time.monotonic()
    print(json.dumps(line), flush=True)


def main() -> None:
    where, role, index, count, seed, stop = sys.argv[1:7]
    rng = random.Random(int(seed) * 100 + int(index))
    store = hg.open_store(NAME, path=where, durability="sync")
    print("READY", flush=True)
    sys.stdin.readline()
    try:
        if role == "writer":
            writer(store, int(index), int(count), rng)
        elif role == "forgetter":
            forgetter(store, int(count), rng, Path(stop))
        else:
            reader(store, int(count), rng, Path(stop))
    except Exception:
        print(json.dumps({"role": role, "error": traceback.format_exc()}), flush=True)
        sys.exit(1)
    finally:
        store.close()


if __name__ == "__main__":
    main()
