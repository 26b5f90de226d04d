"""No import cycle inside any app, at any level: between modules, and between the sibling
packages and modules of every package (delivery's wings among them).

`.importlinter` says which app and which wing may import which; this says the rest: inside
a wing, or an app without wings, no two modules lean on each other. A cycle is how a layout
starts to blur (the models once imported the selectors that read them), and import-linter's
layers do not look inside a layer. Imports made inside functions count like the others.
"""

from collections import defaultdict
from collections.abc import Iterable

import grimp
import pytest

APPS = ("config", "kinds", "runtime", "scheduling", "users", "delivery", "monitoring", "console", "devtools")


def _product(module: str) -> bool:
    parts = module.split(".")
    return "tests" not in parts and "migrations" not in parts


def _cycles(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in edges.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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

    for node in nodes:
        if node not in index:
            visit(node)
    return found


def _graph(app: str) -> tuple[set[str], dict[str, set[str]]]:
    graph = grimp.build_graph(app, include_external_packages=False)
    modules = {m for m in graph.modules if _product(m)}
    edges = {m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules}
    return modules, edges


def _child_of(package: str, module: str) -> str | None:
    """The child of `package` that `module` is or lies in (None: not below `package`)."""
    if not module.startswith(package + "."):
        return None
    return package + "." + module[len(package) + 1 :].split(".")[0]


@pytest.mark.parametrize("app", APPS)
def test_no_module_of_the_app_imports_one_that_imports_it_back(app):
    modules, edges = _graph(app)
    assert _cycles(sorted(modules), edges) == []


@pytest.mark.parametrize("app", APPS)
def test_the_children_of_every_package_import_one_way(app):
    modules, edges = _graph(app)
    packages = {m.rsplit(".", 1)[0] for m in modules if "." in m} | {app}
    cycles = {}
    for package in sorted(packages):
        siblings: dict[str, set[str]] = defaultdict(set)
        for importer in modules:
            source = _child_of(package, importer)
            if source is None:
                continue
            for imported in edges[importer]:
                target = _child_of(package, imported)
                if target is not None and target != source:
                    siblings[source].add(target)
        if found := _cycles(sorted(siblings), siblings):
            cycles[package] = found
    assert cycles == {}


def test_a_cycle_is_found_when_there_is_one():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(["a", "b", "c", "d"], edges) == [["a", "b", "c"]]
