"""``databus bench consume``: consuming from the broker.

With ``--messages N`` (kafka-consumer-perf-test's required option) it is that tool: N
records read by databus's consumer in a group, Kafka's header and figures line (see
perf_test.py).  Otherwise the comparison table below, with librdkafka (confluent-kafka):

Fills a topic with ``--records`` records (produced as in ``databus bench produce``), then
reads them all from the beginning with one consumer and reports records/s and MB/s of the
read alone.  The consumer assigns the partitions itself (no group), so the figure is the
Fetch path: broker reads, response encoding, loopback, librdkafka parsing, Python delivery.
A last row reads the same records with bare Fetch requests from a minimal client (no
per-record work), which shows how fast the broker itself serves.  Without confluent-kafka
the librdkafka rows are printed as skipped with the command that installs it, the fill is
written by databus's producer, and the bare-Fetch row still runs.  The topic is deleted
after the run unless ``--keep-topic``.
"""

from __future__ import annotations

import time

from .common import (
    Result,
    add_bench_options,
    bench_topic,
    broker_for,
    consume_all,
    fill_topic,
    librdkafka_missing,
    print_results,
)
from .perf_test import add_consumer_perf_options, run_consumer_perf


def add_arguments(parser) -> None:
    add_bench_options(parser, records=2_000_000)
    add_consumer_perf_options(parser)
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--compression", default="none", help="compression.type of the fill")
    parser.add_argument("--rounds", type=int, default=2, help="read the topic this many times")


def raw_fetch_all(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Read every record with bare Fetch requests (kio decode, no per-record work): the rate
    at which the broker serves, without librdkafka's and Python's per-message costs."""
    import datetime
    import socket
    import struct
    import sys

    from databus.protocol.addresses import parse_host_port
    from databus.protocol.api_keys import ApiKey
    from databus.protocol.entities import build
    from databus.protocol.framing import decode_response, encode_request, request_schema
    from databus.protocol.records import iter_headers

    version = 11
    schema = request_schema(ApiKey.FETCH, version)
    module = sys.modules[schema.__module__]
    offsets = dict.fromkeys(range(partitions), 0)
    with socket.create_connection(parse_host_port(bootstrap)) as sock:
        reader = sock.makefile("rb", buffering=1 << 20)
        seen = 0
        start = time.perf_counter()
        correlation = 0
        while seen < records:
            correlation += 1
            request = build(
                schema, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500),
                min_bytes=1, max_bytes=64 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, forgotten_topics_data=(), rack_id="",
                topics=(build(module.FetchTopic, topic=topic, partitions=tuple(
                    build(module.FetchPartition, partition=p, fetch_offset=o,
                          partition_max_bytes=8 << 20, current_leader_epoch=-1,
                          log_start_offset=-1)
                    for p, o in offsets.items())),),
            )
            sock.sendall(encode_request(request, correlation, "bench-raw"))
            (size,) = struct.unpack(">i", reader.read(4))
            _, response = decode_response(reader.read(size), 1, version)
            for part in response.responses[0].partitions:
                for _pos, header in iter_headers(part.records or b""):
                    if header.base_offset + header.last_offset_delta >= offsets[
                            part.partition_index]:
                        seen += header.records_count
                        offsets[part.partition_index] = (
                            header.base_offset + header.last_offset_delta + 1)
        return time.perf_counter() - start


def run(args) -> int:
    if args.messages is not None:
        return run_consumer_perf(args)
    results = []
    skipped: dict[str, str] = {}
    missing = librdkafka_missing()
    with broker_for(args) as (bootstrap, cpu), bench_topic(
            bootstrap, f"bench-consume-{time.time_ns()}", args.partitions,
            args.keep_topic) as topic:
        writer, fill = fill_topic(bootstrap, topic, args.records, args.record_size,
                                  compression=args.compression)
        results.append(Result(f"fill ({writer} produce acks=1)", args.records, fill,
                              args.record_size))
        for round_no in range(1, args.rounds + 1):
            if missing:
                skipped[f"consume round {round_no} (librdkafka)"] = missing
                continue
            before = cpu.seconds()
            seconds = consume_all(bootstrap, topic, args.partitions, args.records)
            used = None if before is None else cpu.seconds() - before
            results.append(Result(f"consume round {round_no}", args.records, seconds,
                                  args.record_size, used))
        before = cpu.seconds()
        seconds = raw_fetch_all(bootstrap, topic, args.partitions, args.records)
        used = None if before is None else cpu.seconds() - before
        results.append(Result("bare Fetch requests (no client)", args.records, seconds,
                              args.record_size, used))
    print_results(
        f"databus bench consume: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, compression {args.compression}", results,
        skipped=skipped, as_json=args.json)
    return 0


__all__ = ["add_arguments", "raw_fetch_all", "run"]
