"""hippograph.embedders: sentence-transformers, fastembed, OpenAI-compatible and LangChain models as embedders.

No model runs here (there are no weights to download): each adapter is driven through a stand-in
shaped like its library's object (`encode` returning an array, `embed` yielding arrays, a client
whose `embeddings.create` answers like the ``openai`` package's models, a LangChain `Embeddings`),
all answering from one tiny model of meaning where synonyms share a coordinate. That the right
memory is recalled for a query sharing no word with it shows the vectors went through the adapter
into the store and back.
"""

from __future__ import annotations

import base64
import math
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hippograph as hg
from hippograph.backends import InMemory
from hippograph.embedders import FastEmbedEmbedder, LangChainEmbedder, OpenAIEmbedder, SentenceTransformerEmbedder
from hippograph.embedders._base import PROBE_TEXT, BatchedEmbedder
from hippograph.errors import ConfigError, ValidationError
from hippograph.structuring import episodic

# -- a tiny model of meaning -------------------------------------------------------------------

CONCEPTS = {
    "car": 0, "automobile": 0, "sedan": 0, "vehicle": 0, "tires": 0,
    "dog": 1, "puppy": 1, "canine": 1, "vet": 1,
    "refund": 2, "reimbursement": 2, "payment": 2, "money": 2,
    "deploy": 3, "rollout": 3, "release": 3, "ship": 3,
    "allergic": 4, "allergy": 4, "peanuts": 4, "nuts": 4,
}  # fmt: skip
DIM = 8


def meaning(text: str) -> list[float]:
    """Concept counts, times 3 (so that the adapters' normalising shows), plus a small bias."""
    row = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        if word in CONCEPTS:
            row[CONCEPTS[word]] += 3.0
    row[DIM - 1] = 0.25
    return row


Respond = Callable[[list[str]], list[Any]]


def unit(rows: Sequence[Sequence[float]]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


# -- stand-ins for the libraries' objects --------------------------------------------------------


class FakeSentenceTransformer:
    """Answers as `SentenceTransformer.encode` with ``convert_to_numpy=True``: one (n, d) array."""

    def __init__(self, respond: Respond = lambda texts: [meaning(t) for t in texts], dim: int | None = DIM):
        self.respond, self.stated, self.calls = respond, dim, []

    def get_sentence_embedding_dimension(self) -> int | None:
        return self.stated

    def encode(self, sentences: list[str], batch_size: int = 32, **kwargs: Any) -> Any:
        self.calls.append({"texts": list(sentences), "batch_size": batch_size, **kwargs})
        rows = self.respond(list(sentences))
        if all(map(_numeric, rows)) and len({len(r) for r in rows}) <= 1:
            return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(rows[0]) if rows else DIM)
        return [np.asarray(r) for r in rows]  # ragged or not numbers: what a faulty model might hand back


class FakeTextEmbedding:
    """Answers as fastembed's `TextEmbedding.embed`: a generator of one array per document."""

    def __init__(self, respond: Respond = lambda texts: [meaning(t) for t in texts], dim: int | None = DIM):
        self.respond, self.stated, self.calls = respond, dim, []

    @property
    def embedding_size(self) -> int:
        if self.stated is None:
            raise NotImplementedError("this model states no size")
        return self.stated

    def embed(self, documents: list[str], batch_size: int = 256, parallel: int | None = None, **kw: Any) -> Any:
        self.calls.append({"texts": list(documents), "batch_size": batch_size, "parallel": parallel, **kw})
        for row in self.respond(list(documents)):
            yield np.asarray(row, dtype=np.float32) if _numeric(row) else np.asarray(row)


def _numeric(row: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row)


@dataclass
class Embedding:  # the openai package's openai.types.Embedding
    embedding: Any
    index: int
    object: str = "embedding"


@dataclass
class Usage:
    prompt_tokens: int
    total_tokens: int


