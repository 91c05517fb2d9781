"""`LangChainEmbedder`: a LangChain ``Embeddings`` object as a hippograph embedder.

Any object with ``embed_documents(texts) -> list[list[float]]`` serves, so nothing is imported
here; ``pip install 'hippograph[langchain]'`` installs ``langchain-core``, where the
``Embeddings`` base class lives.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ._base import BatchedEmbedder

__all__ = ["LangChainEmbedder"]


class LangChainEmbedder(BatchedEmbedder):
    """Embeds texts with a LangChain ``Embeddings`` (module docs of `hippograph.embedders`).

    `embeddings`: the LangChain embeddings (``OpenAIEmbeddings``, ``OllamaEmbeddings``,
    ``HuggingFaceEmbeddings``, …). Every text, stored or searched, goes through
    ``embed_documents``: hippograph's ``embed=`` contract does not tell a query from a document.
    `dim`: the dimension expected (default: learned from the first batch). `batch_size`: texts
    per ``embed_documents`` call.
    """

    def __init__(self, embeddings: Any, *, dim: int | None = None, batch_size: int = 64) -> None:
        super().__init__(dim=dim, batch_size=batch_size)
        if not callable(getattr(embeddings, "embed_documents", None)):
            raise ConfigError(
                "LangChainEmbedder needs a LangChain Embeddings (with embed_documents), "
                f"got {type(embeddings).__name__}"
            )
        self.embeddings = embeddings

    def _embed_batch(self, texts: list[str], start: int) -> object:
        return self.embeddings.embed_documents(texts)
