"""``databus produce``: lines from stdin to a topic, one message per line (like
kafka-console-producer).

    databus produce --bootstrap-server HOST:PORT --topic T [--property parse.key=true ...]
                    [--header K=V ...] [--partition N] [--producer-property K=V ...]
                    [--producer.config FILE] [--compression-codec C]
                    [--request-required-acks A]

Lines are read as Kafka's LineMessageReader reads them, with its ``--property`` names:
``parse.key=true`` splits ``KEY<key.separator>VALUE`` (separator default a tab; a line
without it is reported and not sent, unless ``ignore.error=true``: then the whole line is
the value), ``parse.headers=true`` first takes ``h1:v1,h2:v2<headers.delimiter>`` off the
front (``headers.delimiter`` a tab, ``headers.separator`` ",", ``headers.key.separator``
":"), and ``null.marker`` makes a key, value or header value that equals it null.
``--key-separator SEP`` is our alias of ``parse.key=true key.separator=SEP``.  ``-X`` (alias
``--producer-property``) passes producer settings by Kafka's names.  Exit status: 0 when
every line was delivered, 1 when any was not (each failure is reported on stderr), 2 for
bad usage.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from databus.cli_helpers.options import (
    add_bootstrap,
    add_client_settings,
    parse_properties,
    unescape,
)

# Quiet by default, as Kafka's console tools: stdout carries the records, stderr only their
# outcome and errors; `--log-level INFO` shows the client's own lines.
DEFAULT_LOG_LEVEL = "WARNING"

# Kafka's LineMessageReader properties and their defaults.
READER_PROPERTIES: dict[str, object] = {
    "parse.key": False, "key.separator": "\t", "parse.headers": False,
    "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
    "ignore.error": False, "null.marker": "",
}


def add_arguments(parser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="K=V",
                        help="line reader property, as kafka-console-producer's: "
                             + ", ".join(READER_PROPERTIES))
    parser.add_argument("--key-separator", metavar="SEP",
                        help="alias of --property parse.key=true --property key.separator=SEP")
    parser.add_argument("--header", action="append", default=[], metavar="K=V",
                        help="a header added to every message (repeatable)")
    parser.add_argument("--partition", type=int, help="send every message to this partition")
    parser.add_argument("--compression-codec", metavar="C",
                        help="compression.type: none, gzip, snappy, lz4, zstd")
    parser.add_argument("--request-required-acks", metavar="A", help="acks: 0, 1, -1 or all")
    add_client_settings(parser, "producer")


@dataclass(frozen=True)
class LineReader:
    """Kafka's LineMessageReader: one line -> (key, value, headers), or a ValueError."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, props: dict) -> LineReader:
        marker = props["null.marker"]
        return cls(props["parse.key"], unescape(props["key.separator"]),
                   props["parse.headers"], unescape(props["headers.delimiter"]),
                   unescape(props["headers.separator"]),
                   unescape(props["headers.key.separator"]), props["ignore.error"],
                   marker.encode() if marker else None)

    def _null(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def read(self, line: bytes) -> tuple[bytes | None, bytes | None, list]:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            text, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"no headers delimiter {self.headers_delimiter.decode()!r}")
                text, rest = b"", line
            for item in filter(None, text.split(self.headers_separator)):
                hk, hsep, hv = item.partition(self.headers_key_separator)
                if not hsep:
                    raise ValueError(f"header {item.decode(errors='replace')!r} has no "
                                     f"key separator {self.headers_key_separator!r}")
                headers.append((hk.decode(), self._null(hv)))
        if not self.parse_key:
            return None, self._null(rest), headers
        key, sep, value = rest.partition(self.key_separator)
        if not sep:
            if self.ignore_error:
                return None, self._null(rest), headers
            raise ValueError(f"no key separator {self.key_separator.decode()!r}")
        return self._null(key), self._null(value), headers


def run(args) -> int:
    import trio

    from databus.cli_helpers.options import client_settings
    from databus.client import KafkaError, ProducerConfig

    try:
        settings = client_settings(args)
        if args.compression_codec:
            settings["compression.type"] = args.compression_codec
        if args.request_required_acks:
            settings["acks"] = args.request_required_acks
        config = ProducerConfig.from_kafka(settings)
        headers = []
        for item in args.header:
            key, sep, value = item.partition("=")
            if not sep:
                raise KafkaError(f"--header expects K=V, got {item!r}")
            headers.append((key, value.encode()))
        props = parse_properties(args.property, READER_PROPERTIES)
        if args.key_separator:
            props["parse.key"], props["key.separator"] = True, args.key_separator
        reader = LineReader.from_properties(props)
    except (KafkaError, ValueError) as exc:
        print(f"databus produce: {exc}", file=sys.stderr)
        return 2
    try:
        failed = trio.run(_produce, args, config, headers, reader)
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


async def _produce(args, config, headers, reader: LineReader) -> int:
    from databus.client import AuthenticationError, KafkaError, Producer

    failures = 0  # lines not sent or not delivered
    undelivered = 0  # of those sent
    sent = 0

    def report(fut, line_no):
        nonlocal failures, undelivered
        exc = fut.exception()
        if exc is not None:
            failures += 1
            undelivered += 1
            print(f"databus produce: line {line_no} not delivered: {exc}", file=sys.stderr)

    async with Producer(args.bootstrap, config) as producer:
        line_no = 0
        async for line in _lines(sys.stdin.buffer):
            line_no += 1
            try:
                key, value, line_headers = reader.read(line)
            except ValueError as exc:
                failures += 1
                print(f"databus produce: line {line_no} has {exc}; not sent", file=sys.stderr)
                continue
            try:
                fut = await producer.send(args.topic, value, key=key,
                                          headers=line_headers + headers,
                                          partition=args.partition)
            except AuthenticationError:
                raise  # every other line would fail the same way: stop, as Kafka's tool does
            except KafkaError as exc:
                failures += 1
                print(f"databus produce: line {line_no} not sent: {exc}", file=sys.stderr)
                continue
            sent += 1
            fut.add_done_callback(lambda f, n=line_no: report(f, n))
        await producer.flush()
    print(f"databus produce: {sent - undelivered} of {line_no} "
          f"message(s) delivered to {args.topic}", file=sys.stderr)
    return failures
