"""``databus bench client-produce``: our trio producer beside librdkafka, on the same broker.

Both clients send ``--records`` values of ``--record-size`` bytes to a fresh topic with the
same settings (Kafka's defaults unless given: linger.ms 5, batch.size 16384, acks all,
idempotence on for ours as for Java's default), one ``send``/``produce`` call per record,
and the time runs until every record is acknowledged.  The ratio column is ours divided by
librdkafka's.  The broker is a subprocess started here (``--bootstrap-server`` to use
another), so the client, in this process, and the broker share the machine's cores.  Without
confluent-kafka installed, librdkafka's row is printed as skipped with the command that
installs it and ours still runs.  The topics are deleted after the run unless --keep-topic.
"""

from __future__ import annotations

import os
import time

from .produce import (
    Result,
    add_bench_options,
    bench_topic,
    broker_for,
    librdkafka_missing,
    print_skipped,
    produce_records,
)


def add_arguments(parser) -> None:
    add_bench_options(parser, records=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type for both")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--acks", default="all")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


async def produce_ours(bootstrap: str, topic: str, records: int, record_size: int, config) -> float:
    import trio

    from databus.client import Producer

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


def print_ratios(title: str, results: list[Result], baseline: Result | None, *,
                 skipped: dict[str, str], as_json: bool = False) -> None:
    """Rows with their rate over librdkafka's (``baseline``; None when it was skipped)."""
    from databus.tools.table import Column, print_table

    def ratio(r: Result) -> float | None:
        return None if baseline is None else r.records_per_s / baseline.records_per_s

    if as_json:
        from databus.tools.options import print_json

        from .produce import results_document

        doc = results_document(title, results, skipped)
        for row, r in zip(doc["results"], results):
            row["vs_librdkafka"] = ratio(r)
        print_json(doc)
        return
    print_table(
        [Column("client"), *(Column(header, justify="right") for header in (
            "records", "seconds", "records/s", "MB/s", "vs librdkafka"))],
        [(r.name, f"{r.records:,}", f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
          f"{r.mb_per_s:.1f}", "-" if ratio(r) is None else f"{ratio(r):.2f}x")
         for r in results],
        title=title,
    )
    print_skipped(skipped)


def run(args) -> int:
    import trio

    from databus.client import ProducerConfig

    config = ProducerConfig.from_kafka({
        "linger.ms": args.linger_ms, "batch.size": args.batch_size, "acks": args.acks,
        "compression.type": args.compression,
    })
    missing = librdkafka_missing()
    baseline = None
    with broker_for(args) as (bootstrap, _cpu):
        if not missing:
            with bench_topic(bootstrap, f"bench-client-produce-rdkafka-{time.time_ns()}",
                             args.partitions, args.keep_topic) as topic:
                theirs = produce_records(
                    bootstrap, topic, args.records, args.record_size, acks=args.acks,
                    compression=args.compression, linger_ms=args.linger_ms,
                    batch_size=args.batch_size, api="produce",
                )
            baseline = Result("librdkafka (confluent-kafka produce())", args.records, theirs,
                              args.record_size)
        with bench_topic(bootstrap, f"bench-client-produce-databus-{time.time_ns()}",
                         args.partitions, args.keep_topic) as topic:
            ours = trio.run(produce_ours, bootstrap, topic, args.records, args.record_size,
                            config)
    mine = Result("databus.client Producer.send()", args.records, ours, args.record_size)
    print_ratios(
        f"databus bench client-produce: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, acks={args.acks}, linger.ms={args.linger_ms}, "
        f"batch.size={args.batch_size}, compression {args.compression}",
        [r for r in (baseline, mine) if r is not None], baseline,
        skipped={"librdkafka (confluent-kafka produce())": missing} if missing else {},
        as_json=args.json)
    return 0
