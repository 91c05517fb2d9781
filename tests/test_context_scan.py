"""The keyword search's matching of raw node records (`_core.context_keyword_scan`, used by
`context.scan.keyword`) against the Python search it replaces, over random records and needles.

The oracle decodes each record and applies ``needle in text.casefold()`` as the search always did;
the scan must agree wherever it decides (a kept document's fields, a skipped record), and whatever
it leaves undecided is decided by that same Python code. Records include every msgpack type,
repeated and odd keys, text whose case folding is not ASCII's (K, ſ, ß, ﬁ, İ), and garbage.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hippograph import _core
from hippograph.context import scan, tree
from hippograph.context.keys import decode, encode, uri_of
from hippograph.context.model import TreeNode
from hippograph.errors import StorageError

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALL = (True, True, True)

_TRICKY = ["K", "\u212a", "\u017f", "ß", "\ufb01", "İ", "ǰ", "é", "É", "\u03a3", "ς", "\U0001f600", "\x00", "\x7f"]
chars = st.one_of(
    st.sampled_from(list("abcfeoCOFEx -")), st.sampled_from(_TRICKY), st.characters(blacklist_categories=["Cs"])
)
texts = st.text(chars, max_size=12)
needles = st.one_of(
    st.sampled_from(["coffee", "off", "e", "c o", "k", "kelvin", "s", "ss", "fi", "i\u0307", "σ", "é"]),
    st.text(st.sampled_from(list("coffeCOFE -")), min_size=1, max_size=4),
    texts.filter(bool),
).map(str.casefold)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    texts,
    st.binary(max_size=4),
    st.just(msgpack.ExtType(3, b"x")),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)
layer_values = st.one_of(
    st.none(),
    texts,
    st.tuples(texts, st.sampled_from(["Coffee", "KELVIN", "\u212aelvin", "Stra\u00dfe", "\ufb01"]), texts).map("".join),
    values,
)
field_values = {
    "k": st.one_of(st.just("doc"), st.just("doc"), st.just("dir"), values),
    "e": st.one_of(st.booleans(), st.just(True), st.none(), values),
    "g": st.one_of(st.just(""), texts, values),
    "c": layer_values,
    "a": layer_values,
    "o": layer_values,
    "r": values,
    "s": values,
}


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """A node record: usually a well-formed map, sometimes repeated or odd keys, sometimes garbage."""
    names = draw(st.lists(st.sampled_from(list(field_values)), unique=True).map(lambda n: ["k", *n]))
    if draw(st.integers(0, 9)) == 0:
        names = draw(st.permutations(names))[1:] + draw(st.lists(st.sampled_from(list(field_values)), max_size=3))
    pairs: list[tuple[object, object]] = [(name, draw(field_values[name])) for name in names]
    if draw(st.integers(0, 4)) == 0:
        pairs.append((draw(st.one_of(st.integers(0, 3), st.binary(max_size=2), st.just(None))), draw(scalars)))
    head = bytes([0x80 | len(pairs)]) if len(pairs) < 16 else b"\xde" + len(pairs).to_bytes(2, "big")
    body = head + b"".join(msgpack.packb(k, use_bin_type=True) + msgpack.packb(v, use_bin_type=True) for k, v in pairs)
    raw = b"\x01" + body
    damage = draw(st.sampled_from(["none"] * 30 + ["truncate", "extend", "version", "bytes", "list-key", "not-map"]))
    if damage == "truncate":
        return raw[: draw(st.integers(0, max(0, len(raw) - 1)))]
    if damage == "extend":
        return raw + draw(st.binary(min_size=1, max_size=3))
    if damage == "version":
        return bytes([draw(st.sampled_from([0, 2, 255]))]) + body
    if damage == "bytes":
        return draw(st.binary(max_size=12))
    if damage == "list-key":
        return b"\x01\x81\x91\xa1k\xa3doc"
    if damage == "not-map":
        return b"\x01" + msgpack.packb(draw(values), use_bin_type=True)
    return raw


keys = st.one_of(
    st.lists(
        st.text(st.characters(blacklist_categories=["Cc", "Cs"]), min_size=1, max_size=4), min_size=1, max_size=3
    ).map(lambda s: "\x01".join(s).encode() + b"\x00"),
    st.binary(min_size=1, max_size=6),
)


def oracle(key: bytes, raw: bytes, needle: str, fields: frozenset[str] = tree.ALL_FIELDS) -> object:
    """What the Python search does with one record: its node, "skip", or the error it raises."""
    try:
        rec = decode(raw, "context node")
        if rec["k"] != "doc":
            return "skip"
        uri = uri_of(key)
        return tree.to_node(uri, rec, fields) if scan.matches(rec, needle) else "skip"
    except Exception as exc:
        return type(exc)


def typed(row: tuple[Any, ...]) -> list[tuple[type, Any]]:
    return [(type(v), v) for v in row]


@SETTINGS
@given(key=keys, raw=records(), needle=needles)
def test_a_decided_record_agrees_with_the_python_search(key: bytes, raw: bytes, needle: str) -> None:
    rows, at = _core.context_keyword_scan([(key, raw)], needle, 0, 1, ALL)
    assert at == 1
    expected = oracle(key, raw, needle)
    if not rows:
        assert expected == "skip"
    elif type(rows[0]) is tuple:
        assert isinstance(expected, TreeNode)
        assert typed(rows[0]) == typed(expected)
    else:
        assert rows == [0]


@st.composite
def holding(draw: st.DrawFn) -> tuple[str, str]:
    """A needle and a text around it in some case (often holding it, sometimes only once folded)."""
    needle = draw(needles)
    shown = draw(st.sampled_from([str, str.upper, str.title, str.swapcase]))(needle)
    shown = shown.replace("k", draw(st.sampled_from(["k", "\u212a"]))).replace(
        "s", draw(st.sampled_from(["s", "\u017f"]))
    )
    return needle, draw(texts) + shown + draw(texts)


@SETTINGS
@given(case=holding(), layer=st.sampled_from(["c", "a", "o"]), enabled=st.sampled_from([True, False, None]))
def test_layer_matching_is_casefold_containment(case: tuple[str, str], layer: str, enabled: bool | None) -> None:
    needle, text = case
    raw = encode({"k": "doc", layer: text, "e": enabled, "g": "t"})
    rows, _ = _core.context_keyword_scan([(b"p\x01d\x00", raw)], needle, 0, 1, ALL)
    expected = oracle(b"p\x01d\x00", raw, needle)
    if rows and type(rows[0]) is tuple:
        assert isinstance(expected, TreeNode) and typed(rows[0]) == typed(expected)
    elif not rows:
        assert expected == "skip"
    else:
        assert not (text.isascii() and needle.isascii()), "ASCII text and needle are always decided"


class _Pairs:
    """A `KvTxn` over sorted (key, record) pairs of the nodes space (reads only)."""

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self.pairs = pairs

    def range(self, space: str, start: bytes = b"", stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        assert space == tree.NODES
        return (p for p in self.pairs if start <= p[0] and (stop is None or p[0] < stop))


def _python_search(pairs: list[tuple[bytes, bytes]], needle: str, limit: int, fields: frozenset[str]) -> object:
    out = []
    try:
        for key, raw in pairs:
            got = oracle(key, raw, needle, fields)
            if isinstance(got, type):
                return got
            if got != "skip":
                out.append(got)
                if len(out) >= limit:
                    break
    except Exception as exc:  # pragma: no cover - the oracle returns errors
        return type(exc)
    return out


@SETTINGS
@given(
    pairs=st.dictionaries(keys, records(), max_size=40).map(lambda d: sorted(d.items())),
    needle=needles,
    limit=st.integers(1, 12),
    fields=st.sets(st.sampled_from(["content", "abstract", "overview"])).map(lambda s: frozenset(s | {"uri"})),
)
def test_the_search_returns_what_the_python_search_did(
    pairs: list[tuple[bytes, bytes]], needle: str, limit: int, fields: frozenset[str]
) -> None:
    expected = _python_search(pairs, needle, limit, fields)
    try:
        got: object = scan.keyword(_Pairs(pairs), (), needle, limit, fields)  # type: ignore[arg-type]
    except Exception as exc:
        got = type(exc)
    if isinstance(expected, list) and isinstance(got, list):
        assert [typed(n) for n in got] == [typed(n) for n in expected]
    else:
        assert got == expected


def test_garbage_in_a_searched_subtree_is_a_storage_error() -> None:
    pairs = [(b"a\x00", encode({"k": "doc", "c": "x"})), (b"b\x00", b"\x01\xc1")]
    with pytest.raises(StorageError):
        scan.keyword(_Pairs(pairs), (), "zz", 10, tree.ALL_FIELDS)  # type: ignore[arg-type]
    assert [n.uri for n in scan.keyword(_Pairs(pairs), (), "x", 1, tree.ALL_FIELDS)] == ["a"]  # type: ignore[arg-type]