@dataclass
class CreateEmbeddingResponse:  # openai.types.CreateEmbeddingResponse
    data: list[Embedding]
    model: str
    object: str = "list"
    usage: Usage = field(default_factory=lambda: Usage(0, 0))


class FakeEmbeddingsResource:
    def __init__(self, respond: Respond, shuffle: bool):
        self.respond, self.shuffle, self.calls = respond, shuffle, []

    def create(self, *, model: str, input: list[str], **kwargs: Any) -> CreateEmbeddingResponse:
        self.calls.append({"texts": list(input), "model": model, **kwargs})
        rows = self.respond(list(input))
        if kwargs.get("encoding_format") == "base64":
            rows = [base64.b64encode(np.asarray(r, dtype="<f4").tobytes()).decode() for r in rows]
        data = [Embedding(embedding=r, index=i) for i, r in enumerate(rows)]
        if self.shuffle:  # the API's order is by index; the adapter must not rely on the list's
            random.Random(len(input)).shuffle(data)
        return CreateEmbeddingResponse(data=data, model=model, usage=Usage(len(input), len(input)))


class FakeOpenAI:
    """Shaped like ``openai.OpenAI``: ``client.embeddings.create(model=, input=)``."""

    def __init__(self, respond: Respond = lambda texts: [meaning(t) for t in texts], shuffle: bool = True):
        self.embeddings = FakeEmbeddingsResource(respond, shuffle)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.embeddings.calls


class FakeLangChainEmbeddings:
    """Shaped like a LangChain `Embeddings` (tests below use langchain-core's own base class too)."""

    def __init__(self, respond: Respond = lambda texts: [meaning(t) for t in texts]):
        self.respond, self.calls = respond, []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append({"texts": list(texts)})
        return [list(map(float, r)) if _numeric(r) else r for r in self.respond(list(texts))]

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("hippograph embeds every text with embed_documents")


@dataclass
class Kind:
    name: str
    make: Callable[..., tuple[BatchedEmbedder, Any]]  # (respond, batch_size, dim) -> (embedder, fake)


def _st(respond: Respond | None = None, batch_size: int = 4, dim: int | None = None, stated: int | None = DIM):
    fake = FakeSentenceTransformer(respond or (lambda texts: [meaning(t) for t in texts]), dim=stated)
    return SentenceTransformerEmbedder(fake, batch_size=batch_size, dim=dim), fake


def _fe(respond: Respond | None = None, batch_size: int = 4, dim: int | None = None, stated: int | None = DIM):
    fake = FakeTextEmbedding(respond or (lambda texts: [meaning(t) for t in texts]), dim=stated)
    return FastEmbedEmbedder(fake, batch_size=batch_size, dim=dim), fake


def _oa(respond: Respond | None = None, batch_size: int = 4, dim: int | None = None, stated: int | None = None):
    fake = FakeOpenAI(respond or (lambda texts: [meaning(t) for t in texts]))
    return OpenAIEmbedder(fake, model="text-embedding-3-small", batch_size=batch_size, dim=dim), fake


def _lc(respond: Respond | None = None, batch_size: int = 4, dim: int | None = None, stated: int | None = None):
    fake = FakeLangChainEmbeddings(respond or (lambda texts: [meaning(t) for t in texts]))
    return LangChainEmbedder(fake, batch_size=batch_size, dim=dim), fake


KINDS = [Kind("sentence-transformers", _st), Kind("fastembed", _fe), Kind("openai", _oa), Kind("langchain", _lc)]
kinds = pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])

MEMORIES = {
    "tires": "the sedan needs new tires before winter",
    "vet": "took the puppy to the vet on monday",
    "refund": "customer asked for a reimbursement of the order",
    "deploy": "rollout of version two is planned for friday",
    "diet": "she is allergic to peanuts",
}
QUERIES = {  # no word in common with any memory
    "automobile maintenance": "tires",
    "canine checkup": "vet",
    "money returned?": "refund",
    "ship date": "deploy",
    "nuts avoided": "diet",
}


