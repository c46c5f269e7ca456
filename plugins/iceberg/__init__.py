"""The built-in ``iceberg`` sink: topics as Apache Iceberg tables, committed exactly once.

::

    sinks:
      orders-table:
        plugin: iceberg
        topics: [orders]
        config: {namespace: db, table: "{topic}", format: json, commit.interval.ms: 60000}

Registered through the ``databus`` entry-point group (``iceberg =
"databus_plugins.iceberg"``) like any third-party plugin; needs pyiceberg with its SQLite
catalog and pyarrow (``pip install 'databus[iceberg]'``).  Modules: ``options`` (pure:
options, table names, the offsets kept in snapshot summaries), ``decode`` (records ->
Arrow), ``schema`` (pure Arrow: a batch's schema against the table's), ``tables`` (the
catalog: create, commit, orphan files), ``sink`` (the sink object), ``command``
(``databus iceberg show | expire | compact``, brought by the ``databus_commands`` hook),
``status`` (the console's *Sink tables*, by the ``databus_console_sink_tables`` hook).
``databus bench iceberg`` (databus/bench/iceberg.py) finds the sink through the plugin
manager.
Users' documentation: docs/iceberg.md.
"""

from __future__ import annotations

from databus import hookimpl
from databus.hookspecs import Command

NAME = "iceberg"


@hookimpl
def databus_commands():
    return [Command("iceberg", "databus_plugins.iceberg.command",
                    "the iceberg sinks' tables: show (snapshots and their offsets), expire, "
                    "compact")]


@hookimpl
def databus_console_sink_tables(name, sink):
    if sink.plugin != NAME:
        return None
    from .status import sink_tables

    return sink_tables(sink)


@hookimpl
def databus_sink_names():
    return [NAME]


@hookimpl
def databus_sink(name, config, schema_registry_url):
    if name != NAME:
        return None
    from .options import parse_options

    options = parse_options(config, schema_registry_url)
    try:
        from .sink import IcebergSink
    except ImportError as exc:  # pyiceberg and pyarrow are an extra
        raise ValueError(f"iceberg: needs pyiceberg and pyarrow (pip install "
                         f"'databus[iceberg]'): {exc}") from None
    return IcebergSink(options)
