"""The import graph of bench/, advisor/ and ui/ has no cycles and no upward import, function-level
and type-only imports included.

The graph is read from the source with `ast` (nothing is imported): every `import` and
`from ... import` anywhere in a module, in functions and under `if TYPE_CHECKING:` too, is an
edge (`import_graph(type_checking=False)` leaves the annotation-only ones out, for the test that
the reader tells them apart). A type-only import is still a dependency: two modules whose
annotations name each other cannot be read or moved apart either. `from a import b` is an edge to
the module `a.b` when that is a module, else to `a`. The parent packages a dotted import also runs
are not edges of their own: a package's `__init__` is checked through its own imports.

A cycle hidden behind a function-level import still makes the modules one unit that cannot be
read, tested or moved apart; ARCHITECTURE.md's rule is that such imports are for heavy optional
dependencies, never a way around a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "advisor", "ui")

PACKAGE_ORDER = ("bench", "advisor", "ui")
"""Lowest first: advisor may import bench, ui both; bench never imports advisor or ui."""

BENCH_LAYERS: dict[str, set[str]] = {
    "core": set(),
    "storage": {"core"},
    "engines": {"core"},
    "run": {"core", "storage", "engines"},
    "orchestrate": {"core", "storage", "engines", "run"},
}
"""bench's sub-packages, lowest first, each with the layers below it that it may import (and its
own): storage and engines both stand on core alone and do not import each other. `bench`
itself (its `__init__`, SCHEMA_VERSION) is below every layer; BENCH_TOP is above every layer."""

BENCH_TOP = {"bench.__main__", "bench.cli", "bench.cli_errors"}
"""The command line, at bench/'s top: may import any layer. Any other module directly in bench/
fails the test: a new module goes into the layer it belongs to."""

ADVISOR_LAYERS: dict[str, set[str]] = {
    "workload": set(),
    "sizing": {"workload"},
    "plan": {"workload", "sizing"},
    "evidence": {"workload", "sizing", "plan"},
    "decide": {"workload", "sizing", "plan", "evidence"},
    "report": {"workload", "sizing", "plan", "evidence", "decide"},
}
"""advisor's sub-packages, lowest first, each with the layers below it that it may import (and its
own): the profile and its traffic; memory fit, configurations, capacity and the measured runs
sizing calibrates on; the tree's candidates and their benchmark plan; evidence rows; the
recommendation; the report. `advisor` itself is below every layer; ADVISOR_TOP above."""

ADVISOR_TOP = {"advisor.__main__", "advisor.cli"}
"""advisor's command line: may import any layer. Any other module directly in advisor/ fails."""

KNOWN_CYCLES: list[set[str]] = []
"""Cycles that existed when this test was written and are not broken yet (each a strongly
connected component). Empty: a cycle now is a new one, and fails the test."""


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the checked packages."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    node: ast.AST, module: str, is_package: bool, type_checking: bool = True
) -> Iterator[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import under `node`, in any scope;
    `if TYPE_CHECKING:` bodies only with `type_checking` (their `else:` always)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test) and not type_checking:
            for other in child.orelse:
                yield from _imports(other, module, is_package, type_checking)
            continue
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield alias.name, []
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:  # relative: resolve against this module's package
                package = module.split(".")
                package = package if is_package else package[:-1]
                package = package[: len(package) - (child.level - 1)]
                base = ".".join([*package, base] if base else package)
            yield base, [alias.name for alias in child.names]
        yield from _imports(child, module, is_package, type_checking)


