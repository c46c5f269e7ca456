"""The ``databus`` command.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires names to modules, so adding a command is one line
in COMMANDS (or BENCHMARKS for ``databus bench NAME``).  Modules import their heavy
dependencies inside ``run`` so that ``databus --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "dump-log": ("databus.tools.dump_log", "print the batches (and records) of a .log segment"),
}

# databus bench NAME -> (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "records": ("databus.bench.records", "RecordBatch v2 encode/decode cost per record"),
}


def _add_module_command(subparsers, name: str, module_name: str, help_text: str):
    module = importlib.import_module(module_name)
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    module.add_arguments(parser)
    parser.set_defaults(_run=module.run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="databus",
        description="databus: message bus with a per-host sidecar and a Kafka-compatible broker",
    )
    parser.add_argument("--version", action="version", version=f"databus {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", help="logging level for stderr (default: INFO)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        _add_module_command(subparsers, name, module_name, help_text)
    if BENCHMARKS:
        bench = subparsers.add_parser("bench", help="run a benchmark and print its figures")
        bench_sub = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
        for name, (module_name, help_text) in BENCHMARKS.items():
            _add_module_command(bench_sub, name, module_name, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
