"""The console as a trio service: hypercorn's trio worker serving the Starlette app, the
lag sampler beside it, one Admin connection for both.  ``databus console`` runs it alone;
``databus up`` starts it in its nursery when ``console.listen`` is set.
"""

from __future__ import annotations

import contextlib
import logging
import time
from functools import partial

import trio

from databus.config import describe_security

from .view import Samples, chart

log = logging.getLogger("databus.console")


SINK_TABLE_COLUMNS = ("sink", "table", "last snapshot", "committed", "records", "offsets",
                      "lag")


class ConfigStatus:
    """What a sidecar.yaml adds to the console: its mirrors, indexes and sinks as tables
    (read when the page is asked for, never cached) and searching its indexes."""

    def __init__(self, config, bootstrap: str) -> None:
        self.config = config
        self.bootstrap = bootstrap
        # Mirror and index lag, sampled on each read of the tables (not on a timer: reading
        # a mirror's offset syncs costs more than a group's offsets).
        self.samples = Samples()

    def _charts(self, kind: str, lags: dict[str, int]) -> list:
        now = time.monotonic()
        for name, lag in lags.items():
            self.samples.add((kind, name), now, lag)
        return [(name, chart(self.samples.series((kind, name)), width=380, height=110))
                for name in lags]

    @property
    def indexes(self) -> dict[str, list[str]]:
        """Index name -> its fields (the search box's choices)."""
        return {name: list(index.fields) for name, index in self.config.indexes.items()}

    def _index_api(self):
        """The index plugin's panel (hook databus_console_indexes, asked once); None when no
        loaded plugin serves indexes."""
        if not hasattr(self, "_indexes_api"):
            from databus.plugins import get_plugin_manager

            self._indexes_api = get_plugin_manager().hook.databus_console_indexes()
        return self._indexes_api

    async def search(self, view, index: str, field: str, value: str, limit: int = 20) -> list:
        """The messages of ``index`` whose ``field`` is ``value``, newest first; read as
        ``view`` (the request's ClusterView) reads when the index is on its cluster."""
        from .cluster import ConsoleError

        indexes = self._index_api()
        if indexes is None:
            raise ConsoleError("no plugin serves indexes (is the index plugin loaded? "
                               "`databus plugins` lists them)")
        # An index on the built-in broker has no cluster entry: it is the console's cluster.
        bootstrap = indexes.bootstrap_for(
            self.config, index, None if self.config.clusters else self.bootstrap)
        settings = view.client_config() if bootstrap == view.bootstrap else None
        if settings is None and view.user is not None:
            # A logged-in user's credentials are for the console's cluster only.
            raise ConsoleError(f"index {index!r} is on another cluster than the console's: "
                               "not searchable after a login")
        try:
            return await indexes.query_async(self.config, bootstrap, index, field, value,
                                             settings=settings, limit=limit)
        except indexes.IndexQueryError as exc:
            raise ConsoleError(str(exc)) from None
        except FileNotFoundError:
            raise ConsoleError(f"index {index!r} is not built yet (its builder runs where "
                               "the configuration's sinks run)") from None

    @staticmethod
    async def _visible(view) -> set[str] | None:
        """The topics the logged-in user's Metadata lists; None without a login."""
        if view.user is None:
            return None
        from databus.client import Admin

        async with Admin(view.bootstrap, view.client_config()) as admin:
            topics = await admin.list_topics(include_internal=True)
        return set(topics)

    @staticmethod
    def _shown(topics: set[str] | None, visible: set[str]) -> bool:
        """A row about ``topics`` (None: topics of another cluster than the console's, which
        the user's credentials cannot ask about) is shown when the user may describe all."""
        return topics is not None and topics <= visible

    def _mirror_topics(self, mirror, row, view) -> set[str] | None:
        """The topics of a mirror status row on the console's cluster: the source topic
        and/or the target topic, by which end of the mirror the console's cluster is."""
        clusters = self.config.clusters
        topics = set()
        if clusters[mirror.source].bootstrap_servers == view.bootstrap:
            topics.add(row[1])
        if clusters[mirror.target].bootstrap_servers == view.bootstrap:
            topics.add(row[6])
        return topics or None

    def _index_topics(self, indexes, name: str, view) -> set[str] | None:
        bootstrap = indexes.bootstrap_for(
            self.config, name, None if self.config.clusters else self.bootstrap)
        if bootstrap != view.bootstrap:
            return None
        return indexes.index_topics(self.config, name)

    async def tables(self, view) -> list[dict]:
        """The tables; the sinks' groups are read as ``view`` (the request's ClusterView)
        reads the console's cluster, mirrors and indexes with the configuration's settings
        (after a login, only their rows about topics on the console's cluster that the
        user's own Metadata lists)."""
        from databus.client import Admin
        from databus.groups import GroupsError, Session, group_document, load_group
        from databus.mirror.command import STATUS_COLUMNS as MIRROR_COLUMNS
        from databus.mirror.command import status_rows as mirror_rows

        config = self.config
        # Mirror and index figures are read with the configuration's credentials; a
        # logged-in user sees only the rows about topics their own Metadata describes.
        visible = await self._visible(view)
        mirrors = []
        for mirror in config.mirrors:
            try:
                rows = await mirror_rows(config, mirror)
            except Exception as exc:  # one unreachable cluster must not hide the others
                # names no topic, but the clusters it could not reach: not for a user
                rows = [] if visible is not None else [
                    [mirror.name, f"? ({exc})", *["-"] * 7]]
            if visible is not None:
                rows = [row for row in rows
                        if self._shown(self._mirror_topics(mirror, row, view), visible)]
            mirrors += rows
        api = self._index_api()
        indexes = (await api.status_rows(config, self.bootstrap)
                   if api is not None and config.indexes else [])
        if visible is not None:
            indexes = [row for row in indexes
                       if self._shown(self._index_topics(api, row[0], view), visible)]
        sinks: list[list] = []
        sink_tables: list[list] = []
        # Every sink as the runtime runs them: an index's builder is a sink too (index.NAME).
        if config.all_sinks():
            async with Admin(self.bootstrap, view.client_config()) as admin:
                session = Session(admin.cluster, 15.0)
                for name, sink in config.all_sinks().items():
                    if visible is not None and not self._shown(set(sink.topics), visible):
                        continue
                    group = sink.group(name)
                    try:
                        members = await load_group(session, group)
                        doc = await group_document(session, group, members)
                    except GroupsError:
                        if visible is None:
                            raise
                        continue  # a group the logged-in user may not describe
                    lags = [o["lag"] for o in doc["offsets"] if o["lag"] is not None]
                    lag = sum(lags) if lags else "-"  # nothing committed yet: unknown
                    sinks.append([name, sink.plugin, ", ".join(sink.topics) or
                                  sink.topics_regex or "-", group, members.state,
                                  len(members.members), lag])
                    ends = {(o["topic"], o["partition"]): o["log_end_offset"]
                            for o in doc["offsets"]}
                    sink_tables += await self._sink_tables(name, sink, ends)
        mirror_lag: dict[str, int] = {}
        for row in mirrors:
            if isinstance(row[5], int):
                mirror_lag[row[0]] = mirror_lag.get(row[0], 0) + row[5]
        index_lag = {row[0]: int(row[4]) for row in indexes if str(row[4]).isdigit()}
        return [
            {"id": "mirrors", "title": "Mirrors", "columns": MIRROR_COLUMNS, "rows": mirrors,
             "empty": ("no mirror rows about topics you may describe" if config.mirrors
                       else "no mirrors in the configuration"),
             "charts": self._charts("mirror", mirror_lag)},
            {"id": "indexes", "title": "Indexes",
             "columns": api.STATUS_COLUMNS if api is not None else ("index",),
             "rows": indexes, "empty": ("no plugin serves indexes" if api is None else
                                        "no index rows about topics you may describe"
                                        if config.indexes else
                                        "no indexes in the configuration"),
             "charts": self._charts("index", index_lag)},
            {"id": "sinks", "title": "Sinks",
             "columns": ("sink", "plugin", "topics", "group", "state", "members", "lag"),
             "rows": sinks, "empty": "no sinks in the configuration"},
            # (only when a sink's plugin reports tables: the iceberg sink's, ...)
            *([{"id": "sink-tables", "title": "Sink tables", "columns": SINK_TABLE_COLUMNS,
                "rows": sink_tables, "empty": ""}] if sink_tables else []),
        ]

    async def _sink_tables(self, name: str, sink, ends: dict) -> list[list]:
        """Rows of what the sink wrote (hook databus_console_sink_tables, in a worker
        thread: a plugin reads its catalog), each with its lag: the partitions' end offsets
        (its group's, as read above) less the offsets the table holds."""
        from databus.plugins import get_plugin_manager

        hook = get_plugin_manager().hook.databus_console_sink_tables
        try:
            tables = await trio.to_thread.run_sync(lambda: hook(name=name, sink=sink))
        except Exception as exc:  # a catalog down: said in the row, the page still shows
            return [[name, f"? ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})",
                     "-", "-", "-", "-", "-"]]
        rows = []
        for table in tables or ():
            offsets = table["offsets"]
            known = [ends[tp] - n for tp, n in offsets.items() if ends.get(tp) is not None]
            rows.append([
                name, table["table"], table["snapshot"] or "-", table["committed"] or "-",
                table["records"] if table["records"] is not None else "-",
                ", ".join(f"{t}-{p}:{n}" for (t, p), n in sorted(offsets.items())) or "-",
                max(0, sum(known)) if known else "-"])
        return rows


