"""``databus consume``: print a topic's messages, one per line (like kafka-console-consumer).

    databus consume --bootstrap-server HOST:PORT --topic T [--group G] [--from-beginning]
                    [--partition P [--offset O|earliest|latest]] [--max-messages N]
                    [--timeout-ms MS] [--property print.key=true ...] [--isolation-level L]
                    [--consumer-property K=V ...] [--consumer.config FILE]
    databus consume --bootstrap-server HOST:PORT --topic T --share-group G [--release|--reject]
                    [--max-messages N] [--timeout-ms MS] [--property print.delivery=true ...]

Without ``--group`` all partitions (or ``--partition P`` alone) are assigned manually
(nothing committed); with it the consumer joins the group and commits.  ``--from-beginning``
starts from the earliest offset where there is no committed one (else: the end);
``--offset`` (with ``--partition``) starts at that offset.  Lines are formatted as Kafka's
DefaultMessageFormatter does, with its ``--property`` names: ``print.timestamp``
(``CreateTime:MS``), ``print.partition`` (``Partition:P``), ``print.offset`` (``Offset:O``),
``print.headers`` (``k:v,k:v`` or ``NO_HEADERS``), ``print.key``, ``print.value``, each
followed by ``key.separator`` (a tab); ``null.literal`` for a null key/value.  The older
``--print-key/--print-partition/--print-offset`` flags are aliases.  Stops after
``--max-messages`` or when nothing arrived for ``--timeout-ms``; exit status 0, or 1 on a
consumer error, 2 for bad usage.

``--share-group G`` is Kafka's ``kafka-console-share-consumer.sh --group G``: a member of
share group G (KIP-932, databus.client.ShareConsumer) that accepts each message it prints,
or releases (``--release``) or rejects (``--reject``) it; several of them on one topic
share its records.  ``print.delivery`` prints ``DeliveryCount:N``.  Where a share group
starts is the group's ``share.auto.offset.reset``, so ``--from-beginning``, ``--partition``,
``--offset`` and ``--group`` do not go with it.
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

# Kafka's DefaultMessageFormatter properties and their defaults.
FORMATTER_PROPERTIES: dict[str, object] = {
    "print.timestamp": False, "print.key": False, "print.offset": False,
    "print.delivery": False, "print.partition": False, "print.headers": False, "print.value": True,
    "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
    "null.literal": "null",
}
TIMESTAMP_TYPES = {0: b"CreateTime", 1: b"LogAppendTime"}


def add_arguments(parser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="consumer group (default: no group, manual assignment)")
    parser.add_argument("--share-group", metavar="G",
                        help="consume as a member of share group G (kafka-console-share-"
                             "consumer.sh's --group): each message printed is accepted")
    acks = parser.add_mutually_exclusive_group()
    acks.add_argument("--release", action="store_true",
                      help="with --share-group: release each message (delivered again)")
    acks.add_argument("--reject", action="store_true",
                      help="with --share-group: reject each message (never delivered again)")
    parser.add_argument("--reject-message-on-error", action="store_true",
                        help="accepted for kafka-console-share-consumer.sh: messages are "
                             "printed as raw bytes, so no message can fail to format")
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--partition", type=int, metavar="P",
                        help="read only this partition (no group)")
    parser.add_argument("--offset", metavar="O|earliest|latest",
                        help="with --partition: the offset to start at (default latest, or "
                             "earliest with --from-beginning)")
    parser.add_argument("--max-messages", type=int, metavar="N")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="exit when no message arrived for this long")
    parser.add_argument("--property", action="append", default=[], metavar="K=V",
                        help="formatter property, as kafka-console-consumer's: "
                             + ", ".join(FORMATTER_PROPERTIES))
    parser.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                        help="read_committed: skip aborted transactions' records")
    parser.add_argument("--skip-message-on-error", action="store_true",
                        help="accepted for Kafka's scripts: messages are printed as raw bytes, "
                             "so no message can fail to format")
    parser.add_argument("--print-key", action="store_true", help="alias of print.key=true")
    parser.add_argument("--print-partition", action="store_true",
                        help="alias of print.partition=true")
    parser.add_argument("--print-offset", action="store_true", help="alias of print.offset=true")
    add_client_settings(parser, "consumer")


@dataclass(frozen=True)
class Format:
    """The formatter properties, resolved to bytes and flags."""

    timestamp: bool = False
    partition: bool = False
    offset: bool = False
    delivery: bool = False
    headers: bool = False
    key: bool = False
    value: bool = True
    separator: bytes = b"\t"
    line_end: bytes = b"\n"
    headers_separator: bytes = b","
    null: bytes = b"null"

    @classmethod
    def from_properties(cls, props: dict) -> Format:
        return cls(props["print.timestamp"], props["print.partition"], props["print.offset"],
                   props["print.delivery"], props["print.headers"], props["print.key"], props["print.value"],
                   unescape(props["key.separator"]), unescape(props["line.separator"]),
                   unescape(props["headers.separator"]), props["null.literal"].encode())


def parse_start(offset: str | None, from_beginning: bool) -> int | str:
    """--offset as Kafka reads it: a non-negative number, earliest or latest."""
    if offset is None:
        return "earliest" if from_beginning else "latest"
    if offset in ("earliest", "latest"):
        return offset
    try:
        value = int(offset)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"--offset {offset!r}: expected a non-negative offset, earliest or "
                         "latest")
    return value


def run(args) -> int:

    from databus.cli_helpers.options import client_settings
    from databus.client import ConsumerConfig, KafkaError

    try:
        settings = client_settings(args)
        if args.share_group is not None or args.release or args.reject:
            return _run_share(args, settings)
        if args.group:
            settings["group.id"] = args.group
        if args.isolation_level:
            settings["isolation.level"] = args.isolation_level
        settings.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
        config = ConsumerConfig.from_kafka(settings)
        fmt = _formatter(args)
        if args.offset is not None and args.partition is None:
            raise ValueError("--offset needs --partition (as in kafka-console-consumer)")
        if args.partition is not None and args.group:
            raise ValueError("--partition reads one partition without a group; drop --group")
        start = parse_start(args.offset, args.from_beginning)
    except (KafkaError, ValueError) as exc:
        print(f"databus consume: {exc}", file=sys.stderr)
        return 2
    return _finish(_consume, args, config, fmt, start)


def _finish(consume, *call) -> int:
    """Run the consume loop; its exit status and Kafka's closing line."""
    import trio

    from databus.client import KafkaError

    try:
        count = trio.run(consume, *call)
    except KafkaError as exc:
        print(f"databus consume: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _formatter(args) -> Format:
    props = parse_properties(args.property, FORMATTER_PROPERTIES)
    for flag in ("key", "partition", "offset"):
        if getattr(args, f"print_{flag}"):
            props[f"print.{flag}"] = True
    return Format.from_properties(props)


def _run_share(args, settings: dict) -> int:
    """``--share-group``: kafka-console-share-consumer.sh."""

    from databus.client import AcknowledgeType, KafkaError, ShareConsumerConfig

    try:
        if args.share_group is None:
            raise ValueError(f"--{'release' if args.release else 'reject'} needs --share-group")
        clash = [flag for flag, given in (
            ("--group", args.group), ("--from-beginning", args.from_beginning),
            ("--partition", args.partition is not None), ("--offset", args.offset is not None),
            ("--isolation-level", args.isolation_level)) if given]
        if clash:
            raise ValueError(
                f"--share-group does not go with {', '.join(clash)}: a share group's members "
                "share every partition and start where the group's share.auto.offset.reset "
                "says (set it with IncrementalAlterConfigs on the group)")
        given = settings.get("group.id")
        if given is not None and given != args.share_group:
            raise ValueError(f"group.id {given!r} and --share-group {args.share_group!r} "
                             "do not match")
        settings = {"client.id": "console-share-consumer", **settings,
                    "group.id": args.share_group, "share.acknowledgement.mode": "explicit"}
        config = ShareConsumerConfig.from_kafka(settings)
        fmt = _formatter(args)
    except (KafkaError, ValueError) as exc:
        print(f"databus consume: {exc}", file=sys.stderr)
        return 2
    kind = (AcknowledgeType.RELEASE if args.release else
            AcknowledgeType.REJECT if args.reject else AcknowledgeType.ACCEPT)
    return _finish(_consume_share, args, config, fmt, kind)


def format_record(record, fmt: Format) -> bytes:
    """One record as Kafka's DefaultMessageFormatter writes it."""
    parts = []
    if fmt.timestamp:
        kind = TIMESTAMP_TYPES.get(record.timestamp_type)
        parts.append(b"%s:%d" % (kind, record.timestamp) if kind and record.timestamp >= 0
                     else b"NO_TIMESTAMP")
    if fmt.partition:
        parts.append(b"Partition:%d" % record.partition)
    if fmt.offset:
        parts.append(b"Offset:%d" % record.offset)
    if fmt.delivery and record.delivery_count is not None:
        parts.append(b"DeliveryCount:%d" % record.delivery_count)
    if fmt.headers:
        parts.append(fmt.headers_separator.join(
            k.encode() + b":" + (fmt.null if v is None else v) for k, v in record.headers
        ) or b"NO_HEADERS")
    if fmt.key:
        parts.append(fmt.null if record.key is None else record.key)
    if fmt.value:
        parts.append(fmt.null if record.value is None else record.value)
    return fmt.separator.join(parts) + fmt.line_end


async def _consume(args, config, fmt: Format, start) -> int:
    import trio

    from databus.client import Consumer, KafkaError

    out = sys.stdout.buffer
    count = 0
    idle = None if args.timeout_ms is None else args.timeout_ms / 1000
    async with Consumer(args.bootstrap, config) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            partitions = await consumer.partitions_for(args.topic)
            if args.partition is not None:
                if args.partition not in partitions:
                    raise KafkaError(f"topic {args.topic!r} has no partition {args.partition} "
                                     f"(it has {len(partitions)})")
                partitions = [args.partition]
            consumer.assign([(args.topic, p) for p in partitions])
            if args.partition is not None:
                tp = (args.topic, args.partition)
                if start == "earliest":
                    consumer.seek_to_beginning(tp)
                elif start == "latest":
                    consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, start)
        last_data = trio.current_time()
        while args.max_messages is None or count < args.max_messages:
            remaining = None if args.max_messages is None else args.max_messages - count
            records = await consumer.poll(0.5, max_records=remaining)
            if records:
                last_data = trio.current_time()
                out.write(b"".join(format_record(r, fmt) for r in records))
                out.flush()
                count += len(records)
            elif idle is not None and trio.current_time() - last_data >= idle:
                break
    return count


async def _consume_share(args, config, fmt: Format, kind) -> int:
    """Print and settle (``kind``) each message; what is held but not printed when
    --max-messages is reached goes back to the group on close."""
    import trio

    from databus.client import ShareConsumer

    out = sys.stdout.buffer
    count = 0
    idle = None if args.timeout_ms is None else args.timeout_ms / 1000
    async with ShareConsumer(args.bootstrap, config) as consumer:
        consumer.subscribe([args.topic])
        last_data = trio.current_time()
        while args.max_messages is None or count < args.max_messages:
            records = await consumer.poll(0.5)
            if args.max_messages is not None:
                records = records[:args.max_messages - count]
            if records:
                last_data = trio.current_time()
                out.write(b"".join(format_record(r, fmt) for r in records))
                out.flush()
                for record in records:
                    consumer.acknowledge(record, kind)
                count += len(records)
            elif idle is not None and trio.current_time() - last_data >= idle:
                break
        for tp, error in (await consumer.commit()).items():
            if error is not None:
                print(f"databus consume: {tp[0]}-{tp[1]}: {error}", file=sys.stderr)
    return count
