"""The import rules of DESIGN's layout, checked on the source: all Kafka wire knowledge in
protocol/, the broker and the client never import each other, the tools use neither's
internals, protocol/ and storage/ stay free of trio; and every import made only for type
checkers names something that exists (no test would ever run it otherwise)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "databus"

# (importing package, forbidden module prefixes, allowed exceptions)
RULES = [
    ("databus.broker", ("databus.client",), ()),
    ("databus.client", ("databus.broker",), ()),
    # databus.broker.config is the broker's configuration model (databus up, the config docs).
    ("databus.tools", ("databus.broker",), ("databus.broker.config",)),
    # the client's public surface is its package (databus/client/__init__.py), not its modules
    ("databus.tools", ("databus.client.",), ()),
    # the web console is a tool too: the client's public surface, never the broker
    ("databus.console", ("databus.broker", "databus.client.", "databus.protocol",
                         "databus.sidecar", "databus.storage"), ()),
    ("databus.protocol", ("trio", "databus.broker", "databus.client", "databus.sidecar",
                          "databus.storage"), ()),
    ("databus.storage", ("trio", "databus.broker", "databus.client", "databus.sidecar"), ()),
    # the sidecar is one part: `databus up` (databus.up) assembles it with the others
    ("databus.sidecar", ("databus.broker", "databus.console", "databus.mirror",
                         "databus.sinks", "databus.up"), ()),
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """(imported module, names, line, only for type checkers) for every import in ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    checking: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno, id(node) in checking
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, target] if target else base)
            yield target, tuple(a.name for a in node.names), node.lineno, id(node) in checking


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_layering():
    broken = []
    for path in SOURCES:
        module = _module_name(path)
        for package, forbidden, allowed in RULES:
            if not (module == package or module.startswith(package + ".")):
                continue
            for target, _names, line, _ in _imports(path):
                # a prefix ending in "." forbids the package's modules, not the package
                hit = any(target.startswith(f) if f.endswith(".") else
                          target == f or target.startswith(f + ".") for f in forbidden)
                ok = any(target == a or target.startswith(a + ".") for a in allowed)
                if hit and not ok:
                    broken.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "path", [p for p in SOURCES if "TYPE_CHECKING" in p.read_text()],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_type_checking_imports_exist(path):
    for target, names, line, only_for_types in _imports(path):
        if not only_for_types:
            continue
        imported = importlib.import_module(target)
        for name in names:
            assert hasattr(imported, name), f"{path.name}:{line}: {target} has no {name}"


def test_pure_layers_do_not_load_trio_even_indirectly():
    """protocol/ and storage/ imported whole in a fresh interpreter leave trio unloaded."""
    import subprocess
    import sys

    modules = [_module_name(p) for p in SOURCES
               if _module_name(p).startswith(("databus.protocol", "databus.storage"))]
    # hypothesis is blocked as in a production install: kio's phantom types register
    # hypothesis strategies when it is importable, and those load trio.
    code = ("import importlib, sys\nsys.modules['hypothesis'] = None\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'trio'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (module -> modules it imports), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for target in sorted(graph[module]):
            found = visit(target, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_bench_imports_go_one_way():
    """The benches share their helpers through databus/bench/common.py, which imports no
    bench: no bench imports one that imports it back, lazily (inside a function) or not."""
    modules = {_module_name(p): p for p in SOURCES if _module_name(p).startswith("databus.bench.")}
    graph = {}
    for module, path in modules.items():
        targets = set()
        for target, names, _line, _ in _imports(path):
            # ``from . import peers`` names a module; ``from .common import x`` a module's name
            targets.update(f"{target}.{n}" for n in names if f"{target}.{n}" in modules)
            if target in modules:
                targets.add(target)
        graph[module] = targets - {module}
    assert not graph["databus.bench.common"], graph["databus.bench.common"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
