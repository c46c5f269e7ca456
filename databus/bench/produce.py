"""``databus bench produce``: producing to the broker.

Two modes:

* ``--throughput T`` (kafka-producer-perf-test's required option) runs the perf test as
  Kafka's tool does: ``--num-records`` records of ``--record-size`` bytes to ``--topic``
  through databus's producer (``--producer-props K=V ...``, ``--producer.config FILE``),
  paced to T records/s (-1: unpaced), a progress line every 5 s and Kafka's summary line
  (records/s, MB/s, avg/max latency, 50th/95th/99th/99.9th percentiles); see perf_test.py.
* otherwise, the comparison table: records/s and MB/s for fixed-size records (100 bytes by
  default), with librdkafka (confluent-kafka) once per acks level (acks=1: answered after the
  append; acks=all: after the group-commit fsync), and a last row appending the same volume
  with bare Produce requests of prebuilt batches (no client work per record): the broker's
  own rate.  Without confluent-kafka installed the librdkafka rows are printed as skipped,
  with the command that installs it (``pip install 'databus[bench]'``), and the rest runs.

Starts its own broker subprocess in a temporary directory unless ``--bootstrap-server`` is
given.  The client runs in this process, the broker in another: on a 2-core machine they
share the cores, so the figures are end-to-end, client included.  Topics are created with
databus's admin client and deleted afterwards unless ``--keep-topic``.  Also holds the
helpers the other benches share (``broker_for``, ``bench_topic``, ``produce_records``,
``print_results``, ``librdkafka_missing``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass

INSTALL_HINT = "pip install 'databus[bench]'"


def add_bench_options(parser, *, records: int) -> None:
    """The options every broker bench shares: where, how much, --keep-topic, --json."""
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                        metavar="HOST:PORT",
                        help="a running broker (default: start one); --bootstrap is an alias")
    parser.add_argument("--num-records", "--records", dest="records", type=int,
                        default=records, help=f"records per run (default {records:,})")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--keep-topic", action="store_true",
                        help="keep the topics the bench created (default: delete them)")
    parser.add_argument("--json", action="store_true",
                        help="print the results as one JSON document")


def add_arguments(parser) -> None:
    add_bench_options(parser, records=2_000_000)
    from .perf_test import add_producer_perf_options

    add_producer_perf_options(parser)
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--acks", nargs="+", default=["1", "all"], help="acks levels to run")
    parser.add_argument("--compression", default="none", help="compression.type")
    parser.add_argument("--topic-compression", default=None, metavar="CODEC",
                        help="the bench topics' compression.type (producer, uncompressed, "
                             "gzip, snappy, lz4, zstd): the broker recompresses batches in "
                             "another codec on append (default: the broker's, producer)")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=1_000_000, help="batch.size bytes")
    parser.add_argument("--rounds", type=int, default=1, help="runs per acks level")
    parser.add_argument("--api", choices=("batch", "produce"), default="batch",
                        help="client call: produce_batch() of 10,000 records (default) or "
                        "one produce() per record (the Python call then caps the client)")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


@dataclass
class Result:
    name: str
    records: int
    seconds: float
    record_size: int
    broker_cpu_s: float | None = None

    @property
    def broker_cpu_percent(self) -> str:
        if self.broker_cpu_s is None:
            return "-"
        return f"{100 * self.broker_cpu_s / self.seconds:.0f}%"

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * self.record_size / self.seconds / 1e6


class ProcessCpu:
    """CPU seconds used so far by a process of ours (None for one we do not own: pid None)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def seconds(self) -> float | None:
        if self.pid is None:
            return None
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def broker_for(args):
    """Yield (bootstrap, ProcessCpu): ``--bootstrap`` or a broker subprocess we own."""
    if args.bootstrap:
        yield args.bootstrap, ProcessCpu(None)
        return
    from databus.broker.process import BrokerProcess

    options = dict(option.split("=", 1) for option in args.broker_option)
    with tempfile.TemporaryDirectory(prefix="databus-bench-") as root:
        with BrokerProcess(root, options) as broker:
            yield broker.bootstrap, ProcessCpu(broker.pid)


def librdkafka_missing() -> str | None:
    """None when confluent-kafka imports; else the line a skipped row prints."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return f"skipped: confluent-kafka is not installed ({INSTALL_HINT})"
    return None


def _admin(bootstrap: str, action):
    """Run ``await action(admin)`` with databus's admin client (no librdkafka needed)."""
    import trio

    from databus.client import Admin

    async def main():
        async with Admin(bootstrap) as admin:
            return await action(admin)

    return trio.run(main)


