"""Every pluggy hook databus calls, and nothing else.

docs/plugins.md documents the same hooks (a test keeps the two equal).  Two kinds:

* Hot-path hooks are *factories*: the sidecar calls them once per (re)configuration and
  keeps the plain callable they return; per message it calls that callable directly.  pluggy
  dispatch per message would cost more than the rest of the hot path.
* Lifecycle hooks run at start, stop and reload.  pluggy hooks are synchronous: long-running
  work goes into a task handed to ``spawn`` in ``databus_sidecar_started``, never inside the
  hook call.

A hook implementation that raises is reported with its plugin's name and skipped; the sidecar
keeps running (a factory failing during a reload makes that reload invalid, so the old config
stays in service).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pluggy

PROJECT_NAME = "databus"  # pluggy's project name: the markers and the plugin manager share it
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
# What plugin authors decorate their hook functions with, as ``from databus import hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --- the types hooks hand over and take back ---------------------------------------------


class RoutedMessage:
    """What a ``databus_route`` function receives and returns."""

    __slots__ = ("stream", "topic", "key", "value", "headers", "partition")

    def __init__(self, stream, topic, key, value, headers, partition) -> None:
        self.stream = stream
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.partition = partition

    def __repr__(self) -> str:
        return (
            f"RoutedMessage(stream={self.stream!r}, topic={self.topic!r}, key={self.key!r}, "
            f"partition={self.partition!r}, headers={self.headers!r})"
        )


class Rejected(Exception):
    """A message the router answers instead of placing: ``code`` and why (raised by a
    ``databus_route`` function to refuse a message on purpose)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    """A ``databus NAME`` subcommand a plugin brings (``databus_commands``): ``module`` has
    ``add_arguments(parser)`` and ``run(args) -> int``; imported only when it is run."""

    name: str
    module: str
    help: str


# An HTTP route: (path, {name: [values]} of the query string) -> (status, content type, body).
RouteHandler = Callable[[str, dict[str, list[str]]], Awaitable[tuple[str, str, bytes]]]


@dataclass(frozen=True)
class HttpRoute:
    """A path prefix a plugin serves on a process's metrics listener (``databus_http_routes``),
    and, if the handler needs one, a trio service run beside the listener for its life
    (``serve(task_status=...)``, started with ``nursery.start``)."""

    prefix: str
    handler: RouteHandler
    serve: Callable[..., Awaitable[Any]] | None = None


@hookspec(firstresult=True)
def databus_partitioner(name, config):
    """Make the partitioner called ``name``, or return None if this plugin has no such name.

    :param name: the stream's ``partitioner`` setting, e.g. ``"default"`` or ``"field"``.
    :param config: the stream's ``partitioner.config`` mapping (empty if not set).
    :returns: a callable ``partition(topic, key, value, partition_count) -> int`` returning a
        partition in ``[0, partition_count)``, or None.

    When: once per upstream producer per (re)configuration (streams with identical producer
    settings share a producer, and so a partitioner); the first non-None result wins.  The
    callable then runs for every message without an explicit partition, so it must be fast
    and must not block.  If it has a ``batch_completed(topic, partition)`` method, the
    producer calls it when a batch is closed (how the sticky partitioner moves on).  Raise
    ``ValueError`` for a bad ``config``: the configuration (or reload) is rejected with your
    message.  An exception raised per message fails that message with PLUGIN_ERROR.
    """


@hookspec
def databus_partitioner_names():
    """Name the partitioners this plugin can make.

    :returns: a list of names accepted by this plugin's ``databus_partitioner``.

    When: by ``databus plugins`` and when a stream names an unknown partitioner (to list the
    choices in the error).  All results are collected.
    """


