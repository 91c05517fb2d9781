"""The README's import path of the structuring functions, which live in `hippograph.graph.structuring`."""

from .graph.structuring import MAX_KEY_BYTES, Embed, episodic, node_key, step_text

__all__ = ["MAX_KEY_BYTES", "Embed", "episodic", "node_key", "step_text"]
