"""docs/plugins.md documents exactly the hooks of databus/hookspecs.py, with their
signatures and firstresult flags."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from databus import hookspecs

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def specs():
    return {
        name: fn for name, fn in vars(hookspecs).items()
        if name.startswith("databus_") and callable(fn)
    }


def documented():
    text = DOC.read_text()
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    out = {}
    for section in sections:
        heading, _, body = section.partition("\n")
        match = re.fullmatch(r"(databus_\w+)\((.*)\)", heading.strip())
        if match:
            out[match.group(1)] = (match.group(2), body.split("\n## ", 1)[0])
    return out


def test_every_hook_is_documented_with_its_signature():
    docs = documented()
    assert set(docs) == set(specs())
    for name, fn in specs().items():
        params = ", ".join(inspect.signature(fn).parameters)
        assert docs[name][0] == params, name


def test_firstresult_flags_and_docstrings_match():
    docs = documented()
    for name, fn in specs().items():
        firstresult = fn.databus_spec["firstresult"]
        body = docs[name][1]
        assert ("*firstresult*" in body) == firstresult, name
        assert fn.__doc__ and "When:" in fn.__doc__, f"{name} docstring lacks 'When:'"
        assert "**When**" in body, name
        assert "```python" in body, f"{name} has no example"


def test_every_hookspec_argument_is_described_in_the_docstring():
    for name, fn in specs().items():
        for param in inspect.signature(fn).parameters:
            assert f"``{param}``" in fn.__doc__ or f":param {param}:" in fn.__doc__, (name, param)
