"""``databus bench parquet``: records/s of JSON records exported to Parquet.

Fills a topic (``--partitions``) with ``--records`` JSON records of about ``--record-size``
bytes (``{"id": .., "name": .., "amount": .., "pad": ..}``), then:

* **sinks runtime + parquet**: the sinks runtime in this process (the code ``databus
  sinks`` runs) exports the topic to a temporary directory with the built-in parquet sink;
  timed from the first record handed to the plugin until every record is in a file and its
  offset committed (group join excluded).  Includes fetching, decoding, Arrow, Parquet
  (snappy) writing with fsync, and the commits.
* **parquet sink alone**: the same records, already in memory, fed to the sink object in
  batches of ``max.poll.records``: the plugin's own cost (decode + write), as columns
  (``write_columns``, what the runtime hands it) and as ConsumerRecords (``write``).
"""

from __future__ import annotations

import json
import tempfile
import time

from .common import Result, add_broker_options, broker_for, create_topic, print_results


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=1_000_000, help="records to export")
    parser.add_argument("--record-size", type=int, default=100, help="JSON bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--flush-size", type=int, default=100_000, help="flush.size (records "
                        "per file)")
    parser.add_argument("--codec", default="snappy", help="parquet.codec")


def json_values(records: int, size: int) -> list[bytes]:
    out = []
    for i in range(records):
        doc = {"id": i, "name": f"user-{i % 1000}", "amount": i / 8, "pad": ""}
        base = len(json.dumps(doc, separators=(",", ":")))
        doc["pad"] = "x" * max(0, size - base)
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out


def fill(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    start = time.perf_counter()
    for i in range(0, len(values), 10_000):
        todo = [{"value": v} for v in values[i:i + 10_000]]
        while todo:
            try:
                producer.produce_batch(topic, todo)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise RuntimeError("fill: records undelivered")
    return time.perf_counter() - start


def export_with_runtime(bootstrap: str, topic: str, records: int, path: str, args) -> float:
    import trio

    from databus.config import parse_config
    from databus.plugins import get_plugin_manager
    from databus.sinks.runtime import SinkSupervisor

    config = parse_config({
        "clusters": {"main": {"bootstrap.servers": bootstrap}},
        "sinks": {"bench": {"plugin": "parquet", "topics": [topic], "config": {
            "path": path, "flush.size": args.flush_size, "parquet.codec": args.codec}}},
    })

    async def main() -> float:
        supervisor = SinkSupervisor(get_plugin_manager(), lambda c: {"main": bootstrap})
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.serve, supervisor.prepare(config))
            progress = supervisor.runners["bench"].progress
            with trio.fail_after(600):
                while progress.records_in == 0:
                    await trio.sleep(0.001)
                start = time.perf_counter()
                while progress.records_in < records:
                    await trio.sleep(0.01)
            await supervisor.aclose()
            print("closed", time.perf_counter() - start)  # the rest of the records into files, committed
            seconds = time.perf_counter() - start
            nursery.cancel_scope.cancel()
            return seconds

    return trio.run(main)


def export_sink_alone(topic: str, values: list[bytes], path: str, args, *,
                      columns: bool = True) -> float:
    """The sink object fed the records already in memory, in batches of the runtime's
    default max.poll.records per partition: as the runtime hands them (``columns``:
    RecordColumns decoded from record batches, through ``write_columns``), or as
    ConsumerRecords through ``write`` (the per-record path)."""
    from databus_plugins.parquet import layout
    from databus_plugins.parquet.sink import ParquetSink

    from databus.client import ConsumerRecord
    from databus.client.fetcher import decode_fetched_columns
    from databus.protocol.records import build_batch

    sink = ParquetSink(layout.parse_options(
        {"path": path, "flush.size": args.flush_size, "parquet.codec": args.codec}))
    now = int(time.time() * 1000)
    parts = range(args.partitions)
    batch = 5000  # the sinks runtime's default max.poll.records
    chunks: dict[int, list] = {}
    for p in parts:
        mine = values[p::args.partitions]
        if columns:
            chunks[p] = [decode_fetched_columns(topic, p, build_batch(
                [(None, v, (), now) for v in mine[o:o + batch]], base_offset=o), o)[0]
                for o in range(0, len(mine), batch)]
        else:
            records = [ConsumerRecord(topic, p, i, now, 0, None, v, ()) for i, v in enumerate(mine)]
            chunks[p] = [records[o:o + batch] for o in range(0, len(records), batch)]
    write = sink._write_columns if columns else sink._write
    start = time.perf_counter()
    for p in parts:
        sink._open((topic, p), None)
    for i in range(max(len(c) for c in chunks.values())):
        for p in parts:
            if i < len(chunks[p]):
                write((topic, p), chunks[p][i])
    sink._flush([(topic, p) for p in parts], True)
    return time.perf_counter() - start


def run(args) -> int:
    values = json_values(args.records, args.record_size)
    size = sum(map(len, values)) // len(values)
    results = []
    with broker_for(args) as (bootstrap, cpu):
        topic = f"bench-parquet-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        results.append(Result("fill (confluent-kafka)", args.records,
                               fill(bootstrap, topic, values), size))
        with tempfile.TemporaryDirectory(prefix="databus-bench-parquet-") as out:
            before = cpu.seconds()
            seconds = export_with_runtime(bootstrap, topic, args.records, out, args)
            used = None if before is None else cpu.seconds() - before
            results.append(Result("sinks runtime + parquet (fetch, decode, write, commit)",
                                  args.records, seconds, size, used))
    with tempfile.TemporaryDirectory(prefix="databus-bench-parquet-") as out:
        seconds = export_sink_alone(topic, values, out, args)
        results.append(Result("parquet sink alone, columns (write_columns: decode + write)",
                              args.records, seconds, size))
    with tempfile.TemporaryDirectory(prefix="databus-bench-parquet-") as out:
        seconds = export_sink_alone(topic, values, out, args, columns=False)
        results.append(Result("parquet sink alone, ConsumerRecords (write)", args.records,
                              seconds, size))
    print_results(
        f"databus bench parquet: {args.records:,} JSON records of ~{size} B, "
        f"{args.partitions} partitions, flush.size {args.flush_size:,}, {args.codec}", results)
    return 0
