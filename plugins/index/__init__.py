"""The built-in ``index`` sink: a topic's records found by business fields.

::

    indexes:
      orders:
        topics: [orders]
        fields: {user_id: value.user.id, log_id: header.log-id}

Each entry of ``indexes:`` is run by the sinks runtime as a sink of this plugin (named
``index.NAME``, group ``databus-index-NAME``); the plugin is registered through the
``databus`` entry-point group (``index = "databus_plugins.index"``) like any third-party
plugin.  Modules: ``fields`` (pure: where a field is in a record, its value as text),
``store`` (the SQLite database of one index), ``sink`` (the builder the runtime drives),
``query`` (entries -> the messages, fetched by offset), ``command`` (``databus index``, brought
by the ``databus_commands`` hook), ``http`` (``GET /index/NAME``, by ``databus_http_routes``).
Users' documentation: docs/index.md.
"""

from __future__ import annotations

from databus import hookimpl
from databus.hookspecs import Command, HttpRoute

NAME = "index"


@hookimpl
def databus_commands():
    return [Command("index", "databus_plugins.index.command",
                    "query the indexes of a sidecar.yaml (messages by business fields); status")]


@hookimpl
def databus_http_routes(current_config, bootstrap):
    from .http import PREFIX, index_route
    from .query import IndexQueries

    queries = IndexQueries(current_config, bootstrap)
    return [HttpRoute(PREFIX, index_route(queries), queries.serve)]


@hookimpl
def databus_console_indexes():
    from types import SimpleNamespace

    from .command import STATUS_COLUMNS, index_topics, status_rows
    from .query import IndexQueryError, bootstrap_for, query_async

    return SimpleNamespace(
        STATUS_COLUMNS=STATUS_COLUMNS, status_rows=status_rows, index_topics=index_topics,
        bootstrap_for=bootstrap_for, query_async=query_async, IndexQueryError=IndexQueryError)


@hookimpl
def databus_sink_names():
    return [NAME]


@hookimpl
def databus_sink(name, config, schema_registry_url):
    if name != NAME:
        return None
    from .fields import Extractor
    from .sink import IndexSink

    for key in ("index", "path", "fields"):
        if key not in config:
            raise ValueError(f"index: config needs {key!r} (declare indexes under `indexes:`)")
    from .store import RECENT_MAX

    fmt = config.get("format", "json")
    registry = None
    if fmt == "registry":
        from .registry_values import RegistryValues

        registry = RegistryValues(config.get("schema.registry.url") or schema_registry_url)
    return IndexSink(config["index"], config["path"],
                     Extractor(config["fields"], fmt,
                               registry.decode if registry is not None else None),
                     recent_max=int(config.get("recent.entries", RECENT_MAX)),
                     registry=registry)
