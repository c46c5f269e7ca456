"""docs/architecture.md describes the code as it is: every module, file and dotted import
path it names exists (a module moved or removed without the page following fails here)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# a file path (``broker/notify.py``, ``entities.py``, ``setup.py``) or a dotted name of one of
# our packages (``databus.protocol._speedups``, ``databus.lanes.model.reader_selection``)
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|c|toml))\b")
DOTTED = re.compile(r"(?<![\w.])((?:databus|databus_plugins|databus_spark)(?:\.\w+)+)")

# the import packages mapped onto the repository's folders (pyproject.toml)
FOLDERS = {"databus_plugins": "plugins", "databus_spark": "spark_sink"}


def _files() -> list[str]:
    skip = (".venv", ".git", "build", "databus.egg-info", "node_modules")
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
            if p.is_file() and not any(part in skip for part in p.relative_to(ROOT).parts)]


def _file_exists(name: str, files: list[str]) -> bool:
    """A path as the page writes it: from the repository's root, from databus/, or a file
    name inside a folder the sentence names (some file ends with it)."""
    return any(f == name or f.endswith("/" + name) for f in files)


def _dotted_exists(name: str) -> bool:
    """A module, or a name defined in one (``module.attribute``)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        obj = module
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def names_in(text: str) -> tuple[set[str], set[str]]:
    return set(PATH.findall(text)), set(DOTTED.findall(text))


def missing(text: str) -> list[str]:
    files = _files()
    paths, dotted = names_in(text)
    return sorted([p for p in paths if not _file_exists(p, files)]
                  + [d for d in dotted if not _dotted_exists(d)])


def test_architecture_names_only_modules_that_exist():
    text = DOC.read_text()
    paths, dotted = names_in(text)
    assert len(paths) > 30 and dotted, "the page names the modules it describes"
    assert missing(text) == []


# features the page could deny, and the module that serves each
FEATURES = {
    "fetch sessions": "databus/broker/fetch_sessions.py",
    "transactions": "databus/broker/txn/service.py",
    "share groups": "databus/broker/share/service.py",
    "ACLs": "databus/broker/authorizer.py",
    "delayed messages": "databus/sidecar/delay/service.py",
}


def denied(text: str) -> list[str]:
    """Features the page says databus lacks ("No fetch sessions", "no ACLs") though their
    module serves them."""
    return sorted(feature for feature, module in FEATURES.items()
                  if (ROOT / module).exists()
                  and re.search(rf"\bno {re.escape(feature)}\b", text, re.IGNORECASE))


def test_architecture_denies_no_feature_the_code_serves():
    assert denied(DOC.read_text()) == []
    assert denied("- No fetch sessions (clients send full Fetch requests).") == [
        "fetch sessions"]


def test_the_check_sees_a_module_that_does_not_exist():
    """The check itself: a moved module, a removed C extension, a wrong attribute."""
    text = ("`sidecar/embedded_broker.py` starts the broker; `databus.protocol._nope` "
            "speeds it; `databus.lanes.model.no_such_function`; `broker/notify.py` exists.")
    assert missing(text) == ["databus.lanes.model.no_such_function", "databus.protocol._nope",
                             "sidecar/embedded_broker.py"]
