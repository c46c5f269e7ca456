"""``databus bench client-produce``: our trio producer beside librdkafka, aiokafka and
kafka-python, on the same broker.

Every client sends ``--records`` values of ``--record-size`` bytes to a fresh topic, one
``send``/``produce`` call per record (awaited for ours and aiokafka), and the time runs until
every record is acknowledged.  Each client runs at its own defaults (ours: linger.ms 5,
batch.size 1,000,000, acks all, idempotence on; librdkafka's: linger.ms 5, batch.size
1,000,000, acks all; aiokafka's: linger_ms 0, max_batch_size 16384, acks 1; kafka-python's:
linger_ms 0, batch_size 16384, acks 1) unless ``--linger-ms``, ``--batch-size`` or
``--acks`` set one for every client.  The ratio columns are each client's
rate over librdkafka's and over aiokafka's.  Ours runs twice, each in a child process: with
the C extension and with the pure-Python code (DATABUS_PURE_PYTHON=1); see peers.py.  The
broker is a subprocess started here (``--bootstrap-server`` to use another), so a client and
the broker share the machine's cores.  A peer client that is not installed gets a skipped
row with the command that installs it.  ``--rounds N`` repeats the whole set, clients
alternating, and keeps each client's best round.  The topics are deleted after the run
unless --keep-topic.
"""

from __future__ import annotations

import time

from . import peers
from .common import add_bench_options, bench_topic, broker_for, produce_records
from .peers import AIOKAFKA, CLIENTS, KAFKA_PYTHON, LIBRDKAFKA, OURS_C, OURS_PURE, client_rows


def add_arguments(parser) -> None:
    add_bench_options(parser, records=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type for both")
    parser.add_argument("--linger-ms", type=int, help="for every client (default: each one's)")
    parser.add_argument("--batch-size", type=int, help="for every client (default: each one's)")
    parser.add_argument("--acks", help="for every client (default: each one's)")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated subset of {','.join(CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the set, clients alternating; each client's best round")


NAMES = {
    LIBRDKAFKA: "librdkafka (confluent-kafka produce())",
    OURS_C: "databus.client Producer.send(), C extension",
    AIOKAFKA: "aiokafka AIOKafkaProducer.send()",
    OURS_PURE: "databus.client Producer.send(), pure Python",
    KAFKA_PYTHON: "kafka-python KafkaProducer.send()",
}


def run(args) -> int:
    kafka_config = {key: value for key, value in (
        ("linger.ms", args.linger_ms), ("batch.size", args.batch_size), ("acks", args.acks),
        ("compression.type", args.compression)) if value is not None}
    settings = {"acks": args.acks, "linger_ms": args.linger_ms, "batch_size": args.batch_size,
                "compression": args.compression}
    with broker_for(args) as (bootstrap, _cpu):
        def runner(client: str):
            def run_one() -> float:
                with bench_topic(bootstrap, f"bench-client-produce-{client}-{time.time_ns()}",
                                 args.partitions, args.keep_topic) as topic:
                    common = (bootstrap, topic, args.records, args.record_size)
                    if client == LIBRDKAFKA:
                        return produce_records(*common, api="produce", **settings)
                    if client == AIOKAFKA:
                        return peers.aiokafka_produce(*common, **settings)
                    if client == KAFKA_PYTHON:
                        return peers.kafka_python_produce(*common, **settings)
                    seconds, _ = peers.in_child(client == OURS_PURE, peers.ours_produce,
                                                *common, kafka_config)
                    return seconds
            return run_one

        return client_rows(
            args, NAMES, {c: runner(c) for c in CLIENTS},
            f"databus bench client-produce: {args.records:,} x {args.record_size} B, "
            f"{args.partitions} partitions, compression {args.compression}, "
            + ", ".join(f"{key}={value}" for key, value in kafka_config.items()
                        if key != "compression.type")
            + (" for every client" if len(kafka_config) > 1 else "every client at its defaults"))
