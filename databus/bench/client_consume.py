"""``databus bench client-consume``: our trio consumer beside librdkafka, on the same broker.

Fills a topic with ``--records`` values (librdkafka producer), then each client reads all of
it from the beginning with manual assignment (no group): librdkafka's ``consume()`` in
batches, ours with ``getmany``.  Records/s of the read alone, and ours / librdkafka's.
"""

from __future__ import annotations

import time

from .client_produce import print_ratios
from .consume import consume_all
from .produce import Result, broker_for, create_topic, produce_records


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--records", type=int, default=500_000, help="records to read")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type of the fill")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


async def consume_ours(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    import trio

    from databus.client.consumer import Consumer

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

    with broker_for(args) as (bootstrap, _cpu):
        topic = f"bench-client-consume-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        produce_records(bootstrap, topic, args.records, args.record_size,
                        compression=args.compression, batch_size=1_000_000)
        theirs = consume_all(bootstrap, topic, args.partitions, args.records)
        ours = trio.run(consume_ours, bootstrap, topic, args.partitions, args.records)
    baseline = Result("librdkafka (confluent-kafka consume())", args.records, theirs, args.record_size)
    mine = Result("databus.client Consumer.getmany()", args.records, ours, args.record_size)
    print_ratios(
        f"databus bench client-consume: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, compression {args.compression}",
        [baseline, mine], baseline)
    return 0
