"""``console:`` in sidecar.yaml: validation, which cluster the console shows, and that a
reload names a console change as needing a restart (databus up starts it once)."""

from __future__ import annotations

import pytest

from databus.config import ConfigError, parse_config
from databus.console.command import console_bootstrap
from databus.sidecar.config_diff import diff_configs

TWO = {"clusters": {"east": {"bootstrap.servers": "east:9092"},
                    "west": {"bootstrap.servers": "west:9092"}}}


def test_defaults_serve_nothing_and_allow_actions():
    console = parse_config({}).console
    assert (console.listen, console.read_only, console.sample_interval_ms) == (None, False, 5000)


@pytest.mark.parametrize("section, problem", [
    ({"listen": "8080"}, "console.listen must be HOST:PORT"),
    ({"sample_interval_ms": 0}, "greater than 0"),
    ({"cluster": "north"}, "console: cluster 'north' is not defined"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_console_settings_are_named(section, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_config({**TWO, "console": section})


def test_which_cluster_the_console_shows():
    assert console_bootstrap(parse_config({**TWO, "console": {"cluster": "west"}})) == "west:9092"
    with pytest.raises(ConfigError, match="'cluster' is required"):
        console_bootstrap(parse_config(TWO))
    # No clusters: the built-in broker, at the address databus up learned or broker.listen.
    assert console_bootstrap(parse_config({}), "127.0.0.1:41000") == "127.0.0.1:41000"
    assert console_bootstrap(parse_config({"broker": {"listen": "127.0.0.1:9093"}})) == \
        "127.0.0.1:9093"
    with pytest.raises(ConfigError, match="port 0"):
        console_bootstrap(parse_config({"broker": {"listen": "127.0.0.1:0"}}))


def test_a_reload_says_a_console_change_needs_a_restart():
    old = parse_config({"console": {"listen": "127.0.0.1:8080"}})
    new = parse_config({"console": {"listen": "127.0.0.1:8081", "read_only": True}})
    diff = diff_configs(old, new)
    assert diff.restart == ["console.listen '127.0.0.1:8080' -> '127.0.0.1:8081'",
                            "console.read_only False -> True"]
    assert diff.applied == []


def test_console_client_settings_come_from_its_cluster(tmp_path):
    from databus.console.command import console_client_settings

    (tmp_path / "pw").write_text("s3cret\n")
    config = parse_config({"clusters": {"east": {
        "bootstrap.servers": "east:9094", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "console",
        "sasl.password": f"${{file:{tmp_path}/pw}}", "ssl.ca.location": "/etc/ca.crt",
        "linger.ms": 5}}})
    assert console_client_settings(config) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "console", "sasl.password": "s3cret", "ssl.ca.location": "/etc/ca.crt"}
    assert console_client_settings(parse_config({})) == {}  # the built-in broker: PLAINTEXT


def test_command_line_settings_are_connection_settings_only(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from databus.console.command import check_login, command_settings

    (tmp_path / "admin.properties").write_text(
        "# the operator's\nsecurity.protocol=SASL_PLAINTEXT\nsasl.password=${env:PW}\n")
    monkeypatch.setenv("PW", "from-env")
    args = SimpleNamespace(config_file=str(tmp_path / "admin.properties"),
                           overrides=["sasl.mechanism=PLAIN"])
    assert command_settings(args) == {"security.protocol": "SASL_PLAINTEXT",
                                      "sasl.password": "from-env", "sasl.mechanism": "PLAIN"}
    with pytest.raises(ConfigError, match="-X acks: the console takes only"):
        command_settings(SimpleNamespace(config_file=None, overrides=["acks=all"]))
    check_login({"security.protocol": "sasl_ssl"})
    for settings in ({}, {"security.protocol": "SSL"}):
        with pytest.raises(ConfigError, match="needs a SASL cluster"):
            check_login(settings)


def test_the_index_panel_is_the_index_plugins_by_hook(monkeypatch):
    """The console names no index code: its panel comes from the databus_console_indexes
    hook (the built-in index plugin answers it); with no plugin answering, a search says so
    and the Indexes table has no rows."""
    import trio

    import databus.plugins
    from databus.console.cluster import ConsoleError
    from databus.console.server import ConfigStatus

    config = parse_config({"indexes": {"orders": {"topics": ["orders"], "fields": ["id"]}}})
    assert ConfigStatus(config, "127.0.0.1:9")._index_api().STATUS_COLUMNS[0] == "index"

    # a manager with no plugin registered (the built-ins always load from entry points)
    monkeypatch.setattr(databus.plugins, "get_plugin_manager", databus.plugins.PluginManager)
    status = ConfigStatus(config, "127.0.0.1:9")
    with pytest.raises(ConsoleError, match="no plugin serves indexes"):
        trio.run(status.search, None, "orders", "id", "7")
