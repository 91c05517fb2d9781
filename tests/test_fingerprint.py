"""The payload fingerprint and the Python → Erlang term mapping (docs/architecture.md, fingerprint)."""

from __future__ import annotations

import collections
import enum
import hashlib
import json
import math
import pickle
import struct
import threading
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippograph.errors import IngestionError, ValidationError
from hippograph.graph.atom import Atom
from hippograph.graph.fingerprint import FINGERPRINT_VERSION, etf_encode, fingerprint
from hippograph.graph.trajectory import Step, Trajectory

GOLDEN = json.loads((Path(__file__).parent / "data" / "fingerprints.json").read_text("utf-8"))["cases"]


def decode(tagged: dict[str, Any]) -> Any:
    """A golden-file term (see its "about" field) as a Python value."""
    ((tag, value),) = tagged.items()
    match tag:
        case "str" | "bool":
            return value
        case "none":
            return None
        case "atom":
            return Atom(value)
        case "int":
            return int(value)
        case "float_hex":
            return float.fromhex(value)
        case "bytes_hex":
            return bytes.fromhex(value)
        case "list":
            return [decode(v) for v in value]
        case "tuple":
            return tuple(decode(v) for v in value)
        case "map":
            return {decode(k): decode(v) for k, v in value}
    raise AssertionError(f"unknown tag {tag}")


def golden_trajectory(case: dict[str, Any]) -> Trajectory:
    steps = [Step(obs, act) for obs, act in case["steps"]]
    return Trajectory("golden", case["goal"], steps, decode(case["metadata"]))


def full_term(t: Trajectory) -> tuple[Any, ...]:
    steps = [(s.observation, s.action) for s in t.steps]
    return (Atom("mnemosyne_trajectory"), FINGERPRINT_VERSION, t.goal, steps, t.metadata)


def traj(goal: str = "g", steps: list[Step] | None = None, metadata: dict[Any, Any] | None = None) -> Trajectory:
    return Trajectory("src", goal, steps if steps is not None else [Step("o", "a")], metadata or {})


def reason_of(value: object) -> str:
    with pytest.raises(IngestionError) as info:
        etf_encode(value)
    return info.value.reason


# --- golden cases computed by Erlang/OTP --------------------------------------------


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_golden_etf_bytes_match_erlang(case: dict[str, Any]) -> None:
    assert etf_encode(full_term(golden_trajectory(case))).hex() == case["etf_hex"]


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_golden_fingerprint_matches_erlang(case: dict[str, Any]) -> None:
    assert fingerprint(golden_trajectory(case)).hex() == case["sha256"]


def test_golden_file_covers_every_term_kind() -> None:
    tags = set(json.dumps([c["metadata"] for c in GOLDEN]).split('"'))
    assert {"str", "atom", "none", "bool", "int", "float_hex", "bytes_hex", "list", "tuple", "map"} <= tags


def test_fingerprint_is_32_bytes_of_sha256_over_the_encoding() -> None:
    t = traj(metadata={"k": [1, 2.5]})
    assert fingerprint(t) == hashlib.sha256(etf_encode(full_term(t))).digest()


def test_fingerprint_version_is_1() -> None:
    assert FINGERPRINT_VERSION == 1


# --- the term mapping ----------------------------------------------------------------


def test_str_and_bytes_encode_as_binaries() -> None:
    assert etf_encode("hé") == etf_encode("hé".encode()) == bytes.fromhex("836d0000000368c3a9")


def test_bool_and_none_encode_as_atoms() -> None:
    assert etf_encode(True) == etf_encode(Atom("true")) == bytes.fromhex("83770474727565")
    assert etf_encode(False) == etf_encode(Atom("false"))
    assert etf_encode(None) == etf_encode(Atom("nil")) == bytes.fromhex("8377036e696c")


def test_bool_is_not_encoded_as_an_integer() -> None:
    assert etf_encode(True) != etf_encode(1)


@pytest.mark.parametrize(
    ("value", "hex_"),
    [
        (0, "836100"),
        (255, "8361ff"),
        (256, "836200000100"),
        (-1, "8362ffffffff"),
        (2**31 - 1, "83627fffffff"),
        (-(2**31), "836280000000"),
        (2**31, "836e040000000080"),
        (-(2**31) - 1, "836e040101000080"),
        (2**64, "836e0900000000000000000001"),
    ],
)
def test_integer_boundaries(value: int, hex_: str) -> None:
    assert etf_encode(value).hex() == hex_


