"""``databus bench client-consume``: our trio consumer beside librdkafka, aiokafka and
kafka-python, on the same broker.

Fills a topic with ``--records`` values (librdkafka producer), then each client reads all of
it from the beginning with manual assignment (no group), each at its own defaults (Kafka's
fetch settings; the calls each client's docs show): librdkafka's ``consume(500, 1.0)``,
ours ``poll(1.0)``, aiokafka's ``getmany()``, kafka-python's ``poll()``.  ``--tuned`` adds
rows with the same large fetch settings for every client after them.  Records/s of the read
alone, and the ratios to librdkafka's and aiokafka's.  Ours runs twice, each in a child
process: with the C extension and with the pure-Python code (peers.py).  A client that is
not installed gets a skipped row (without confluent-kafka the fill is written by databus's
producer).  ``--rounds N`` repeats the reads, clients alternating, keeping each one's best.
The topic is deleted after the run unless ``--keep-topic``.
"""

from __future__ import annotations

import time

from . import peers
from .common import add_bench_options, bench_topic, broker_for, consume_all, fill_topic
from .peers import AIOKAFKA, CLIENTS, KAFKA_PYTHON, LIBRDKAFKA, OURS_C, OURS_PURE, client_rows


def add_arguments(parser) -> None:
    add_bench_options(parser, records=500_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type of the fill")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated subset of {','.join(CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the reads, clients alternating; each client's best round")
    parser.add_argument("--columnar", action="store_true",
                        help="rows/s into an Arrow table: ours getmany_columns(), librdkafka's "
                             "consume() and aiokafka's getmany() building the same columns in "
                             "Python (needs pyarrow)")
    parser.add_argument("--tuned", action="store_true",
                        help="after the rows at every client's defaults, rows with the same "
                             "large fetch settings for every client (peers.TUNED_FETCH)")


NAMES = {
    LIBRDKAFKA: "librdkafka (confluent-kafka consume())",
    OURS_C: "databus.client Consumer.poll(), C extension",
    AIOKAFKA: "aiokafka AIOKafkaConsumer.getmany()",
    OURS_PURE: "databus.client Consumer.poll(), pure Python",
    KAFKA_PYTHON: "kafka-python KafkaConsumer.poll()",
}


COLUMNAR_NAMES = {
    LIBRDKAFKA: "librdkafka consume() + Arrow columns built in Python",
    OURS_C: "databus.client getmany_columns() -> Arrow, C extension",
    AIOKAFKA: "aiokafka getmany() + Arrow columns built in Python",
    OURS_PURE: "databus.client getmany_columns() -> Arrow, pure Python",
}


def run(args) -> int:
    with broker_for(args) as (bootstrap, _cpu), bench_topic(
            bootstrap, f"bench-client-consume-{time.time_ns()}", args.partitions,
            args.keep_topic) as topic:
        fill_topic(bootstrap, topic, args.records, args.record_size,
                   compression=args.compression)
        common = (bootstrap, topic, args.partitions, args.records)
        title = (f"databus bench client-consume: {args.records:,} x {args.record_size} B, "
                 f"{args.partitions} partitions, compression {args.compression}")
        if args.columnar:
            return client_rows(args, COLUMNAR_NAMES, {
                LIBRDKAFKA: lambda: peers.librdkafka_consume_columns(*common),
                AIOKAFKA: lambda: peers.aiokafka_consume_columns(*common),
                OURS_C: lambda: peers.in_child(False, peers.ours_consume_columns, *common)[0],
                OURS_PURE: lambda: peers.in_child(True, peers.ours_consume_columns, *common)[0],
            }, title + ", into Arrow tables, every client at its defaults",
                clients=[c for c in args.clients.split(",") if c in COLUMNAR_NAMES])
        status = client_rows(args, NAMES, _runners(common, tuned=False),
                             title + ", every client at its defaults")
        if args.tuned:
            status |= client_rows(args, NAMES, _runners(common, tuned=True),
                                  title + ", tuned: fetch.max.bytes 64 MiB, "
                                  "max.partition.fetch.bytes 8 MiB, fetch.max.wait.ms 100, "
                                  "batches of 100k")
        return status


def _runners(common: tuple, *, tuned: bool) -> dict:
    return {
        LIBRDKAFKA: lambda: consume_all(*common, tuned=tuned),
        AIOKAFKA: lambda: peers.aiokafka_consume(*common, tuned),
        KAFKA_PYTHON: lambda: peers.kafka_python_consume(*common, tuned),
        OURS_C: lambda: peers.in_child(False, peers.ours_consume, *common, tuned)[0],
        OURS_PURE: lambda: peers.in_child(True, peers.ours_consume, *common, tuned)[0],
    }
