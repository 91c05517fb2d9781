"""`FastEmbedEmbedder`: a fastembed ``TextEmbedding`` model as a hippograph embedder.

Needs ``pip install 'hippograph[fastembed]'`` only to load a model by name; a model object
already loaded is used as it is (anything with fastembed's ``embed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ._base import BatchedEmbedder, import_extra, options

__all__ = ["FastEmbedEmbedder"]

_RESERVED = frozenset({"documents", "batch_size"})


def _stated_dim(model: Any) -> int | None:
    """The dimension the model states (``embedding_size`` in recent fastembed releases), if any."""
    try:
        dim = getattr(model, "embedding_size", None)
    except Exception:  # a release or model type that states none raises (NotImplementedError, ValueError)
        return None
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return dim
    return None


class FastEmbedEmbedder(BatchedEmbedder):
    """Embeds texts with a fastembed model (module docs of `hippograph.embedders`).

    `model`: a ``fastembed.TextEmbedding`` (or an object with its ``embed``), or a model name,
    loaded here with ``TextEmbedding(model_name=model)``. `dim`: the dimension expected
    (default: the model's ``embedding_size``, else learned from the first batch). `batch_size`:
    texts per ``embed`` call, which also gets it as its own ``batch_size``. `embed_kwargs`:
    further keyword arguments of ``embed`` (e.g. ``parallel``).
    """

    def __init__(
        self,
        model: Any,
        *,
        dim: int | None = None,
        batch_size: int = 256,
        embed_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(dim=dim, batch_size=batch_size)
        self._options = options(embed_kwargs, "embed_kwargs", _RESERVED)
        if isinstance(model, str):
            library = import_extra("fastembed", "fastembed", "FastEmbedEmbedder")
            model = library.TextEmbedding(model_name=model)
        if not callable(getattr(model, "embed", None)):
            raise ConfigError(
                f"FastEmbedEmbedder needs a fastembed TextEmbedding (with embed), got {type(model).__name__}"
            )
        self.model = model
        stated = _stated_dim(model)
        if stated is not None:
            if self._dim is not None and self._dim != stated:
                raise ConfigError(f"FastEmbedEmbedder dim={self._dim}, but the model's dimension is {stated}")
            self._dim = stated

    def _embed_batch(self, texts: list[str], start: int) -> object:
        return self.model.embed(texts, batch_size=len(texts), **self._options)  # yields one array per text
