"""No import cycles between stem_jax modules, counting imports inside functions too.

A function-local import that closes a cycle hides a layering problem (``engine -> eval -> methods.stem
-> engine`` did); this test reads every ``import`` statement of the package with :mod:`ast`, builds the
module graph (``from pkg import name`` depends on ``pkg.name`` when that is a module, else on ``pkg``),
and fails with the cycles it finds. Loading a package's ``__init__`` before a submodule is not an edge.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import stem_jax

ROOT = Path(stem_jax.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("stem_jax"):
                    resolved = resolve(target)
                    if resolved and resolved != module:
                        graph[module].add(resolved)
        graph.setdefault(module, set())
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_function_local_imports():
    graph = import_graph()
    assert "stem_jax.engine" in graph["stem_jax"]  # stem_jax.__getattr__ imports it lazily
    assert "stem_jax.methods.stem.pipeline" in graph["stem_jax.methods.stem.method"]


def test_no_import_cycles_between_stem_jax_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (including imports inside functions): " + "; ".join(
        " <-> ".join(c) for c in found)
