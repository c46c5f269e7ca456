"""``databus bench client-consume``: our trio consumer beside librdkafka, on the same broker.

Fills a topic with ``--records`` values (librdkafka producer), then each client reads all of
it from the beginning with manual assignment (no group): librdkafka's ``consume()`` in
batches, ours with ``getmany``.  Records/s of the read alone, and ours / librdkafka's.
Without confluent-kafka the fill is written by databus's producer and librdkafka's row is
printed as skipped with the command that installs it.  The topic is deleted after the run
unless ``--keep-topic``.
"""

from __future__ import annotations

import time

from .client_produce import print_ratios
from .consume import consume_all
from .produce import (
    Result,
    add_bench_options,
    bench_topic,
    broker_for,
    fill_topic,
    librdkafka_missing,
)


def add_arguments(parser) -> None:
    add_bench_options(parser, records=500_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type of the fill")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


async def consume_ours(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import trio

    from databus.client import Consumer

    config = {"auto.offset.reset": "earliest", "fetch.max.bytes": 64 * 1024 * 1024,
              "max.partition.fetch.bytes": 8 * 1024 * 1024, "max.poll.records": 100_000,
              "fetch.max.wait.ms": 100}
    async with Consumer(bootstrap, config) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        seen = 0
        start = trio.current_time()
        with trio.fail_after(600):
            while seen < records:
                got = await consumer.getmany(timeout=1.0)
                seen += sum(len(v) for v in got.values())
        return trio.current_time() - start


def run(args) -> int:
    import trio

    missing = librdkafka_missing()
    baseline = None
    with broker_for(args) as (bootstrap, _cpu), bench_topic(
            bootstrap, f"bench-client-consume-{time.time_ns()}", args.partitions,
            args.keep_topic) as topic:
        fill_topic(bootstrap, topic, args.records, args.record_size,
                   compression=args.compression)
        if not missing:
            theirs = consume_all(bootstrap, topic, args.partitions, args.records)
            baseline = Result("librdkafka (confluent-kafka consume())", args.records, theirs,
                              args.record_size)
        ours = trio.run(consume_ours, bootstrap, topic, args.partitions, args.records)
    mine = Result("databus.client Consumer.getmany()", args.records, ours, args.record_size)
    print_ratios(
        f"databus bench client-consume: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, compression {args.compression}",
        [r for r in (baseline, mine) if r is not None], baseline,
        skipped={"librdkafka (confluent-kafka consume())": missing} if missing else {},
        as_json=args.json)
    return 0
