"""The ``databus`` command loads kio without hypothesis (docs: databus/protocol/kio_loading.py):
hypothesis and the pytest it brings cost every command's start 0.5-1 s where they are
installed, as they are here.  A process that imported hypothesis first keeps kio's strategies."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from databus.cli import main
try:
    main(["topics", "--help"])
except SystemExit:
    pass
import kio.static._phantom as phantom
print("kio" in sys.modules, "hypothesis" in sys.modules, phantom.hypothesis is None)
"""


def run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout.split()[-3:]


def test_the_command_line_loads_kio_without_hypothesis():
    assert run(CHECK) == ["True", "False", "True"]


def test_hypothesis_imported_first_keeps_kios_strategies_and_can_still_be_imported_later():
    assert run("import hypothesis\n" + CHECK) == ["True", "True", "False"]
    # hidden only while kio loads: a plugin importing hypothesis afterwards gets it
    later = CHECK.replace('print(', 'import hypothesis.strategies\nprint(')
    assert run(later) == ["True", "True", "True"]
