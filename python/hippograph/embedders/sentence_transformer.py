"""`SentenceTransformerEmbedder`: a sentence-transformers model as a hippograph embedder.

Needs ``pip install 'hippograph[sentence-transformers]'`` only to load a model by name; a model
object already loaded is used as it is (anything with sentence-transformers' ``encode``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ._base import BatchedEmbedder, import_extra, options

__all__ = ["SentenceTransformerEmbedder"]

_RESERVED = frozenset({"sentences", "batch_size"})


def _stated_dim(model: Any) -> int | None:
    """The dimension the model states (newer releases name the method without "sentence_"), if any."""
    for method in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        ask = getattr(model, method, None)
        if callable(ask):
            dim = ask()
            if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
                return dim
    return None


class SentenceTransformerEmbedder(BatchedEmbedder):
    """Embeds texts with a sentence-transformers model (module docs of `hippograph.embedders`).

    `model`: a ``sentence_transformers.SentenceTransformer`` (or an object with its ``encode``),
    or a model name or path, loaded here with ``SentenceTransformer(model)``. `dim`: the
    dimension expected (default: the one the model states, else learned from the first batch).
    `batch_size`: texts per ``encode`` call, which also gets it as its own ``batch_size``.
    `encode_kwargs`: further keyword arguments of ``encode`` (e.g. ``prompt_name``,
    ``normalize_embeddings``); rows are brought to unit length whatever they say.
    """

    def __init__(
        self,
        model: Any,
        *,
        dim: int | None = None,
        batch_size: int = 32,
        encode_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(dim=dim, batch_size=batch_size)
        self._options = {
            "convert_to_numpy": True,
            "show_progress_bar": False,
            **options(encode_kwargs, "encode_kwargs", _RESERVED),
        }
        if isinstance(model, str):
            library = import_extra("sentence_transformers", "sentence-transformers", "SentenceTransformerEmbedder")
            model = library.SentenceTransformer(model)
        if not callable(getattr(model, "encode", None)):
            raise ConfigError(
                f"SentenceTransformerEmbedder needs a SentenceTransformer (with encode), got {type(model).__name__}"
            )
        self.model = model
        stated = _stated_dim(model)
        if stated is not None:
            if self._dim is not None and self._dim != stated:
                raise ConfigError(f"SentenceTransformerEmbedder dim={self._dim}, but the model's dimension is {stated}")
            self._dim = stated

    def _embed_batch(self, texts: list[str], start: int) -> object:
        return self.model.encode(texts, batch_size=len(texts), **self._options)