@hookspec
def databus_route(stream, topic, settings, config, bootstrap):
    """Make a per-message route function for a stream, or return None to leave it alone.

    :param stream: the stream's name as apps send it.
    :param topic: the topic the configuration maps the stream to.
    :param settings: the stream's merged producer settings (a read-only mapping).
    :param config: the whole ``databus.config.DatabusConfig`` being built (e.g. a plugin's
        own section, such as ``lanes:``).
    :param bootstrap: the ``bootstrap.servers`` of the cluster the stream is sent to (for a
        plugin that must talk to it, e.g. to create the topics it routes to).
    :returns: a callable ``route(message) -> message | None`` or None.  ``message`` is a
        ``databus.hookspecs.RoutedMessage`` with mutable attributes ``topic``, ``key``,
        ``value``, ``headers`` (a list of ``(str, bytes)``), ``partition`` and read-only
        ``stream``.  Return the message (changed or not) to send it, or None to drop it (the
        app gets a delivery report with ``partition`` and ``offset`` -1).  A route that must
        wait (for a topic it creates) may return an awaitable of the same instead; return
        the plain message whenever it need not wait, awaiting costs per message.  Raise
        ``databus.hookspecs.Rejected(code, reason)`` to refuse a message on purpose:
        the app gets ``code`` and ``reason``, nothing is logged as a plugin failure.  A
        route function whose attribute ``needs_headers`` is true is called only for messages
        that carry headers (the others keep the sidecar's fast path).

    When: once per stream per (re)configuration (for a stream reaching the default route,
    when it is first seen); every plugin's route function is kept and they run in plugin
    order for every message of that stream, before partitioning.  An exception raised per
    message fails that message with PLUGIN_ERROR naming the plugin.  The factory runs while
    the configuration is still being validated (a refused reload must change nothing): it
    must not act; start what it needs in ``databus_sidecar_started`` /
    ``databus_config_reloaded``, or on its first message.
    """


@hookspec
def databus_sidecar_started(config, spawn, metrics):
    """The sidecar is serving.

    :param config: the ``databus.config.DatabusConfig`` in force.
    :param spawn: ``spawn(async_fn, *args)`` starts a long-running trio task in the sidecar's
        nursery; it is cancelled when the sidecar stops.
    :param metrics: the sidecar's ``prometheus_client.CollectorRegistry``: register a
        collector in it to have the plugin's figures on ``/metrics``.

    When: once, after the ingress sockets listen and before apps are served.
    """


@hookspec
def databus_sidecar_stopping(config):
    """The sidecar is about to stop (after it stopped accepting messages, before it drains).

    :param config: the ``DatabusConfig`` in force.

    When: once, on SIGINT/SIGTERM or when the sidecar's task is cancelled.
    """


@hookspec
def databus_config_reloaded(old, new):
    """A new configuration has been applied by hot reload.

    :param old: the previous ``DatabusConfig``.
    :param new: the ``DatabusConfig`` now in force.

    When: after the new routes are live (SIGHUP or a changed file).  Not called for a
    rejected (invalid) configuration.
    """