def test_the_queries_share_no_word_with_the_memories() -> None:
    memory_words = {w for text in MEMORIES.values() for w in re.findall(r"\w+", text)}
    assert not memory_words & {w for query in QUERIES for w in re.findall(r"\w+", query)}


# -- the vectors reach the store, and recall finds the right memory ------------------------------


@kinds
def test_store_puts_the_adapters_vectors_and_search_finds_the_memory_by_meaning(kind: Kind) -> None:
    embed, fake = kind.make(batch_size=2)
    with hg.Store(InMemory(), embed=embed) as store:
        store.put_many([{"scope": ("users", "u1"), "key": k, "text": t} for k, t in MEMORIES.items()])
        for key, text in MEMORIES.items():
            stored = store.get(("users", "u1"), key)
            assert stored is not None and stored.embedding is not None
            np.testing.assert_allclose(stored.embedding, unit([meaning(text)])[0], rtol=1e-6)
        for query, key in QUERIES.items():
            hits = store.search(("users", "u1"), text=query, limit=2)
            assert hits[0].entry.key == key, (query, [h.entry.key for h in hits])
            assert hits[0].vector_score > 0.9 and hits[0].text_score is None  # found by meaning alone
    batches = [call["texts"] for call in fake.calls]
    assert batches[0] + batches[1] + batches[2] == list(MEMORIES.values())  # put_many: 5 texts in 3 batches
    assert [len(b) for b in batches[:3]] == [2, 2, 1]
    assert batches[3:] == [[q] for q in QUERIES]


@kinds
def test_repo_recall_through_the_adapter_finds_the_step(kind: Kind, tmp_path: Any) -> None:
    embed, _ = kind.make(batch_size=3)
    trajectory = hg.Trajectory(
        source_id="run-1",
        goal="look after the household",
        steps=[
            hg.Step("the sedan needs new tires", "book the garage"),
            hg.Step("the puppy is coughing", "call the vet"),
            hg.Step("the order arrived broken", "ask for a reimbursement"),
        ],
    )
    with hg.open_repo("agent", path=tmp_path / "agent") as repo:
        repo.ingest(trajectory, structure=episodic(embed))
        hits = repo.recall(embed.embed_one("my canine is ill"), types=["episodic"])
        assert hits and hits[0].node.observation == "the puppy is coughing"
        hits = repo.recall(embed(["automobile trouble"])[0], types=["episodic"])
        assert hits and hits[0].node.observation == "the sedan needs new tires"


@kinds
def test_output_is_float32_unit_rows_in_input_order(kind: Kind) -> None:
    embed, _ = kind.make(batch_size=3)
    texts = ["dog", "car car", "refund", "nothing known", "deploy", "car dog", "x"]
    out = embed(texts)
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.shape == (7, DIM)
    np.testing.assert_allclose(out, unit([meaning(t) for t in texts]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(embed.embed_one("car dog"), out[5], rtol=1e-6)
    assert embed.dim == DIM
    assert embed([]).shape == (0, DIM)


# -- every answer is checked; an error names the input at fault ----------------------------------

FAULTS = ["nan", "inf", "short", "long", "words", "drop", "extra"]
COUNT_FAULTS = {"drop", "extra"}


def faulty(n_at: int, fault: str) -> Respond:
    """A model answering `meaning` except for the text "t<n_at>", where it goes wrong as `fault` says."""
    target = f"t{n_at}"

    def respond(texts: list[str]) -> list[Any]:
        rows: list[Any] = [meaning(t) for t in texts]
        if target not in texts:
            return rows
        i = texts.index(target)
        if fault == "nan":
            rows[i][1] = math.nan
        elif fault == "inf":
            rows[i][0] = -math.inf
        elif fault == "short":
            rows[i] = rows[i][:-1]
        elif fault == "long":
            rows[i] = [*rows[i], 1.0]
        elif fault == "words":
            rows[i] = ["0.5"] * DIM
        elif fault == "drop":
            del rows[i]
        elif fault == "extra":
            rows.append(meaning("dog"))
        return rows

    return respond


@kinds
@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 23),
    batch_size=st.integers(1, 6),
    fault=st.sampled_from(FAULTS),
)
def test_a_faulty_answer_is_a_config_error_naming_the_input(
    kind: Kind, data: st.DataObject, n: int, batch_size: int, fault: str
) -> None:
    at = data.draw(st.integers(0, n - 1), label="at")
    embed, _ = kind.make(faulty(at, fault), batch_size=batch_size, dim=DIM)
    texts = [f"t{i}" for i in range(n)]
    with pytest.raises(ConfigError) as caught:
        embed(texts)
    message = str(caught.value)
    if fault in COUNT_FAULTS:
        start = at // batch_size * batch_size
        assert f"texts[{start}:{min(start + batch_size, n)}]" in message
    else:
        assert re.search(rf"texts\[{at}\](?!\d)", message), message
    assert type(embed).__name__ in message
    assert "t0" not in message.replace("texts[", "")  # names positions, never the texts themselves