def create_topic(bootstrap: str, topic: str, partitions: int,
                 configs: dict[str, str] | None = None) -> None:
    async def create(admin):
        error = (await admin.create_topics({topic: partitions}, configs=configs or {}))[topic]
        if error is not None:
            raise RuntimeError(f"creating topic {topic!r}: {error}")

    _admin(bootstrap, create)


def delete_topics(bootstrap: str, topics) -> None:
    async def delete(admin):
        await admin.delete_topics(list(topics))

    _admin(bootstrap, delete)


@contextlib.contextmanager
def bench_topic(bootstrap: str, topic: str, partitions: int, keep: bool = False,
                configs: dict[str, str] | None = None):
    """A topic created for a bench run and deleted after it (unless ``keep``)."""
    create_topic(bootstrap, topic, partitions, configs)
    try:
        yield topic
    finally:
        if not keep:
            delete_topics(bootstrap, [topic])


def produce_records(bootstrap: str, topic: str, records: int, record_size: int, *,
                    acks: str = "1", compression: str = "none", linger_ms: int = 5,
                    batch_size: int = 1_000_000, api: str = "batch") -> float:
    """Produce ``records`` values of ``record_size`` bytes; the seconds until all are acked."""
    from confluent_kafka import Producer

    errors = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression,
        "linger.ms": linger_ms, "batch.size": batch_size,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: errors.append(err),
    })
    value = os.urandom(record_size)
    poll = producer.poll
    start = time.perf_counter()
    if api == "batch":
        chunk = [{"value": value}] * 10_000
        left = records
        while left:
            todo = chunk if left >= len(chunk) else chunk[:left]
            try:
                queued = producer.produce_batch(topic, todo)
            except BufferError:
                queued = 0
            left -= queued
            if queued < len(todo):
                poll(0.001)
    else:
        produce = producer.produce
        for _ in range(records):
            try:
                produce(topic, value)
            except BufferError:
                poll(0.001)
                produce(topic, value)
    remaining = producer.flush(300)
    seconds = time.perf_counter() - start
    if remaining or errors:
        raise RuntimeError(f"{remaining} records undelivered, errors: {errors[:3]}")
    return seconds


def fill_topic(bootstrap: str, topic: str, records: int, record_size: int, *,
               compression: str = "none") -> tuple[str, float]:
    """Fill ``topic`` for a read bench: with librdkafka when installed (the fastest writer
    here), else with databus's producer.  Returns (writer name, seconds)."""
    if librdkafka_missing() is None:
        return "librdkafka", produce_records(bootstrap, topic, records, record_size,
                                             compression=compression, batch_size=1_000_000)
    import trio

    from databus.client import ProducerConfig

    from .client_produce import produce_ours

    config = ProducerConfig.from_kafka({"linger.ms": 20, "batch.size": 1_000_000, "acks": "1",
                                        "compression.type": compression})
    return "databus.client", trio.run(produce_ours, bootstrap, topic, records, record_size,
                                      config)


RAW_BATCH_RECORDS = 8_000


