"""Adapters that let agent frameworks keep their memories in a hippograph `Store`.

Each adapter lives in its own module and imports its framework only when that module is imported,
so ``import hippograph`` never needs them:

- `hippograph.integrations.langgraph`: `HippographStore`, LangGraph's `BaseStore` (docs/langgraph.md);
  needs ``pip install 'hippograph[langgraph]'``.
"""

from __future__ import annotations

__all__: list[str] = []