def test_integers_beyond_255_magnitude_bytes_use_large_big() -> None:
    encoded = etf_encode(-(2 ** (8 * 300)))
    assert encoded[:7] == bytes([131, 111, 0, 0, 1, 45, 1])
    assert len(encoded) == 7 + 301


def test_float_encodes_as_new_float() -> None:
    assert etf_encode(1.5) == b"\x83F" + struct.pack(">d", 1.5)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_invalid_metadata(value: float) -> None:
    assert reason_of({"x": value}) == "invalid_metadata"


def test_list_of_bytes_is_a_string_ext() -> None:
    assert etf_encode([104, 105]).hex() == "836b00026869"


def test_list_with_a_value_above_255_is_a_list_ext() -> None:
    assert etf_encode([1, 256]).hex() == "836c00000002610162000001006a"


def test_list_of_65536_bytes_is_a_list_ext() -> None:
    assert etf_encode([7] * 65535)[1] == 107
    assert etf_encode([7] * 65536)[1] == 108


def test_empty_containers() -> None:
    assert etf_encode([]).hex() == "836a"
    assert etf_encode(()).hex() == "836800"
    assert etf_encode({}).hex() == "837400000000"


def test_map_keys_sort_integers_before_floats_whatever_their_values() -> None:
    assert etf_encode({2.0: 0, 3: 0}).hex() == "837400000002" + "6103" + "6100" + "464000000000000000" + "6100"


def test_map_keys_sort_by_erlang_type_order() -> None:
    keys: list[Any] = ["b", (Atom("x"),), b"a", Atom("a"), 2.5, 1, ()]
    encoded = etf_encode(dict.fromkeys(keys, 0))
    expected = [1, 2.5, Atom("a"), (), (Atom("x"),), b"a", "b"]
    assert encoded == b"\x83t" + len(keys).to_bytes(4, "big") + b"".join(etf_encode(k)[1:] + b"a\x00" for k in expected)


def test_atom_encodes_as_utf8_atom() -> None:
    assert etf_encode(Atom("clé")).hex() == "837704636cc3a9"


def test_long_utf8_atom_uses_a_two_byte_length() -> None:
    encoded = etf_encode(Atom("é" * 200))
    assert encoded[:4] == bytes([131, 118, 1, 144])


def test_keys_that_collide_once_mapped_are_invalid_metadata() -> None:
    assert reason_of({"a": 1, b"a": 2}) == "invalid_metadata"
    assert reason_of({True: 1, Atom("true"): 2}) == "invalid_metadata"


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Pair(NamedTuple):
    a: int
    b: int


UNSUPPORTED = [
    {1, 2},
    frozenset(),
    object(),
    bytearray(b"x"),
    1j,
    Colour.RED,
    Level.LOW,
    collections.OrderedDict(a=1),
    Pair(1, 2),
    np.float64(1.0),
    np.int64(1),
    "\ud800",
]


@pytest.mark.parametrize("value", UNSUPPORTED, ids=[type(v).__name__ for v in UNSUPPORTED])
def test_values_outside_the_mapping_are_invalid_metadata(value: object) -> None:
    assert reason_of({"k": [value]}) == "invalid_metadata"


def test_error_message_names_the_path_and_type() -> None:
    with pytest.raises(IngestionError, match=r"'set'.*\['a'\]\[1\]"):
        etf_encode({"a": [0, {1}]})


def test_nesting_at_512_levels_is_accepted() -> None:
    term: list[Any] = []
    for _ in range(512):
        term = [term]
    assert etf_encode(term)[:2] == b"\x83l"


def test_nesting_past_512_levels_is_invalid_metadata() -> None:
    term: list[Any] = []
    for _ in range(513):
        term = [term]
    assert reason_of(term) == "invalid_metadata"


@pytest.mark.parametrize("wrap", [lambda t: [t], lambda t: (t,), lambda t: {"k": t}], ids=["list", "tuple", "dict"])
def test_100k_levels_of_nesting_fail_fast_without_crashing(wrap: Any) -> None:
    term: Any = 0
    for _ in range(100_000):
        term = wrap(term)
    with pytest.raises(IngestionError) as info:
        etf_encode({"deep": term})
    assert info.value.reason == "invalid_metadata"
    # The depth limit refused it, checked before each level is entered: not the node budget, the
    # Rust stack or the interpreter's recursion limit deeper down.
    assert "nested deeper than 512 levels" in str(info.value)


def test_self_referencing_list_is_invalid_metadata() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert reason_of(loop) == "invalid_metadata"


