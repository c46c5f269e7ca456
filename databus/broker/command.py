"""``databus broker``: run the built-in Kafka-compatible broker in the foreground.

    databus broker --data-dir DIR --listen HOST:PORT [--advertised-listener HOST:PORT]
                   [--ready-file PATH] [--lifeline-fd FD] [-o key=value ...]

Logs to stderr, including ``listening on HOST:PORT`` with the real port when 0 was asked.
Programs that start it learn that address from ``--ready-file`` (see launch.py), never from
the log.  SIGTERM/SIGINT (or end-of-file on the ``--lifeline-fd`` pipe) = clean shutdown:
stop accepting, answer in-flight requests, flush, write the clean-shutdown marker.  A bad
option is a one-line error and exit status 2; a port in use, a data directory that cannot
be created, or one that another process holds (its ``.lock``, see storage/dir_lock.py) is a
one-line error and exit status 1, found before anything is written.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys

log = logging.getLogger("databus.broker")


def add_arguments(parser) -> None:
    parser.add_argument("--data-dir", help="directory of the topic-partition logs (log.dirs)")
    parser.add_argument("--listen", help="HOST:PORT to listen on (port 0 = any free port)")
    parser.add_argument("--advertised-listener", help="HOST:PORT given to clients in Metadata")
    parser.add_argument(
        "--ready-file", metavar="PATH",
        help="for programs that start the broker: once listening, write {\"host\", \"port\", "
        "\"pid\"} as JSON to PATH (atomically), removed at shutdown; if the broker cannot "
        "start, write {\"error\": REASON} there instead of printing it",
    )
    parser.add_argument(
        "--lifeline-fd", type=int, metavar="FD",
        help="shut down cleanly when this inherited file descriptor reads end-of-file "
        "(the launcher holds the pipe's write end: the broker stops when the launcher dies)",
    )
    parser.add_argument(
        "--metrics-listen", metavar="HOST:PORT",
        help="serve /metrics (Prometheus) and /healthz here: storage failures, damaged "
        "batches, connections (docs/operations.md)",
    )
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE",
        help="a broker setting by its Kafka name, e.g. -o num.partitions=3 (repeatable)",
    )


async def run_broker(
    config, *, tune_gc: bool = False, ready_file: str | None = None,
    lifeline_fd: int | None = None, metrics_listen: str | None = None,
) -> None:
    """Broker + server until SIGTERM/SIGINT, end-of-file on ``lifeline_fd``, or cancellation.
    ``tune_gc``: this process is the broker's own (``databus broker``): tune its collector
    once recovery is done.  Raises StartupError (one line) for a port in use or a data
    directory that cannot be created, before anything is written."""
    import trio

    from databus.startup import lock_data_dir, make_dirs, open_tcp_listeners

    from .broker import Broker
    from .launch import remove_ready_file, write_ready_file
    from .server import Server

    broker = Broker(config)
    server = Server(broker)
    endpoints = await open_endpoints(config)
    host = endpoints[0].listener.host
    metrics_listeners = []
    if metrics_listen:
        from databus.protocol.addresses import parse_host_port
        from databus.startup import StartupError

        try:
            try:
                m_host, m_port = parse_host_port(metrics_listen, allow_port_zero=True)
            except ValueError as exc:
                raise StartupError(f"--metrics-listen {metrics_listen!r}: {exc}") from None
            metrics_listeners = await open_tcp_listeners(m_host, m_port,
                                                         setting="--metrics-listen")
        except BaseException:
            for endpoint in endpoints:
                for listener in endpoint.sockets:
                    await trio.aclose_forcefully(listener)
            raise
    try:
        make_dirs(broker.data_dir, "data directory")
        dir_lock = lock_data_dir(broker.data_dir)
    except BaseException:
        for endpoint in endpoints:
            for listener in endpoint.sockets:
                await trio.aclose_forcefully(listener)
        for listener in metrics_listeners:
            await trio.aclose_forcefully(listener)
        raise
    try:
        with dir_lock, trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(broker.run)
                if tune_gc:
                    from databus.gc_tuning import tune_for_service

                    tune_for_service()

                async def serve_then_stop_broker(task_status):
                    await server.serve(endpoints, host, task_status=task_status)
                    nursery.cancel_scope.cancel()

                bound_host, bound_port = await nursery.start(serve_then_stop_broker)
                if metrics_listeners:
                    from databus.service.metrics import serve_http

                    from .metrics import BrokerMetrics

                    metrics = BrokerMetrics(broker, server)
                    m_bound = metrics_listeners[0].socket.getsockname()
                    log.info("metrics on http://%s:%d/metrics", m_bound[0], m_bound[1])
                    nursery.start_soon(serve_http, metrics, metrics_listeners, metrics.healthy)
                registry_url = None
                if config.schema_registry_listen:
                    registry_url = await _start_registry(nursery, broker,
                                                         config.schema_registry_listen)
                if ready_file:
                    extra = {"schema_registry": registry_url} if registry_url else {}
                    write_ready_file(ready_file, host=bound_host, port=bound_port,
                                     pid=os.getpid(), listeners={
                                         name: port for name, (_, port)
                                         in server.addresses.items()}, **extra)
                if lifeline_fd is not None:
                    nursery.start_soon(_watch_lifeline, lifeline_fd, server.stop)
                async for signum in signals:
                    log.info("received %s: shutting down", signal.Signals(signum).name)
                    server.stop()
                    break
    finally:
        if ready_file:
            remove_ready_file(ready_file)
    log.info("broker stopped cleanly")


async def _start_registry(nursery, broker, listen: str) -> str:
    """Serve the schema registry (docs/schemas.md) in ``nursery``; its URL.  A port in use
    is a StartupError naming the setting, like the broker's own listeners."""
    from databus.schemas.server import serve_registry
    from databus.startup import StartupError

    try:
        return await nursery.start(serve_registry, broker, listen)
    except OSError as exc:
        raise StartupError(f"schema.registry.listen {listen}: {exc.strerror or exc}") from None


