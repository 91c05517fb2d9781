"""HashingEmbedder: deterministic, lexical vectors for demos and tests."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from hippograph.embedding import ENGLISH_STOP_WORDS, HashingEmbedder, tokenize
from hippograph.errors import ValidationError


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_returns_float32_matrix_with_one_row_per_text() -> None:
    out = HashingEmbedder(16)(["build failed", "deploy ok", "refund issued"])
    assert out.dtype == np.float32
    assert out.shape == (3, 16)


def test_default_dimension_is_384() -> None:
    assert HashingEmbedder()(["hello"]).shape == (1, 384)
    assert HashingEmbedder().dim == 384


def test_rows_have_unit_length() -> None:
    out = HashingEmbedder(64)(["the build failed on the linker step", "x"])
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), [1.0, 1.0], rtol=1e-6)


def test_empty_text_is_the_zero_vector() -> None:
    assert not HashingEmbedder(32)([""]).any()


def test_punctuation_only_text_is_the_zero_vector() -> None:
    assert not HashingEmbedder(32)(["?! -- ..."]).any()


def test_empty_list_gives_zero_rows() -> None:
    assert HashingEmbedder(8)([]).shape == (0, 8)


def test_same_text_gives_the_same_vector_from_separate_instances() -> None:
    a = HashingEmbedder(128)(["rotate the leaked api key"])
    b = HashingEmbedder(128)(["rotate the leaked api key"])
    assert np.array_equal(a, b)


def test_vectors_do_not_depend_on_pythons_hash_seed() -> None:
    code = (
        "import sys; from hippograph.embedding import HashingEmbedder; "
        "sys.stdout.write(HashingEmbedder(64)(['stable across processes']).tobytes().hex())"
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.add(run.stdout)
    assert outputs == {HashingEmbedder(64)(["stable across processes"]).tobytes().hex()}


def test_hashing_is_pinned_so_stored_vectors_stay_comparable_across_versions() -> None:
    # "hello" -> coordinate 6, sign -1; "world" and "hello world" -> coordinate 7, sign +1 each.
    expected = np.zeros(16, dtype=np.float32)
    expected[6], expected[7] = -1.0, 2.0
    expected /= np.sqrt(5.0)
    np.testing.assert_allclose(HashingEmbedder(16)(["Hello, world"])[0], expected, rtol=1e-6)


def test_case_is_ignored() -> None:
    e = HashingEmbedder(64)
    assert np.array_equal(e(["Build FAILED"]), e(["build failed"]))


def test_punctuation_separates_words() -> None:
    e = HashingEmbedder(64)
    assert np.array_equal(e(["disk, full!"]), e(["disk full"]))


def test_tokenize_lowercases_and_keeps_underscored_words_whole() -> None:
    assert tokenize("Fix snake_case v2-API") == ["fix", "snake_case", "v2", "api"]


def test_shared_words_make_texts_more_similar_than_unrelated_ones() -> None:
    e = HashingEmbedder(384)
    query, near, far = e(["payment refund failed", "refund for a failed payment", "docker image too large"])
    assert cosine(query, near) > cosine(query, far)


def test_word_order_matters_through_bigrams() -> None:
    e = HashingEmbedder(384)
    a, b = e(["dog bites man", "man bites dog"])
    assert 0.0 < cosine(a, b) < 0.99


def test_similarity_is_lexical_not_semantic() -> None:
    e = HashingEmbedder(384)
    a, b = e(["automobile", "car"])
    assert cosine(a, b) == 0.0


def test_stop_words_are_ignored_when_given() -> None:
    e = HashingEmbedder(64, stop_words=ENGLISH_STOP_WORDS)
    assert np.array_equal(e(["the build of the service"]), e(["build service"]))


def test_stop_words_match_case_insensitively() -> None:
    e = HashingEmbedder(64, stop_words=["The"])
    assert np.array_equal(e(["THE build"]), e(["build"]))


def test_text_of_only_stop_words_is_the_zero_vector() -> None:
    assert not HashingEmbedder(32, stop_words=ENGLISH_STOP_WORDS)(["it is what it is"]).any()


def test_no_stop_words_by_default() -> None:
    e = HashingEmbedder(64)
    assert not np.array_equal(e(["the build"]), e(["build"]))


def test_embed_one_is_the_row_of_a_single_text() -> None:
    e = HashingEmbedder(16)
    assert np.array_equal(e.embed_one("flaky test"), e(["flaky test"])[0])


@pytest.mark.parametrize("dim", [0, -3, 1.5, True, "384", None])
def test_dimension_must_be_a_positive_int(dim: object) -> None:
    with pytest.raises(ValidationError, match="dim"):
        HashingEmbedder(dim)  # type: ignore[arg-type]


def test_a_bare_string_is_refused() -> None:
    with pytest.raises(ValidationError, match="list of str"):
        HashingEmbedder(8)("just one text")


def test_non_string_texts_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"texts\[1\]"):
        HashingEmbedder(8)(["ok", 42])  # type: ignore[list-item]


def test_a_single_string_as_stop_words_is_refused() -> None:
    with pytest.raises(ValidationError, match="stop_words"):
        HashingEmbedder(8, stop_words="the")
