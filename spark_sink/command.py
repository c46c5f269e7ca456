"""``databus spark``: Spark pipelines over databus topics.

    databus spark export --bootstrap-server HOST:PORT --topic T --path OUT --checkpoint CK

Needs the ``spark`` extra (pyspark, pyarrow) and Java 17+; pyspark is imported only when a
pipeline runs.
"""

from __future__ import annotations

import argparse

from . import export

PIPELINES = {"export": (export, "topics -> Parquet partitioned by topic and event date")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pipeline", metavar="PIPELINE", required=True)
    for name, (module, help_text) in PIPELINES.items():
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))


def run(args: argparse.Namespace) -> int:
    module, _ = PIPELINES[args.pipeline]
    return module.run(args)
