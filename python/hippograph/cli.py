"""The ``hippograph`` command line: ``demo``, ``stats``, ``verify``, ``index``, ``recall`` and ``store``.

``--path`` names a store's directory or a directory of stores (default ``./.hippograph``), and
``--name`` one store there (`hippograph.inventory`). ``stats`` prints every family each selected
store holds; ``verify``, ``index`` and ``recall`` work on a graph repo, ``store stats | verify |
search`` on a scoped store, and refuse a store without one rather than report an empty one. Only
``demo`` and ``index`` write (``recall`` opens the store read-only and records no access).
docs/graph-memory.md describes every command and its exit status: 0 on success, 2 on a usage
error, 1 when hippograph reports an error (on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .backends.lmdb import LMDB
from .backends.lmdb.families import GRAPH, STORE, families
from .context import ContextStore
from .embedding import ENGLISH_STOP_WORDS, HashingEmbedder
from .engine.checks import Progress
from .errors import HippographError, ValidationError
from .graph.changeset import Changeset
from .graph.model import Episodic, IngestionReceipt, Node, NodeType, Semantic, Source, Subgoal
from .graph.repo import DEFAULT_RECALL_TYPES, Hit, Repo, open_repo, store_path
from .graph.structuring import episodic
from .graph.trajectory import Step, Trajectory
from .inventory import LABELS, one, select, store_name
from .store import Store
from .store.inspect import print_hits, print_stats, verify_entries

__all__ = ["DEMO_QUERIES", "demo_trajectories", "format_hits", "human_size", "main", "progress_bar"]

DEMO_DATA = "demo_trajectories.json"
DEMO_NAME = "demo"
TEXT_WIDTH = 72

DEMO_QUERIES: tuple[tuple[str, tuple[NodeType, ...]], ...] = (
    ("ModuleNotFoundError in CI: a package missing from requirements.txt", (NodeType.EPISODIC,)),
    ("CI job 'test' fails: ModuleNotFoundError: No module named 'stripe'", (NodeType.PROCEDURAL,)),
    ("roll back a bad release", (NodeType.SUBGOAL, NodeType.EPISODIC)),
    ("deduplicate customer rows by email", (NodeType.SOURCE,)),
    ("customer charged twice: refund the duplicate charge", (NodeType.SUBGOAL, NodeType.EPISODIC)),
)
"""The demo's recalls: query text and the node types asked for."""

TOP_K = 3


def demo_trajectories() -> list[Trajectory]:
    """The bundled sample trajectories, in file order."""
    raw = resources.files("hippograph").joinpath("data", DEMO_DATA).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(raw)
    return [
        Trajectory(
            source_id=item["source_id"],
            goal=item["goal"],
            steps=[Step(s["observation"], s["action"]) for s in item["steps"]],
            metadata=item.get("metadata", {}),
        )
        for item in data["trajectories"]
    ]


def _shorten(text: str, width: int = TEXT_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def node_text(node: Node) -> str:
    """A one-line summary of a node for display."""
    if isinstance(node, Episodic):
        return f"{node.observation} → {node.action}"
    if isinstance(node, Subgoal):
        return node.description
    if isinstance(node, Source):
        return node.plain_text or f"{node.episode_id} step {node.step_index}"
    if isinstance(node, Semantic):
        return node.proposition
    values = [str(v) for v in node.fields_dict().values() if v is not None]
    return " | ".join(values)


def format_hits(hits: Sequence[Hit]) -> str:
    """An aligned text table of hits: score, type, id, text."""
    header = ("score", "type", "id", "text")
    rows = [(f"{h.score:.3f}", h.node.node_type.value, h.node.id, _shorten(node_text(h.node))) for h in hits]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: tuple[str, str, str, str]) -> str:
        score, kind, node_id, text = cells
        return f"  {score:>{widths[0]}}  {kind:<{widths[1]}}  {node_id:<{widths[2]}}  {text}".rstrip()

    out = [line(header), "  " + "  ".join("-" * w for w in widths) + "  " + "-" * 4]
    out += [line(r) for r in rows] if rows else ["  (no matches)"]
    return "\n".join(out)


