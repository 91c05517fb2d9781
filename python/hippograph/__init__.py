"""hippograph: an embedded, durable memory graph for AI agents.

Every public name of the data model is importable from here; backends live in
`hippograph.backends` and errors in `hippograph.errors`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from . import backends, errors
from .engine.vector_index import AnnConfig
from .errors import (
    ConfigError,
    HippographError,
    IngestionError,
    InvalidError,
    NotFoundError,
    StorageError,
    ValidationError,
)
from .graph.atom import Atom
from .graph.changeset import Changeset
from .graph.fingerprint import FINGERPRINT_VERSION, etf_encode, fingerprint
from .graph.hits import ExplainedHit, Explanation, ValueParts, WhyNot
from .graph.model import (
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
from .graph.protocol import GraphBackend
from .graph.repo import ForgetSummary, Hit, Repo, RepoStats, open_repo
from .graph.trajectory import Step, Trajectory, validate_trajectory
from .graph.value import DEFAULT_PARAMS, DefaultValueFunction, ValueFunction, ValueFunctionConfig
from .store import Entry, EntryBackend, Scope, ScopeReceipt, Store, open_store
from .store import Hit as StoreHit

try:
    __version__ = _version("hippograph")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_PARAMS",
    "FINGERPRINT_VERSION",
    "AnnConfig",
    "Atom",
    "Changeset",
    "ConfigError",
    "DefaultValueFunction",
    "EdgeType",
    "Entry",
    "EntryBackend",
    "Episodic",
    "ExplainedHit",
    "Explanation",
    "ForgetSummary",
    "GraphBackend",
    "HippographError",
    "Hit",
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
    "Repo",
    "RepoStats",
    "Scope",
    "ScopeReceipt",
    "Semantic",
    "Source",
    "Step",
    "StorageError",
    "Store",
    "StoreHit",
    "Subgoal",
    "Tag",
    "Trajectory",
    "ValidationError",
    "ValueFunction",
    "ValueFunctionConfig",
    "ValueParts",
    "WhyNot",
    "backends",
    "errors",
    "etf_encode",
    "fingerprint",
    "open_repo",
    "open_store",
    "validate_trajectory",
]