@kinds
@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.floats(-(2.0**100), 2.0**100, width=32), min_size=DIM, max_size=DIM),
        min_size=1,
        max_size=17,
    ),
    batch_size=st.integers(1, 5),
)
def test_any_finite_answer_comes_back_normalised_in_order(kind: Kind, rows: list[list[float]], batch_size: int) -> None:
    table = {f"t{i}": row for i, row in enumerate(rows)}
    embed, fake = kind.make(lambda texts: [table[t] for t in texts], batch_size=batch_size)
    out = embed(list(table))
    expected = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(expected, axis=1, keepdims=True)
    assert out.shape == (len(rows), DIM) and out.dtype == np.float32
    for got, want, norm in zip(out, expected, norms[:, 0], strict=True):
        if norm == 0 or not np.isfinite(norm):
            continue
        np.testing.assert_allclose(got, want / norm, atol=1e-6)
    nonzero = np.abs(expected).max(axis=1) > 0
    np.testing.assert_allclose(np.linalg.norm(out[nonzero], axis=1), 1.0, rtol=1e-5)
    assert not out[~nonzero].any()  # a zero vector stays zero: it matches nothing
    sizes = [min(batch_size, len(rows) - start) for start in range(0, len(rows), batch_size)]
    assert [len(c["texts"]) for c in fake.calls] == sizes


@kinds
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), data=st.data())
def test_a_list_holding_a_non_str_is_a_validation_error_naming_it(kind: Kind, n: int, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, n - 1), label="at")
    bad = data.draw(st.sampled_from([None, 3, b"bytes", 1.5, ["x"]]), label="bad")
    embed, fake = kind.make()
    texts: list[Any] = [f"t{i}" for i in range(n)]
    texts[at] = bad
    with pytest.raises(ValidationError, match=rf"texts\[{at}\] must be a str"):
        embed(texts)
    assert fake.calls == []  # refused before the model is called


@kinds
def test_a_single_str_is_refused(kind: Kind) -> None:
    embed, fake = kind.make()
    with pytest.raises(ValidationError, match="wrap a single text in a list"):
        embed("dog")  # type: ignore[arg-type]
    assert fake.calls == []


