"""Run Python code in a fresh interpreter where one module cannot be imported, as on a
machine without a C compiler (the extension was never built).

    out = python_without("databus.protocol._speedups", "from databus.protocol import speedups\n"
                         "print(speedups.implementation())")

A meta-path finder raises ImportError for ``module``; DATABUS_PURE_PYTHON is unset, so the
fallback is the import failing, not the switch.  Returns what the code printed (raises if
it failed).
"""

from __future__ import annotations

import os
import subprocess
import sys

_BLOCK = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == {module!r}: raise ImportError('blocked')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def python_without(module: str, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DATABUS_PURE_PYTHON"}
    return subprocess.run([sys.executable, "-c", _BLOCK.format(module=module) + code], env=env,
                          capture_output=True, text=True, check=True).stdout
