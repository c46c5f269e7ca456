"""The import rules of DESIGN's layout, checked on the source: all Kafka wire knowledge in
protocol/, the broker and the client never import each other, the tools use neither's
internals, protocol/ and storage/ stay free of trio; the sidecar is one part (never the
broker, console, mirror, sinks or the host assembly of databus/up/); nothing under databus/
imports the plugins; no part imports databus.tools (with no exception: the groups' logic the
console shares with ``databus groups`` is databus.groups); protocol/'s C names no upper layer's
type; the parts' config models never import databus.config, which assembles them;
and every import made only for type checkers names something that exists (no test
would ever run it otherwise).  Each rule is shown to fail on a deliberately wrong import."""

from __future__ import annotations

import ast
import importlib
import re
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
    # ... and its index panel is the index plugin's, by hook (databus_console_indexes)
    ("databus.console", ("databus.broker", "databus.client.", "databus.protocol",
                         "databus.sidecar", "databus.storage", "databus.index"), ()),
    # the groups' reads and changes (databus groups, the console): the client's package and
    # protocol/ only, and no printing (the command lines print, through databus.cli_helpers)
    ("databus.groups", ("databus.broker", "databus.client.", "databus.sidecar",
                        "databus.storage", "databus.console", "databus.cli_helpers"), ()),
    ("databus.protocol", ("trio", "databus.broker", "databus.client", "databus.sidecar",
                          "databus.storage"), ()),
    ("databus.storage", ("trio", "databus.broker", "databus.client", "databus.sidecar"), ()),
    # the sidecar is one part: `databus up` (databus.up) assembles it with the others
    ("databus.sidecar", ("databus.broker", "databus.console", "databus.mirror",
                         "databus.sinks", "databus.up"), ()),
    # config by owner: each part's section model sits below databus.config, which assembles
    # them (no import loop between the config and a part's commands)
    *((model, ("databus.config",), ()) for model in (
        "databus.config_base", "databus.sidecar.config", "databus.sinks.config",
        "databus.lanes.config", "databus.lanes.model", "databus.mirror.config")),
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


# Rules over every module under databus/ but some: (forbidden prefix, modules exempt, why).
EVERYWHERE = [
    # plugins register themselves (hookspecs: databus_commands, databus_http_routes, ...)
    ("databus_plugins", (
        # the documented public path `import databus.index` (docs/index.md) is the index
        # plugin's Python API
        "databus.index",
        # benchmarks measure the built-in plugins' own code
        "databus.bench",
    )),
    # the console tools are top of the tree: shared CLI helpers live in databus.cli_helpers
    ("databus.tools", ("databus.tools", "databus.cli")),
    # databus up assembles the host: nothing below it imports it
    ("databus.up", ("databus.up", "databus.cli")),
]

# the built-in plugins (plugins/, imported as databus_plugins): no tool either
PLUGIN_RULES = [
    ("databus.tools", ()),
]

SOURCES = sorted(PACKAGE.rglob("*.py"))
PLUGIN_SOURCES = sorted((ROOT / "plugins").rglob("*.py"))


def _within(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _hits(target: str, forbidden) -> bool:
    # a prefix ending in "." forbids the package's modules, not the package
    return any(target.startswith(f) if f.endswith(".") else
               target == f or target.startswith(f + ".") for f in forbidden)


def broken_imports(sources: dict[str, list[tuple[str, int]]]) -> list[str]:
    """``module -> [(imported, line)]`` against every rule: the imports that break one."""
    broken = []
    for module, imports in sources.items():
        for target, line in imports:
            rules = PLUGIN_RULES if module.startswith("plugins.") else EVERYWHERE
            if any(_within(module, [package]) and _hits(target, forbidden)
                   and not _within(target, allowed) for package, forbidden, allowed in RULES) \
                    or any(_hits(target, [forbidden]) and not _within(module, exempt)
                           for forbidden, exempt in rules):
                broken.append(f"{module}:{line} imports {target}")
    return broken


def _source_imports(paths) -> dict[str, list[tuple[str, int]]]:
    return {_module_name(p): [(target, line) for target, _n, line, _ in _imports(p)]
            for p in paths}


def test_layering():
    broken = broken_imports(_source_imports(SOURCES + PLUGIN_SOURCES))
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("module, target", [
    ("databus.sidecar.app", "databus.broker.launch"),
    ("databus.sidecar.produce.router", "databus.console.server"),
    ("databus.sidecar.app", "databus.mirror.supervisor"),
    ("databus.sidecar.app", "databus.sinks.runtime"),
    ("databus.sidecar.app", "databus.up.host"),
    ("databus.service.http", "databus_plugins.index.http"),
    ("databus.cli", "databus_plugins.index.command"),
    ("databus.lanes.command", "databus.tools.table"),
    ("databus.mirror.command", "databus.tools"),
    ("plugins.lanes.route", "databus.tools.options"),
    ("databus.sinks.command", "databus.up.commands"),
    ("databus.broker.server", "databus.client.admin"),
    ("databus.protocol.records", "trio"),
    ("databus.lanes.config", "databus.config"),
    ("databus.sinks.config", "databus.config"),
    ("databus.mirror.config", "databus.config"),
    ("databus.console.server", "databus.index"),
    # the groups' logic is databus.groups', the time parsing databus.cli_helpers.times'
    ("databus.console.cluster", "databus.tools.groups"),
    ("databus.console.server", "databus.tools.groups"),
    ("plugins.index.command", "databus.tools.groups"),
    ("databus.groups.describe", "databus.client.cluster"),
    ("databus.groups.alter", "databus.cli_helpers.table"),
])
def test_each_rule_refuses_a_wrong_import(module, target):
    """The rules themselves: a deliberately wrong import is reported."""
    assert broken_imports({module: [(target, 1)]}) == [f"{module}:1 imports {target}"]


# protocol/'s C knows only Kafka and msgpack: no type or module of an upper layer
UPPER_LAYER_NAMES = re.compile(
    r"\b(DeliveryFuture|RecordHandle|Outbox|RoutedMessage|ConsumerRecord|Sidecar|"
    r"databus\.(?:sdk|sidecar|client|broker)|databus_plugins)\b")


def upper_layer_names(text: str) -> set[str]:
    return set(UPPER_LAYER_NAMES.findall(text))


def c_offenders(folder: Path) -> dict[str, set[str]]:
    """``file -> names`` for every C file of ``folder`` that names an upper layer's type."""
    found = {path.name: upper_layer_names(path.read_text()) for path in sorted(folder.glob("*.c"))}
    return {name: names for name, names in found.items() if names}


def test_protocol_c_names_no_upper_layer_type():
    """The SDK's outbox, the sidecar's placement loop, the producer's future base and the
    index plugin's JSON reader keep their C beside their code: protocol/'s serves the wire."""
    assert list((PACKAGE / "protocol").glob("*.c")), "protocol/ has C files to check"
    assert c_offenders(PACKAGE / "protocol") == {}


def test_the_c_rule_refuses_a_wrong_file(tmp_path):
    """The rule itself: a protocol/ C file that fills the SDK's futures is reported."""
    (tmp_path / "_wire.c").write_text("/* frames */\nstatic int put(void);\n")
    (tmp_path / "_wrong.c").write_text(
        "/* fills a DeliveryFuture of databus.sdk */\nstatic PyObject *Sidecar;\n")
    assert c_offenders(tmp_path) == {"_wrong.c": {"DeliveryFuture", "databus.sdk", "Sidecar"}}


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