def _format_receipt(receipt: IngestionReceipt) -> str:
    ids = ", ".join(receipt.node_ids)
    return (
        f"source_id={receipt.source_id} stored_at={receipt.stored_at.isoformat()} nodes={len(receipt.node_ids)} [{ids}]"
    )


def human_size(n: int) -> str:
    """Bytes in binary units, the exact count beside them: ``1.5 MiB (1,572,864 bytes)``."""
    value, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n:,} bytes" if unit == "bytes" else f"{value:.1f} {unit} ({n:,} bytes)"


def _print_disk(n: int | None, others: Sequence[str], out: TextIO) -> None:
    """The bytes the store's directory takes; said to be shared when it holds other families too."""
    shared = f" (the directory's, shared with the {' and the '.join(LABELS[f] for f in others)})" if others else ""
    print(f"  {'on disk':<18} {'n/a' if n is None else human_size(n)}{shared}", file=out)


def _disk_bytes(where: Path) -> int:
    """The blocks the LMDB files take, counted as `LMDB.stats` counts them for a graph repo."""
    return sum(f.stat().st_blocks * 512 for f in where.iterdir() if f.name.endswith(".mdb"))


def _print_stats(repo: Repo, name: str, where: Path, out: TextIO, others: Sequence[str] = ()) -> None:
    s = repo.stats()
    print(f"graph repo {name!r} at {where}", file=out)
    print(f"  nodes              {s.total_nodes}", file=out)
    for kind, count in s.nodes.items():
        print(f"    {kind:<16} {count}", file=out)
    figures = (
        ("links", s.links),
        ("ingestion records", s.ingestion_records),
        ("metadata records", s.metadata),
        ("dimension", s.dimension),
    )
    for label, value in figures:
        print(f"  {label:<18} {'n/a' if value is None else value}", file=out)
    _print_disk(s.disk_bytes, others, out)


def _print_context(context: ContextStore, name: str, where: Path, out: TextIO, others: Sequence[str]) -> None:
    s, memories, jobs = context.stats(), context.memory_stats(), context.queue_stats()
    print(f"context store {name!r} at {where}", file=out)
    rows = [("documents", s["documents"], {}), ("directories", s["directories"], {}),
            ("memories", memories["total"], memories["by_status"]),
            ("sessions", len(context.list_session_ids()), {}), ("jobs", sum(jobs.values()), jobs)]  # fmt: skip
    for label, value, parts in rows:
        print(f"  {label:<18} {value}", file=out)
        for part, count in parts.items():
            print(f"    {part:<16} {count}", file=out)
    _print_disk(_disk_bytes(where), others, out)


