"""A LangGraph agent whose long-term memory lives in hippograph (docs/langgraph.md), offline.

The chat model is LangChain's `GenericFakeChatModel` and the embedder hashes words into a small
vector, so this runs without a network or an API key. Swap in a real model (``init_chat_model``)
and a real embedder (``init_embeddings``) and nothing else changes.

    pip install 'hippograph[langgraph]'
    python examples/langgraph_agent.py            # in process memory
    python examples/langgraph_agent.py ./memory   # in an LMDB directory, kept between runs
"""

from __future__ import annotations

import hashlib
import re
import sys
import zlib
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.base import BaseStore

from hippograph.integrations.langgraph import HippographStore

DIMS = 64


def embed(texts: Sequence[str]) -> list[list[float]]:
    """A stand-in embedder: each word adds ±1 to a hashed dimension (deterministic, no model)."""
    out = []
    for text in texts:
        v = [0.0] * DIMS
        for word in re.findall(r"\w+", text.lower()):
            h = zlib.crc32(word.encode())
            v[h % DIMS] += 1.0 if h & (1 << 20) else -1.0
        out.append(v)
    return out


def key_of(fact: str) -> str:
    """A key the fact itself gives (a digest of its words, lower-cased): saying it again overwrites
    the memory instead of adding a copy, as a fresh ``uuid4()`` key per write would."""
    words = " ".join(re.findall(r"\w+", fact.lower()))
    return hashlib.sha256(words.encode()).hexdigest()[:16]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build(store: BaseStore, replies: list[str]) -> Any:
    model = GenericFakeChatModel(messages=iter(AIMessage(r) for r in replies))

    def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, object]:
        """Recall what we know about the user, answer, and file what they said as a memory."""
        user = config["configurable"]["user_id"]
        said = str(state["messages"][-1].content)
        memories = store.search(("memories", user), query=said, limit=3)
        known = "\n".join(f"- {m.value['text']} (score {m.score:.2f})" for m in memories)
        reply = model.invoke([SystemMessage(f"What you remember about the user:\n{known}"), *state["messages"]])
        if said.lower().startswith("remember"):
            fact = said.removeprefix("remember").strip(" :,")
            store.put(("memories", user), key_of(fact), {"text": fact})
        return {"messages": [reply]}

    graph = StateGraph(State)
    graph.add_node("remember", remember)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


def main(path: str | None = None) -> list[str]:
    replies = ["Noted: vegetarian.", "Noted: peanuts.", "Try a chickpea curry, no peanuts."]
    with HippographStore(path=path, index={"dims": DIMS, "embed": embed, "fields": ["text"]}) as store:
        agent = build(store, replies)
        config: RunnableConfig = {"configurable": {"user_id": "u42"}}
        answers = []
        for said in ["remember: I am vegetarian", "remember: allergic to peanuts", "what should I cook tonight?"]:
            out = agent.invoke({"messages": [HumanMessage(said)]}, config)
            answers.append(str(out["messages"][-1].content))
            print(f"user: {said}\nagent: {answers[-1]}")
        for item in store.search(("memories", "u42"), query="food allergy peanuts"):
            print(f"memory {item.value['text']!r}: score {item.score:.3f}")
        print("namespaces:", store.list_namespaces())
        return answers


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
