"""``databus console``: the web console (docs/console.md).

    databus console [--listen 127.0.0.1:8080] [-c sidecar.yaml | --bootstrap HOST:PORT]
                    [-X KEY=VALUE ...] [--command-config FILE] [--login]
                    [--read-only] [--sample-interval-ms MS] [--broker-metrics HOST:PORT]

The cluster is ``--bootstrap`` (alias ``--bootstrap-server``), else the configuration's:
``console.cluster`` or its only cluster (with that cluster's ``security.protocol``,
``sasl.*`` and ``ssl.*``), or the built-in broker's ``broker.listen`` when it names no
cluster.  ``--command-config`` and ``-X`` add or override those settings, Kafka's tools'
way.  ``--login`` (``console.auth: sasl``): each user logs in with their own SASL
credentials.  With ``-c`` the status page also shows the file's mirrors, indexes and sinks.
Flags override ``console:`` of the file.  Exit status: 0 stopped by Ctrl-C/SIGTERM, 1
cannot start (the port is taken ...), 2 bad usage.
"""

from __future__ import annotations

import signal
import sys
from functools import partial

from databus.cli_helpers.options import DEFAULT_BOOTSTRAP, add_command_config

DEFAULT_LISTEN = "127.0.0.1:8080"
PROG = "databus console"


def add_arguments(parser) -> None:
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help=f"where to serve the console (default console.listen, else "
                             f"{DEFAULT_LISTEN}; port 0 picks a free port)")
    parser.add_argument("-c", "--config", help="sidecar.yaml: its cluster, console settings, "
                        "mirrors, indexes and sinks (default ./sidecar.yaml if it exists)")
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                        metavar="HOST:PORT",
                        help=f"the cluster to show (default: the configuration's, else "
                             f"{DEFAULT_BOOTSTRAP})")
    add_command_config(parser, "console client")
    parser.add_argument("--schema-registry", metavar="URL",
                        help="the schema registry of the Schemas pages (default: "
                        "schema.registry.listen of -c FILE's broker section, else "
                        "http://127.0.0.1:8081)")
    parser.add_argument("--login", action="store_true", default=None,
                        help="ask each user for a user name and password and act as that "
                             "user: a SASL login to the cluster (console.auth: sasl)")
    parser.add_argument("--read-only", action="store_true", default=None,
                        help="refuse every action (console.read_only)")
    parser.add_argument("--broker-metrics", metavar="HOST:PORT|URL",
                        help="the broker's /metrics (its --metrics-listen) that the Clients "
                        "page reads: clients' pushed metrics (KIP-714) beside the broker's "
                        "(console.broker_metrics, else -c FILE's broker.metrics_listen)")
    parser.add_argument("--sample-interval-ms", type=int, metavar="MS",
                        help="how often lag and end offsets are sampled for the charts "
                             "(console.sample_interval_ms, default 5000)")


def console_bootstrap(config, embedded_bootstrap: str | None = None) -> str:
    """The cluster a configuration's console shows (databus.config.part_bootstrap)."""
    from databus.config import part_bootstrap

    return part_bootstrap(config, config.console.cluster, "console", embedded_bootstrap)


def console_broker_metrics(config, flag: str | None = None) -> str | None:
    """The /metrics URL the Clients page reads: ``--broker-metrics``, else
    ``console.broker_metrics``, else the built-in broker's ``metrics_listen``; None: none."""
    from .client_metrics import metrics_url

    listen = flag or config.console.broker_metrics or config.broker.metrics_listen
    return metrics_url(listen) if listen else None


def console_client_settings(config) -> dict:
    """The TLS/SASL settings (secrets resolved) of the cluster a configuration's console
    shows; none for the built-in broker (PLAINTEXT)."""
    from databus.config import part_security

    return part_security(config, config.console.cluster, "console")


def command_settings(args) -> dict:
    """-X and --command-config: only connection settings (the console sets the rest
    itself), ``${env:...}`` / ``${file:...}`` resolved as in sidecar.yaml."""
    from databus.cli_helpers.options import client_settings
    from databus.client import KafkaError
    from databus.config import CONNECTION_KEY_PREFIXES, ConfigError, resolve_references

    try:
        settings = client_settings(args)
    except KafkaError as exc:
        raise ConfigError(str(exc)) from None
    for key in settings:
        if not key.startswith(CONNECTION_KEY_PREFIXES):
            raise ConfigError(f"-X {key}: the console takes only security.protocol, sasl.* "
                              "and ssl.* settings")
    return resolve_references(settings, "-X ")


def check_login(settings: dict) -> None:
    """ConfigError unless ``settings`` let users log in: a SASL security.protocol."""
    from databus.config import ConfigError

    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise ConfigError(f"console.auth: sasl (--login) needs a SASL cluster, but its "
                          f"security.protocol is {protocol} (SASL_PLAINTEXT or SASL_SSL: in "
                          "the cluster's settings, or -X security.protocol=...)")


def run(args) -> int:
    import trio
    from pydantic import ValidationError

    from databus.config import (
        ConfigError,
        ConsoleSettings,
        broker_registry_url,
        find_config,
        load_config,
    )

    # --bootstrap names another cluster: ./sidecar.yaml is read only when asked for (-c).
    path = find_config(args.config) if args.bootstrap is None else args.config
    try:
        config = load_config(path)
        # --bootstrap names another cluster than the file's: none of its settings apply.
        from_file = path is not None and args.bootstrap is None
        bootstrap = args.bootstrap or (console_bootstrap(config) if path else DEFAULT_BOOTSTRAP)
        client = {**(console_client_settings(config) if from_file else {}),
                  **command_settings(args)}
        login = config.console.auth == "sasl" if args.login is None else args.login
        if login:
            check_login(client)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    settings = config.console
    listen = args.listen or settings.listen or DEFAULT_LISTEN
    try:
        ConsoleSettings(listen=listen)  # the same HOST:PORT rules as console.listen
    except ValidationError as exc:
        print(f"{PROG}: --listen {listen!r}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    interval_ms = args.sample_interval_ms or settings.sample_interval_ms
    if interval_ms <= 0:
        print(f"{PROG}: --sample-interval-ms must be positive", file=sys.stderr)
        return 2
    read_only = settings.read_only if args.read_only is None else args.read_only
    try:
        return trio.run(partial(
            _main, config if path else None, bootstrap, listen, settings=client, login=login,
            session_idle_timeout=settings.session_idle_timeout_ms / 1000,
            read_only=read_only, sample_interval=interval_ms / 1000,
            schema_registry=args.schema_registry or broker_registry_url(config),
            broker_metrics=console_broker_metrics(config, args.broker_metrics)))
    except KeyboardInterrupt:
        return 130


async def _main(config, bootstrap: str, listen: str, **options) -> int:
    import trio

    from databus.startup import leaves

    from .server import ConfigStatus, console_mode, serve_console

    status = ConfigStatus(config, bootstrap) if config is not None else None
    failed = False
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(
                    serve_console, bootstrap, listen, status=status, **options))
                mode = console_mode(options["settings"], options["login"], options["read_only"])
                print(f"databus console on {url}  (cluster {bootstrap}{mode}); Ctrl-C to stop",
                      file=sys.stderr, flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
        except* OSError as group:
            for exc in leaves(group):
                print(f"{PROG}: cannot serve on {listen}: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0
