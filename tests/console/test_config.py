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