def import_graph(type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the checked modules it imports (`type_checking`: with annotation-only ones)."""
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, names in _imports(tree, name, path.name == "__init__.py", type_checking):
            found = {f"{target}.{item}" for item in names} & files.keys()
            if len(found) < len(names) or not names:  # some names are attributes of `target`
                found |= {target} & files.keys()
            graph[name] |= found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
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
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One concrete cycle inside a component, for the failure message."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for child in sorted(graph[node] & component):
            if child == start:
                route = [node]
                while route[-1] != start:
                    route.append(previous[route[-1]])
                return [*reversed(route), start]
            if child not in previous:
                previous[child] = node
                frontier.append(child)
    return sorted(component)


def test_the_graph_sees_function_level_and_type_only_imports() -> None:
    """The reader finds imports inside functions and tells TYPE_CHECKING-only ones apart: a
    module known to import inside a function, and ones whose import is for annotations only."""
    graph = import_graph()
    runtime = import_graph(type_checking=False)
    # `from bench.orchestrate.ray_executor import RayExecutor` inside open_executor:
    assert "bench.orchestrate.ray_executor" in runtime["bench.orchestrate.executor_registry"]
    # under `if TYPE_CHECKING:` only: an edge of the full graph, not of the runtime one
    for importer, imported in (
        ("bench.orchestrate.executors", "bench.storage.store"),
        ("advisor.cli", "advisor.workload.profile"),
    ):
        assert imported in graph[importer]
        assert imported not in runtime[importer]
    assert len(graph) > 100


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert path_through(graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    """No cycle among modules as they run (function-level imports included)."""
    graph = import_graph(type_checking=False)
    new = [component for component in cycles(graph) if component not in KNOWN_CYCLES]
    described = ["  " + " -> ".join(path_through(graph, component)) for component in new]
    assert not new, "import cycle(s):\n" + "\n".join(described)
    gone = [component for component in KNOWN_CYCLES if component not in cycles(graph)]
    assert not gone, f"known cycles broken: drop them from KNOWN_CYCLES: {gone}"


def test_no_advisor_cycles_type_only_imports_included() -> None:
    """Among advisor's modules not even annotations may go round: its layers are read and moved
    one at a time, so a `TYPE_CHECKING` import back up is a cycle too."""
    full = import_graph()
    advisor = {module for module in full if module.startswith("advisor")}
    graph = {module: full[module] & advisor for module in advisor}
    found = cycles(graph)
    described = ["  " + " -> ".join(path_through(graph, component)) for component in found]
    assert not found, "advisor import cycle(s):\n" + "\n".join(described)


def bench_layer(module: str) -> str:
    """A bench module's layer: one of BENCH_LAYERS, "root" for the package itself, "top" for the
    command line. A module in no layer raises LookupError (the test names it)."""
    if module == "bench":
        return "root"
    if module in BENCH_TOP:
        return "top"
    layer = module.split(".")[1]
    if layer not in BENCH_LAYERS:
        raise LookupError(module)
    return layer


def advisor_layer(module: str) -> str:
    """An advisor module's layer: one of ADVISOR_LAYERS, "root" for the package itself, "top" for
    the command line. A module in no layer raises LookupError (the test names it)."""
    if module == "advisor":
        return "root"
    if module in ADVISOR_TOP:
        return "top"
    layer = module.split(".")[1]
    if layer not in ADVISOR_LAYERS:
        raise LookupError(module)
    return layer


def may_import(
    importer_layer: str, imported_layer: str, layers: dict[str, set[str]] = BENCH_LAYERS
) -> bool:
    if importer_layer == "top" or imported_layer == "root" or importer_layer == imported_layer:
        return True
    return imported_layer in layers.get(importer_layer, set())


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every edge that goes up or sideways where it may not: between packages against
    PACKAGE_ORDER, inside bench against BENCH_LAYERS, inside advisor against ADVISOR_LAYERS;
    each as 'importer -> imported (why)'."""
    found = []
    for importer in sorted(graph):
        importer_package = importer.split(".")[0]
        for imported in sorted(graph[importer]):
            imported_package = imported.split(".")[0]
            if PACKAGE_ORDER.index(imported_package) > PACKAGE_ORDER.index(importer_package):
                found.append(f"{importer} -> {imported} ({importer_package} is below it)")
            elif importer_package == imported_package == "bench" and not may_import(
                bench_layer(importer), bench_layer(imported)
            ):
                found.append(
                    f"{importer} -> {imported} ({bench_layer(importer)} may not import "
                    f"{bench_layer(imported)})"
                )
            elif importer_package == imported_package == "advisor" and not may_import(
                advisor_layer(importer), advisor_layer(imported), ADVISOR_LAYERS
            ):
                found.append(
                    f"{importer} -> {imported} ({advisor_layer(importer)} may not import "
                    f"{advisor_layer(imported)})"
                )
    return found


def test_every_bench_module_is_in_a_layer() -> None:
    outside = []
    for module in import_graph():
        if module.startswith("bench"):
            try:
                bench_layer(module)
            except LookupError:
                outside.append(module)
    layers = ", ".join(BENCH_LAYERS)
    assert not outside, f"bench modules in no layer (move each into one of {layers}): {outside}"


def test_every_advisor_module_is_in_a_layer() -> None:
    outside = []
    for module in import_graph():
        if module.startswith("advisor"):
            try:
                advisor_layer(module)
            except LookupError:
                outside.append(module)
    layers = ", ".join(ADVISOR_LAYERS)
    assert not outside, f"advisor modules in no layer (move each into one of {layers}): {outside}"


def test_an_upward_import_is_found() -> None:
    graph = {
        "bench.core.config": {"bench.run.api"},
        "bench.storage.store": {"bench.engines.models"},
        "bench.run.api": {"bench.core.config", "bench.storage.store", "bench", "bench.run.x"},
        "bench.engines.models": {"bench.storage.store"},
        "bench.cli": {"bench.orchestrate.jobs", "advisor.plan.stage_plan"},
        "advisor.plan.stage_plan": {"bench.run.api", "ui.state"},
        "ui.state": {"advisor.plan.stage_plan", "bench.cli"},
        "advisor.sizing.configurations": {"advisor.evidence.rows", "advisor.workload.profile"},
        "advisor.workload.profile": {"advisor.sizing.estimate", "advisor"},
        "advisor.report.build": {"advisor.decide.recommend", "advisor.cli"},
        "advisor.cli": {"advisor.report.cli", "advisor.workload.profile"},
    }
    assert upward_imports(graph) == [
        "advisor.plan.stage_plan -> ui.state (advisor is below it)",
        "advisor.report.build -> advisor.cli (report may not import top)",
        "advisor.sizing.configurations -> advisor.evidence.rows (sizing may not import evidence)",
        "advisor.workload.profile -> advisor.sizing.estimate (workload may not import sizing)",
        "bench.cli -> advisor.plan.stage_plan (bench is below it)",
        "bench.core.config -> bench.run.api (core may not import run)",
        "bench.engines.models -> bench.storage.store (engines may not import storage)",
        "bench.storage.store -> bench.engines.models (storage may not import engines)",
    ]


def test_no_upward_imports() -> None:
    found = upward_imports(import_graph())
    assert not found, "upward import(s):\n  " + "\n  ".join(found)
