"""Writers, a forgetter and a reader in separate processes on one scoped store (LMDB, ``sync``).

Three writer processes (four in the ``slow`` profile: ``pytest -m slow
tests/reliability/test_store_concurrency.py``) put entries, one at a time, into keys of their own under
``("shared",)`` (at three depths), re-put some of their earlier keys there and
put some into ``("shared2",)``, a sibling no forget may touch. A forgetter
process runs ``forget(("shared",))`` over and over while they write, and a
reader process lists the whole store (one snapshot per call) between forgets.
Every operation is logged with system-wide monotonic start and end times.

What makes the checks exact without knowing the commit order: each writer
commits its puts in order, and forgets are one process's sequence, so an entry
a writer put earlier was committed before one it put later, and forget k
committed before forget k+1. For a key put exactly once ("unique"), let e(x) be
the number of the forget whose receipt names it (infinity if none). Then:

- a receipt names only refs under ``("shared",)`` that a put had begun to write
  before the forget ended, and each unique key at most once (``receipt``);
- a forget's receipt names every key whose last put was acknowledged before it
  began, unless an earlier forget already erased that put (``complete``);
- along one writer's unique keys, e(x) never decreases (a forget erasing a later
  put erased every earlier one still there) (``order``);
- a reader's snapshot shows, of each writer's unique keys, a contiguous run
  (those put before the snapshot and not yet erased), and one number s of
  forgets done explains every writer's run at once: everything before a run
  was erased by forget <= s, everything in it by none <= s, and s lies between
  the forgets that ended before the read began and those that began before it
  ended. A half-erased subtree would need two different s (``snapshot``);
- nothing a forget erased shows up in a read begun after that forget ended,
  unless a put of that key was still running when the forget began
  (``reappear``); and every token a read shows belongs to a put begun before
  the read ended;
- every put acknowledged before a read began is in that read, with its token or
  a later put's of the same key, unless a forget running after the put began
  and before the read ended erased it (``visible``; under ``("shared2",)``
  nothing excuses it);
- at the end, a unique key is in the store exactly when no receipt names it,
  and every other key holds its last put exactly when no forget erased that
  put; `verify_entries` reports no problem (``final``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rel_store_concurrency_child import KEPT, NAME, SHARED

import hippograph as hg
from hippograph.store.inspect import verify_entries
from hippograph.store.model import Scope, in_scope

CHILD = Path(__file__).with_name("rel_store_concurrency_child.py")
PROFILES = {"ci": (3, 200, 20, 40), "slow": (4, 3000, 100, 200)}
"""Per profile: writers, puts per writer, and the fewest forgets and reads (both go on until the writers end)."""
HANG_GUARD = 600.0
INF = 1 << 30
Ref = tuple[Scope, str]


@dataclass
class Run:
    profile: tuple[int, int, int, int]
    puts: list[dict[str, Any]]
    forgets: list[dict[str, Any]]
    reads: list[dict[str, Any]]
    errors: list[str]
    statuses: list[int]
    final: dict[Ref, str]
    verified: tuple[int, list[str]]
    violations: dict[str, list[str]] = field(default_factory=dict)

    def violate(self, kind: str, message: str) -> None:
        self.violations.setdefault(kind, []).append(message)


def _ref(scope: list[str], key: str) -> Ref:
    return tuple(scope), key


@pytest.fixture(
    scope="module",
    params=[pytest.param(p, id=f"store-{p}", marks=[pytest.mark.slow] if p == "slow" else []) for p in PROFILES],
)
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    profile = PROFILES[request.param]
    writers, puts, forgets, reads = profile
    base = tmp_path_factory.mktemp(f"store-concurrency-{request.param}")
    where, stop = base / "store", base / "stop"
    hg.open_store(NAME, path=where).close()  # created once, before the workers race
    roles = [("writer", w, puts) for w in range(writers)] + [("forgetter", 0, forgets), ("reader", 0, reads)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(where), role, str(i), str(n), "11", str(stop)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, i, n in roles
    ]
    for proc in procs:  # every process has its store open before any starts
        assert proc.stdout is not None and proc.stdout.readline() == "READY\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs: list[tuple[str, str]] = []
    for proc in procs[:writers]:
        outputs.append(proc.communicate(timeout=HANG_GUARD))
    stop.touch()
    for proc in procs[writers:]:
        outputs.append(proc.communicate(timeout=HANG_GUARD))
    lines = [json.loads(x) for out, _ in outputs for x in out.splitlines()]
    with hg.open_store(NAME, path=where) as store:
        final = {e.ref: e.text.split()[-1] for e in store.backend.entry_read(lambda t: list(t.scan(())))}
        verified = verify_entries(store.backend)
    result = Run(
        profile=profile,
        puts=[x for x in lines if x.get("role") == "put"],
        forgets=sorted((x for x in lines if x.get("role") == "forget"), key=lambda x: x["k"]),
        reads=[x for x in lines if x.get("role") == "read"],
        errors=[x["error"] for x in lines if "error" in x] + [err for _, err in outputs if err.strip()],
        statuses=[p.returncode for p in procs],
        final=final,
        verified=verified,
    )
    _check(result)
    yield result


def _check(run: Run) -> None:
    puts_of: dict[Ref, list[dict[str, Any]]] = defaultdict(list)
    by_token: dict[str, dict[str, Any]] = {}
    for p in sorted(run.puts, key=lambda p: (p["w"], p["n"])):
        puts_of[_ref(p["scope"], p["key"])].append(p)
        by_token[p["tok"]] = p
    shared = {r for r in puts_of if in_scope(r[0], SHARED)}
    unique = {r for r in shared if len(puts_of[r]) == 1}
    named: dict[Ref, list[int]] = defaultdict(list)  # ref -> numbers of the forgets whose receipt names it
    for f in run.forgets:
        for scope, key in f["keys"]:
            named[_ref(scope, key)].append(f["k"])
    forget = {f["k"]: f for f in run.forgets}
    erased = {r: named[r][0] if named[r] else INF for r in unique}

    # receipt: only refs under SHARED that a put had begun writing, each unique key at most once, and
    # between two forgets naming the same key a put of it that may have landed between them
    for f in run.forgets:
        for scope, key in f["keys"]:
            ref = _ref(scope, key)
            if not in_scope(ref[0], SHARED) or not any(p["t0"] < f["t1"] for p in puts_of.get(ref, [])):
                run.violate("receipt", f"forget {f['k']} names {ref}, which no put had begun to write")
    for ref, ks in named.items():
        for a, b in itertools.pairwise(ks):
            if not any(p["t1"] > forget[a]["t0"] and p["t0"] < forget[b]["t1"] for p in puts_of.get(ref, [])):
                run.violate("receipt", f"forgets {a} and {b} both name {ref} with no put of it between them")

    # complete: a put acknowledged before forget k began, not erased by an earlier forget, is named by k
    for ref in shared:
        for p in puts_of[ref]:
            for f in run.forgets:
                if p["t1"] >= f["t0"]:
                    continue
                earlier = [j for j in named[ref] if j < f["k"]]
                if earlier and p["t0"] < forget[earlier[-1]]["t1"]:
                    continue  # that earlier forget may have erased this put
                if f["k"] not in named[ref]:
                    run.violate("complete", f"forget {f['k']} misses {ref} ({p['tok']} acknowledged before it)")
                break  # later forgets: the first one erased it

    # order: along one writer's unique keys, the erasing forget never decreases
    sequence: dict[int, list[Ref]] = defaultdict(list)
    for p in sorted(run.puts, key=lambda p: (p["w"], p["n"])):
        ref = _ref(p["scope"], p["key"])
        if ref in unique:
            sequence[p["w"]].append(ref)
    for w, refs in sequence.items():
        for x, y in itertools.pairwise(refs):
            if erased[x] > erased[y]:
                run.violate("order", f"writer {w}: {x} erased by forget {erased[x]}, the later {y} by {erased[y]}")

    for r in run.reads:
        _check_read(run, r, sequence, erased, puts_of, by_token, named, forget)
    _check_final(run, puts_of, unique, named, forget)


def _check_read(
    run: Run,
    r: dict[str, Any],
    sequence: dict[int, list[Ref]],
    erased: dict[Ref, int],
    puts_of: dict[Ref, list[dict[str, Any]]],
    by_token: dict[str, dict[str, Any]],
    named: dict[Ref, list[int]],
    forget: dict[int, dict[str, Any]],
) -> None:
    seen = {_ref(scope, key): tok for scope, key, tok in r["entries"]}
    where = f"read at {r['t0']:.4f}"
    # snapshot: per writer a contiguous run of its unique keys, and one s explaining all of them
    done = sum(f["t1"] < r["t0"] for f in forget.values())
    started = sum(f["t0"] < r["t1"] for f in forget.values())
    low, high = done, started
    for w, refs in sequence.items():
        present = [i for i, ref in enumerate(refs) if ref in seen]
        if not present:
            continue
        lo, hi = present[0], present[-1]
        if len(present) != hi - lo + 1:
            gaps = [refs[i] for i in range(lo, hi + 1) if refs[i] not in seen]
            run.violate("snapshot", f"{where}: writer {w}'s keys {gaps[:3]} missing between ones it shows")
        low = max([low, *(erased[refs[i]] for i in range(lo))])
        high = min([high, *(erased[refs[i]] - 1 for i in range(lo, hi + 1))])
    if low > high:
        run.violate("snapshot", f"{where}: no number of forgets done explains it (needs >= {low} and <= {high})")
    for ref, tok in seen.items():
        p = by_token.get(tok)
        if p is None or _ref(p["scope"], p["key"]) != ref or p["t0"] > r["t1"]:
            run.violate("reappear", f"{where}: {ref} shows {tok}, which no put begun before the read wrote there")
            continue
        for k in named.get(ref, []):
            f = forget[k]
            if f["t1"] < r["t0"] and p["t1"] < f["t0"]:
                run.violate("reappear", f"{where}: {ref} shows {tok}, erased by forget {k} before the read began")
    # visible: every put acknowledged before the read began, unless a forget may have erased it since
    for ref, puts in puts_of.items():
        for i, p in enumerate(puts):
            if p["t1"] >= r["t0"]:
                continue
            allowed = {q["tok"] for q in puts[i:] if q["t0"] < r["t1"]}
            if seen.get(ref) in allowed:
                continue
            excused = ref not in seen and any(
                forget[k]["t1"] > p["t0"] and forget[k]["t0"] < r["t1"] for k in named.get(ref, [])
            )
            if not excused:
                run.violate("visible", f"{where}: {ref} shows {seen.get(ref)}, {p['tok']} was acknowledged before")


def _check_final(
    run: Run,
    puts_of: dict[Ref, list[dict[str, Any]]],
    unique: set[Ref],
    named: dict[Ref, list[int]],
    forget: dict[int, dict[str, Any]],
) -> None:
    count, problems = run.verified
    if problems or count != len(run.final):
        run.violate("final", f"verify_entries: {count} checked of {len(run.final)}: {problems}")
    for ref in run.final.keys() - puts_of.keys():
        run.violate("final", f"{ref} is in the store but nothing put it")
    for ref, puts in puts_of.items():
        last = puts[-1]
        if ref in unique:
            if (ref in run.final) == bool(named[ref]):
                run.violate("final", f"{ref}: in the store {ref in run.final}, named by forgets {named[ref]}")
            continue
        after = [k for k in named.get(ref, []) if forget[k]["t1"] > last["t0"]]
        if ref in run.final:
            if run.final[ref] != last["tok"]:
                run.violate("final", f"{ref} holds {run.final[ref]}, its last put wrote {last['tok']}")
            if any(forget[k]["t0"] > last["t1"] for k in after):
                run.violate("final", f"{ref} survived a forget that began after its last put")
        elif not after:
            run.violate("final", f"{ref} is gone, but no forget could have erased its last put {last['tok']}")


def test_every_process_exits_cleanly(run: Run) -> None:
    assert run.statuses == [0] * (run.profile[0] + 2), run.errors
    assert run.errors == []


def test_the_run_exercised_forgets_racing_puts_and_reads(run: Run) -> None:
    writers, puts, forgets, reads = run.profile
    assert len(run.puts) == writers * puts
    assert len(run.forgets) >= forgets and len(run.reads) >= reads
    assert sum(bool(f["keys"]) for f in run.forgets) >= forgets // 2
    assert sum(any(in_scope(tuple(s), SHARED) for s, _, _ in r["entries"]) for r in run.reads) >= reads // 2


def test_every_receipt_names_exactly_entries_that_existed(run: Run) -> None:
    assert run.violations.get("receipt", []) == []


def test_every_forget_erases_every_entry_acknowledged_before_it(run: Run) -> None:
    assert run.violations.get("complete", []) == []


def test_forgets_erase_each_writers_entries_in_the_order_they_were_written(run: Run) -> None:
    assert run.violations.get("order", []) == []


def test_no_reader_sees_a_half_erased_subtree(run: Run) -> None:
    assert run.violations.get("snapshot", []) == []


def test_nothing_erased_reappears_unless_put_again(run: Run) -> None:
    assert run.violations.get("reappear", []) == []


def test_a_reader_sees_every_acknowledged_put_at_its_next_read(run: Run) -> None:
    assert run.violations.get("visible", []) == []


def test_the_final_store_matches_the_receipts(run: Run) -> None:
    assert run.violations.get("final", []) == []


def test_no_forget_touches_the_sibling_subtree(run: Run) -> None:
    kept = {_ref(p["scope"], p["key"]) for p in run.puts if in_scope(tuple(p["scope"]), KEPT)}
    assert kept and kept <= run.final.keys()
    assert not any(in_scope(tuple(s), KEPT) for f in run.forgets for s, _ in f["keys"])
