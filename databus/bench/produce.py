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
databus's admin client and deleted afterwards unless ``--keep-topic``.  The helpers the
benches share (``broker_for``, ``bench_topic``, ``produce_records``, ``print_results``, ...)
live in common.py.
"""

from __future__ import annotations

import os
import time

from .common import (
    Result,
    add_bench_options,
    bench_topic,
    broker_for,
    librdkafka_missing,
    print_results,
    produce_records,
)
from .perf_test import add_producer_perf_options, run_producer_perf


def add_arguments(parser) -> None:
    add_bench_options(parser, records=2_000_000)
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


def run(args) -> int:
    if args.throughput is not None:
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