def test_shared_references_cannot_blow_up_the_conversion() -> None:
    term: Any = list(range(100))
    for _ in range(6):
        term = [term] * 100  # 10^14 values if expanded
    with pytest.raises(IngestionError) as info:
        etf_encode(term)
    assert info.value.reason == "invalid_metadata"
    # The value budget stopped the walk inside the first of the 100 outer copies (the path names
    # where), after about four million values, not after expanding all 10^14.
    message = str(info.value)
    assert "more than 4194304 values" in message
    assert "at term[0][0][0]" in message


def test_concurrent_fingerprints_agree() -> None:
    t = traj(metadata={"blob": "x" * 200_000, "n": list(range(10_000))})
    expected = fingerprint(t)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(fingerprint(t))) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == [expected] * 8


# --- the digest's inputs -------------------------------------------------------------

keys = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.builds(Atom, st.text(max_size=8)),
)
hashables = st.recursive(keys, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)
scalars = st.one_of(
    st.text(),
    st.binary(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.builds(Atom, st.text(max_size=8)),
)
terms = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(hashables, inner, max_size=4),
    ),
    max_leaves=20,
)
metadatas = st.dictionaries(hashables, terms, max_size=6)
texts = st.text(min_size=1).filter(str.strip)
step_lists = st.lists(st.builds(Step, st.text(), st.text()), min_size=1, max_size=5)


@given(metadatas)
def test_digest_is_independent_of_dict_insertion_order(meta: dict[Any, Any]) -> None:
    reordered = dict(reversed(list(meta.items())))
    assert fingerprint(traj(metadata=meta)) == fingerprint(traj(metadata=reordered))


@given(texts, texts)
def test_digest_changes_with_the_goal(a: str, b: str) -> None:
    assert (fingerprint(traj(goal=a)) == fingerprint(traj(goal=b))) == (a == b)


@given(metadatas, hashables, terms)
def test_digest_changes_with_the_metadata(meta: dict[Any, Any], key: Any, value: Any) -> None:
    changed = {**meta, key: value}
    if etf_encode(changed) != etf_encode(meta):
        assert fingerprint(traj(metadata=meta)) != fingerprint(traj(metadata=changed))


@given(step_lists, st.data())
def test_digest_changes_with_any_step_text(steps: list[Step], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(steps) - 1))
    field = data.draw(st.sampled_from(["observation", "action"]))
    new_text = data.draw(st.text().filter(lambda s: s != getattr(steps[i], field)))
    edited = list(steps)
    edited[i] = Step(**{**vars(steps[i]), field: new_text})
    assert fingerprint(traj(steps=steps)) != fingerprint(traj(steps=edited))


@given(step_lists)
def test_digest_changes_with_step_order(steps: list[Step]) -> None:
    reordered = steps[1:] + steps[:1]
    assert (fingerprint(traj(steps=steps)) == fingerprint(traj(steps=reordered))) == (steps == reordered)


@given(st.text(min_size=1).filter(str.strip), st.text(min_size=1).filter(str.strip))
def test_source_id_is_not_part_of_the_digest(a: str, b: str) -> None:
    one = Trajectory(a, "g", [Step("o", "a")], {"k": 1})
    other = Trajectory(b, "g", [Step("o", "a")], {"k": 1})
    assert fingerprint(one) == fingerprint(other)


# --- robustness and a reference model ------------------------------------------------


def order_key(term: Any) -> Any:
    """Erlang's map-key order as a Python sort key (integers before floats)."""
    if term is None or isinstance(term, bool):
        term = Atom({None: "nil", True: "true", False: "false"}[term])
    if isinstance(term, int):
        return (0, term)
    if isinstance(term, float):
        return (1, term)
    if isinstance(term, Atom):
        return (2, term.name.encode())
    if isinstance(term, tuple):
        return (3, len(term), tuple(map(order_key, term)))
    if isinstance(term, dict):
        items = sorted(term.items(), key=lambda kv: order_key(kv[0]))
        return (4, len(term), tuple(order_key(k) for k, _ in items), tuple(order_key(v) for _, v in items))
    if isinstance(term, list):
        return (6, tuple(map(order_key, term))) if term else (5,)
    return (7, term.encode() if isinstance(term, str) else term)