async def serve_console(bootstrap: str, listen: str, *, settings: dict | None = None,
                        login: bool = False, session_idle_timeout: float = 1800.0,
                        read_only: bool = False, sample_interval: float = 5.0, status=None,
                        schema_registry: str | None = None, broker_metrics: str | None = None,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the console on ``listen`` (HOST:PORT, port 0: a free one) for the cluster at
    ``bootstrap`` reached with client ``settings`` (TLS/SASL); ``login``: each user logs in
    with their own SASL credentials (sessions.py).  ``task_status.started(url)`` once it
    accepts connections."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from .app import create_app
    from .cluster import ClusterView
    from .sessions import Sessions

    config = Config()
    config.bind = [listen]
    config.accesslog = None
    # Through logging (one handler, the process's format) instead of hypercorn's own stderr.
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 1.0
    settings = dict(settings or {})
    async with contextlib.AsyncExitStack() as stack:
        # Login mode: no view of the console's own; each session brings the user's.
        view = None if login else await stack.enter_async_context(
            ClusterView(bootstrap, settings).open())
        nursery = await stack.enter_async_context(trio.open_nursery())
        if view is None:
            sessions = Sessions(bootstrap, settings, idle_timeout=session_idle_timeout,
                                sample_interval=sample_interval)
            await nursery.start(sessions.serve)
            app = create_app(None, read_only=read_only, status=status, sessions=sessions,
                             schema_registry=schema_registry, broker_metrics=broker_metrics)
        else:
            await nursery.start(view.sample_forever, sample_interval)
            app = create_app(view, read_only=read_only, status=status,
                             schema_registry=schema_registry, broker_metrics=broker_metrics)
        # hypercorn types an app by its own TypedDict events, which Starlette's (ASGI 3)
        # __call__ does not name: the two agree at run time, not in their annotations
        binds = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        url = binds[0]
        log.info("console on %s (cluster %s%s)", url, bootstrap,
                 console_mode(settings, login, read_only))
        task_status.started(url)


def console_mode(settings: dict, login: bool, read_only: bool) -> str:
    """``, SASL_SSL SCRAM-SHA-512, login, read-only``: how the console reaches its cluster
    and whom it acts as, for its start-up line (never a secret)."""
    security = describe_security({k: v for k, v in settings.items()
                                  if not (login and k == "sasl.username")})
    return "".join(f", {part}" for part in (security, "login" if login else "",
                                            "read-only" if read_only else "") if part)