@pytest.mark.parametrize("kind", [KINDS[2], KINDS[3]], ids=["openai", "langchain"])
def test_a_dimension_learned_from_the_first_batch_holds_for_the_next(kind: Kind) -> None:
    answers = iter([[[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]])
    embed, _ = kind.make(lambda texts: next(answers), batch_size=2)
    assert repr(embed).startswith(f"{type(embed).__name__}(dim=?")
    assert embed(["a"]).shape == (1, 3)
    assert embed.dim == 3
    with pytest.raises(ConfigError, match=r"dimension 4 for texts\[1\]; expected 3$"):
        embed(["b", "c"])


@pytest.mark.parametrize("kind", [KINDS[2], KINDS[3]], ids=["openai", "langchain"])
def test_dim_of_a_model_stating_none_is_learned_by_one_probe(kind: Kind) -> None:
    embed, fake = kind.make()
    assert embed.dim == DIM and embed.dim == DIM
    assert [c["texts"] for c in fake.calls] == [[PROBE_TEXT]]
    assert embed([]).shape == (0, DIM)
    assert len(fake.calls) == 1


def test_the_first_batch_sets_the_dimension_every_row_must_share() -> None:
    embed, _ = _lc(lambda texts: [[1.0, 2.0], [1.0, 2.0, 3.0]])
    with pytest.raises(ConfigError, match=r"dimension 3 for texts\[1\]; expected 2 \(the dimension of texts\[0\]\)"):
        embed(["a", "b"])
    assert repr(embed) == "LangChainEmbedder(dim=?, batch_size=4)"  # a refused batch teaches nothing


@pytest.mark.parametrize("answer", [[[]], [[[1.0, 2.0]]], [[True, False]], [[1 + 2j, 0j]], "12", [{"a": 1}]])
def test_answers_that_are_not_vectors_of_numbers_are_refused(answer: Any) -> None:
    embed, _ = _lc(lambda texts: answer)
    with pytest.raises(ConfigError, match=r"texts\[0\]|texts\[0:1\]"):
        embed(["a"])


@pytest.mark.parametrize("make", [_st, _fe], ids=["sentence-transformers", "fastembed"])
def test_a_dim_other_than_the_models_is_refused_at_once(make: Callable[..., Any]) -> None:
    with pytest.raises(ConfigError, match="dim=5, but the model's dimension is 8"):
        make(dim=5)
    embed, fake = make(stated=None)  # a model that states none: learned as for the others
    assert embed.dim == DIM and fake.calls[0]["texts"] == [PROBE_TEXT]


@kinds
def test_errors_of_the_model_itself_propagate_unchanged(kind: Kind) -> None:
    class Down(Exception):
        pass

    def respond(texts: list[str]) -> list[Any]:
        raise Down("the model server is down")

    embed, _ = kind.make(respond, dim=DIM)
    with pytest.raises(Down):
        embed(["dog"])


@pytest.mark.parametrize("batch_size", [0, -1, True, 2.5, "4"])
@kinds
def test_batch_size_and_dim_must_be_positive_ints(kind: Kind, batch_size: Any) -> None:
    with pytest.raises(ConfigError, match="batch_size must be a positive int"):
        kind.make(batch_size=batch_size)
    with pytest.raises(ConfigError, match="dim must be a positive int"):
        kind.make(dim=batch_size)


# -- each adapter's own calling convention -------------------------------------------------------


def test_sentence_transformer_gets_its_batch_size_numpy_output_and_extra_options() -> None:
    fake = FakeSentenceTransformer()
    embed = SentenceTransformerEmbedder(fake, batch_size=3, encode_kwargs={"prompt_name": "query"})
    assert embed.dim == DIM and fake.calls == []  # stated by the model: no probe
    embed(["dog"] * 4)
    assert [(len(c["texts"]), c["batch_size"]) for c in fake.calls] == [(3, 3), (1, 1)]
    assert all(
        c["convert_to_numpy"] is True and c["show_progress_bar"] is False and c["prompt_name"] == "query"
        for c in fake.calls
    )
    with pytest.raises(ConfigError, match="must not set batch_size"):
        SentenceTransformerEmbedder(fake, encode_kwargs={"batch_size": 8})


def test_sentence_transformer_prefers_the_newer_dimension_method() -> None:
    class Newer(FakeSentenceTransformer):
        def get_embedding_dimension(self) -> int:
            return DIM

        def get_sentence_embedding_dimension(self) -> int:
            raise AssertionError("the older name is asked only when the newer is missing")

    assert SentenceTransformerEmbedder(Newer()).dim == DIM


def test_fastembed_gets_its_batch_size_and_extra_options() -> None:
    fake = FakeTextEmbedding()
    embed = FastEmbedEmbedder(fake, batch_size=2, embed_kwargs={"parallel": 0})
    embed(["dog", "car", "refund"])
    assert [(c["texts"], c["batch_size"], c["parallel"]) for c in fake.calls] == [
        (["dog", "car"], 2, 0),
        (["refund"], 1, 0),
    ]


def test_openai_sends_model_dimensions_and_options_and_orders_by_index() -> None:
    fake = FakeOpenAI(shuffle=True)
    embed = OpenAIEmbedder(
        fake, model="text-embedding-3-small", dimensions=DIM, batch_size=5, create_kwargs={"user": "agent-7"}
    )
    assert embed.dim == DIM and fake.calls == []  # asked for: no probe
    texts = ["dog", "car", "refund", "deploy", "peanuts", "vet", "sedan"]
    out = embed(texts)
    np.testing.assert_allclose(out, unit([meaning(t) for t in texts]), rtol=1e-6)
    assert [c["texts"] for c in fake.calls] == [texts[:5], texts[5:]]
    assert all(c["model"] == "text-embedding-3-small" and c["dimensions"] == DIM for c in fake.calls)
    assert all(c["user"] == "agent-7" for c in fake.calls)
    assert "model='text-embedding-3-small'" in repr(embed)


def test_openai_decodes_base64_embeddings() -> None:
    fake = FakeOpenAI()
    embed = OpenAIEmbedder(fake, model="m", create_kwargs={"encoding_format": "base64"})
    texts = ["dog", "car", "nothing"]
    np.testing.assert_allclose(embed(texts), unit([meaning(t) for t in texts]), rtol=1e-6)


def test_openai_refuses_bad_base64_naming_the_input() -> None:
    def respond(texts: list[str]) -> list[Any]:
        return [("not base64!" if t == "c" else meaning(t)) for t in texts]

    embed = OpenAIEmbedder(FakeOpenAI(respond), model="m", batch_size=2)
    with pytest.raises(ConfigError, match=r"embedding of texts\[2\] is a str but not base64"):
        embed(["a", "b", "c"])


@pytest.mark.parametrize("indices", [[0, 0, 1], [1, 2, 3], [0, 1, -1]])
def test_openai_refuses_a_response_whose_indices_are_not_the_requests(indices: list[int]) -> None:
    class Client:
        class embeddings:  # the attribute the openai client has
            @staticmethod
            def create(*, model: str, input: list[str]) -> CreateEmbeddingResponse:
                got = range(3) if input[0] == "a" else indices  # the second batch's are wrong
                data = [Embedding(meaning(t), i) for t, i in zip(input, got, strict=True)]
                return CreateEmbeddingResponse(data, model)

    with pytest.raises(ConfigError, match=r"texts\[3:6\] has indices other than 0..2"):
        OpenAIEmbedder(Client(), model="m", batch_size=3, dim=DIM)(["a", "b", "c", "d", "e", "f"])


def test_openai_accepts_plain_mapping_responses() -> None:
    class Client:
        class embeddings:
            @staticmethod
            def create(*, model: str, input: list[str]) -> dict[str, Any]:
                return {"data": [{"embedding": meaning(t), "index": i} for i, t in enumerate(input)]}

    np.testing.assert_allclose(OpenAIEmbedder(Client(), model="m")(["dog"]), unit([meaning("dog")]), rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": ""}, "model must be a non-empty str"),
        ({"model": "m", "dim": 4, "dimensions": 8}, "dim=4 differs from dimensions=8"),
        ({"model": "m", "dimensions": 0}, "dimensions must be a positive int"),
        ({"model": "m", "create_kwargs": {"input": ["x"]}}, "must not set input"),
    ],
)
def test_openai_configuration_is_checked(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OpenAIEmbedder(FakeOpenAI(), **kwargs)


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda: SentenceTransformerEmbedder(object()), "SentenceTransformer"),
        (lambda: FastEmbedEmbedder(object()), "TextEmbedding"),
        (lambda: OpenAIEmbedder(object(), model="m"), "embeddings.create"),
        (lambda: LangChainEmbedder(object()), "embed_documents"),
    ],
)
def test_an_object_that_is_not_the_librarys_is_refused(make: Callable[[], Any], what: str) -> None:
    with pytest.raises(ConfigError, match=what):
        make()


