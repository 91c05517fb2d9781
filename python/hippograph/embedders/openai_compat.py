"""`OpenAIEmbedder`: the embeddings endpoint of OpenAI, or of any server speaking its API, as a
hippograph embedder.

Any client with ``client.embeddings.create(model=..., input=[...])`` answering as the ``openai``
package's does: ``openai.OpenAI()``, ``openai.OpenAI(base_url=...)`` for a compatible server,
``openai.AzureOpenAI(...)``. Needs ``pip install 'hippograph[openai]'`` only when no client is
given (one is then made with ``openai.OpenAI()``, which reads ``OPENAI_API_KEY`` and
``OPENAI_BASE_URL``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import ConfigError
from ._base import BatchedEmbedder, import_extra, options, positive_int

__all__ = ["OpenAIEmbedder"]

_RESERVED = frozenset({"model", "input", "dimensions"})


def _field(obj: object, name: str) -> Any:
    """A field of a response object (the ``openai`` package's models), or of a plain mapping."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


class OpenAIEmbedder(BatchedEmbedder):
    """Embeds texts through an OpenAI-compatible embeddings API (module docs of `hippograph.embedders`).

    `client`: the API client (default: ``openai.OpenAI()``). `model`: the embedding model's name
    on that server. `dimensions`: asks the server for vectors of this length (sent as
    ``dimensions=``; models that can shorten their vectors honour it). `dim`: the dimension
    expected (default: `dimensions`, else learned from the first batch). `batch_size`: texts per
    request. `create_kwargs`: further keyword arguments of ``embeddings.create`` (e.g.
    ``encoding_format``, ``user``, ``timeout``, ``extra_body``).

    The vectors of a response are put in the order of their ``index``; a response with more or
    fewer vectors than texts, or indices other than those of the request, is a `ConfigError`.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str,
        dimensions: int | None = None,
        dim: int | None = None,
        batch_size: int = 128,
        create_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if dimensions is not None:
            dimensions = positive_int(dimensions, "OpenAIEmbedder dimensions")
            if dim is not None and dim != dimensions:
                raise ConfigError(f"OpenAIEmbedder dim={dim!r} differs from dimensions={dimensions}")
            dim = dimensions
        super().__init__(dim=dim, batch_size=batch_size)
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAIEmbedder model must be a non-empty str, got {model!r:.40}")
        self._options = options(create_kwargs, "create_kwargs", _RESERVED)
        if dimensions is not None:
            self._options["dimensions"] = dimensions
        if client is None:
            client = import_extra("openai", "openai", "OpenAIEmbedder").OpenAI()
        if not callable(getattr(getattr(client, "embeddings", None), "create", None)):
            raise ConfigError(f"OpenAIEmbedder needs a client with embeddings.create, got {type(client).__name__}")
        self.client = client
        self.model = model

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, model={self.model!r})"

    def _embed_batch(self, texts: list[str], start: int) -> object:
        response = self.client.embeddings.create(model=self.model, input=texts, **self._options)
        data = _field(response, "data")
        if not isinstance(data, Iterable) or isinstance(data, (str, bytes, Mapping)):
            raise ConfigError(
                f"OpenAIEmbedder: the response for texts[{start}:{start + len(texts)}] has no list of embeddings"
            )
        items = list(data)
        if len(items) != len(texts):
            raise self._count_error(len(items), start, len(texts))
        indices = [_field(item, "index") for item in items]
        if all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            if sorted(indices) != list(range(len(items))):
                raise ConfigError(
                    f"OpenAIEmbedder: the response for texts[{start}:{start + len(texts)}] has indices other "
                    f"than 0..{len(texts) - 1}"
                )
            items = [item for _, item in sorted(zip(indices, items, strict=True), key=lambda pair: pair[0])]
        return [self._vector_of(_field(item, "embedding"), start + k) for k, item in enumerate(items)]

    def _vector_of(self, embedding: object, at: int) -> object:
        """The embedding as sent: a list of floats, or base64 of little-endian float32 values."""
        if not isinstance(embedding, str):
            return embedding
        try:
            raw = base64.b64decode(embedding, validate=True)
        except (binascii.Error, ValueError):
            raw = None
        if raw is None or len(raw) % 4:
            raise ConfigError(f"OpenAIEmbedder: the embedding of texts[{at}] is a str but not base64 of float32 values")
        return np.frombuffer(raw, dtype="<f4")
