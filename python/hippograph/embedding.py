"""`HashingEmbedder`: a dependency-free text embedder for demos and tests.

It is lexical, not semantic: two texts come out similar when they share words
(and adjacent word pairs), never because they mean the same thing. Use a real
embedding model for an agent in production; use this one where a test or a demo
needs vectors that are deterministic, fast and need nothing installed.
docs/graph-memory.md says how a text becomes a vector.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from .errors import ValidationError

__all__ = ["ENGLISH_STOP_WORDS", "HashingEmbedder", "tokenize"]

_WORD = re.compile(r"\w+")
_PERSON = b"hippograph-hash1"

_STOP_TEXT = """
a an and are as at be been but by did do does for from had has have he her his i if in into is it
its me my no not of on or our she so than that the their them then there these they this those to
was we were what when which who will with you your
"""

ENGLISH_STOP_WORDS: frozenset[str] = frozenset(_STOP_TEXT.split())
"""Common English function words; pass as ``stop_words`` so that texts match on content words."""


def tokenize(text: str) -> list[str]:
    """The lowercase words of `text`, in order."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    """The coordinate and sign a feature adds to, stable across processes."""
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8, person=_PERSON).digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


class HashingEmbedder:
    """Deterministic token-hashing embedder (lexical, not semantic; see the module docs).

    `dim` is the vector length; `stop_words` are words to ignore (matched
    case-insensitively), e.g. `ENGLISH_STOP_WORDS`.

    ``HashingEmbedder(dim)(texts)`` returns a C-contiguous float32 array of
    shape ``(len(texts), dim)`` whose rows have unit length, or are zero for
    texts without words.
    """

    def __init__(self, dim: int = 384, *, stop_words: Iterable[str] = ()) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValidationError(f"HashingEmbedder dim must be a positive int, got {dim!r}")
        if isinstance(stop_words, str):
            raise ValidationError("stop_words must be a collection of words, not a single str")
        try:
            words = frozenset(stop_words)
        except TypeError:
            raise ValidationError("stop_words must be a collection of str") from None
        if not all(isinstance(w, str) for w in words):
            raise ValidationError("stop_words must hold only str")
        self._dim = dim
        self._stop = frozenset(w.lower() for w in words)

    @property
    def dim(self) -> int:
        """Length of every vector this embedder returns."""
        return self._dim

    def __repr__(self) -> str:
        stop = f", stop_words=<{len(self._stop)} words>" if self._stop else ""
        return f"HashingEmbedder(dim={self._dim}{stop})"

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        """The vector of one text, shape ``(dim,)``."""
        vector: npt.NDArray[np.float32] = self([text])[0]
        return vector

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
            raise ValidationError(
                f"HashingEmbedder expects a list of str, got {type(texts).__name__}; wrap a single text in a list"
            )
        out = np.zeros((len(texts), self._dim), dtype=np.float64)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValidationError(f"texts[{row}] must be a str, got {type(text).__name__}")
            words = [w for w in tokenize(text) if w not in self._stop]
            features = [f"w:{w}" for w in words]
            features += [f"b:{a} {b}" for a, b in itertools.pairwise(words)]
            for feature in features:
                index, sign = _bucket(feature, self._dim)
                out[row, index] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return np.ascontiguousarray(out, dtype=np.float32)
