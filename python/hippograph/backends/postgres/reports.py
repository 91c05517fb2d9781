"""What `Postgres.stats` and `Postgres.verify_storage` read, in the caller's snapshot: one repo's
counts, and its storage-level checks (every record decodes, every embedding has the repo's dimension,
every link has its mirror, server-side vectors equal the embeddings). Both read every row of the
repo each time they run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import StorageError, ValidationError
from ...graph import codec
from ...graph.model import EdgeType, NodeType
from .tx import _id, _Tx


def _counts(tx: _Tx) -> dict[str, Any]:
    """Nodes per type, links, ingestion records, metadata and dimension of `tx`'s repo."""
    counts = {nt.value: 0 for nt in NodeType}
    for node_type, n in tx.all("count_types", (tx.repo,)):
        counts[str(node_type)] = int(n)

    def count(name: str) -> int:
        row = tx.one(name, (tx.repo,))
        return 0 if row is None else int(row[0])

    return {
        "nodes": counts,
        "links": count("count_links") // 2,
        "ingestion_records": count("count_records"),
        "metadata": count("count_meta"),
        "dimension": tx.dim(),
        "disk_bytes": None,
    }


def _vector_problems(tx: _Tx, embeddings: dict[bytes, bytes], types: dict[bytes, str]) -> list[str]:
    """Where the schema keeps vectors in the server: each embedding has its vector, equal to it and
    filed under its node's type, no other vector exists, each metadata row's usage columns say
    what its record says, and each vector's value-weighted copy is what its usage makes it."""
    problems: list[str] = []
    held = {bytes(k): (t, v) for k, t, v in tx.all("repo_vectors", (tx.repo,))}
    for key in sorted(embeddings.keys() | held.keys()):
        shown = key.decode("utf-8", "replace")
        if key not in held:
            problems.append(f"embedding of {shown!r} has no server-side vector")
        elif key not in embeddings:
            problems.append(f"server-side vector of {shown!r} has no embedding")
        else:
            node_type, values = held[key]
            if node_type != types.get(key):
                problems.append(
                    f"server-side vector of {shown!r} is filed as {node_type!r}, the node is {types.get(key)!r}"
                )
            if not np.array_equal(np.asarray(values, np.float32), np.frombuffer(embeddings[key], "<f4")):
                problems.append(f"server-side vector of {shown!r} differs from its embedding")
    for key, record, *usage in tx.all("repo_meta_usage", (tx.repo,)):
        try:
            want = codec.usage_of_meta(bytes(record))
        except StorageError:
            continue  # reported with the record
        if tuple(usage) != want:
            problems.append(f"usage columns of {bytes(key).decode('utf-8', 'replace')!r} disagree with its metadata")
    if (tx.one("has_weights") or (False,))[0]:
        for key, missing in tx.all("repo_weight_problems", (tx.repo,)):
            shown = bytes(key).decode("utf-8", "replace")
            problems.append(
                f"server-side vector of {shown!r} has no value-weighted vector"
                if missing
                else f"value-weighted vector of {shown!r} disagrees with its vector and usage"
            )
    return problems


def _problems(tx: _Tx) -> tuple[list[str], int]:
    """What is wrong with `tx`'s repo at the storage level, and how many ingestion records were checked."""
    problems: list[str] = []
    dim = tx.dim()
    vecs = {bytes(k): bytes(v) for k, v in tx.all("repo_embeddings", (tx.repo,))}
    nodes = tx.all("repo_nodes", (tx.repo,))
    for key, node_type, record in nodes:
        vec = vecs.get(bytes(key))
        shown = bytes(key).decode("utf-8", "replace")
        try:
            node = codec.decode_node(bytes(record), _id(key), None, {})
            if node.node_type.value != node_type:
                problems.append(f"node {shown!r} is stored as {node_type!r} but is a {node.node_type.value}")
        except (StorageError, UnicodeDecodeError) as exc:
            problems.append(f"node {shown!r}: {exc}")
        if vec is not None and (dim is None or len(vec) != 4 * dim):
            problems.append(f"embedding of {shown!r} has {len(vec)} bytes, dim {dim}")
    keys = {bytes(k) for k, _, _ in nodes}
    problems += [f"embedding of {k.decode('utf-8', 'replace')!r}, a node not stored" for k in vecs if k not in keys]
    links = {(bytes(a), e, bytes(b)) for a, e, b in tx.all("repo_links", (tx.repo,))}
    for a, e, b in sorted(links):
        if a not in keys:
            problems.append(f"{e} link {a.decode('utf-8', 'replace')!r} -> {b.decode('utf-8', 'replace')!r}: no node")
        if (b, e, a) not in links:
            problems.append(
                f"{e} link {a.decode('utf-8', 'replace')!r} -> {b.decode('utf-8', 'replace')!r} has no mirror"
            )
        try:
            EdgeType(e)
        except ValueError:
            problems.append(f"link with unknown edge type {e!r}")
    for key, data in tx.all("repo_metadata", (tx.repo,)):
        try:
            codec.decode_meta(bytes(data))
        except StorageError as exc:
            problems.append(f"metadata of {bytes(key).decode('utf-8', 'replace')!r}: {exc}")
    if tx.shared.vectors:
        types = {bytes(k): t for k, t, _ in nodes}
        problems += _vector_problems(tx, vecs, types)
    records = tx.all("repo_records", (tx.repo,))
    for key, data in records:
        try:
            codec.decode_record(_id(key), bytes(data))
        except (StorageError, ValidationError, UnicodeDecodeError) as exc:
            problems.append(f"ingestion record {bytes(key).decode('utf-8', 'replace')!r}: {exc}")
    return problems, len(records)
