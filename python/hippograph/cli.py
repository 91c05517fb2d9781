"""The ``hippograph`` command line: ``demo``, ``stats``, ``verify``, ``index`` and ``store``.

Each command works on an LMDB repo (``--path DIR``, or ``./.hippograph/<name>``); ``store stats |
verify | search`` look at the scoped store kept in such a directory.
docs/graph-memory.md describes every command and its exit status: 0 on
success, 2 on a usage error, 1 when hippograph reports an error (on stderr).
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
from .embedding import ENGLISH_STOP_WORDS, HashingEmbedder
from .engine.checks import Progress
from .errors import HippographError, NotFoundError, ValidationError
from .graph.changeset import Changeset
from .graph.model import Episodic, IngestionReceipt, Node, NodeType, Semantic, Source, Subgoal
from .graph.repo import Hit, Repo, open_repo, store_path
from .graph.structuring import episodic
from .graph.trajectory import Step, Trajectory
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


def _print_stats(repo: Repo, name: str, where: Path, out: TextIO) -> None:
    s = repo.stats()
    print(f"repo {name!r} at {where}", file=out)
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
    print(f"  {'on disk':<18} {'n/a' if s.disk_bytes is None else human_size(s.disk_bytes)}", file=out)


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
        print(f"hippograph demo: repo {DEMO_NAME!r} at {where}", file=out)
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
        _print_stats(repo, DEMO_NAME, where, out)


def _never_called(trajectory: Trajectory) -> Changeset:
    """A structure function for a re-ingest that must be answered from the stored record."""
    raise ValidationError(f"{trajectory.source_id!r} was expected to be ingested already")


def _stats(name: str, path: str | None, out: TextIO) -> None:
    where = _existing_store(name, path)
    with open_repo(name, path=where, flush_interval=0) as repo:
        _print_stats(repo, name, where, out)


def _existing_store(name: str, path: str | None) -> Path:
    """The directory of an existing repo or store; `NotFoundError` saying how to make one."""
    where = store_path(name, path)
    if not (where / "data.mdb").is_file():
        option = f" --path {where}" if path is not None else ""
        raise NotFoundError(
            "repo",
            str(where),
            f"no hippograph repo at {str(where)!r}: create one from Python with "
            f"hippograph.open_repo({name!r}, path=...) or hippograph.open_store({name!r}, path=...), "
            f"or try the sample one with `hippograph demo{option}`",
        )
    return where


def _verify(name: str, path: str | None, out: TextIO, err: TextIO) -> bool:
    """Print the `Repo.verify` report of an existing repo; True when it found no problem."""
    where = _existing_store(name, path)
    with Repo(LMDB(where, readonly=True), flush_interval=0) as repo:
        report = repo.verify(progress=progress_bar(err))
    print(f"repo {name!r} at {where}", file=out)
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
    where = _existing_store(args.name, args.path)
    with LMDB(where, readonly=True) as backend:
        store = Store(backend)
        if args.action != "verify":
            store.refresh(progress=progress_bar(err))  # the derived index, built from a scan
        if args.action == "stats":
            print_stats(store, str(where), out)
        elif args.action == "search":
            print_hits(store, tuple(args.scope), args.text, args.limit, out)
        else:
            count, problems = verify_entries(backend)
            print(f"store at {where}\n  checked entries    {count}", file=out)
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


def _index(name: str, path: str | None, out: TextIO, err: TextIO) -> None:
    """Build (or adopt the saved) vector indexes of an existing repo and report them."""
    where = _existing_store(name, path)
    with Repo(LMDB(where), flush_interval=0) as repo:
        built = repo.build_vector_index(progress=progress_bar(err))
        stats = repo.vector_index_stats()
    print(f"repo {name!r} at {where}", file=out)
    ready = {kind: s for kind, s in stats.items() if s["available"]}
    for kind, s in ready.items():
        how = "built and saved" if kind in built else "loaded from saved files" if s.get("loaded") else "ready"
        print(f"  {kind:<16} {s['live']:>10,} vectors  {how}", file=out)
    if not ready:
        print("  no node type is large enough for a vector index: recall scans exactly", file=out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hippograph", description="An embedded memory graph for AI agents.")
    parser.add_argument("--version", action="version", version=f"hippograph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="ingest sample trajectories and show recalls")
    demo.add_argument("--path", metavar="DIR", help="repo directory (default: ./.hippograph/demo)")
    stats = commands.add_parser("stats", help="print the counts of a repo")
    stats.add_argument("--path", metavar="DIR", help="repo directory (default: ./.hippograph/NAME)")
    stats.add_argument("--name", default=DEMO_NAME, help="repo name (default: demo)")
    verify = commands.add_parser("verify", help="check a repo's invariants (exit 1 when broken)")
    verify.add_argument("--path", metavar="DIR", help="repo directory (default: ./.hippograph/NAME)")
    verify.add_argument("--name", default=DEMO_NAME, help="repo name (default: demo)")
    index = commands.add_parser("index", help="build (or load) and save the vector indexes of a repo")
    index.add_argument("--path", metavar="DIR", help="repo directory (default: ./.hippograph/NAME)")
    index.add_argument("--name", default=DEMO_NAME, help="repo name (default: demo)")
    store = commands.add_parser("store", help="look at the scoped store in a directory")
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, about in (("stats", "entries by status, scopes, dimension"), ("verify", "check every entry"),
                          ("search", "search the entries by words")):  # fmt: skip
        sub = actions.add_parser(action, help=about)
        sub.add_argument("--path", metavar="DIR", help="store directory (default: ./.hippograph/NAME)")
        sub.add_argument("--name", default=DEMO_NAME, help="store name (default: demo)")
        if action == "search":
            sub.add_argument("text", help="the words to look for")
            sub.add_argument("--scope", nargs="*", default=[], metavar="SEGMENT", help="only under this scope")
            sub.add_argument("--limit", type=int, default=10)
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
        elif args.command == "index":
            _index(args.name, args.path, sys.stdout, sys.stderr)
        else:
            _stats(args.name, args.path, sys.stdout)
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
