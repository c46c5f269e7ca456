"""``databus console``: the web console (docs/console.md).

    databus console [--listen 127.0.0.1:8080] [-c sidecar.yaml | --bootstrap HOST:PORT]
                    [--read-only] [--sample-interval-ms MS]

The cluster is ``--bootstrap`` (alias ``--bootstrap-server``), else the configuration's:
``console.cluster`` or its only cluster, or the built-in broker's ``broker.listen`` when it
names no cluster.  With ``-c`` the status page also shows the file's mirrors, indexes and
sinks.  Flags override ``console:`` of the file.  Exit status: 0 stopped by Ctrl-C/SIGTERM,
1 cannot start (the port is taken ...), 2 bad usage.
"""

from __future__ import annotations

import os
import signal
import sys
from functools import partial

from databus.tools.options import DEFAULT_BOOTSTRAP

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
    parser.add_argument("--read-only", action="store_true", default=None,
                        help="refuse every action (console.read_only)")
    parser.add_argument("--sample-interval-ms", type=int, metavar="MS",
                        help="how often lag and end offsets are sampled for the charts "
                             "(console.sample_interval_ms, default 5000)")


def console_bootstrap(config, embedded_bootstrap: str | None = None) -> str:
    """The cluster a configuration's console shows (see the module docstring)."""
    from databus.config import ConfigError

    if config.clusters:
        name = config.resolve_cluster(config.console.cluster, "console")
        return config.clusters[name].bootstrap_servers
    if embedded_bootstrap:
        return embedded_bootstrap
    if config.broker.listen.endswith(":0"):
        raise ConfigError("the built-in broker listens on port 0 (a free port chosen at "
                          "start): pass its address with --bootstrap")
    return config.broker.listen


def run(args) -> int:
    import trio
    from pydantic import ValidationError

    from databus.config import ConfigError, ConsoleSettings, load_config

    path = args.config
    if path is None and args.bootstrap is None and os.path.exists("sidecar.yaml"):
        path = "sidecar.yaml"
    try:
        config = load_config(path)
        bootstrap = args.bootstrap or (console_bootstrap(config) if path else DEFAULT_BOOTSTRAP)
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
        return trio.run(_main, config if path else None, bootstrap, listen, read_only,
                        interval_ms / 1000)
    except KeyboardInterrupt:
        return 130


async def _main(config, bootstrap: str, listen: str, read_only: bool, interval: float) -> int:
    import trio

    from databus.startup import leaves

    from .server import ConfigStatus, serve_console

    status = ConfigStatus(config, bootstrap) if config is not None else None
    failed = False
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(
                    serve_console, bootstrap, listen, read_only=read_only,
                    sample_interval=interval, status=status))
                print(f"databus console on {url}  (cluster {bootstrap}"
                      f"{', read-only' if read_only else ''}); Ctrl-C to stop",
                      file=sys.stderr, flush=True)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
        except* OSError as group:
            for exc in leaves(group):
                print(f"{PROG}: cannot serve on {listen}: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0
