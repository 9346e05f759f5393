"""The package's shape: layers that import only downward, no import cycles, small modules.

Every import of a kernelrag module is walked with ``ast``: at module level, inside
functions and under ``TYPE_CHECKING``. ARCHITECTURE.md explains the layers.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]

# layer of each module, by longest matching prefix; a module may import its own layer or lower
LAYERS = {
    "kernelrag.errors": 0, "kernelrag.config": 0, "kernelrag.types": 0,
    "kernelrag.verify": 1,
    "kernelrag.task": 2,
    "kernelrag.patterns": 3, "kernelrag.knowledge": 3,
    "kernelrag.memory": 4,
    "kernelrag.retrieve": 5,
    "kernelrag.draft": 6,
    "kernelrag.generate": 7, "kernelrag.export": 7, "kernelrag.bench": 7,
    "kernelrag.api": 8, "kernelrag": 8,
    "kernelrag.cli": 9, "kernelrag.__main__": 9, "kernelrag.commands": 9, "kernelrag.mcp_server": 9,
    "kernelrag.ui": 9,
}
# kernelrag modules the verifier may use: it runs on a GPU machine with torch and triton only
VERIFY_MAY_IMPORT = ("kernelrag.errors", "kernelrag.config", "kernelrag.verify")
MAX_TOP_LEVEL_MODULES = 12
MAX_MODULE_LINES = 450


def module_files() -> dict[str, Path]:
    files = {}
    for base in ("kernelrag", "ui"):
        for path in sorted((ROOT / base).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] == "ui":                       # installed as kernelrag.ui (pyproject package-dir)
                parts.insert(0, "kernelrag")
            files[".".join(parts)] = path
    return files


def layer_of(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    assert best is not None, f"{module} has no layer: add it to LAYERS and ARCHITECTURE.md"
    return LAYERS[best]


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The kernelrag modules that ``module`` imports anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        found |= {n for n in names if n in known and n != module}
    return found


def import_graph() -> nx.DiGraph:
    files = module_files()
    graph = nx.DiGraph()
    graph.add_nodes_from(files)
    for module, path in files.items():
        graph.add_edges_from((module, dep) for dep in imports_of(module, path, set(files)))
    return graph


def test_no_import_cycles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles)


def test_no_upward_imports():
    upward = [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
              for a, b in import_graph().edges if layer_of(b) > layer_of(a)]
    assert not upward, "\n".join(upward)


def test_verifier_imports_only_errors_config_and_itself():
    graph = import_graph()
    bad = [f"{a} imports {b}" for a, b in graph.edges
           if a.startswith("kernelrag.verify") and not b.startswith(VERIFY_MAY_IMPORT)]
    assert not bad, "\n".join(bad)


def test_few_top_level_modules_and_short_modules():
    top = sorted(p.name for p in (ROOT / "kernelrag").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    long = {str(p.relative_to(ROOT)): n for p in module_files().values()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "README.md"])
def test_layout_docs_name_every_package(doc):
    text = (ROOT / doc).read_text()
    packages = sorted(p.parent.name for p in (ROOT / "kernelrag").glob("*/__init__.py"))
    missing = [p for p in packages if f"{p}/" not in text]
    assert not missing, f"{doc} does not describe: {missing}"
