"""Security: no code-executing deserialisation, and errors that never carry user data.

A memory store sits inside agents whose errors end up in logs. An error may
name the offending id, a field, a metadata key path and a type, never the
content a user stored: text, embedding values or metadata values. Each
property below plants a random marker in that content next to the defect and
checks the error's message, its args, its attributes and the whole formatted
traceback (the log line a caller would write).

Stored records are decoded as msgpack and raw float32 only: a pickle planted
in any table by someone with write access to the files must be refused as a
`StorageError` and never run.
"""

from __future__ import annotations

import ast
import os
import pickle
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_workload import DIM, structure, trajectory

import hippograph as hg
from hippograph.backends import LMDB, InMemory
from hippograph.graph.structuring import episodic
from hippograph.testing.graphs import snapshot
from pg_server import pg_dsn, pg_store

__all__ = ["pg_dsn", "pg_store"]

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)

# A marker no message could contain by chance; numbers are non-integral and large for the same reason.
markers = st.text("ABCDEFGHJKLMNPQRSTUVWXYZ", min_size=10, max_size=16).map(lambda s: f"secret-{s}")
secret_floats = st.floats(100_000.0, 1e9).map(lambda x: float(np.float32(x + 0.4375)))


def assert_no_leak(call: Callable[[], object], *secrets: str) -> hg.HippographError:
    """`call` raises a hippograph error in which none of `secrets` appears anywhere a log would show."""
    with pytest.raises(hg.HippographError) as caught:
        call()
    err = caught.value
    shown = [str(err), repr(err), *map(repr, err.args), *map(repr, vars(err).values())]
    shown.append("".join(traceback.format_exception(err)))
    for secret in secrets:
        for text in shown:
            assert secret not in text, f"{type(err).__name__} shows user data {secret!r}: {text[:300]}"
    assert str(err), "an error must say what is wrong"
    return err


def float_texts(values: list[float]) -> list[str]:
    """How a float may be printed: repr of the Python float and of its float32."""
    return sorted({repr(v) for v in values} | {str(np.float32(v)) for v in values})


