"""The package's shape: no import cycles, an engine that knows no family, small modules, a self-contained design."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "python" / "hippograph"
FAMILIES = ("graph", "store", "context", "integrations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, the Rust extension (`_core`, known by its stubs) included."""
    return {module_name(p): p for p in [*PACKAGE.rglob("*.py"), PACKAGE / "_core.pyi"]}


def imports(path: Path, known: set[str]) -> set[str]:
    """Every hippograph module `path` imports, type-only imports and imports inside functions included."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import x` imports the module x
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(path, known) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_engine_imports_no_memory_family_nor_backend() -> None:
    graph = import_graph()
    outside = ("hippograph.backends", "hippograph.testing", *(f"hippograph.{f}" for f in FAMILIES))
    leaks = {
        name: sorted(m for m in deps if m.startswith(outside))
        for name, deps in graph.items()
        if name.startswith("hippograph.engine")
    }
    assert {k: v for k, v in leaks.items() if v} == {}


def test_families_are_packages_above_the_engine() -> None:
    graph = import_graph()
    assert "hippograph.graph" in graph and "hippograph.engine" in graph
    assert any(m.startswith("hippograph.engine") for m in graph["hippograph.graph.recall"])


def test_no_python_module_is_over_700_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 700}
    assert long == {}


def test_the_code_and_docs_refer_to_no_document_outside_the_repository() -> None:
    pattern = re.compile(r"DESIGN(\.md)?\s*§|\.\./shared|DESIGN §")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for top in ("python", "rust", "docs", "tests", "benches", "examples")
        for p in (ROOT / top).rglob("*")
        if p.is_file() and p.suffix in (".py", ".pyi", ".rs", ".md") and p != Path(__file__)
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_benchmarks_and_examples_import_names_that_exist() -> None:
    """Scripts outside the test suite (benches/, examples/) still find every hippograph name they import."""
    import importlib

    missing = []
    for path in [*(ROOT / "benches").glob("*.py"), *(ROOT / "examples").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("hippograph"):
                module = importlib.import_module(node.module or "")
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
    assert missing == []
