"""``databus sinks -c FILE``: run the ``sinks:`` of a sidecar.yaml without an app socket.

For hosts that export or index but serve no apps.  It reads the same file as ``databus up``
(clusters, sinks, indexes, ``sidecar.metrics_listen`` for /metrics, /healthz and the
indexes' ``GET /index/NAME``, ``sidecar.reload_poll_ms``), reloads it on SIGHUP or change,
and on SIGTERM / Ctrl-C stops every sink gracefully (flush, commit, leave the group) — a
second signal stops at once.
Without ``clusters:`` in the file, the built-in broker (``local``) is the one at
``broker.listen``, or ``--bootstrap`` if given.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger("databus.sinks")

PROG = "databus sinks"


def add_arguments(parser) -> None:
    parser.add_argument(
        "-c", "--config", default=None,
        help="sidecar.yaml with the sinks (default: ./sidecar.yaml); watched for changes",
    )
    parser.add_argument(
        "--bootstrap-server", "--bootstrap", dest="bootstrap", default=None,
        help="HOST:PORT of the built-in broker (cluster `local`) when the file names no "
        "clusters",
    )
    parser.add_argument(
        "--metrics-listen", help="HOST:PORT for /metrics and /healthz (sidecar.metrics_listen)"
    )


def run(args) -> int:
    import trio

    from databus.config import ConfigError, find_config, load_config, part_bootstrap, with_overrides

    path = find_config(args.config)
    if path is None:
        print(f"{PROG}: no configuration: pass -c FILE (a sidecar.yaml with `sinks:`)",
              file=sys.stderr)
        return 2
    try:
        config = with_overrides(load_config(path), metrics_listen=args.metrics_listen)
    except ConfigError as exc:
        print(f"{PROG}: invalid configuration: {exc}", file=sys.stderr)
        return 2
    bootstrap = args.bootstrap
    if config.uses_embedded_broker and not bootstrap:
        try:  # the built-in broker of the file (broker.listen), as every -c command finds it
            bootstrap = part_bootstrap(config, None, "sinks")
        except ConfigError as exc:
            print(f"{PROG}: no upstream cluster: add `clusters:` to {path} or pass --bootstrap "
                  f"HOST:PORT (the built-in broker) ({exc})", file=sys.stderr)
            return 2
    try:
        return trio.run(_main, path, config, bootstrap)
    except KeyboardInterrupt:
        return 130


class SinksService:
    """What the reload watcher (databus.service.reload) needs: the path, the config in
    force, and ``reload_from_file``."""

    def __init__(self, path, config, supervisor) -> None:
        self.config_path = path
        self.config = config
        self.supervisor = supervisor

    async def reload_from_file(self) -> bool:
        from databus.config import ConfigError, load_config
        from databus.plugins import PluginError

        try:
            new = load_config(self.config_path)
            plan = self.supervisor.prepare(new)
        except (ConfigError, ValueError, PluginError, KeyError) as exc:
            log.error("config rejected, keeping the current one: %s", exc)
            return False
        await self.supervisor.apply(plan)
        self.config = new.model_copy(update={"sidecar": self.config.sidecar.model_copy(
            update={"reload_poll_ms": new.sidecar.reload_poll_ms})})
        log.info("config applied (%d sinks)", len(new.all_sinks()))
        return True


async def _main(path, config, bootstrap: str | None) -> int:
    import trio

    from databus.config import EMBEDDED_CLUSTER
    from databus.plugins import PluginError, get_plugin_manager
    from databus.service.http import serve_metrics
    from databus.service.reload import watch_config
    from databus.service.run import log_metrics_address, open_metrics_listeners, stop_on_signals
    from databus.startup import StartupError

    from .metrics import SinkMetrics
    from .runtime import SinkSupervisor

    def bootstrap_map(cfg):
        if cfg.clusters:
            return {name: c.bootstrap_servers for name, c in cfg.clusters.items()}
        return {EMBEDDED_CLUSTER: bootstrap}

    pm = get_plugin_manager()
    for name, reason in pm.failures.items():
        log.error("plugin %r not loaded: %s", name, reason)
    supervisor = SinkSupervisor(pm, bootstrap_map,
                                stop_timeout=config.sidecar.shutdown_timeout_ms / 1000)
    try:
        plan = supervisor.prepare(config)
        listeners = await open_metrics_listeners(config.sidecar.metrics_listen,
                                                 "sidecar.metrics_listen")
    except (ValueError, PluginError, StartupError) as exc:
        print(f"{PROG}: cannot start: {exc}", file=sys.stderr)
        return 1
    service = SinksService(path, config, supervisor)
    status = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            stopping = False
            if listeners:
                nursery.start_soon(
                    serve_metrics, SinkMetrics(supervisor), listeners,
                    lambda: (False, "stopping") if stopping else (True, "ok"),
                    lambda: service.config, bootstrap, pm,
                )
                log_metrics_address(log, listeners)
            await nursery.start(supervisor.serve, plan)
            nursery.start_soon(watch_config, service)
            log.info("databus sinks is up: %s (config %s; kill -HUP %d reloads it)",
                     ", ".join(config.all_sinks()) or "no sinks", os.path.abspath(path), os.getpid())

            def drain() -> None:
                nonlocal stopping
                stopping = True
                nursery.start_soon(_stop_then_cancel, supervisor, nursery.cancel_scope)

            status = await stop_on_signals(signals, nursery.cancel_scope, log, drain=drain,
                                           what="stopping the sinks")
    log.info("databus sinks stopped")
    return status


async def _stop_then_cancel(supervisor, scope) -> None:
    await supervisor.aclose()
    scope.cancel()
