"""The package's import boundaries: no import cycles among its modules, and the planning modules
(what Snakemake imports while it parses the workflow, and the workflow's table / figure / claims
commands) never import torch. The layering is written down in docs/architecture.md."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = SRC / "fedmgda"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The package module that an import of ``name`` names (a submodule, else its package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The package modules ``module`` imports, at module level or inside functions alike.

    ``from fedmgda.data import adult`` counts as an import of ``fedmgda.data.adult`` when that is a
    module (else of ``fedmgda.data``). The parent packages that Python also runs on the way are
    not counted: a package's ``__init__`` that gathers its submodules would otherwise make every
    submodule part of a cycle."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        found |= {target for n in names if n.startswith("fedmgda") and (target := _resolve(n))}
    return found - {module}


GRAPH = {m: imports_of(m) for m in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_import_graph_is_read_from_the_sources():
    """The graph has the edges one can see in the sources (a guard against an empty graph)."""
    assert "fedmgda.catalog" in GRAPH["fedmgda.experiments"]
    assert "fedmgda.algorithms" in GRAPH["fedmgda.simulator"]
    assert "fedmgda.simulator" in GRAPH["fedmgda.cli"]  # inside a function: counted too
    assert "fedmgda.data.adult" in GRAPH["fedmgda.data.registry"]  # from fedmgda.data import adult
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_catalog_is_the_bottom_layer():
    """errors <- algorithms, partitioners <- catalog <- config <- ...: the names and ranges every
    other module asks for depend on nothing but the algorithms' and the partitioners' declarations
    (which need only the error type, the QP and the authors' label sort) and the error type, so
    that anything may import them."""
    algorithms = {m for m in MODULES if m.startswith("fedmgda.algorithms.")}
    assert GRAPH["fedmgda.errors"] == set()
    assert set().union(*(GRAPH[m]
                         for m in algorithms)) <= algorithms | {"fedmgda.errors"}
    assert GRAPH["fedmgda.partitioners"] <= {"fedmgda.errors", "fedmgda.legacy_sort"}
    assert GRAPH["fedmgda.catalog"] <= algorithms | {"fedmgda.errors", "fedmgda.partitioners"}
    assert GRAPH["fedmgda.config"] == {"fedmgda.catalog", "fedmgda.errors"}


def workflow_parse_imports() -> set[str]:
    """The package modules the Snakefiles import while Snakemake parses them."""
    files = [REPO / "Snakefile", REPO / "workflow" / "Snakefile",
             *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    pattern = re.compile(r"^\s*(?:from\s+(fedmgda[\w.]*)\s+import|import\s+(fedmgda[\w.]*))", re.M)
    return {_resolve(a or b) for f in files for a, b in pattern.findall(f.read_text())}


# what the workflow's `fedmgda table | figure | claims | ...` jobs import (cli -> workflow_cli), and
# the run config's checks; everything they import (the graph above) is planning too
WORKFLOW_COMMANDS = {"fedmgda.cli", "fedmgda.workflow_cli", "fedmgda.tables", "fedmgda.figures",
                     "fedmgda.claims", "fedmgda.results", "fedmgda.config"}


def test_the_workflow_imports_planning_modules():
    parsed = workflow_parse_imports()
    assert {"fedmgda.experiments", "fedmgda.schema", "fedmgda.catalog", "fedmgda.packs"} <= parsed


PLANNING = sorted(workflow_parse_imports() | WORKFLOW_COMMANDS)


@pytest.mark.parametrize("module", PLANNING)
def test_planning_modules_never_import_torch(module):
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'imported torch'"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"{module}: {done.stderr.strip().splitlines()[-1:]}"


def readme_layers() -> dict[str, int]:
    """The layering docs/architecture.md writes down: module -> layer (``data/`` is one)."""
    text = (REPO / "docs" / "architecture.md").read_text()
    block = text.split("layer  modules\n", 1)[1].split("```", 1)[0]
    layers = {}
    for line in block.splitlines():
        number, *names = line.split()
        layers |= {name.rstrip("*").removesuffix("/"): int(number) for name in names}
    return layers


def layer_unit(module: str) -> str:
    """The README's name of a module: ``fedmgda.simulator`` -> simulator, fedmgda.data.* -> data."""
    parts = module.split(".")
    return "fedmgda" if len(parts) == 1 else parts[1]


def test_imports_follow_the_readme_layers():
    """Every module is in the README's layer table and imports only from layers above its own
    (the data/ package is one unit; its modules import each other)."""
    layers = readme_layers()
    units = {layer_unit(m) for m in MODULES} - {"fedmgda"}
    assert units == set(layers), (f"README layers: missing {sorted(units - set(layers))}, extra "
                                  f"{sorted(set(layers) - units)}")
    wrong = [f"{a} (layer {layers[layer_unit(a)]}) imports {b} (layer {layers[layer_unit(b)]})"
             for a, targets in GRAPH.items() if layer_unit(a) != "fedmgda"
             for b in targets if layer_unit(b) != layer_unit(a)
             and layers[layer_unit(b)] >= layers[layer_unit(a)]]
    assert not wrong, wrong


# modules that nothing in the package, its commands or the workflow imports, kept for code outside
KEPT_FOR_OUTSIDE_CODE = {
    "fedmgda.aggregators": "deprecated names for plug-ins of interface 1, until fedmgda 0.2.0",
    "fedmgda.data.legacy_sort": "the authors' label sort under its old path (fedmgda.legacy_sort)",
}
WORKFLOW_FILES = [REPO / "Makefile", REPO / "Snakefile", REPO / "workflow" / "Snakefile",
                  *sorted((REPO / "workflow" / "rules").glob("*.smk"))]


def entry_points() -> set[str]:
    """The modules run as commands: pyproject's scripts, and each ``python -m fedmgda[.X]`` of the
    Makefile and the workflow (``-m fedmgda`` runs ``fedmgda.__main__``)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    table = pyproject.split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    found = set(re.findall(r'^\s*[\w-]+\s*=\s*"([\w.]+):', table, re.M))  # name = "module:function"
    for path in WORKFLOW_FILES:
        for name in re.findall(r"-m\s+(fedmgda[\w.]*)", path.read_text()):
            found.add(f"{name}.__main__" if f"{name}.__main__" in MODULES else name)
    return found


def workflow_imports() -> set[str]:
    """The package modules the Snakefiles and the workflow's scripts import."""
    scripts = {name for path in sorted((REPO / "workflow" / "scripts").glob("*.py"))
               for name in module_imports(path)}
    return workflow_parse_imports() | scripts


def module_imports(path: Path) -> set[str]:
    """The package modules a file outside the package imports (absolute imports only)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES
                      else node.module for alias in node.names}
    return {target for name in found if name.startswith("fedmgda") and (target := _resolve(name))}


def unreached(graph: dict[str, set[str]], starts: set[str]) -> set[str]:
    """The modules of ``graph`` that no other module imports and that are not in ``starts``; a
    package counts as reached when one of its modules is (importing it runs the package first)."""
    reached = starts | {target for module, targets in graph.items()
                        for target in targets - {module}}
    packages = {".".join(name.split(".")[:i])
                for name in reached for i in range(1, name.count(".") + 1)}
    return set(graph) - reached - packages


def test_every_module_is_used_by_the_package_its_commands_or_the_workflow():
    starts = entry_points() | workflow_imports() | set(KEPT_FOR_OUTSIDE_CODE)
    alone = sorted(unreached(GRAPH, starts))
    assert not alone, ("nothing in the package, its commands or the workflow imports these: move "
                       f"them beside their callers (scripts/, benchmarks/): {alone}")
    alone_without_list = unreached(GRAPH, entry_points() | workflow_imports())
    needed = sorted(set(KEPT_FOR_OUTSIDE_CODE) - alone_without_list)
    assert not needed, ("used inside the package now; drop them from "
                        f"KEPT_FOR_OUTSIDE_CODE: {needed}")


def test_the_entry_points_and_reach_are_read_from_the_files():
    entries = entry_points()
    assert {"fedmgda.cli", "fedmgda.__main__", "fedmgda.workflow_cli", "fedmgda.schema"} <= entries
    assert "fedmgda.packs" in workflow_imports()  # workflow/scripts/train_pack.py
    graph = {"p": set(), "p.a": {"p.b"}, "p.b": set(), "p.c": set(), "q": set(), "q.d": set()}
    assert unreached(graph, {"p.a", "q"}) == {"p.c", "q.d"}


def private_imports(path: Path, root: Path = REPO) -> list[str]:
    """'file: module._name' for each private name a file imports from a package module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        if (node.module or "").startswith("fedmgda"):
            found += [f"{path.relative_to(root)}: {node.module}.{alias.name}"
                      for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


@pytest.mark.parametrize("folder", ["src", "scripts", "benchmarks", "workflow"])
def test_no_private_name_is_imported_from_another_module(folder):
    paths = sorted((REPO / folder).rglob("*.py"))
    found = [line for path in paths for line in private_imports(path)]
    assert not found, "make these public or move them where they are used:\n" + "\n".join(found)


def test_private_imports_are_seen(tmp_path):
    (tmp_path / "uses.py").write_text("from fedmgda.experiments import _hidden, fmt_num\n")
    found = private_imports(tmp_path / "uses.py", tmp_path)
    assert found == ["uses.py: fedmgda.experiments._hidden"]