@pytest.fixture(params=["memory", "lmdb", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, pg_store: Callable[..., Any]) -> Iterator[Any]:
    kinds = {"memory": lambda: InMemory(ann=None), "lmdb": lambda: LMDB(tmp_path / "store"), "postgres": pg_store}
    b = kinds[request.param]()
    b.apply_changeset(
        hg.Changeset().add_node(
            hg.Semantic(id="known", proposition="p", confidence=0.5, embedding=np.ones(DIM, np.float32))
        )
    )
    yield b
    b.close()


# -- node content -------------------------------------------------------------------


@SETTINGS
@given(secret=markers, values=st.lists(secret_floats, min_size=2, max_size=6))
def test_node_construction_errors_name_the_node_not_its_content(secret: str, values: list[float]) -> None:
    nan_vector = [*values, float("nan")]
    calls: list[Callable[[], object]] = [
        lambda: hg.Semantic(id="n1", proposition="p", confidence=0.5, embedding=[*values, secret]),
        lambda: hg.Semantic(id="n1", proposition="p", confidence=0.5, embedding=nan_vector),
        lambda: hg.Semantic(id="n1", proposition="p", confidence=0.5, embedding=[values, [1.0]]),
        lambda: hg.Semantic(id="n1", proposition=secret.encode(), confidence=0.5),
        lambda: hg.Semantic(id="n1", proposition=secret + "\ud800", confidence=0.5),
        lambda: hg.Episodic(
            id="n1", observation=secret, action=[secret], state=secret, subgoal=secret, reward=0.0, trajectory_id="t"
        ),
        lambda: hg.Semantic(id="n1", proposition=secret, confidence=float("inf")),
    ]
    for call in calls:
        err = assert_no_leak(call, secret, *float_texts(values))
        assert "'n1'" in str(err), str(err)


@SETTINGS
@given(secret=markers, count=st.integers(10**6, 10**30))
def test_metadata_errors_name_the_key_path_not_the_values(secret: str, count: int) -> None:
    deep: object = secret
    for _ in range(40):
        deep = [deep]
    customs: list[dict[Any, Any]] = [
        {"note": secret, "bad": {secret}},
        {"note": [secret, float("nan")]},
        {"note": deep},
        {count: secret},
        {"note": {"inner": secret + "\udc80"}},
        {"note": secret, "big": count * 2**64},
    ]
    for custom in customs:
        assert_no_leak(lambda custom=custom: hg.NodeMetadata(custom=custom), secret, str(count))
    for field in ("access_count", "reward_count"):
        for value in (-count, count * 2**64):
            assert_no_leak(lambda field=field, value=value: hg.NodeMetadata(**{field: value}), str(count))


@SETTINGS
@given(values=st.lists(secret_floats, min_size=DIM + 1, max_size=DIM + 4), secret=markers)
def test_backend_errors_on_vectors_never_quote_them(backend: InMemory | LMDB, values: list[float], secret: str) -> None:
    before = snapshot(backend)
    wrong_dim = hg.Semantic(id="n2", proposition=secret, confidence=0.5, embedding=values)
    texts = float_texts(values)
    assert_no_leak(lambda: backend.apply_changeset(hg.Changeset().add_node(wrong_dim)), secret, *texts)
    query = [*values[: DIM - 1], float("nan")]
    assert_no_leak(lambda: backend.find_candidates(["semantic"], query, [], None), *texts)
    assert_no_leak(lambda: backend.find_candidates(["semantic"], values, [], None), *texts)
    assert_no_leak(lambda: backend.find_candidates(["semantic"], [*values[: DIM - 1], secret], [], None), secret)
    assert_no_leak(lambda: backend.find_candidates(["semantic"], np.ones(DIM), [[secret] * DIM], None), secret)
    assert snapshot(backend) == before


# -- ingestion ------------------------------------------------------------------------


@SETTINGS
@given(secret=markers)
def test_ingestion_errors_name_the_source_not_the_trajectory(secret: str) -> None:
    with hg.Repo(InMemory(ann=None), flush_interval=0) as repo:
        repo.ingest(trajectory(1), structure)
        original = trajectory(1)
        conflicting = hg.Trajectory(
            source_id=original.source_id, goal=secret, steps=[hg.Step(secret, secret)], metadata={"m": secret}
        )
        err = assert_no_leak(lambda: repo.ingest(conflicting, structure), secret)
        assert isinstance(err, hg.IngestionError) and err.reason == "source_conflict"
        bad = [
            hg.Trajectory("s1", secret, [hg.Step(secret, secret)], {"m": secret, "bad": {secret}}),
            hg.Trajectory("s1", secret, [hg.Step(secret, secret)], {"m": [secret, float("nan")]}),
            hg.Trajectory("s1", secret, [hg.Step(secret.encode(), secret)], {}),  # type: ignore[arg-type]
            hg.Trajectory("s1", secret + "\udc80", [hg.Step(secret, secret)], {}),
        ]
        for t in bad:
            assert_no_leak(lambda t=t: repo.ingest(t, structure), secret)
        strings = episodic(lambda texts: [[secret] * DIM for _ in texts])
        assert_no_leak(lambda: repo.ingest(hg.Trajectory("s2", "g", [hg.Step("o", "a")], {}), strings), secret)
        assert_no_leak(lambda: repo.recall([secret] * DIM), secret)
        assert_no_leak(lambda: hg.etf_encode({"k": [secret, object()]}), secret)


# -- no code-executing deserialisation ------------------------------------------------

FORBIDDEN_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "jsonpickle",
    "joblib",
    "yaml",
}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_the_package_imports_no_code_executing_deserialiser() -> None:
    offences: list[str] = []
    sources = sorted((ROOT / "python" / "hippograph").rglob("*.py"))
    assert len(sources) > 10
    for path in sources:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                offences += [
                    f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                offences.append(f"{where} imports from {node.module}")
            elif isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                    offences.append(f"{where} calls {node.func.id}")
                offences += [f"{where} passes allow_pickle" for k in node.keywords if k.arg == "allow_pickle"]
    rust = "\n".join(
        p.read_text() for p in sorted((ROOT / "rust").rglob("*.rs")) + sorted((ROOT / "rust").rglob("Cargo.toml"))
    )
    offences += [f"rust mentions {word}" for word in ("pickle", "bincode") if re.search(word, rust, re.IGNORECASE)]
    assert not offences, offences


class _Planted:
    """Unpickling this creates `path`: proof that a pickle was run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


TABLES = {"nodes": b"src-000001:goal", "meta": b"src-000001:goal", "links": b"src-000001:goal", "ingest": b"src-000001"}


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("prefix", [b"", b"\x01"], ids=["bare", "after-version-byte"])
def test_a_pickle_planted_in_a_stored_record_is_refused_and_never_run(
    tmp_path: Path, table: str, prefix: bytes
) -> None:
    store, marker = tmp_path / "store", tmp_path / "pwned"
    with hg.Repo(LMDB(store), flush_interval=0) as repo:
        repo.ingest(trajectory(1), structure)
        repo.recall(np.ones(DIM, np.float32))
    env = lmdb.open(str(store), max_dbs=16)
    with env.begin(write=True) as txn:
        handle = env.open_db(table.encode(), txn=txn)
        assert txn.get(TABLES[table], db=handle) is not None
        txn.put(TABLES[table], prefix + pickle.dumps(_Planted(marker)), db=handle)
    env.close()
    with hg.Repo(LMDB(store), flush_interval=0) as repo:
        problems, _ = repo.backend.verify_storage()
        assert any(TABLES[table].decode() in p for p in problems), problems
        with pytest.raises(hg.StorageError) as caught:
            if table == "ingest":
                repo.backend.get_ingestion("src-000001")
            elif table == "meta":
                repo.backend.get_metadata(["src-000001:goal"])
            else:
                repo.backend.get_linked_nodes(["src-000001:goal"]) if table == "links" else repo.backend.get_node(
                    "src-000001:goal"
                )
        assert caught.value.operation == "decode"
    assert not marker.exists(), "a stored pickle was executed"


PG_TABLES = {
    "nodes": ("id", "src-000001:goal"),
    "metadata": ("id", "src-000001:goal"),
    "ingestion": ("source_id", "src-000001"),
}


@pytest.mark.parametrize("table", PG_TABLES)
@pytest.mark.parametrize("prefix", [b"", b"\x01"], ids=["bare", "after-version-byte"])
def test_a_pickle_planted_in_a_postgres_row_is_refused_and_never_run(
    tmp_path: Path, pg_store: Callable[..., Any], table: str, prefix: bytes
) -> None:
    import psycopg

    marker = tmp_path / "pwned"
    writer = pg_store()
    with hg.Repo(writer, flush_interval=0) as repo:
        repo.ingest(trajectory(1), structure)
        repo.recall(np.ones(DIM, np.float32))
    column, key = PG_TABLES[table]
    with psycopg.connect(os.environ["HIPPOGRAPH_PG_DSN"], autocommit=True) as conn:
        done = conn.execute(
            f'UPDATE "{writer.schema}".{table} SET record = %s WHERE repo = %s AND {column} = %s',
            (prefix + pickle.dumps(_Planted(marker)), writer.repo, key.encode()),
        )
        assert done.rowcount == 1
    reader = pg_store()  # a fresh process's view: nothing cached
    problems, _ = reader.verify_storage()
    assert any(key in p for p in problems), problems
    with pytest.raises(hg.StorageError) as caught:
        if table == "ingestion":
            reader.get_ingestion(key)
        elif table == "metadata":
            reader.get_metadata([key])
        else:
            reader.get_node(key)
    assert caught.value.operation == "decode"
    assert not marker.exists(), "a stored pickle was executed"