def raw_produce(bootstrap: str, topic: str, partitions: int, records: int, record_size: int,
                acks: int = 1, in_flight: int = 8) -> float:
    """Send prebuilt batches (RAW_BATCH_RECORDS records, under message.max.bytes) with bare Produce requests, ``in_flight`` at a
    time: the rate at which the broker itself appends, without a client's per-record work."""
    import datetime
    import socket
    import struct
    import sys

    from databus.protocol.addresses import parse_host_port
    from databus.protocol.api_keys import ApiKey
    from databus.protocol.entities import build
    from databus.protocol.framing import decode_response, encode_request, request_schema
    from databus.protocol.records import build_batch

    per_batch = RAW_BATCH_RECORDS
    value = os.urandom(record_size)
    batch = build_batch([(None, value, (), 1_700_000_000_000)] * per_batch)
    schema = request_schema(ApiKey.PRODUCE, 8)
    module = sys.modules[schema.__module__]
    frames = [
        encode_request(build(
            schema, acks=acks, timeout=datetime.timedelta(seconds=30), transactional_id=None,
            topic_data=(build(module.TopicProduceData, name=topic, partition_data=(
                build(module.PartitionProduceData, index=p, records=batch),)),),
        ), p, "bench-raw")
        for p in range(partitions)
    ]
    batches = -(-records // per_batch)
    with socket.create_connection(parse_host_port(bootstrap)) as sock:
        reader = sock.makefile("rb", buffering=1 << 16)
        start = time.perf_counter()
        sent = answered = 0
        while answered < batches:
            while sent < batches and sent - answered < in_flight:
                sock.sendall(frames[sent % partitions])
                sent += 1
            (size,) = struct.unpack(">i", reader.read(4))
            _, response = decode_response(reader.read(size), 0, 8)
            error = response.responses[0].partition_responses[0].error_code
            if error:
                raise RuntimeError(f"produce failed: {error!r}")
            answered += 1
        return time.perf_counter() - start


def results_document(title: str, results: list[Result], skipped: dict[str, str]) -> dict:
    """The --json form of a bench's rows (fields documented in docs/cli.md)."""
    return {"title": title, "results": [
        {"name": r.name, "records": r.records, "record_size": r.record_size,
         "seconds": r.seconds, "records_per_s": r.records_per_s, "mb_per_s": r.mb_per_s,
         "broker_cpu_percent": (None if r.broker_cpu_s is None
                                else 100 * r.broker_cpu_s / r.seconds)}
        for r in results], "skipped": skipped}


def print_results(title: str, results: list[Result], *, skipped: dict[str, str] | None = None,
                  as_json: bool = False) -> None:
    from databus.tools.table import Column, print_table

    skipped = skipped or {}
    if as_json:
        from databus.tools.options import print_json

        print_json(results_document(title, results, skipped))
        return
    print_table(
        [Column("run"), *(Column(header, justify="right") for header in (
            "records", "record bytes", "seconds", "records/s", "MB/s", "broker CPU"))],
        [(r.name, f"{r.records:,}", str(r.record_size), f"{r.seconds:.2f}",
          f"{r.records_per_s:,.0f}", f"{r.mb_per_s:.1f}", r.broker_cpu_percent)
         for r in results],
        title=title,
    )
    print_skipped(skipped)


def print_skipped(skipped: dict[str, str]) -> None:
    for name, reason in skipped.items():
        print(f"{name}: {reason}")


def run(args) -> int:
    if args.throughput is not None:
        from .perf_test import run_producer_perf

        return run_producer_perf(args)
    results: list[Result] = []
    skipped: dict[str, str] = {}
    missing = librdkafka_missing()
    configs = {"compression.type": args.topic_compression} if args.topic_compression else None
    with broker_for(args) as (bootstrap, cpu):
        for acks in args.acks:
            if missing:
                skipped[f"produce acks={acks} (librdkafka)"] = missing
                continue
            for round_no in range(1, args.rounds + 1):
                name = f"produce acks={acks}"
                if args.rounds > 1:
                    name += f" #{round_no}"
                with bench_topic(bootstrap, f"bench-produce-{acks}-{time.time_ns()}",
                                 args.partitions, args.keep_topic, configs) as topic:
                    cpu_before = cpu.seconds()
                    seconds = produce_records(bootstrap, topic, args.records,
                                              args.record_size, acks=acks,
                                              compression=args.compression,
                                              linger_ms=args.linger_ms,
                                              batch_size=args.batch_size, api=args.api)
                    cpu_used = None if cpu_before is None else cpu.seconds() - cpu_before
                results.append(Result(name, args.records, seconds, args.record_size,
                                      cpu_used))
        with bench_topic(bootstrap, f"bench-produce-raw-{time.time_ns()}", args.partitions,
                         args.keep_topic, configs) as topic:
            cpu_before = cpu.seconds()
            seconds = raw_produce(bootstrap, topic, args.partitions, args.records,
                                  args.record_size)
            cpu_used = None if cpu_before is None else cpu.seconds() - cpu_before
        records = -(-args.records // RAW_BATCH_RECORDS) * RAW_BATCH_RECORDS
        results.append(Result("bare Produce requests acks=1 (no client)", records, seconds,
                              args.record_size, cpu_used))
    print_results(
        f"databus bench produce: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, compression {args.compression}"
        f"{f' (topic: {args.topic_compression})' if args.topic_compression else ''}, "
        f"{args.api} API, "
        f"librdkafka {_client_version()}", results, skipped=skipped, as_json=args.json)
    return 0


def _client_version() -> str:
    try:
        import confluent_kafka
    except ImportError:
        return "(not installed)"
    return confluent_kafka.libversion()[0]
