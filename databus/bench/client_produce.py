"""``databus bench client-produce``: our trio producer beside librdkafka, aiokafka and
kafka-python, on the same broker.

Every client sends ``--records`` values of ``--record-size`` bytes to a fresh topic with the
same settings (Kafka's defaults unless given: linger.ms 5, batch.size 16384, acks all,
idempotence on for ours as for Java's default), one ``send``/``produce`` call per record,
and the time runs until every record is acknowledged.  The ratio columns are each client's
rate over librdkafka's and over aiokafka's.  Ours runs twice, each in a child process: with
the C extension and with the pure-Python code (DATABUS_PURE_PYTHON=1); see peers.py.  The
broker is a subprocess started here (``--bootstrap-server`` to use another), so a client and
the broker share the machine's cores.  A peer client that is not installed gets a skipped
row with the command that installs it.  ``--rounds N`` repeats the whole set, clients
alternating, and keeps each client's best round.  The topics are deleted after the run
unless --keep-topic.
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

LIBRDKAFKA, AIOKAFKA, KAFKA_PYTHON = "librdkafka", "aiokafka", "kafka-python"
OURS_C, OURS_PURE = "databus-c", "databus-pure"
CLIENTS = (LIBRDKAFKA, OURS_C, AIOKAFKA, OURS_PURE, KAFKA_PYTHON)


def add_arguments(parser) -> None:
    add_bench_options(parser, records=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--compression", default="none", help="compression.type for both")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16384)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated subset of {','.join(CLIENTS)}")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the set, clients alternating; each client's best round")
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
                 skipped: dict[str, str], as_json: bool = False,
                 peer: Result | None = None) -> None:
    """Rows with their rate over librdkafka's (``baseline``) and aiokafka's (``peer``);
    either None when it was skipped."""
    from databus.tools.table import Column, print_table

    def ratio(r: Result, base: Result | None) -> float | None:
        return None if base is None else r.records_per_s / base.records_per_s

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    if as_json:
        from databus.tools.options import print_json

        from .produce import results_document

        doc = results_document(title, results, skipped)
        for row, r in zip(doc["results"], results):
            row["vs_librdkafka"] = ratio(r, baseline)
            row["vs_aiokafka"] = ratio(r, peer)
        print_json(doc)
        return
    print_table(
        [Column("client"), *(Column(header, justify="right") for header in (
            "records", "seconds", "records/s", "MB/s", "vs librdkafka", "vs aiokafka"))],
        [(r.name, f"{r.records:,}", f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
          f"{r.mb_per_s:.1f}", shown(ratio(r, baseline)), shown(ratio(r, peer)))
         for r in results],
        title=title,
    )
    print_skipped(skipped)


def client_rows(args, names: dict[str, str], runners: dict, title: str) -> int:
    """Run the chosen clients ``--rounds`` times, alternating; print each one's best round.

    ``names`` maps a client to its row name, ``runners`` to a function returning seconds."""
    from .peers import extension_missing, peer_missing

    chosen = [c for c in args.clients.split(",") if c]
    unknown = sorted(set(chosen) - set(CLIENTS))
    if unknown:
        raise SystemExit(f"unknown --clients {','.join(unknown)} (known: {','.join(CLIENTS)})")
    missing = {LIBRDKAFKA: librdkafka_missing(), AIOKAFKA: peer_missing(AIOKAFKA),
               KAFKA_PYTHON: peer_missing(KAFKA_PYTHON), OURS_C: extension_missing()}
    skipped = {names[c]: missing[c] for c in chosen if missing.get(c)}
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for client in chosen:
            if not missing.get(client):
                seconds = runners[client]()
                best[client] = min(seconds, best.get(client, seconds))
    results = {c: Result(names[c], args.records, s, args.record_size) for c, s in best.items()}
    rounds = f", best of {args.rounds} rounds" if args.rounds > 1 else ""
    print_ratios(title + rounds, [results[c] for c in chosen if c in results],
                 results.get(LIBRDKAFKA), skipped=skipped, as_json=args.json,
                 peer=results.get(AIOKAFKA))
    return 0


NAMES = {
    LIBRDKAFKA: "librdkafka (confluent-kafka produce())",
    OURS_C: "databus.client Producer.send(), C extension",
    AIOKAFKA: "aiokafka AIOKafkaProducer.send()",
    OURS_PURE: "databus.client Producer.send(), pure Python",
    KAFKA_PYTHON: "kafka-python KafkaProducer.send()",
}


def run(args) -> int:
    from . import peers

    kafka_config = {"linger.ms": args.linger_ms, "batch.size": args.batch_size,
                    "acks": args.acks, "compression.type": args.compression}
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
            f"{args.partitions} partitions, acks={args.acks}, linger.ms={args.linger_ms}, "
            f"batch.size={args.batch_size}, compression {args.compression}")
