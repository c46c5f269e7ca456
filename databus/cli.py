"""The ``databus`` command.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires names to modules, so adding a command is one line
in COMMANDS (or BENCHMARKS for ``databus bench NAME``).  Plugins bring their own commands
through the ``databus_commands`` hook (the index plugin's ``databus index``).  Only the module
of the command being run is imported.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from . import __version__
from .protocol.kio_loading import load_kio_without_test_strategies

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "produce": ("databus.tools.console_producer", "send stdin lines to a topic, one message per line"),
    "consume": ("databus.tools.console_consumer", "print a topic's messages, one value per line"),
    "topics": ("databus.tools.topics", "create, delete, list, describe and alter topics; delete records"),
    "dump-log": ("databus.tools.dump_log", "print the batches (and records) of a .log segment"),
    "repair-log": ("databus.tools.repair_log", "report a partition's damaged batches and cut them out (broker stopped)"),
    "broker": ("databus.broker.command", "run the built-in Kafka-compatible broker"),
    "users": ("databus.tools.users", "add, list and delete SASL users (SCRAM credentials)"),
    "acls": ("databus.tools.acls", "add, list and remove ACLs (like kafka-acls.sh)"),
    "groups": ("databus.tools.groups", "list, describe, reset offsets of, delete consumer and share groups"),
    "dlq": ("databus.tools.dlq", "list, show and replay a consumer group's dead letters (GROUP.dlq)"),
    "up": ("databus.up.cmd_up", "run the sidecar (plus the built-in broker if no cluster is configured)"),
    "sidecar": ("databus.up.cmd_sidecar", "run the sidecar alone against the configured clusters"),
    "sinks": ("databus.sinks.command", "run the sinks of a sidecar.yaml (consumer-side plugins) without an app socket"),
    "console": ("databus.console.command", "the web console: topics, messages, groups and lag, mirrors, indexes, sinks"),
    "lanes": ("databus.lanes.command", "swimlanes: create, list, extend, delete (--merge) lanes and their topics"),
    "schemas": ("databus.schemas.command", "the schema registry: list, get, register, check, delete subjects; config, mode"),
    "plugins": ("databus.up.cmd_plugins", "list the loaded plugins and the hooks each implements"),
    "mirror": ("databus.mirror.command", "run cross-region mirrors alone; status; translate-offsets"),
    "verify": ("databus.verify.command", "Jepsen-style check: a queue workload under faults, its history checked for anomalies"),
    "spark": ("databus_spark.command", "Spark pipelines: export topics to Parquet (needs the spark extra)"),
}

# databus bench NAME -> (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "groups": ("databus.bench.groups", "consumer groups: offset commit rate/latency, group formation, rebalance"),
    "client-produce": ("databus.bench.client_produce", "our producer's throughput beside librdkafka's, same broker"),
    "client-consume": ("databus.bench.client_consume", "our consumer's throughput beside librdkafka's, same broker"),
    "sdk": ("databus.bench.sdk", "the SDK's own CPU per message, against a stand-in sidecar"),
    "sidecar": ("databus.bench.sidecar", "SDK -> sidecar -> broker: records/s, p50/p99 latency, beside librdkafka"),
    "consume-sdk": ("databus.bench.consume_sdk", "broker -> sidecar -> SDK with an ack per message, beside librdkafka"),
    "parquet": ("databus.bench.parquet", "records/s of JSON records exported to Parquet by the sinks runtime"),
    "lanes": ("databus.bench.lanes", "the lanes route plugin's cost per message (no lane, live lane, unknown lane)"),
    "index": ("databus.bench.index", "an index's build rate and point-query latency (messages fetched)"),
    "iceberg": ("databus.bench.iceberg", "records/s into an Iceberg table beside the parquet sink, same run"),
    "records": ("databus.bench.records", "RecordBatch v2 encode/decode cost per record"),
    "storage": ("databus.bench.storage", "log append (with/without group-commit fsync) and read throughput"),
    "produce": ("databus.bench.produce", "produce throughput against the broker (librdkafka)"),
    "consume": ("databus.bench.consume", "consume throughput from the broker (librdkafka)"),
    "fetch-sessions": ("databus.bench.fetch_sessions", "fetching many idle partitions with and without a fetch session (KIP-227)"),
    "mirror": ("databus.bench.mirror", "mirror A -> B: copy rate and replication latency, beside librdkafka's ingest"),
    "spark": ("databus.bench.spark", "a batch read through the databus Spark source beside a Parquet scan"),
    "spark-write": ("databus.bench.spark_write", "df.write.format(\"databus\") at least once beside exactlyOnce=true"),
    "share": ("databus.bench.share", "share group (3 ShareConsumers, explicit accepts) beside a classic consumer"),
    "schemas": ("databus.bench.schemas", "schema registry: lookups by id p50/p99, registrations/s, produce with validation on/off"),
    "delay": ("databus.bench.delay", "delayed messages through the delay service: on time, none lost (kill -9 of a member)"),
}


def all_commands() -> dict[str, tuple[str, str]]:
    """COMMANDS, then those of the loaded plugins (a plugin cannot replace a built-in)."""
    from .plugins import get_plugin_manager

    commands = dict(COMMANDS)
    for found in get_plugin_manager().hook.databus_commands():
        for command in found or ():
            commands.setdefault(command.name, (command.module, command.help))
    return commands


def _command_table(title: str, table: dict[str, tuple[str, str]]) -> str:
    width = max(map(len, table), default=0)
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in table.items()]
    return f"{title}:\n" + "\n".join(lines)


def _top_parser(commands: dict[str, tuple[str, str]]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="databus",
        description="databus: message bus with a per-host sidecar and a Kafka-compatible broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_command_table(
            "commands", {**commands, "bench": ("", "run a benchmark: databus bench NAME --help")})
        + "\n\n" + _command_table("benchmarks", BENCHMARKS),
    )
    parser.add_argument("--version", action="version", version=f"databus {__version__}")
    parser.add_argument(
        "--log-level", default=None,
        help="logging level for stderr (default: INFO; WARNING for consume and produce, "
             "whose stdout/stderr are the records and their outcome, as Kafka's console tools)"
    )
    parser.add_argument("command", metavar="COMMAND", choices=[*commands, "bench"],
                        help="one of the commands below")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _command_parser(prog: str, module_name: str, help_text: str):
    # Only the chosen command's module is imported: a broken or slow module elsewhere in the
    # tree never takes the other commands down, and `databus --help` stays instant.
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=prog, description=help_text)
    module.add_arguments(parser)
    return parser, module.run, module


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")


def _take_log_level(args: list[str], level: str | None) -> tuple[list[str], str | None]:
    """``--log-level L`` / ``--log-level=L`` anywhere after the command (a Kafka user puts
    options after the tool's name): removed from ``args``; the last one given wins."""
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg == "--log-level" and i + 1 < len(args):
            level, i = args[i + 1], i + 2
            continue
        if arg.startswith("--log-level="):
            level, i = arg.partition("=")[2], i + 1
            continue
        rest.append(arg)
        i += 1
    return rest, level


def _kafka_action_first(module, args: list[str]) -> list[str]:
    """kafka-topics.sh and kafka-consumer-groups.sh take the action as a flag anywhere
    (``--create``, ``--describe``, ``--reset-offsets``); a module listing its actions in
    ACTIONS accepts that spelling too: the flag becomes the leading action word."""
    actions = getattr(module, "ACTIONS", None)
    if not actions or (args and args[0] in actions):
        return args
    flags = [a for a in args if a.startswith("--") and a[2:] in actions]
    if len(flags) != 1:
        return args
    rest = list(args)
    rest.remove(flags[0])
    return [flags[0][2:], *rest]


def main(argv: list[str] | None = None) -> int:
    load_kio_without_test_strategies()
    commands = all_commands()
    top = _top_parser(commands)
    ns = top.parse_args(argv)
    rest, log_level = _take_log_level(list(ns.args), ns.log_level)
    if log_level is not None and str(log_level).upper() not in LOG_LEVELS:
        print(f"databus: unknown --log-level {log_level!r} (one of {', '.join(LOG_LEVELS)})",
              file=sys.stderr)
        return 2
    if ns.command == "bench":
        bench = argparse.ArgumentParser(
            prog="databus bench", formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=_command_table("benchmarks", BENCHMARKS),
        )
        bench.add_argument("benchmark", metavar="BENCHMARK", choices=list(BENCHMARKS))
        bench.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        bns = bench.parse_args(rest)
        module_name, help_text = BENCHMARKS[bns.benchmark]
        prog, rest = f"databus bench {bns.benchmark}", list(bns.args)
    else:
        module_name, help_text = commands[ns.command]
        prog = f"databus {ns.command}"
    parser, run, module = _command_parser(prog, module_name, help_text)
    args = parser.parse_args(_kafka_action_first(module, rest))
    if log_level is None:
        log_level = getattr(module, "DEFAULT_LOG_LEVEL", "INFO")
    logging.basicConfig(
        level=getattr(logging, str(log_level).upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as Kafka's tools and coreutils
        # do; stdout is pointed at /dev/null so the interpreter's final flush cannot fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
