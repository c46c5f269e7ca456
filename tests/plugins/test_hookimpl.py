"""``databus.hookimpl``: the marker plugin authors import, without making ``import databus``
heavy for apps that only send."""

import subprocess
import sys

import pluggy

import databus
from databus import hookspecs
from databus.plugins import PluginManager


def test_hookimpl_marks_implementations_the_plugin_manager_calls():
    class Plugin:
        @databus.hookimpl
        def databus_partitioner_names(self):
            return ["marked"]

    pm = PluginManager()
    pm.register(Plugin(), name="marked")
    assert pm.hook.databus_partitioner_names() == [["marked"]]
    assert isinstance(databus.hookimpl, pluggy.HookimplMarker)
    assert databus.hookimpl is hookspecs.hookimpl
    assert "hookimpl" in dir(databus)


def test_importing_the_sdk_loads_neither_pluggy_nor_the_sidecars_dependencies():
    heavy = ("pluggy", "pydantic", "yaml", "kio", "trio")
    code = (
        "import sys, databus\n"
        "databus.Client, databus.ClientStatistics\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
