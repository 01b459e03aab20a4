"""The package's shape: one concept per subpackage, imports one way, no module over 500 lines.

Layers, highest first: cli -> trace -> serve -> memory -> move -> model -> out. A module may import its own
layer and any lower one, never a higher one. Function-level (lazy) imports count too: they are still
dependencies. The root package (``kvcalc/__init__.py``) is the public API facade above every layer; no
module imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kvcalc"
LAYERS = ("cli", "trace", "serve", "memory", "move", "model", "out")  # highest first
MAX_LINES = 500


def layer_of(module: str) -> str | None:
    """'kvcalc.serve.cost' -> 'serve'; the root package 'kvcalc' -> 'root'; anything else None."""
    parts = module.split(".")
    if parts[0] != "kvcalc":
        return None
    if len(parts) == 1 or parts[1] in ("__init__", "__main__"):
        return "root"
    return parts[1] if parts[1] in LAYERS else "unknown"


def rank(layer: str) -> int:
    """Smaller is higher; the root facade and __main__ sit above every layer."""
    return -1 if layer == "root" else LAYERS.index(layer)


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) of every kvcalc import in ``source`` (top-level and inside functions)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kvcalc"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = module.split(".")[: -node.level]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "kvcalc":
                continue
            # `from kvcalc.model import catalog` names a module: the layer is the package's either way
            out.append((node.lineno, target))
    return out


def violations(sources: dict[str, str]) -> list[str]:
    """Every import in ``sources`` ({module name: source}) that goes up the layers, as one line each."""
    found = []
    for module, source in sorted(sources.items()):
        here = layer_of(module)
        for line, target in imported_modules(source, module):
            there = layer_of(target)
            if there == "unknown" or here == "unknown":
                found.append(f"{module}:{line}: {target} is in no layer (layers: {', '.join(LAYERS)})")
            elif there == "root" and here != "root":
                found.append(f"{module}:{line}: imports the root package; import from the layer instead")
            elif here != "root" and rank(there) < rank(here):
                found.append(f"{module}:{line}: {here} imports {target} ({there} is a higher layer)")
    return found


def package_sources() -> dict[str, str]:
    sources = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        sources[name.removesuffix(".__init__")] = path.read_text(encoding="utf-8")
    return sources


def test_imports_run_one_way():
    assert violations(package_sources()) == []


def test_every_module_lives_in_a_layer():
    names = [m for m in package_sources() if m.count(".") >= 1]
    assert all(layer_of(m) in (*LAYERS, "root") for m in names), names


@pytest.mark.parametrize("lower, higher, expect", [
    ("kvcalc.model.kv", "from kvcalc.serve.cost import compare_result", "model imports kvcalc.serve.cost"),
    ("kvcalc.out.render", "def f():\n    from kvcalc.model import catalog\n", "out imports kvcalc.model"),
    ("kvcalc.memory.blocks", "import kvcalc.trace.replay", "memory imports kvcalc.trace.replay"),
    ("kvcalc.move.links", "from ..memory import blocks", "move imports kvcalc.memory"),
    ("kvcalc.model.schema", "from kvcalc import load_model", "imports the root package"),
    ("kvcalc.serve.cost", "from kvcalc.util import x", "kvcalc.util is in no layer"),
])
def test_the_layer_test_catches_an_upward_import(lower, higher, expect):
    # a deliberate violation: the checker must name it (a test that cannot fail is no test)
    found = violations({lower: higher})
    assert len(found) == 1 and expect in found[0], found


@pytest.mark.parametrize("module, source", [
    ("kvcalc.serve.cost", "from kvcalc.model import catalog\nfrom kvcalc.out.units import fmt_bytes"),
    ("kvcalc.cli.kv", "from kvcalc.trace.report import trace_result"),
    ("kvcalc.model.kv", "from kvcalc.model import attention as att"),
    ("kvcalc", "from kvcalc.out.version import __version__"),
])
def test_downward_and_sideways_imports_pass(module, source):
    assert violations({module: source}) == []


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_cli_annotations_are_objects_not_strings():
    """typer reads every command's parameters when it builds the app (`kvcalc --help` builds all 13 commands);
    string annotations (``from __future__ import annotations``) make it eval ~800 of them through typing's
    get_type_hints, compiling each: ~50 ms of a ~200 ms `--help` (measured with cProfile, issue 14's limit being
    0.7x the bare imports). The CLI modules keep real annotations."""
    stringy = [p.name for p in sorted((PACKAGE / "cli").glob("*.py"))
               if "from __future__ import annotations" in p.read_text()]
    assert stringy == []