def reference_encode(term: Any) -> bytes:
    """A plain transcription of the external term format, for cross-checking."""
    if term is None or isinstance(term, bool):
        term = Atom({None: "nil", True: "true", False: "false"}[term])
    if isinstance(term, Atom):
        name = term.name.encode()
        return (bytes([119, len(name)]) if len(name) < 256 else b"v" + len(name).to_bytes(2, "big")) + name
    if isinstance(term, int):
        if 0 <= term <= 255:
            return bytes([97, term])
        if -(2**31) <= term < 2**31:
            return b"b" + term.to_bytes(4, "big", signed=True)
        mag = abs(term).to_bytes((abs(term).bit_length() + 7) // 8, "little")
        head = bytes([110, len(mag)]) if len(mag) < 256 else b"o" + len(mag).to_bytes(4, "big")
        return head + bytes([term < 0]) + mag
    if isinstance(term, float):
        return b"F" + struct.pack(">d", term)
    if isinstance(term, str | bytes):
        raw = term.encode() if isinstance(term, str) else term
        return b"m" + len(raw).to_bytes(4, "big") + raw
    if isinstance(term, tuple):
        head = bytes([104, len(term)]) if len(term) < 256 else b"i" + len(term).to_bytes(4, "big")
        return head + b"".join(map(reference_encode, term))
    if isinstance(term, list):
        if not term:
            return b"j"
        if len(term) < 65536 and all(type(x) is int and 0 <= x <= 255 for x in term):
            return b"k" + len(term).to_bytes(2, "big") + bytes(term)
        return b"l" + len(term).to_bytes(4, "big") + b"".join(map(reference_encode, term)) + b"j"
    assert isinstance(term, dict)
    items = sorted(term.items(), key=lambda kv: order_key(kv[0]))
    return b"t" + len(term).to_bytes(4, "big") + b"".join(reference_encode(k) + reference_encode(v) for k, v in items)


@given(terms)
def test_encoder_agrees_with_a_reference_model(term: Any) -> None:
    assert etf_encode(term) == b"\x83" + reference_encode(term)


anything = st.recursive(
    st.one_of(
        scalars,
        st.floats(),
        st.sampled_from([object(), {1}, frozenset(), bytearray(b"z"), 2j, Colour.RED, np.float64(2.0), "\udc80"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.one_of(keys, st.binary(max_size=2), st.booleans(), st.none()), inner, max_size=4),
        st.builds(collections.OrderedDict, st.dictionaries(st.text(max_size=2), inner, max_size=2)),
    ),
    max_leaves=25,
)


@settings(max_examples=300)
@given(anything)
def test_encoder_only_ever_raises_invalid_metadata(term: Any) -> None:
    try:
        encoded = etf_encode(term)
    except IngestionError as err:
        assert err.reason == "invalid_metadata"
    else:
        assert encoded[:1] == b"\x83"


# --- Atom -----------------------------------------------------------------------------


def test_atoms_with_the_same_name_are_equal_and_hash_alike() -> None:
    assert Atom("a") == Atom("a")
    assert hash(Atom("a")) == hash(Atom("a"))


def test_atom_is_not_equal_to_its_name() -> None:
    assert Atom("a") != "a"
    assert "a" != Atom("a")  # noqa: SIM300 (the reflected comparison is under test)


def test_atom_and_its_name_are_distinct_dict_keys() -> None:
    assert len({Atom("a"): 1, "a": 2}) == 2


def test_atom_is_not_a_str() -> None:
    assert not isinstance(Atom("a"), str)


def test_atom_repr() -> None:
    assert repr(Atom("a")) == "Atom('a')"


def test_atom_is_immutable() -> None:
    atom = Atom("a")
    with pytest.raises(AttributeError):
        atom.name = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        atom._name = "b"
    with pytest.raises(AttributeError):
        del atom._name
    assert atom.name == "a"


def test_atom_survives_pickling() -> None:
    assert pickle.loads(pickle.dumps(Atom("ok"))) == Atom("ok")


def test_atom_name_must_be_a_str() -> None:
    with pytest.raises(ValidationError):
        Atom(b"a")  # type: ignore[arg-type]


def test_atom_name_is_limited_to_255_characters() -> None:
    assert Atom("é" * 255).name == "é" * 255
    with pytest.raises(ValidationError):
        Atom("a" * 256)


def test_atom_name_must_be_utf8_encodable() -> None:
    with pytest.raises(ValidationError):
        Atom("\ud800")


def test_atom_from_a_str_enum_keeps_only_the_text() -> None:
    atom = Atom(Colour.RED)
    assert type(atom.name) is str
    assert etf_encode(atom) == etf_encode(Atom("red"))


def test_fingerprint_reports_the_source_id_on_failure() -> None:
    with pytest.raises(IngestionError) as info:
        fingerprint(Trajectory("s-1", "g", [Step("o", "a")], {"k": {1}}))
    assert (info.value.reason, info.value.source_id) == ("invalid_metadata", "s-1")