# -- the libraries are optional ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "make", "extra"),
    [
        ("sentence_transformers", lambda: SentenceTransformerEmbedder("all-MiniLM-L6-v2"), "sentence-transformers"),
        ("fastembed", lambda: FastEmbedEmbedder("BAAI/bge-small-en-v1.5"), "fastembed"),
        ("openai", lambda: OpenAIEmbedder(model="text-embedding-3-small"), "openai"),
    ],
)
def test_a_missing_library_is_a_config_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, make: Callable[[], Any], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    with pytest.raises(ConfigError, match=re.escape(f"pip install 'hippograph[{extra}]'")):
        make()


def test_a_model_named_is_loaded_through_its_library(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    made: list[Any] = []
    library = types.ModuleType("sentence_transformers")
    library.SentenceTransformer = lambda name: made.append(name) or FakeSentenceTransformer()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", library)
    fastembed = types.ModuleType("fastembed")
    fastembed.TextEmbedding = lambda model_name: made.append(model_name) or FakeTextEmbedding()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fastembed", fastembed)
    openai = types.ModuleType("openai")
    openai.OpenAI = lambda: made.append("client") or FakeOpenAI()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "openai", openai)
    for embed in (
        SentenceTransformerEmbedder("all-MiniLM-L6-v2"),
        FastEmbedEmbedder("BAAI/bge-small-en-v1.5"),
        OpenAIEmbedder(model="text-embedding-3-small"),
    ):
        np.testing.assert_allclose(embed(["dog"]), unit([meaning("dog")]), rtol=1e-6)
    assert made == ["all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5", "client"]


