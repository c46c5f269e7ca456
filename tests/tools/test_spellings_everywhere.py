"""Every command and benchmark that takes --bootstrap takes Kafka's --bootstrap-server too,
as one option (the same destination), and accepts --log-level after its name."""

from __future__ import annotations

import argparse
import importlib

from databus.cli import BENCHMARKS, _take_log_level, all_commands


def parsers():
    for table, prefix in ((all_commands(), "databus"), (BENCHMARKS, "databus bench")):
        for name, (module_name, _help) in table.items():
            parser = argparse.ArgumentParser(prog=f"{prefix} {name}")
            try:
                importlib.import_module(module_name).add_arguments(parser)
            except ImportError:
                # an optional extra (pyspark, pyarrow) not installed: that command cannot
                # be built here; the core set is asserted below
                continue
            yield f"{prefix} {name}", parser


def option_actions(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from option_actions(sub)
        else:
            yield action


def test_every_bootstrap_option_is_also_bootstrap_server():
    checked = []
    for prog, parser in parsers():
        for action in option_actions(parser):
            if "--bootstrap" in action.option_strings:
                assert "--bootstrap-server" in action.option_strings, prog
                assert action.dest == "bootstrap", prog
                checked.append(prog)
    # the console tools and the broker benches at least
    assert {"databus topics", "databus produce", "databus consume", "databus groups",
            "databus bench produce", "databus bench consume", "databus bench groups"} \
        <= set(checked)


def test_log_level_after_the_command_is_taken_out():
    assert _take_log_level(["list", "--log-level", "DEBUG", "--json"], "INFO") == (
        ["list", "--json"], "DEBUG")
    assert _take_log_level(["list", "--log-level=ERROR"], "INFO") == (["list"], "ERROR")
    # after "--" everything belongs to the command
    assert _take_log_level(["--", "--log-level", "X"], "INFO") == (
        ["--", "--log-level", "X"], "INFO")
