"""Keyword search over a subtree, matched where the records lie: a batch of raw node records goes
to `_core.context_keyword_scan`, which returns the kept documents' fields and leaves to Python
only the records it cannot decide exactly (odd types, non-ASCII text without a proven match,
garbage), decoded and judged here as they always were. A search of a small subtree then costs
about what reading it does."""

from __future__ import annotations

from itertools import islice
from typing import Any

from .. import _core
from .keys import decode, subtree, uri_of
from .model import TreeNode
from .protocol import KvTxn
from .tree import NODES, to_node

__all__ = ["chunk", "keyword", "matches"]

_new = tuple.__new__
_MOST = 1024


def matches(rec: dict[str, Any], needle: str) -> bool:
    """Whether an enabled record's content, abstract or overview holds `needle` (casefolded)."""
    return bool(rec.get("e", True)) and any(_holds(rec.get(f), needle) for f in ("c", "a", "o"))


def _holds(text: str | None, needle: str) -> bool:
    return text is not None and needle in text.casefold()


def chunk(t: KvTxn, space: str, start: bytes, stop: bytes | None, n: int) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Up to `n` pairs of the range, read at once where the transaction can (`chunk`), and
    whether more may follow."""
    fast = getattr(t, "chunk", None)
    if fast is not None:
        got: tuple[list[tuple[bytes, bytes]], bool] = fast(space, start, stop, n)
        return got
    pairs = list(islice(t.range(space, start, stop), n))
    return pairs, len(pairs) == n


def keyword(t: KvTxn, segments: tuple[str, ...], needle: str, limit: int, fields: frozenset[str]) -> list[TreeNode]:
    """Enabled documents under `segments` holding `needle`, in URI order, at most `limit`;
    the first batch is what `limit` matches would take, the next ones double, so a large subtree
    is read little further than needed."""
    layers = ("content" in fields, "abstract" in fields, "overview" in fields)
    start, stop = subtree(segments)
    out: list[TreeNode] = []
    n = min(limit + 1, _MOST)  # the scope's own node, then its documents
    while True:
        pairs, more = chunk(t, NODES, start, stop, n)
        at = 0
        while at < len(pairs):
            rows, at = _core.context_keyword_scan(pairs, needle, at, limit - len(out), layers)
            for row in rows:
                if type(row) is tuple:
                    out.append(_new(TreeNode, row))
                    continue
                key, raw = pairs[row]  # type: ignore[index]
                rec = decode(raw, "context node")
                if rec["k"] == "doc":
                    uri = uri_of(key)
                    if matches(rec, needle):
                        out.append(to_node(uri, rec, fields))
            if len(out) >= limit:
                return out
        if not more or not pairs:
            return out
        start = pairs[-1][0] + b"\x00"
        n = min(2 * n, _MOST)
