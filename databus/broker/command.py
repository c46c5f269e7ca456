"""``databus broker``: run the built-in Kafka-compatible broker in the foreground.

    databus broker --data-dir DIR --listen HOST:PORT [--advertised-listener HOST:PORT]
                   [-o key=value ...]

Logs to stderr, including ``listening on HOST:PORT`` with the real port when 0 was asked
(harnesses wait for that line).  SIGTERM/SIGINT = clean shutdown: stop accepting, answer
in-flight requests, flush, write the clean-shutdown marker.  A bad option is a one-line
error and exit status 2.
"""

from __future__ import annotations

import functools
import logging
import signal
import sys

log = logging.getLogger("databus.broker")


def add_arguments(parser) -> None:
    parser.add_argument("--data-dir", help="directory of the topic-partition logs (log.dirs)")
    parser.add_argument("--listen", help="HOST:PORT to listen on (port 0 = any free port)")
    parser.add_argument("--advertised-listener", help="HOST:PORT given to clients in Metadata")
    parser.add_argument(
        "-o", "--option", action="append", default=[], metavar="KEY=VALUE",
        help="a broker setting by its Kafka name, e.g. -o num.partitions=3 (repeatable)",
    )


async def run_broker(config, *, tune_gc: bool = False, task_status=None) -> None:
    """Broker + server until SIGTERM/SIGINT (or cancellation).  ``tune_gc``: this process is
    the broker's own (``databus broker``): tune its collector once recovery is done."""
    import trio

    from .broker import Broker
    from .server import Server

    broker = Broker(config)
    server = Server(broker)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(broker.run)
            if tune_gc:
                from databus.gc_tuning import tune_for_service

                tune_for_service()
            host, port = config.listen_address

            async def serve_then_stop_broker():
                await server.serve(host, port, task_status=trio.TASK_STATUS_IGNORED)
                nursery.cancel_scope.cancel()

            nursery.start_soon(serve_then_stop_broker)
            async for signum in signals:
                log.info("received %s: shutting down", signal.Signals(signum).name)
                server.stop()
                break
    log.info("broker stopped cleanly")


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
    try:
        trio.run(functools.partial(run_broker, config, tune_gc=True))
    except KeyboardInterrupt:
        return 130
    return 0
