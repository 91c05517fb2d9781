"""hippograph: an embedded, durable memory graph for AI agents.

Every public name of the data model is importable from here; backends live in
`hippograph.backends` and errors in `hippograph.errors`.
"""

from __future__ import annotations

from . import backends, errors
from .changeset import Changeset
from .errors import (
    ConfigError,
    HippographError,
    IngestionError,
    InvalidError,
    NotFoundError,
    StorageError,
    ValidationError,
)
from .model import (
    EdgeType,
    Episodic,
    IngestionReceipt,
    IngestionRecord,
    Intent,
    Node,
    NodeMetadata,
    NodeType,
    Outcome,
    Procedural,
    Semantic,
    Source,
    Subgoal,
    Tag,
)
from .protocol import GraphBackend
from .value import DEFAULT_PARAMS, DefaultValueFunction, ValueFunction, ValueFunctionConfig

__all__ = [
    "DEFAULT_PARAMS",
    "Changeset",
    "ConfigError",
    "DefaultValueFunction",
    "EdgeType",
    "Episodic",
    "GraphBackend",
    "HippographError",
    "IngestionError",
    "IngestionReceipt",
    "IngestionRecord",
    "Intent",
    "InvalidError",
    "Node",
    "NodeMetadata",
    "NodeType",
    "NotFoundError",
    "Outcome",
    "Procedural",
    "Semantic",
    "Source",
    "StorageError",
    "Subgoal",
    "Tag",
    "ValidationError",
    "ValueFunction",
    "ValueFunctionConfig",
    "backends",
    "errors",
]
