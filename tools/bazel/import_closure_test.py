"""Checks that a py_library's runfiles contain every first-party module its sources import.

Usage: import_closure_test.py PACKAGE_DIR TARGET_LABEL [--first_party=stem_jax,kernels]

Generated for each library by //tools/bazel:py_package.bzl. It parses (never imports) every
.py file under PACKAGE_DIR in this test's runfiles, and for each import of a first-party
module (stem_jax.*, kernels.*) checks the module's file is also in the runfiles, i.e. that
the BUILD `deps` are complete. Imports inside `if TYPE_CHECKING:` blocks are ignored. It is
quick (no jax import), so it runs in the bazel_smoke subset of tools/bazel_check.sh.
"""

import ast
import os
import sys


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_pkg: bool):
    """Yields (lineno, absolute module name, imported names or None)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    skip.add(id(sub))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                if not is_pkg:
                    parts = parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            yield node.lineno, base, [a.name for a in node.names if a.name != "*"]


def _module_file(root: str, name: str) -> str | None:
    rel = name.replace(".", "/")
    for cand in (rel + ".py", rel + "/__init__.py"):
        if os.path.exists(os.path.join(root, cand)):
            return cand
    if os.path.isdir(os.path.join(root, rel)):  # namespace package
        return rel + "/"
    return None


def _bound_names(init_path: str) -> set[str]:
    with open(init_path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=init_path)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return bound


def _owner_hint(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "stem_jax" and len(parts) >= 2:
        # every stem_jax module is in //stem_jax (one library)
        return "//stem_jax"
    return "//" + parts[0]


def main(argv: list[str]) -> int:
    pkg_dir, label = argv[0], argv[1]
    first_party = {"stem_jax", "kernels"}
    for arg in argv[2:]:
        if arg.startswith("--first_party="):
            first_party = set(filter(None, arg.split("=", 1)[1].split(",")))
    root = os.getcwd()  # Bazel runs tests from the main repository's runfiles directory
    top = os.path.join(root, pkg_dir)
    if not os.path.isdir(top):
        print(f"{pkg_dir}: not in the runfiles of {label}", file=sys.stderr)
        return 1
    files = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        files += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    problems = []
    checked = 0
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        is_pkg = rel.endswith("/__init__.py")
        module = rel[: -len("/__init__.py")] if is_pkg else rel[: -len(".py")]
        module = module.replace("/", ".")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=rel)
        for lineno, name, names in _imports(tree, module, is_pkg):
            if not name or name.split(".")[0] not in first_party:
                continue
            checked += 1
            # every parent package must be present, then the module itself
            parts = name.split(".")
            missing = None
            for i in range(1, len(parts) + 1):
                if _module_file(root, ".".join(parts[:i])) is None:
                    missing = ".".join(parts[:i])
                    break
            if missing is None and names and _module_file(root, name).endswith("__init__.py"):
                # `from pkg import x`: x is a submodule (must be in the runfiles) unless
                # pkg/__init__.py binds it (or defines a module-level __getattr__).
                bound = _bound_names(os.path.join(root, _module_file(root, name)))
                for n in names:
                    if (
                        n not in bound
                        and "__getattr__" not in bound
                        and _module_file(root, f"{name}.{n}") is None
                    ):
                        missing = f"{name}.{n}"
                        break
            if missing:
                problems.append(
                    f"{rel}:{lineno}: imports {name} but {missing} is not in the runfiles of {label}; "
                    f"add {_owner_hint(missing)} to the deps of {label}"
                )
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{label}: {len(files)} files, {checked} first-party imports, {len(problems)} missing")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
