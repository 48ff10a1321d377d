"""The layers of docs/design.md hold in the code: every import of a module under features/,
model/ or streams/ (type-only and function-local ones included) points to its own layer or one
below, and no modules import each other in a cycle (nor do the benchmarks' modules)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from streams.settings import REPO_ROOT

PACKAGES = ("features", "model", "streams")
DESIGN = REPO_ROOT / "docs" / "design.md"
Graph = dict[str, set[str]]


def read_layers(design: str) -> list[list[str]]:
    """The ```layers block of the design doc: a layer a line, bottom first."""
    block = re.search(r"^```layers\n(.*?)^```", design, re.M | re.S)
    assert block, "docs/design.md has no ```layers block"
    return [line.split() for line in block.group(1).splitlines() if line.strip()]


def modules(root: Path, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement of module `name` (at `path`) imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        parent = package[: len(package) - node.level + 1]
        base = ".".join([*parent, base] if base else parent)
    return [f"{base}.{alias.name}" for alias in node.names]


def import_graph(root: Path, packages: Iterable[str] = PACKAGES) -> Graph:
    """Module -> the modules of `packages` it imports, wherever the import statement is."""
    found = modules(root, packages)

    def owner(dotted: str) -> str | None:  # `a.b.NAME` is an import of module a.b
        while dotted and dotted not in found:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    graph: Graph = {}
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        targets = {
            owner(dotted)
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for dotted in imported(name, path, node)
        }
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The layer whose longest name holds `module` (the name itself or a package above it)."""
    best: tuple[int, int] | None = None
    for index, names in enumerate(layers):
        for held in names:
            if (module == held or module.startswith(held + ".")) and (
                best is None or len(held) > best[1]
            ):
                best = (index, len(held))
    return None if best is None else best[0]


def upward(graph: Graph, layers: list[list[str]]) -> list[str]:
    """Each import from a layer to a later one, and each module in no layer."""
    problems = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers)
        if here is None:
            problems.append(f"{module} is in no layer: add it to docs/design.md's layers block")
            continue
        for target in sorted(targets):
            there = layer_of(target, layers)
            if there is not None and there > here:
                problems.append(f"{module} (layer {here}) imports {target} (layer {there})")
    return problems


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_import_points_down_the_layers_of_the_design_doc() -> None:
    layers = read_layers(DESIGN.read_text())
    assert [names[0] for names in layers[:2]] == ["features", "model"]
    assert upward(import_graph(REPO_ROOT), layers) == []


def test_every_name_in_the_layers_is_a_module_or_package() -> None:
    found = modules(REPO_ROOT)
    names = [name for names in read_layers(DESIGN.read_text()) for name in names]
    assert [name for name in names if name not in found] == []


def test_no_modules_import_each_other_in_a_cycle() -> None:
    assert cycles(import_graph(REPO_ROOT)) == []


def test_no_benchmark_modules_import_each_other_in_a_cycle() -> None:
    assert cycles(import_graph(REPO_ROOT, ("benchmarks",))) == []


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_sees_type_only_local_and_relative_imports(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from high.b import B\n",
            "low/c.py": "def f():\n    from . import a\n",
            "high/__init__.py": "",
            "high/b.py": "import low.c\nfrom low import a\n",
        },
    )
    graph = import_graph(tmp_path, ("low", "high"))
    assert graph["low.a"] == {"high.b"} and graph["low.c"] == {"low.a"}
    assert graph["high.b"] == {"low.a", "low.c"}
    assert upward(graph, [["low"], ["high"]]) == ["low.a (layer 0) imports high.b (layer 1)"]
    assert cycles(graph) == [["high.b", "low.a", "low.c"]]
    assert upward(graph, [["high"]]) == [
        "low is in no layer: add it to docs/design.md's layers block",
        "low.a is in no layer: add it to docs/design.md's layers block",
        "low.c is in no layer: add it to docs/design.md's layers block",
    ]


def test_a_module_belongs_to_the_longest_name_that_holds_it() -> None:
    layers = [["streams.settings"], ["streams.runtime"], ["streams", "streams.worker"]]
    assert layer_of("streams.runtime.stages.scores", layers) == 1
    assert layer_of("streams.settings", layers) == 0
    assert layer_of("streams.web.board", layers) == 2
    assert layer_of("features.engine", layers) is None
