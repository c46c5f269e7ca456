"""``databus produce``: lines from stdin to a topic, one message per line (like
kafka-console-producer).

    databus produce --bootstrap HOST:PORT --topic T [--key-separator SEP] [--header K=V ...]
                    [--partition N] [-X key=value ...]

With ``--key-separator`` each line is ``KEY<SEP>VALUE`` (split at the first separator; a line
without it is reported and not sent).  ``-X`` passes producer settings by Kafka's names
(``-X linger.ms=20 -X compression.type=zstd``).  Exit status: 0 when every line was
delivered, 1 when any was not (each failure is reported on stderr), 2 for bad usage.
"""

from __future__ import annotations

import sys

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--key-separator", metavar="SEP",
                        help="lines are KEY<SEP>VALUE (default: the whole line is the value)")
    parser.add_argument("--header", action="append", default=[], metavar="K=V",
                        help="a header added to every message (repeatable)")
    parser.add_argument("--partition", type=int, help="send every message to this partition")
    parser.add_argument("-X", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="producer setting by Kafka's name (repeatable)")


def run(args) -> int:
    import trio

    from databus.client import KafkaError, ProducerConfig, parse_overrides

    try:
        config = ProducerConfig.from_kafka(parse_overrides(args.overrides))
        headers = []
        for item in args.header:
            key, sep, value = item.partition("=")
            if not sep:
                raise KafkaError(f"--header expects K=V, got {item!r}")
            headers.append((key, value.encode()))
    except KafkaError as exc:
        print(f"databus produce: {exc}", file=sys.stderr)
        return 2
    separator = args.key_separator.encode() if args.key_separator else None
    try:
        failed = trio.run(_produce, args, config, headers, separator)
    except KafkaError as exc:
        print(f"databus produce: {exc}", file=sys.stderr)
        return 1
    return 1 if failed else 0


async def _lines(stream):
    """Lines of a binary stream without their line ending, read in a worker thread."""
    import trio

    pending = b""
    while True:
        chunk = await trio.to_thread.run_sync(stream.read1, 1 << 16)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending


async def _produce(args, config, headers, separator) -> int:
    from databus.client import KafkaError, Producer

    failures = 0
    sent = 0

    def report(fut, line_no):
        nonlocal failures
        exc = fut.exception()
        if exc is not None:
            failures += 1
            print(f"databus produce: line {line_no} not delivered: {exc}", file=sys.stderr)

    async with Producer(args.bootstrap, config) as producer:
        line_no = 0
        async for line in _lines(sys.stdin.buffer):
            line_no += 1
            key = None
            value = line
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    failures += 1
                    print(f"databus produce: line {line_no} has no key separator "
                          f"{separator.decode()!r}; not sent", file=sys.stderr)
                    continue
            try:
                fut = await producer.send(args.topic, value, key=key, headers=headers,
                                          partition=args.partition)
            except KafkaError as exc:
                failures += 1
                print(f"databus produce: line {line_no} not sent: {exc}", file=sys.stderr)
                continue
            sent += 1
            fut.add_done_callback(lambda f, n=line_no: report(f, n))
        await producer.flush()
    print(f"databus produce: {sent - failures if failures <= sent else 0} of {line_no} "
          f"message(s) delivered to {args.topic}", file=sys.stderr)
    return failures