def _demo(path: str | None, out: TextIO) -> None:
    where = store_path(DEMO_NAME, path)
    trajectories = demo_trajectories()
    embed = HashingEmbedder(stop_words=ENGLISH_STOP_WORDS)
    structure = episodic(embed, procedures=True)
    with open_repo(DEMO_NAME, path=where, flush_interval=0) as repo:
        inserted = existing = nodes = 0
        receipts: dict[str, IngestionReceipt] = {}
        for t in trajectories:
            seen = repo.backend.get_ingestion(t.source_id) is not None
            receipt = repo.ingest(t, structure)
            receipts[t.source_id] = receipt
            nodes += len(receipt.node_ids)
            if seen:
                existing += 1
            else:
                inserted += 1
        print(f"hippograph demo: graph repo {store_name(where)!r} at {where}", file=out)
        print(
            f"ingested {len(trajectories)} trajectories ({nodes} nodes): {inserted} INSERTED, {existing} EXISTING",
            file=out,
        )
        if inserted == 0:
            print(
                "every trajectory was already ingested: the receipts are the stored ones and no memory was "
                "added (the recalls below still record their accesses, which feed the usage factor)",
                file=out,
            )

        first = trajectories[0]
        again = repo.ingest(first, _never_called)
        original = receipts[first.source_id]
        print(f"\nre-ingesting {first.source_id!r} returns the stored receipt:", file=out)
        print(f"  first:  {_format_receipt(original)}", file=out)
        print(f"  again:  {_format_receipt(again)}", file=out)
        print(f"  identical: {'yes' if again == original else 'NO'}", file=out)

        print(
            "\nscore = relevance (cosine of word-hash vectors) x recency x usage x reward;"
            "\nmemories never recalled before start at the usage floor of 0.3",
            file=out,
        )
        for text, types in DEMO_QUERIES:
            params = {t: {"top_k": TOP_K} for t in types}
            hits = repo.recall(embed([text])[0], types=types, value_function={"params": params})
            kinds = ", ".join(t.value for t in types)
            print(f"\nrecall {text!r} (types: {kinds}; top {TOP_K} per type)", file=out)
            print(format_hits(hits), file=out)
        print(file=out)
        _print_stats(repo, store_name(where), where, out)


def _never_called(trajectory: Trajectory) -> Changeset:
    """A structure function for a re-ingest that must be answered from the stored record."""
    raise ValidationError(f"{trajectory.source_id!r} was expected to be ingested already")


def _stats(name: str | None, path: str | None, out: TextIO, err: TextIO) -> bool:
    """Print every family each selected store holds, with its figures, one store after another;
    False when a store could not be read (its error is on `err`, the others are still printed)."""
    ok = True
    for i, where in enumerate(select(path, name)[1]):
        if i:
            print(file=out)
        try:
            _print_store(where, out, err)
        except HippographError as exc:
            print(f"hippograph: error: {exc}", file=err)
            ok = False
    return ok


def _print_store(where: Path, out: TextIO, err: TextIO) -> None:
    """The figures of each family in one store's directory, read through one read-only handle."""
    name = store_name(where)
    with LMDB(where, readonly=True) as backend:
        held = families(backend)
        if not held:
            print(f"store {name!r} at {where}: nothing written yet", file=out)
            _print_disk(_disk_bytes(where), (), out)
        for family in held:
            others = [f for f in held if f != family]
            if family == GRAPH:
                _print_stats(Repo(backend, flush_interval=0), name, where, out, others)
            elif family == STORE:
                with Store(backend) as store:
                    store.refresh(progress=progress_bar(err))
                    print_stats(store, f"scoped store {name!r} at {where}", out)
                _print_disk(_disk_bytes(where), others, out)
            else:
                with ContextStore(backend) as context:
                    _print_context(context, name, where, out, others)


def _verify(name: str | None, path: str | None, out: TextIO, err: TextIO) -> bool:
    """Print the `Repo.verify` report of an existing repo; True when it found no problem."""
    where = one(path, name, GRAPH)
    with Repo(LMDB(where, readonly=True), flush_interval=0) as repo:
        report = repo.verify(progress=progress_bar(err))
    print(f"graph repo {store_name(where)!r} at {where}", file=out)
    print(f"  checked nodes      {report.checked_nodes}", file=out)
    print(f"  checked records    {report.checked_records}", file=out)
    if report.ok:
        print("  ok: every invariant holds", file=out)
    else:
        print(f"  problems           {len(report.problems)}", file=out)
        for problem in report.problems:
            print(f"    - {problem}", file=out)
    return report.ok


