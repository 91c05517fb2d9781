"""`verify_context`: reads a context store in one snapshot and reports every way its groups
disagree (docs/context.md). The reliability suite runs it after killing writers mid-operation; an
operator can run it on a store they suspect."""

from __future__ import annotations

from collections import Counter

from . import jobs, memories, sessions, tree
from .keys import COUNTERS, decode, read_u64, uri_of
from .protocol import ContextBackend, KvTxn

__all__ = ["verify_context"]


def verify_context(backend: ContextBackend) -> list[str]:
    """Every disagreement found (empty: the groups agree): a node without its parent directory,
    a vector, memory or commit hash at a URI the tree does not hold, an index entry without its
    record or the reverse, a counter that differs from what it counts. (Only jobs enqueued with a
    document must name a node: `enqueue_job` accepts any URI.)"""
    return backend.context_read(_problems)


def _problems(t: KvTxn) -> list[str]:
    out: list[str] = []
    nodes: dict[str, str] = {}
    for key, raw in t.range(tree.NODES):
        nodes[uri_of(key)] = decode(raw, "context node")["k"]
    docs = Counter(u.split("/", 1)[0] for u, k in nodes.items() if k == "doc")
    for uri in nodes:
        parent = uri.rpartition("/")[0]
        if parent and nodes.get(parent) != "dir":
            out.append(f"node {uri!r}: its parent {parent!r} is not a directory of the tree")
    out += _counters(t, nodes, docs)
    for key, _ in t.range(tree.VECTORS):
        if nodes.get(uri_of(key)) != "doc":
            out.append(f"vector of {uri_of(key)!r}: no such document")
    out += _memories(t, nodes)
    out += _jobs(t, nodes)
    for key, _ in t.range(sessions.COMMITS):
        if uri_of(key) not in nodes:
            out.append(f"commit hash for {uri_of(key)!r}: no such node")
    return out


def _counter(t: KvTxn, name: bytes) -> int:
    raw = t.get(COUNTERS, name)
    return 0 if raw is None else read_u64(raw)


def _counters(t: KvTxn, nodes: dict[str, str], docs: Counter[str]) -> list[str]:
    out = []
    kinds = Counter(nodes.values())
    for name, want in ((tree.DOCS, kinds["doc"]), (tree.DIRS, kinds["dir"])):
        if _counter(t, name) != want:
            out.append(f"counter {name.decode()}: {_counter(t, name)}, the tree holds {want}")
    if tree.top_counts(t) != dict(docs):
        out.append(f"documents per top subtree: counters {tree.top_counts(t)}, the tree {dict(docs)}")
    vectors = sum(1 for _ in t.range(tree.VECTORS))
    if _counter(t, tree.VECTOR_COUNT) != vectors:
        out.append(f"counter vectors: {_counter(t, tree.VECTOR_COUNT)}, the store holds {vectors}")
    return out


def _memories(t: KvTxn, nodes: dict[str, str]) -> list[str]:
    out = []
    listed: dict[int, bytes] = {}
    active = Counter[str]()
    for key, status in t.range(memories.URIS):
        memory_id = read_u64(key, len(key) - 8)
        listed[memory_id] = status
        uri = uri_of(key)
        if uri not in nodes:
            out.append(f"memory {memory_id} at {uri!r}: no such node")
        active[uri] += status == b"active"
    out += [f"memory URI {u!r}: {n} active assertions" for u, n in active.items() if n > 1]
    held = 0
    for key, raw in t.range(memories.MEMORIES):
        held += 1
        memory_id = read_u64(key)
        rec = decode(raw, "context memory")
        if listed.get(memory_id) != rec["st"].encode():
            out.append(f"memory {memory_id}: status {rec['st']!r} not what its URI index says")
    if held != len(listed):
        out.append(f"memories: {held} records, {len(listed)} index entries")
    return out


def _jobs(t: KvTxn, nodes: dict[str, str]) -> list[str]:
    out = []
    records = {read_u64(k): decode(raw, "context job") for k, raw in t.range(jobs.JOBS)}
    by_status = Counter(rec["st"] for rec in records.values())
    if jobs.stats(t) != {s: by_status.get(s, 0) for s in jobs.STATUSES}:
        out.append(f"job counters {jobs.stats(t)}, records {dict(by_status)}")
    queued, by_uri = jobs.index_entries(t)
    state = [k for k, _ in t.range(jobs.STATE)]
    pending = {i for i, rec in records.items() if rec["st"] == "pending"}
    if {read_u64(k, len(k) - 8) for k in queued} != pending:
        out.append(f"pending jobs {len(pending)}, queued {len(queued)}: the queue disagrees")
    for key in state:
        job_id = read_u64(key, len(key) - 8)
        status = key[: key.index(b"\x00")].decode()
        if records.get(job_id, {}).get("st") != status:
            out.append(f"job {job_id} indexed as {status!r}: its record says otherwise")
    held = sum(rec["st"] in ("running", "failed") for rec in records.values())
    if held != len(state):
        out.append(f"running or failed jobs {held}, indexed {len(state)}")
    for key in by_uri:
        job_id = read_u64(key, len(key) - 8)
        rec = records.get(job_id)
        if rec is None or rec.get("u") != uri_of(key):
            out.append(f"job {job_id} listed under {uri_of(key)!r}: no such job there")
        elif rec.get("r") is not None and uri_of(key) not in nodes:
            out.append(f"job {job_id}, enqueued with the document {uri_of(key)!r}: no such node")
    with_uri = {i for i, rec in records.items() if rec.get("u") is not None}
    if with_uri != {read_u64(k, len(k) - 8) for k in by_uri}:
        out.append(f"jobs with a URI {len(with_uri)}, listed by URI {len(by_uri)}")
    return out
