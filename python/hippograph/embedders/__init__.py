"""Embedding models as hippograph embedders: pass one wherever hippograph takes ``embed=``.

- `SentenceTransformerEmbedder`: a sentence-transformers model (``[sentence-transformers]``);
- `FastEmbedEmbedder`: a fastembed ``TextEmbedding`` (``[fastembed]``);
- `OpenAIEmbedder`: an OpenAI-compatible embeddings API through the ``openai`` client (``[openai]``);
- `LangChainEmbedder`: a LangChain ``Embeddings`` (``[langchain]``).

Each adapter imports its library only when it has to load a model or make a client itself, so
neither ``import hippograph`` nor ``import hippograph.embedders`` needs any of them; a library
that is not installed then is a `ConfigError` naming the extra to install
(``pip install 'hippograph[fastembed]'``).

An adapter is what `hippograph.embedding.HashingEmbedder` is: ``embed(texts)`` returns a
C-contiguous float32 array of shape ``(len(texts), dim)`` with unit rows; ``embed.dim`` and
``embed.embed_one(text)``. It sends the texts to the model ``batch_size`` at a time and checks
every answer: a wrong number of vectors, a vector of another dimension, one with NaN or
infinities or not made of numbers is a `ConfigError` naming the input (``texts[7]``) or the
batch (``texts[0:32]``) at fault, and nothing is returned. docs/graph-memory.md, embedding models.
"""

from __future__ import annotations

from ._base import BatchedEmbedder
from .fast_embed import FastEmbedEmbedder
from .langchain_embeddings import LangChainEmbedder
from .openai_compat import OpenAIEmbedder
from .sentence_transformer import SentenceTransformerEmbedder

__all__ = [
    "BatchedEmbedder",
    "FastEmbedEmbedder",
    "LangChainEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
]
