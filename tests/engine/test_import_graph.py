"""The shape of stem_jax's imports: no cycles between modules, packages in one declared layer order, and no
module importing another package's underscore names; imports inside functions count too.

A function-local import that closes a cycle hides a layering problem (``engine -> eval -> methods.stem
-> engine`` did); this test reads every ``import`` statement of the package with :mod:`ast`, builds the
module graph (``from pkg import name`` depends on ``pkg.name`` when that is a module, else on ``pkg``),
and fails with the cycles it finds. Loading a package's ``__init__`` before a submodule is not an edge, and
neither is an import under ``if TYPE_CHECKING:`` (it exists for annotations only, never at run time).
"""

from __future__ import annotations

import ast
import functools
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


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
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


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return [node for node in ast.walk(tree) if id(node) not in skipped]


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
    assert "stem_jax.methods.stem.trace" in graph["stem_jax.methods.stem.method"]


def test_no_import_cycles_between_stem_jax_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (including imports inside functions): " + "; ".join(
        " <-> ".join(c) for c in found)


# Packages (and root modules) from the bottom up: a module may import its own package and those below it.
# Names on one line share a layer and may not import each other either way.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("atomic", "locks", "config", "coordination", "progress", "gc_pause", "compile_cache", "ragged", "devices",
     "array_fields"),
    ("zarr_table", "checkpoints", "jraph_compat", "trained_model"),
    ("data", "encoder"),
    ("kg",),
    ("text",),
    ("plan",),
    ("validation", "trace"),
    ("shard",),
    ("eval",),
    ("answer",),
    ("gnn",),
    ("methods",),
    ("engine",),
    ("<root>",),  # stem_jax itself: the public names, the engine among them
    ("bench", "serve"),
    ("cli",),
)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the module edges behind it."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in graph.items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a != b:
                edges[(a, b)].append(f"{module} -> {target}")
    return edges


def test_every_package_has_a_layer():
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    found = {_package(m) for m in import_graph()}
    assert not found - set(layer_of), f"packages without a layer in LAYERS: {sorted(found - set(layer_of))}"


def upward_imports(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """The package edges that import a package of the same layer or one above (with one module edge behind each)."""
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    return [f"{a} -> {b} ({why[0]})" for (a, b), why in sorted(edges.items())
            if layer_of.get(b, -1) >= layer_of.get(a, len(LAYERS))]


def test_packages_import_only_downwards():
    wrong = upward_imports(package_edges(import_graph()))
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_two_way_package_pairs():
    edges = package_edges(import_graph())
    pairs = {tuple(sorted((a, b))) for a, b in edges if (b, a) in edges}
    assert not pairs, f"packages importing each other: {sorted(pairs)}"


def test_the_layer_check_catches_an_upward_and_a_same_layer_import():
    graph = {"stem_jax.data.x": {"stem_jax.kg.y", "stem_jax.encoder.z"}, "stem_jax.kg.y": {"stem_jax.data.x"}}
    assert upward_imports(package_edges(graph)) == ["data -> encoder (stem_jax.data.x -> stem_jax.encoder.z)",
                                                    "data -> kg (stem_jax.data.x -> stem_jax.kg.y)"]


def test_no_module_imports_another_packages_underscore_names():
    modules = _modules()
    wrong = []
    for module, path in modules.items():
        for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("stem_jax") or node.level:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") or any(p.startswith("_") and p != "__init__"
                                                            for p in node.module.split("."))
                line = f"{module}: from {node.module} import {alias.name}"
                if private and _package(node.module) != _package(module):
                    wrong.append(line)
    assert not wrong, "imports of another package's private names:\n" + "\n".join(wrong)
