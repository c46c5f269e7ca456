"""``databus bench client-produce``: our trio producer beside librdkafka, on the same broker.

Both clients send ``--records`` values of ``--record-size`` bytes to a fresh topic with the
same settings (Kafka's defaults unless given: linger.ms 5, batch.size 16384, acks all,
idempotence on for ours as for Java's default), one ``send``/``produce`` call per record,
and the time runs until every record is acknowledged.  The ratio column is ours divided by
librdkafka's.  The broker is a subprocess started here (``--bootstrap`` to use another), so
the client, in this process, and the broker share the machine's cores.
"""

from __future__ import annotations

import os
import time

from .produce import Result, broker_for, create_topic, produce_records


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--records", type=int, default=200_000, help="records per client")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type for both")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--acks", default="all")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


async def produce_ours(bootstrap: str, topic: str, records: int, record_size: int, config) -> float:
    import trio

    from databus.client.producer import Producer

    value = os.urandom(record_size)
    failures = []
    async with Producer(bootstrap, config) as producer:
        start = trio.current_time()
        send = producer.send
        last = None
        for _ in range(records):
            last = await send(topic, value)
        await producer.flush()
        seconds = trio.current_time() - start
        failures = producer.statistics().failed_records
    if failures or last is None or last.exception() is not None:
        raise RuntimeError(f"{failures} records failed")
    return seconds


def print_ratios(title: str, results: list[Result], baseline: Result) -> None:
    from databus.tools.table import Column, print_table

    print_table(
        [Column("client"), *(Column(header, justify="right") for header in (
            "records", "seconds", "records/s", "MB/s", "vs librdkafka"))],
        [(r.name, f"{r.records:,}", f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
          f"{r.mb_per_s:.1f}", f"{r.records_per_s / baseline.records_per_s:.2f}x")
         for r in results],
        title=title,
    )


def run(args) -> int:
    import trio

    from databus.client.config import ProducerConfig

    config = ProducerConfig.from_kafka({
        "linger.ms": args.linger_ms, "batch.size": args.batch_size, "acks": args.acks,
        "compression.type": args.compression,
    })
    with broker_for(args) as (bootstrap, _cpu):
        topic = f"bench-client-produce-rdkafka-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        theirs = produce_records(
            bootstrap, topic, args.records, args.record_size, acks=args.acks,
            compression=args.compression, linger_ms=args.linger_ms, batch_size=args.batch_size,
            api="produce",
        )
        topic = f"bench-client-produce-databus-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        ours = trio.run(produce_ours, bootstrap, topic, args.records, args.record_size, config)
    baseline = Result("librdkafka (confluent-kafka produce())", args.records, theirs, args.record_size)
    mine = Result("databus.client Producer.send()", args.records, ours, args.record_size)
    print_ratios(
        f"databus bench client-produce: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, acks={args.acks}, linger.ms={args.linger_ms}, "
        f"batch.size={args.batch_size}, compression {args.compression}",
        [baseline, mine], baseline)
    return 0
