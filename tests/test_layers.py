"""lakeivm's floors: a module imports only its own floor or lower, and no import cycle exists.

Function-local imports count (they run too); imports under ``if TYPE_CHECKING:`` do not (they are
annotations). ``FLOORS`` maps a module, or every module of a package, to its floor, the most
specific entry winning:

0  foundations, at the package's root: errors, config, limits, columns, spec, fingerprint, processes
1  pure cores: sql/, planning/, views/kind + views/kinds, each kind's algorithm under views/<kind>/
   (no Spark, no lake)
2  the lake: store/ (files, Delta logs, the fast-path gate, system tables, the maintenance log),
   catalog/ (loading specs, choosing kinds), sources/changes (a table's change feed), spark
3  maintainers (views/<kind>/maintainer), sources/upstream (a view read as a source), run/recovery
4  run/: a run and what reads its results: engine, reading, audit, status, quality, explain
5  entry points: api (the package's __init__), cli, demo, infra/ (Airflow, the Connect server,
   the deployment), bench/, datagen/, testing/ (the test oracles)
"""
from __future__ import annotations

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"
FLOORS = {
    "lakeivm.errors": 0, "lakeivm.config": 0, "lakeivm.limits": 0, "lakeivm.columns": 0, "lakeivm.spec": 0,
    "lakeivm.fingerprint": 0, "lakeivm.processes": 0,
    "lakeivm.sql": 1, "lakeivm.planning": 1, "lakeivm.views.kind": 1, "lakeivm.views.kinds": 1,
    "lakeivm.views.fivm": 1, "lakeivm.views.triangle": 1, "lakeivm.views.nested": 1, "lakeivm.views.join_sample": 1,
    "lakeivm.views.window": 1, "lakeivm.views.first_order.kind": 1, "lakeivm.views.full.kind": 1,
    "lakeivm.store": 2, "lakeivm.catalog": 2, "lakeivm.sources": 2, "lakeivm.spark": 2,
    "lakeivm.views": 3, "lakeivm.sources.upstream": 3, "lakeivm.views.fivm.maintainer": 3, "lakeivm.views.fivm.local": 3,
    "lakeivm.views.triangle.maintainer": 3, "lakeivm.views.triangle.sql_batch": 3, "lakeivm.views.nested.maintainer": 3,
    "lakeivm.views.join_sample.maintainer": 3, "lakeivm.views.first_order": 3, "lakeivm.views.window.maintainer": 3,
    "lakeivm.views.full": 3, "lakeivm.run.recovery": 3,
    "lakeivm.run": 4,
    "lakeivm": 5,  # the package itself (its __init__: the public API), infra/, bench/, datagen/, testing/, cli, demo
}


def test_every_module_imports_only_its_floor_or_lower():
    graph = import_graph()
    upward = sorted(f"{source} (floor {floor(source)}) imports {target} (floor {floor(target)})"
                    for source, targets in graph.items() for target in targets if floor(target) > floor(source))
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    cycles = [sorted(component) for component in strongly_connected(import_graph()) if len(component) > 1]
    assert not cycles, cycles


def floor(module: str) -> int:
    """The floor of ``module``: its own entry in FLOORS or its nearest package's."""
    name = module
    while name not in FLOORS:
        name = name.rpartition(".")[0]
    return FLOORS[name]


def import_graph() -> dict[str, set[str]]:
    """{module: the lakeivm modules it imports}, function-local imports included."""
    files = {_module_name(path): path for path in (LIB / "lakeivm").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {target for target in _imports(tree, name, path.name == "__init__.py") if target != name}
        graph[name] = {_known(target, files) for target in graph[name]} - {None, name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


def _module_name(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, package: bool) -> set[str]:
    """The modules ``tree`` imports, outside ``if TYPE_CHECKING:`` blocks; ``from a import b`` as
    ``a.b`` where b is a module (``_known`` resolves it) and ``a`` otherwise."""
    found: set[str] = set()
    for node in _walk_runtime(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: len(module.split(".")) - node.level + (1 if package else 0)]
                base = ".".join([*parent, base] if base else parent)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("lakeivm")}


def _walk_runtime(tree: ast.AST):
    """``ast.walk`` that skips the bodies of ``if TYPE_CHECKING:``."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                pending.extend(child.orelse)
                continue
            pending.append(child)


def _known(name: str, files: dict[str, Path]) -> str | None:
    """The module ``name`` names, or the module holding the object it names (``a.b.f`` -> ``a.b``)."""
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None