@hookspec(firstresult=True)
def databus_sink(name, config, schema_registry_url):
    """Make the sink called ``name``, or return None if this plugin has no such name.

    :param name: the sink's ``plugin`` setting in ``sinks:``, e.g. ``"parquet"``.
    :param config: the sink's ``config:`` mapping in ``sinks:`` (empty if not set).
    :param schema_registry_url: the schema registry of the file's broker section
        (``schema.registry.listen``), or None: a default for sinks that read schemas
        (an implementation may leave this argument out).
    :returns: a sink object (methods below), or None.

    When: once per sink per (re)configuration, and again when the runtime restarts a sink
    after it raised.  The factory must be cheap and do no I/O (do that in ``open``): it
    also runs to validate a reload.  Raise ``ValueError`` for a bad ``config``: the
    configuration (or reload) is rejected with your message.

    The sink's methods are ``async`` and the runtime never calls two at once:
    ``open(tp, committed)`` when a partition ``(topic, partition)`` is assigned
    (``committed`` is the group's committed offset, or None; a sink that keeps its own
    durable offsets returns the offset to read from, else None); ``write(tp, records)`` with a
    batch of ``databus.client.ConsumerRecord`` of one partition in offset order, returning
    the records it rejects as ``[(record, reason), ...]`` (they go to the dead-letter
    topic) or None; or, in place of ``write``, ``write_columns(tp, columns)`` with the same
    batch as a ``databus.protocol.columns.RecordColumns`` (``to_arrow()``; no object per
    record), returning ``[(row index, reason), ...]`` or None — a sink without it gets
    records through ``write`` (docs/plugins.md); ``flush(partitions, force)`` makes durable what it chooses (with
    ``force``, everything taken for ``partitions``) and returns ``{tp: next_offset}`` that
    are now safe to commit; ``close(partitions)`` after a final forced flush when
    partitions are revoked; ``aclose()`` when the sink stops.  Optional: ``trim(starts)``,
every few seconds, with ``{tp: log_start_offset}`` of the partitions it owns (records
before those offsets were removed by the cluster's retention; a sink that keeps records'
locations drops them).  Offsets are committed only
    as ``flush`` reports them.  A method that raises is logged with the plugin's name and
    counted; the runtime restarts that sink (from its committed offsets) after a backoff,
    and every other sink and the sidecar keep serving.
    """


@hookspec
def databus_sink_names():
    """Name the sinks this plugin can make.

    :returns: a list of names accepted by this plugin's ``databus_sink``.

    When: by ``databus plugins`` and when a sink names an unknown plugin (to list the
    choices in the error).  All results are collected.
    """


@hookspec
def databus_commands():
    """Subcommands this plugin adds to the ``databus`` command.

    :returns: a list of ``databus.hookspecs.Command(name, module, help)``; ``module`` is
        imported only when its command is run.  A name databus already has is refused
        (the built-in command stays).

    When: each time ``databus`` starts, to list and dispatch its commands.
    """


@hookspec
def databus_http_routes(current_config, bootstrap):
    """HTTP routes this plugin serves on the metrics listener of ``databus up``,
    ``databus sidecar`` and ``databus sinks`` (beside /metrics and /healthz).

    :param current_config: a callable returning the ``DatabusConfig`` in force (it changes
        on reload).
    :param bootstrap: the built-in broker's HOST:PORT when the config names no clusters
        (else None).
    :returns: a list of ``databus.hookspecs.HttpRoute(prefix, handler, serve)``.

    When: once, when the metrics listener starts; each ``serve`` runs for the listener's life.
    """


@hookspec(firstresult=True)
def databus_console_sink_tables(name, sink):
    """What a sink has written, for the web console's status page: its tables with their
    last commit and the offsets that commit holds (the console adds each table's lag).

    :param name: the sink's name in the configuration.
    :param sink: its ``databus.sinks.config.SinkConfig`` (``plugin``, ``topics``,
        ``config``, ...).
    :returns: a list of dicts ``{"table", "snapshot", "committed", "records", "offsets"}``
        (``offsets``: ``{(topic, partition): next offset}``), or None when the sink is not
        this plugin's.  Blocking calls are fine: the console calls it in a worker thread.

    When: each time the console shows its status page, once per sink.  The first non-None
    result is used.
    """


@hookspec(firstresult=True)
def databus_console_indexes():
    """The web console's index panel (its status table and search box).

    :returns: an object with ``status_rows(config, bootstrap)`` (async; rows of
        ``STATUS_COLUMNS``), ``index_topics(config, name)``, ``bootstrap_for(config, name,
        default)``, ``query_async(config, bootstrap, index, field, value, settings=, limit=)``
        and the exception ``IndexQueryError`` that a bad query raises; None if this plugin
        serves no indexes.

    When: each time the console shows or searches a configuration's indexes.  The first
    non-None result is used.
    """
