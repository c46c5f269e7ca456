"""The ``databus up``, ``databus sidecar`` and ``databus plugins`` subcommands.

``up`` is the main job (``make run``): the sidecar, plus the built-in broker as a child
process when sidecar.yaml names no upstream cluster.  ``sidecar`` runs the sidecar alone
against the configured clusters.  Flags override the file.  The first Ctrl-C (or SIGTERM)
drains: queued messages reach the broker before it is stopped; a second one stops at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger("databus.up")

CHECK_LOGIN_S = 10  # how long the start-up login check of an upstream cluster may take


def _common_arguments(parser) -> None:
    parser.add_argument(
        "-c", "--config", default=None,
        help="sidecar.yaml to load and watch for changes (default: ./sidecar.yaml if it "
        "exists, else built-in defaults)",
    )
    parser.add_argument("--socket", help="Unix socket path for apps (sidecar.socket)")
    parser.add_argument(
        "--tcp-listen", help="also accept apps on this loopback HOST:PORT (sidecar.tcp_listen)"
    )
    parser.add_argument(
        "--metrics-listen", help="HOST:PORT for /metrics and /healthz (sidecar.metrics_listen)"
    )
    parser.add_argument(
        "--check-config", metavar="FILE",
        help="validate FILE and print what a reload to it would change against the running "
        "config (-c, default ./sidecar.yaml, with these flags); apply nothing, start nothing",
    )


def add_up_arguments(parser) -> None:
    _common_arguments(parser)
    parser.add_argument("--data-dir", help="built-in broker's data directory (broker.data_dir)")
    parser.add_argument(
        "--kafka-listen", help="built-in broker's Kafka listener HOST:PORT (broker.listen)"
    )


def run_up(args) -> int:
    return _run(args, embedded=True)


def add_sidecar_arguments(parser) -> None:
    _common_arguments(parser)


def run_sidecar(args) -> int:
    return _run(args, embedded=False)


def _prog(embedded: bool) -> str:
    return "databus up" if embedded else "databus sidecar"


def _overrides(args):
    """The command line's flags as a function applied to every loaded config (at start and
    on each reload, so a flag is never mistaken for a change of the file)."""
    from databus.config import with_overrides

    def apply(config):
        return with_overrides(
            config,
            socket=args.socket,
            tcp_listen=args.tcp_listen,
            metrics_listen=args.metrics_listen,
            data_dir=getattr(args, "data_dir", None),
            listen=getattr(args, "kafka_listen", None),
        )

    return apply


def _load(args, prog: str, path=None):
    from databus.config import ConfigError, find_config, load_config

    if path is None:
        path = find_config(args.config)
    try:
        config = _overrides(args)(load_config(path))
    except ConfigError as exc:
        raise SystemExit(f"{prog}: invalid configuration: {exc}") from None
    return path, config


def check_config(args, prog: str) -> int:
    """``--check-config FILE``: validate it and print the reload diff against the running
    config; exit 0 if valid (even with changes), 2 if invalid."""
    from databus.sidecar.config_diff import diff_configs

    path, running = _load(args, prog)
    try:
        _, candidate = _load(args, prog, args.check_config)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    diff = diff_configs(running, candidate)
    print(f"{args.check_config}: valid; against {path or 'the built-in defaults'}:")
    if not diff:
        print("  no change")
    for item in diff.applied:
        print(f"  reload applies: {item}")
    for item in diff.restart:
        print(f"  needs a restart: {item}")
    return 0


def _run(args, *, embedded: bool) -> int:
    import trio

    prog = _prog(embedded)
    if args.check_config:
        return check_config(args, prog)
    path, config = _load(args, prog)
    if not embedded and config.uses_embedded_broker:
        print(
            f"{prog}: no upstream cluster configured (add `clusters:` to the config, "
            "or run `databus up` to start the built-in broker too)",
            file=sys.stderr,
        )
        return 2
    try:
        return trio.run(_main, prog, path, config, embedded and config.uses_embedded_broker,
                        _overrides(args))
    except KeyboardInterrupt:
        return 130


async def _main(prog: str, path, config, with_broker: bool, overrides=None) -> int:
    import trio

    from databus.config import ConfigError
    from databus.gc_tuning import tune_for_service
    from databus.plugins import PluginError, get_plugin_manager
    from databus.protocol.addresses import format_host_port
    from databus.service.run import stop_on_signals
    from databus.startup import StartupError, leaves

    from .embedded_broker import BrokerExited, run_broker_process
    from .host import host_sidecar

    pm = get_plugin_manager()
    for name, reason in pm.failures.items():
        log.error("plugin %r not loaded: %s", name, reason)
    status = 0
    started = False
    sidecar = host_sidecar(config, plugin_manager=pm, config_path=path, config_overrides=overrides)

    def failed(exc: BaseException) -> None:
        # Before "databus is up" a failure is a start-up failure: one plain line for the
        # user (the message says what and which setting); afterwards it is logged.
        if started:
            log.error("%s", exc)
        elif isinstance(exc, (StartupError, BrokerExited)):
            print(f"{prog}: {exc}", file=sys.stderr)
        else:
            print(f"{prog}: cannot start: {exc}", file=sys.stderr)

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                # The sidecar's socket and ports first: if one is taken, nothing else has
                # started and the broker has written nothing.
                await sidecar.bind()
                broker_address = None
                more_listeners: list[tuple[str, str]] = []
                if with_broker:
                    host, port, _process, bound = await nursery.start(
                        run_broker_process, config.broker
                    )
                    broker_address = sidecar.embedded_bootstrap = format_host_port(host, port)
                    more_listeners = _more_listeners(config.broker, bound)

                async def sidecar_then_stop(task_status=trio.TASK_STATUS_IGNORED):
                    await sidecar.serve(task_status=task_status)
                    nursery.cancel_scope.cancel()

                addresses = await nursery.start(sidecar_then_stop)
                console_url = None
                if config.console.listen:
                    console_url = await nursery.start(_console, config, broker_address)
                started = True
                _print_summary(config, path, addresses, broker_address, console_url,
                               more_listeners)
                if not with_broker:
                    for name, cluster in config.clusters.items():
                        nursery.start_soon(_check_login, prog, name, cluster)
                tune_for_service()  # start-up is done: freeze what it made

                status = await stop_on_signals(signals, nursery.cancel_scope, log,
                                               drain=sidecar.request_stop,
                                               draining=lambda: sidecar.stopping,
                                               what="draining")
        except* BrokerExited as group:
            for exc in leaves(group):
                failed(exc)
            status = 1
        except* (StartupError, ConfigError, PluginError, ValueError, OSError) as group:
            # Start-up failures (an unknown partitioner, a socket in use, ...): one line each.
            for exc in leaves(group):
                failed(exc)
            status = 1
        finally:
            await sidecar.release()  # if it never served (the broker failed first)
    if started:
        log.info("databus stopped")
    return status


async def _console(config, broker_address, task_status):
    """The web console (``console.listen``) on the configured or built-in cluster; its
    settings are read at start (a reload does not move it)."""
    from databus.config import broker_registry_url
    from databus.console.command import (
        check_login,
        console_bootstrap,
        console_broker_metrics,
        console_client_settings,
    )
    from databus.console.server import ConfigStatus, serve_console

    bootstrap = console_bootstrap(config, broker_address)
    client = console_client_settings(config)
    settings = config.console
    login = settings.auth == "sasl"
    if login:
        check_login(client)
    await serve_console(bootstrap, settings.listen, settings=client, login=login,
                        session_idle_timeout=settings.session_idle_timeout_ms / 1000,
                        read_only=settings.read_only,
                        sample_interval=settings.sample_interval_ms / 1000,
                        status=ConfigStatus(config, bootstrap),
                        schema_registry=broker_registry_url(config),
                        broker_metrics=console_broker_metrics(config), task_status=task_status)


def _security(cluster) -> str:
    """`` (SASL_SSL, SCRAM-SHA-512 as sidecar)``: how the cluster is reached, never a secret."""
    from databus.config import describe_security

    described = describe_security(cluster.producer_settings)
    return f"  ({described})" if described else ""


def _more_listeners(broker, bound: dict[str, int]) -> list[tuple[str, str]]:
    """(NAME, HOST:PORT) of the built-in broker's listeners after broker.listen (from
    ``broker.options.listeners``), with the ports they were bound to."""
    from databus.broker.listeners import listener_name
    from databus.protocol.addresses import format_host_port, parse_host_port

    out = []
    for entry in str(broker.options.get("listeners", "")).split(","):
        if entry.strip():
            name = listener_name(entry, "PLAINTEXT")
            host, port = parse_host_port(entry, allow_port_zero=True)
            out.append((name, format_host_port(host, bound.get(name, port))))
    return out


def _print_summary(config, path, addresses, broker_address, console_url=None,
                   more_listeners=()) -> None:
    from databus.cli_helpers.table import Column, console, print_table

    rows = [("apps connect to", f"{addresses.socket}  (databus.Client())")]
    if addresses.tcp:
        rows.append(("", f"tcp {addresses.tcp[0]}:{addresses.tcp[1]}"))
    if broker_address:
        rows.append(
            ("Kafka listener", f"{broker_address}  (built-in broker, data {config.broker.data_dir})")
        )
        for name, address in more_listeners:
            rows.append(("", f"{name} {address}"))
        if config.broker.metrics_listen:
            rows.append(("broker metrics", f"{config.broker.metrics_listen}  (/metrics, /healthz)"))
    else:
        for name, cluster in config.clusters.items():
            rows.append(("upstream", f"{name}: {cluster.bootstrap_servers}{_security(cluster)}"))
    if addresses.metrics:
        host, port = addresses.metrics
        rows.append(("metrics", f"http://{host}:{port}/metrics   health: /healthz"))
    if console_url:
        rows.append(("console", console_url + ("  (read-only)" if config.console.read_only
                                               else "")))
    routes = [f"{name} → {config.route_topic(name)}" for name in config.streams]
    if config.default_route is not None:
        routes.append(f"* → {config.default_route.topic}")
    rows.append(("streams", ", ".join(routes) or "(none: every send is UNKNOWN_STREAM)"))
    if path:
        rows.append(
            ("config", f"{os.path.abspath(path)}  (hot reload: edit it, or kill -HUP {os.getpid()})")
        )
    out = console(stderr=True)
    # one write: a script that waits for "databus is up" finds the lines under it as well
    with out:
        out.print("[bold green]databus is up[/]")
        print_table([Column("what", style="bold"), Column("where")], rows, grid=True, to=out)
        out.print("Ctrl-C to stop.")


async def _check_login(prog: str, name: str, cluster) -> None:
    """Right after start-up, one connection to an upstream cluster: refused credentials are
    said at once, in one plain line (the sidecar goes on: its sends fail with the error, and
    its clients log in again, so credentials fixed on the cluster are picked up)."""
    import trio

    from databus.client import Admin, AuthenticationError, KafkaError

    try:
        with trio.move_on_after(CHECK_LOGIN_S):
            async with Admin(cluster.bootstrap_servers, cluster.connection_settings()) as admin:
                await admin.cluster.refresh_metadata()
    except AuthenticationError as exc:
        print(f"{prog}: upstream {name}: authentication failed ({exc}); sends to it fail "
              f"until its credentials are fixed (clusters.{name}.sasl.* in the config, or "
              "the user's password on the cluster)", file=sys.stderr)
    except (KafkaError, ValueError) as exc:
        log.warning("upstream %s: %s", name, exc)


# --- databus plugins ------------------------------------------------------------------------


def add_plugins_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run_plugins(args) -> int:
    import json

    from databus.plugins import get_plugin_manager

    pm = get_plugin_manager()
    infos = pm.info()
    partitioners = pm.partitioner_names()
    sinks = pm.sink_names()
    if args.json:
        print(json.dumps({
            "plugins": [vars(info) for info in infos],
            "failed": pm.failures,
            "partitioners": partitioners,
            "sinks": sinks,
        }, indent=2))
        return 1 if pm.failures else 0
    from databus.cli_helpers.table import console, print_table

    out = console()
    print_table(
        ("NAME", "MODULE", "DISTRIBUTION", "HOOKS"),
        [(info.name, info.module,
          f"{info.distribution}=={info.version}" if info.distribution else "-",
          list(info.hooks) or "-")  # a list: one hook a line in a rich cell, commas in columns
         for info in infos],
        to=out,
    )
    out.print(f"partitioners: {', '.join(partitioners) or '(none)'}")
    out.print(f"sinks: {', '.join(sinks) or '(none)'}")
    for name, reason in pm.failures.items():
        out.print(f"[red]failed to load {name}[/]: {reason}")
    return 1 if pm.failures else 0
