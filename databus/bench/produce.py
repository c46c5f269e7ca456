"""``databus bench produce``: librdkafka (confluent-kafka) producing to the broker.

Records/s and MB/s for fixed-size records (100 bytes by default), once per acks level
(acks=1: answered after the append; acks=all: after the group-commit fsync).  Starts its own
broker subprocess in a temporary directory unless ``--bootstrap`` is given.  The client runs
in this process, the broker in another: on a 2-core machine they share the cores, so the
figures are end-to-end, client included.  A last row appends the same volume with bare
Produce requests of prebuilt batches (no client work per record): the broker's own rate.
Also holds the helpers ``databus bench consume``
shares (``broker_for``, ``produce_records``, ``print_results``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap", help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--acks", nargs="+", default=["1", "all"], help="acks levels to run")
    parser.add_argument("--compression", default="none", help="compression.type")
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


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


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


def print_results(title: str, results: list[Result]) -> None:
    from databus.tools.table import Column, print_table

    print_table(
        [Column("run"), *(Column(header, justify="right") for header in (
            "records", "record bytes", "seconds", "records/s", "MB/s", "broker CPU"))],
        [(r.name, f"{r.records:,}", str(r.record_size), f"{r.seconds:.2f}",
          f"{r.records_per_s:,.0f}", f"{r.mb_per_s:.1f}", r.broker_cpu_percent)
         for r in results],
        title=title,
    )


def run(args) -> int:
    results = []
    with broker_for(args) as (bootstrap, cpu):
        for acks in args.acks:
            for round_no in range(1, args.rounds + 1):
                topic = f"bench-produce-{acks}-{time.time_ns()}"
                create_topic(bootstrap, topic, args.partitions)
                cpu_before = cpu.seconds()
                seconds = produce_records(bootstrap, topic, args.records, args.record_size,
                                          acks=acks, compression=args.compression,
                                          linger_ms=args.linger_ms,
                                          batch_size=args.batch_size, api=args.api)
                cpu_used = None if cpu_before is None else cpu.seconds() - cpu_before
                name = f"produce acks={acks}"
                if args.rounds > 1:
                    name += f" #{round_no}"
                results.append(Result(name, args.records, seconds, args.record_size,
                                      cpu_used))
        topic = f"bench-produce-raw-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        cpu_before = cpu.seconds()
        seconds = raw_produce(bootstrap, topic, args.partitions, args.records,
                              args.record_size)
        cpu_used = None if cpu_before is None else cpu.seconds() - cpu_before
        records = -(-args.records // RAW_BATCH_RECORDS) * RAW_BATCH_RECORDS
        results.append(Result("bare Produce requests acks=1 (no client)", records, seconds,
                              args.record_size, cpu_used))
    print_results(
        f"databus bench produce: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, compression {args.compression}, {args.api} API, "
        f"librdkafka {_client_version()}", results)
    return 0


def _client_version() -> str:
    import confluent_kafka

    return confluent_kafka.libversion()[0]