async def open_endpoints(config) -> list:
    """Bind every listener of ``config`` (server.Endpoint each, with its TLS context); a
    port in use or an unusable certificate is a StartupError naming the setting."""
    import trio

    from databus.startup import StartupError, open_tcp_listeners

    from .listeners import server_ssl_context
    from .server import Endpoint

    context = None
    listeners = config.listener_list()
    if any(listener.tls for listener in listeners):
        try:
            context = server_ssl_context(config)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
    endpoints: list = []
    try:
        for listener in listeners:
            # a second listener's error names it; the main one reads as it always did
            setting = None if listener is listeners[0] else f"listener {listener.name}"
            sockets = await open_tcp_listeners(listener.host, listener.port, setting=setting)
            endpoints.append(Endpoint(listener, sockets, context if listener.tls else None))
    except BaseException:
        for endpoint in endpoints:
            for sock in endpoint.sockets:
                await trio.aclose_forcefully(sock)
        raise
    return endpoints


async def _watch_lifeline(fd: int, stop) -> None:
    """Return ``stop()`` once the launcher's end of the pipe is closed (it exited or died)."""
    import trio

    stream = trio.lowlevel.FdStream(fd)
    try:
        while await stream.receive_some(4096):
            pass  # the launcher writes nothing; only end-of-file matters
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()
    log.info("the process that started the broker is gone: shutting down")
    stop()


def run(args) -> int:
    import trio

    from .config import BrokerConfig, BrokerConfigError

    try:
        config = BrokerConfig.from_options(
            args.option,
            log_dir=args.data_dir,
            listeners=args.listen,
            advertised_listeners=args.advertised_listener,
        )
        if not config.log_dir:
            raise BrokerConfigError("no data directory: give --data-dir DIR (or -o log.dirs=DIR)")
    except BrokerConfigError as exc:
        print(f"databus broker: {exc}", file=sys.stderr)
        return 2
    from databus.startup import StartupError, leaves

    try:
        trio.run(functools.partial(
            run_broker, config, tune_gc=True, ready_file=args.ready_file,
            lifeline_fd=args.lifeline_fd, metrics_listen=args.metrics_listen,
        ))
    except KeyboardInterrupt:
        return 130
    except (StartupError, BaseExceptionGroup) as error:
        problems = list(leaves(error))
        if not all(isinstance(exc, StartupError) for exc in problems):
            raise
        message = "; ".join(map(str, problems))
        if args.ready_file:
            # The launcher reads it from there and reports it in its own words: printed
            # here too, the user would see the same failure twice.
            from .launch import write_ready_file

            try:
                write_ready_file(args.ready_file, error=message)
                return 1
            except OSError:
                pass
        print(f"databus broker: {message}", file=sys.stderr)
        return 1
    return 0
