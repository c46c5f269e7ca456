"""``databus consume``: print a topic's messages, one value per line (like
kafka-console-consumer).

    databus consume --bootstrap HOST:PORT --topic T [--group G] [--from-beginning]
                    [--max-messages N] [--timeout-ms MS] [--print-key] [--print-partition]
                    [--print-offset] [-X key=value ...]

Without ``--group`` all partitions are assigned manually (no group, nothing committed);
with it the consumer joins the group and commits.  ``--from-beginning`` starts from the
earliest offset where there is no committed one (else: the end).  Each line is
``[Partition:P<TAB>][Offset:O<TAB>][KEY<TAB>]VALUE`` (null as ``null``), as Kafka's
formatter prints.  Stops after ``--max-messages`` or when nothing arrived for
``--timeout-ms``; exit status 0, or 1 on a consumer error, 2 for bad usage.
"""

from __future__ import annotations

import sys

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", help="consumer group (default: no group, manual assignment)")
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--max-messages", type=int, metavar="N")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="exit when no message arrived for this long")
    parser.add_argument("--print-key", action="store_true")
    parser.add_argument("--print-partition", action="store_true")
    parser.add_argument("--print-offset", action="store_true")
    parser.add_argument("-X", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="consumer setting by Kafka's name (repeatable)")


def run(args) -> int:
    import trio

    from databus.client import ConsumerConfig, KafkaError, parse_overrides

    try:
        settings = parse_overrides(args.overrides)
        if args.group:
            settings["group.id"] = args.group
        settings.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
        config = ConsumerConfig.from_kafka(settings)
    except KafkaError as exc:
        print(f"databus consume: {exc}", file=sys.stderr)
        return 2
    try:
        count = trio.run(_consume, args, config)
    except KafkaError as exc:
        print(f"databus consume: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def format_record(record, print_key: bool, print_partition: bool, print_offset: bool) -> bytes:
    parts = []
    if print_partition:
        parts.append(b"Partition:%d" % record.partition)
    if print_offset:
        parts.append(b"Offset:%d" % record.offset)
    if print_key:
        parts.append(b"null" if record.key is None else record.key)
    parts.append(b"null" if record.value is None else record.value)
    return b"\t".join(parts) + b"\n"


async def _consume(args, config) -> int:
    import trio

    from databus.client import Consumer

    out = sys.stdout.buffer
    count = 0
    idle = None if args.timeout_ms is None else args.timeout_ms / 1000
    async with Consumer(args.bootstrap, config) as consumer:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            partitions = await consumer.partitions_for(args.topic)
            consumer.assign([(args.topic, p) for p in partitions])
        last_data = trio.current_time()
        while args.max_messages is None or count < args.max_messages:
            remaining = None if args.max_messages is None else args.max_messages - count
            records = await consumer.poll(0.5, max_records=remaining)
            if records:
                last_data = trio.current_time()
                out.write(b"".join(
                    format_record(r, args.print_key, args.print_partition, args.print_offset)
                    for r in records
                ))
                out.flush()
                count += len(records)
            elif idle is not None and trio.current_time() - last_data >= idle:
                break
    return count