def _store(args: argparse.Namespace, out: TextIO, err: TextIO) -> bool:
    """One ``store`` subcommand on an existing directory; False when ``verify`` found a problem."""
    where = one(args.path, args.name, STORE)
    title = f"scoped store {store_name(where)!r} at {where}"
    with LMDB(where, readonly=True) as backend, Store(backend) as store:
        if args.action != "verify":
            store.refresh(progress=progress_bar(err))  # the derived index, built from a scan
        if args.action == "stats":
            print_stats(store, title, out)
        elif args.action == "search":
            print_hits(store, tuple(args.scope), args.text, args.limit, out, explain=args.explain)
        else:
            count, problems = verify_entries(backend)
            print(f"{title}\n  checked entries    {count}", file=out)
            for problem in problems:
                print(f"    - {problem}", file=out)
            if not problems:
                print("  ok: every entry reads back whole", file=out)
            return not problems
    return True


def progress_bar(
    err: TextIO, width: int = 30, *, after: float = 1.0, clock: Callable[[], float] = time.monotonic
) -> Progress:
    """A progress callback: a redrawn bar per phase on a terminal, a line per tenth otherwise (logs).
    Silent for the first `after` seconds, so a quick command prints nothing but its answer."""
    tty = err.isatty()
    tenths: dict[str, int] = {}
    start = clock()

    def show(phase: str, done: int, total: int) -> None:
        if clock() - start < after:
            return
        pct = 100 if total <= 0 else min(100, done * 100 // total)
        if tty:
            filled = width * pct // 100
            bar = "#" * filled + " " * (width - filled)
            err.write(f"\r{phase:<24} [{bar}] {pct:3d}% {done:,}/{total:,}" + ("\n" if pct == 100 else ""))
        elif tenths.get(phase) != pct // 10:
            tenths[phase] = pct // 10
            err.write(f"{phase}: {pct}% ({done:,}/{total:,})\n")
        err.flush()

    return show


def _index(name: str | None, path: str | None, out: TextIO, err: TextIO) -> None:
    """Build (or adopt the saved) vector indexes of an existing repo and report them."""
    where = one(path, name, GRAPH)
    with Repo(LMDB(where), flush_interval=0) as repo:
        built = repo.build_vector_index(progress=progress_bar(err))
        stats = repo.vector_index_stats()
    print(f"graph repo {store_name(where)!r} at {where}", file=out)
    ready = {kind: s for kind, s in stats.items() if s["available"]}
    for kind, s in ready.items():
        how = "built and saved" if kind in built else "loaded from saved files" if s.get("loaded") else "ready"
        print(f"  {kind:<16} {s['live']:>10,} vectors  {how}", file=out)
    refused = {kind: s for kind, s in stats.items() if not s["available"] and s.get("fallback_reason")}
    for kind, s in refused.items():  # e.g. samples showed no index could beat the exact scan
        print(f"  {kind:<16} {s['nodes']:>10,} nodes    exact scans: {s['fallback_reason']}", file=out)
    if not ready and not refused:
        print("  no node type is large enough for a vector index: recall scans exactly", file=out)


def embedder_for(spec: str, dim: int | None) -> Callable[[list[str]], Any]:
    """The embedder a ``--embedder`` spec names: ``hashing`` (the demo's: `HashingEmbedder` with
    English stop words, at the repo's dimension), ``sentence-transformers:MODEL`` or ``fastembed:MODEL``."""
    kind, _, model = spec.partition(":")
    if kind == "hashing" and not model:
        return HashingEmbedder(dim or 384, stop_words=ENGLISH_STOP_WORDS)
    if kind in ("sentence-transformers", "fastembed") and model:
        from . import embedders

        if kind == "fastembed":
            return embedders.FastEmbedEmbedder(model)
        return embedders.SentenceTransformerEmbedder(model)
    raise ValidationError(f"--embedder must be hashing, sentence-transformers:MODEL or fastembed:MODEL, got {spec!r}")


def _recall(args: argparse.Namespace, out: TextIO) -> None:
    """``recall``: the hits of a graph repo for a text, with their explanations on request."""
    where = one(args.path, args.name, GRAPH)
    with Repo(LMDB(where, readonly=True), flush_interval=0) as repo:
        dim: int | None = getattr(repo.backend, "dimension", None)
        vector = embedder_for(args.embedder, dim)([args.text])[0]
        types = args.type or [t.value for t in DEFAULT_RECALL_TYPES]
        params = None if args.top_k is None else {"params": {t: {"top_k": args.top_k} for t in types}}
        hits = repo.recall(vector, types=types, value_function=params, exact=args.exact, explain=args.explain)
        print(f"recall {args.text!r} in {store_name(where)!r} (types: {', '.join(types)})", file=out)
        print(format_hits(hits), file=out)
        for h in hits if args.explain else []:
            print(f"\n{h.explanation}", file=out)
        for node_id in args.why_not:
            why = repo.why_not(node_id, vector, (), types, params, exact=args.exact)
            print(f"\nwhy not {why}", file=out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hippograph", description="An embedded memory graph for AI agents.")
    parser.add_argument("--version", action="version", version=f"hippograph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="ingest sample trajectories and show recalls")
    demo.add_argument("--path", metavar="DIR", help="repo directory (default: ./.hippograph/demo)")
    where = "a store's directory, or a directory of stores (default: ./.hippograph)"
    stats = commands.add_parser("stats", help="print what each store in a directory holds, by family")
    stats.add_argument("--path", metavar="DIR", help=where)
    stats.add_argument("--name", help="only the store of this name (default: every store there)")
    verify = commands.add_parser("verify", help="check a graph repo's invariants (exit 1 when broken)")
    index = commands.add_parser("index", help="build (or load) and save the vector indexes of a graph repo")
    for sub in (verify, index):
        sub.add_argument("--path", metavar="DIR", help=where)
        sub.add_argument("--name", help="the store's name (default: the one graph repo there)")
    recall = commands.add_parser("recall", help="recall a graph repo's memories for a text (read-only)")
    recall.add_argument("text", help="what to recall memories for")
    recall.add_argument("--path", metavar="DIR", help=where)
    recall.add_argument("--name", help="the store's name (default: the one graph repo there)")
    recall.add_argument("--type", action="append", metavar="TYPE", help="a node type to recall (repeatable)")
    recall.add_argument("--top-k", type=int, help="hits per type (default: each type's own)")
    recall.add_argument("--exact", action="store_true", help="answer with the exact scan")
    recall.add_argument("--explain", action="store_true", help="print what each hit's score was made of")
    recall.add_argument("--why-not", action="append", default=[], metavar="ID", help="why this node is not a hit")
    recall.add_argument("--embedder", default="hashing", help="hashing (default), sentence-transformers:MODEL, ...")
    store = commands.add_parser("store", help="look at a scoped store")
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, about in (("stats", "entries by status, scopes, dimension"), ("verify", "check every entry"),
                          ("search", "search the entries by words")):  # fmt: skip
        sub = actions.add_parser(action, help=about)
        sub.add_argument("--path", metavar="DIR", help=where)
        sub.add_argument("--name", help="the store's name (default: the one scoped store there)")
        if action == "search":
            sub.add_argument("text", help="the words to look for")
            sub.add_argument("--scope", nargs="*", default=[], metavar="SEGMENT", help="only under this scope")
            sub.add_argument("--limit", type=int, default=10)
            sub.add_argument("--explain", action="store_true", help="print each hit's BM25 words and weights")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if args.command == "demo":
            _demo(args.path, sys.stdout)
        elif args.command == "verify":
            if not _verify(args.name, args.path, sys.stdout, sys.stderr):
                return 1
        elif args.command == "store":
            if not _store(args, sys.stdout, sys.stderr):
                return 1
        elif args.command == "recall":
            _recall(args, sys.stdout)
        elif args.command == "index":
            _index(args.name, args.path, sys.stdout, sys.stderr)
        elif not _stats(args.name, args.path, sys.stdout, sys.stderr):
            return 1
    except HippographError as exc:
        print(f"hippograph: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `hippograph demo | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