def test_importing_hippograph_and_the_adapters_needs_none_of_the_libraries() -> None:
    code = """
import importlib.abc, sys
BLOCKED = {"sentence_transformers", "fastembed", "openai", "langchain_core", "torch", "onnxruntime"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import hippograph, hippograph.embedders
from hippograph.embedders import LangChainEmbedder
class E:
    def embed_documents(self, texts):
        return [[1.0, 0.0] for _ in texts]
assert LangChainEmbedder(E())(["x"]).shape == (1, 2)
assert not BLOCKED & {m.split(".")[0] for m in sys.modules}
try:
    hippograph.embedders.FastEmbedEmbedder("BAAI/bge-small-en-v1.5")
except hippograph.ConfigError as exc:
    assert "hippograph[fastembed]" in str(exc)
else:
    raise AssertionError("no ConfigError")
"""
    run = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr


# -- with langchain-core's own Embeddings ------------------------------------------------------


def test_langchain_core_embeddings_subclass_and_its_deterministic_fake() -> None:
    embeddings = pytest.importorskip("langchain_core.embeddings")

    class Meaning(embeddings.Embeddings):  # type: ignore[misc, name-defined]
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [meaning(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return meaning(text)

    with hg.Store(InMemory(), embed=LangChainEmbedder(Meaning())) as store:
        store.put_many([{"scope": ("u",), "key": k, "text": t} for k, t in MEMORIES.items()])
        for query, key in QUERIES.items():
            assert store.search(("u",), text=query, limit=1)[0].entry.key == key

    fake = LangChainEmbedder(embeddings.DeterministicFakeEmbedding(size=32), batch_size=2)
    assert fake.dim == 32
    with hg.Store(InMemory(), embed=fake) as store:
        store.put_many([{"scope": ("u",), "key": k, "text": t} for k, t in MEMORIES.items()])
        for key, text in MEMORIES.items():  # the same text gives the same vector: the vector route alone finds it
            hit = store.search(("u",), text=text, limit=1, weights=(0.0, 1.0))[0]
            assert hit.entry.key == key and hit.vector_score == pytest.approx(1.0, abs=1e-3)
