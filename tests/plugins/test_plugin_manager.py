"""Discovery through entry points, the allow-list, and plugins that fail."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from databus import hookimpl
from databus.plugins import PluginError, PluginManager, get_plugin_manager


def make_distribution(root, name: str, entry_points: dict[str, str], modules: dict[str, str]):
    """A minimal installed distribution (dist-info + modules) under ``root``."""
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = ["[databus]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)


@pytest.fixture
def broken_dist(tmp_path, monkeypatch):
    make_distribution(
        tmp_path, "databus-broken-plugins",
        {"missing": "no_such_module_for_databus", "explodes": "databus_explodes_on_import",
         "fine": "databus_fine_plugin"},
        {
            "databus_explodes_on_import": "raise RuntimeError('boom at import')\n",
            "databus_fine_plugin": (  # pluggy's own marker for "databus" is databus.hookimpl
                "import pluggy\nhookimpl = pluggy.HookimplMarker('databus')\n"
                "@hookimpl\ndef databus_partitioner_names():\n    return ['fine']\n"
            ),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_plugin_that_fails_to_load_is_reported_by_name(broken_dist, caplog):
    pm = PluginManager()
    with caplog.at_level(logging.ERROR, logger="databus.plugins"):
        pm.load_entry_points(allow=None)
    assert set(pm.failures) == {"missing", "explodes"}
    assert "ModuleNotFoundError" in pm.failures["missing"]
    assert "boom at import" in pm.failures["explodes"]
    assert "plugin 'explodes'" in caplog.text
    names = {info.name for info in pm.info()}
    assert {"fine", "partitioners"} <= names  # the others still load
    assert "fine" in pm.partitioner_names()


def test_allow_list_filters_third_party_plugins_only(broken_dist, monkeypatch):
    monkeypatch.setenv("DATABUS_LOAD_PLUGINS", "fine")
    pm = get_plugin_manager()
    names = {info.name for info in pm.info()}
    assert "fine" in names and "partitioners" in names  # built-ins always load
    assert not pm.failures  # the broken ones were never imported
    monkeypatch.setenv("DATABUS_LOAD_PLUGINS", "")
    names = {info.name for info in get_plugin_manager().info()}
    assert names == {"partitioners", "parquet", "index", "lanes", "iceberg"}  # the built-ins


class RaisingRoute:
    @hookimpl
    def databus_route(self, stream, topic, settings):
        raise KeyError("no such thing")


class Lifecycle:
    def __init__(self):
        self.calls = []

    @hookimpl
    def databus_sidecar_stopping(self, config):
        self.calls.append(config)


class RaisingLifecycle:
    @hookimpl
    def databus_sidecar_stopping(self, config):
        raise RuntimeError("lifecycle boom")


def test_factory_errors_name_the_plugin_and_lifecycle_errors_are_contained(caplog):
    pm = get_plugin_manager([("raiser", RaisingRoute())])
    with pytest.raises(PluginError) as info:
        pm.call_each("databus_route", stream="s", topic="t", settings={})
    assert info.value.plugin == "raiser"
    assert "plugin 'raiser' failed in databus_route: KeyError" in str(info.value)

    good = Lifecycle()
    pm = get_plugin_manager([("good", good), ("bad", RaisingLifecycle())])
    with caplog.at_level(logging.ERROR, logger="databus.plugins"):
        pm.notify("databus_sidecar_stopping", config="cfg")
    assert good.calls == ["cfg"]
    assert "plugin 'bad' failed in databus_sidecar_stopping" in caplog.text


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "databus.cli", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=60,
    )


def test_databus_plugins_lists_plugins_and_their_hooks(example_plugin):
    result = run_cli("plugins", "--json", env={"DATABUS_LOAD_PLUGINS": "example"})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["example"]["distribution"] == "databus-example-plugin"
    assert plugins["example"]["hooks"] == [
        "databus_partitioner", "databus_partitioner_names", "databus_route"
    ]
    assert plugins["partitioners"]["module"] == "databus_plugins.partitioners"
    assert "by_tenant" in report["partitioners"] and "field" in report["partitioners"]
    table = run_cli("plugins", env={"DATABUS_LOAD_PLUGINS": "example"})
    assert table.returncode == 0 and "databus_route" in table.stdout


def test_databus_plugins_exits_1_when_a_plugin_failed(broken_dist):
    result = run_cli("plugins", "--json", env={"PYTHONPATH": str(broken_dist)})
    assert result.returncode == 1
    assert set(json.loads(result.stdout)["failed"]) == {"missing", "explodes"}
