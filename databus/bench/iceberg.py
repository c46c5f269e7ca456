"""``databus bench iceberg``: records/s of JSON records into an Iceberg table, beside the
parquet sink in the same run (same topic, same broker, same machine load).

Fills a topic (``--partitions``) with ``--records`` JSON records of about ``--record-size``
bytes (``databus bench parquet``'s records), then, one after the other, each with a group of
its own:

* **sinks runtime + parquet** and **sinks runtime + iceberg**: the sinks runtime in this
  process (the code ``databus sinks`` runs) with the built-in sink, timed from the first
  record handed to the plugin until every record is durable and its offset committed (group
  join excluded; the last records are made durable by the sink's stop).  Iceberg: the SQL catalog on SQLite in a temporary directory, a snapshot
  every ``--commit-interval-ms``, partitioned by hour(timestamp).
* **parquet / iceberg sink alone**: the same records in memory as ConsumerRecords fed to the
  sink object in batches of ``max.poll.records``: the plugin's own cost.

The "vs parquet" column says iceberg's rate over parquet's; the title counts the snapshots.
Both sinks are found through the plugin manager, as ``databus sinks`` finds them.
"""

from __future__ import annotations

import tempfile
import time

from .common import Result, add_broker_options, broker_for, create_topic
from .parquet import fill, json_values


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=1_000_000, help="records to export")
    parser.add_argument("--record-size", type=int, default=100, help="JSON bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--commit-interval-ms", type=int, default=10_000,
                        help="the iceberg sink's commit.interval.ms (default 10000)")
    parser.add_argument("--visibility-seconds", type=float, default=60.0,
                        help="produce for this long at --visibility-rate into a fresh topic "
                        "exported by the iceberg sink, timing each record until a pyiceberg "
                        "scan sees it (0: skip)")
    parser.add_argument("--visibility-rate", type=int, default=2000,
                        help="records/s produced during the visibility run")
    parser.add_argument("--flush-size", type=int, default=100_000,
                        help="the parquet sink's flush.size (records per file)")


def _sink_config(plugin: str, path: str, args) -> dict:
    if plugin == "parquet":
        return {"path": path, "flush.size": args.flush_size}
    return {"path": path, "namespace": "bench", "commit.interval.ms": args.commit_interval_ms}


def with_runtime(plugin: str, bootstrap: str, topic: str, records: int, path: str,
                 args) -> tuple[float, int]:
    """(seconds, plugin commits) for the sinks runtime to make ``records`` durable."""
    import trio

    from databus.config import parse_config
    from databus.plugins import get_plugin_manager
    from databus.sinks.runtime import SinkSupervisor

    name = f"bench-{plugin}"
    config = parse_config({
        "clusters": {"main": {"bootstrap.servers": bootstrap}},
        "sinks": {name: {"plugin": plugin, "topics": [topic],
                         "config": _sink_config(plugin, path, args)}},
    })

    async def main() -> tuple[float, int]:
        supervisor = SinkSupervisor(get_plugin_manager(), lambda c: {"main": bootstrap})
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.serve, supervisor.prepare(config))
            runner = supervisor.runners[name]
            progress = runner.progress
            with trio.fail_after(1800):
                while progress.records_in == 0:
                    await trio.sleep(0.001)
                start = time.perf_counter()
                while progress.records_in < records:
                    await trio.sleep(0.01)
            commits = getattr(runner._sink, "commits", 0)
            # the stop flushes what is left and commits it (as parquet's bench times it)
            await supervisor.aclose()
            seconds = time.perf_counter() - start
            commits = max(commits, getattr(runner._sink, "commits", 0))
            nursery.cancel_scope.cancel()
            return seconds, commits

    return trio.run(main)


def sink_alone(plugin: str, topic: str, values: list[bytes], path: str, args) -> float:
    """The sink object fed the records already in memory as the runtime hands them
    (RecordColumns decoded from record batches, through ``write_columns``), in batches of
    the runtime's default max.poll.records per partition."""
    from databus.client.fetcher import decode_fetched_columns
    from databus.plugins import get_plugin_manager, make_sink
    from databus.protocol.records import build_batch

    _name, sink = make_sink(get_plugin_manager(), plugin, _sink_config(plugin, path, args))
    now = int(time.time() * 1000)
    parts = range(args.partitions)
    batch = 5000  # the sinks runtime's default max.poll.records
    chunks = {}
    for p in parts:
        mine = values[p::args.partitions]
        chunks[p] = [decode_fetched_columns(topic, p, build_batch(
            [(None, v, (), now) for v in mine[o:o + batch]], base_offset=o), o)[0]
            for o in range(0, len(mine), batch)]
    start = time.perf_counter()
    for p in parts:
        sink._open((topic, p), None)
    for i in range(max(len(c) for c in chunks.values())):
        for p in parts:
            if i < len(chunks[p]):
                sink._write_columns((topic, p), chunks[p][i])
        sink._flush([(topic, p) for p in parts], False)
    sink._flush([(topic, p) for p in parts], True)
    return time.perf_counter() - start


def visibility(bootstrap: str, path: str, args) -> dict:
    """Records produced at a steady rate (confluent-kafka, librdkafka's defaults) into a
    fresh topic exported by the sinks runtime + iceberg sink; a reader thread loads the
    table every 100 ms and, at each new snapshot, scans it with pyiceberg: a record is
    *visible* when the scan that first returns it ends, and its delay is that time minus
    its Kafka timestamp (CreateTime: librdkafka sets it in produce()).  Also the
    snapshots committed while producing, per minute."""
    import threading

    import trio
    from confluent_kafka import Producer
    from databus_plugins.iceberg import tables
    from databus_plugins.iceberg.options import parse_options

    from databus.config import parse_config
    from databus.plugins import get_plugin_manager
    from databus.sinks.runtime import SinkSupervisor

    topic = f"bench-iceberg-visible-{time.time_ns()}"
    create_topic(bootstrap, topic, args.partitions)
    config = _sink_config("iceberg", path, args)
    options = parse_options(config)
    name = "bench-iceberg-visible"
    total = int(args.visibility_seconds * args.visibility_rate)
    delays: list[float] = []
    snapshots: list[int] = []  # commit times (ms) of the snapshots the reader saw
    window: list[float] = []  # produce start, end (ms)
    done = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        pad = "x" * max(0, args.record_size - 40)
        start = time.monotonic()
        window.append(time.time() * 1000)
        for i in range(total):
            due = start + i / args.visibility_rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.produce(topic, f'{{"i":{i},"pad":"{pad}"}}'.encode(),
                             partition=i % args.partitions)
            producer.poll(0)
        producer.flush(60)
        window.append(time.time() * 1000)

    def read() -> None:
        import pyarrow.compute as pc

        catalog = tables.open_catalog(options.catalog)
        seen: dict[int, int] = {}  # partition -> next offset not yet seen
        count, last = 0, None
        deadline = time.monotonic() + args.visibility_seconds + \
            3 * args.commit_interval_ms / 1000 + 120
        while count < total and time.monotonic() < deadline:
            time.sleep(0.1)
            table = tables.load_table(catalog, options.table_name(topic))
            snapshot = table.current_snapshot() if table is not None else None
            if snapshot is None or snapshot.snapshot_id == last:
                continue
            last = snapshot.snapshot_id
            rows = table.scan(snapshot_id=last,
                              selected_fields=("partition", "offset", "timestamp")).to_arrow()
            now_ms = time.time() * 1000
            snapshots.append(snapshot.timestamp_ms)
            for p in range(args.partitions):
                mine = rows.filter(pc.and_(pc.equal(rows["partition"], p),
                                           pc.greater_equal(rows["offset"], seen.get(p, 0))))
                if not mine.num_rows:
                    continue
                seen[p] = pc.max(mine["offset"]).as_py() + 1
                ts = pc.divide(mine["timestamp"].cast("int64"), 1000).to_pylist()  # us -> ms
                delays.extend((now_ms - t) / 1000 for t in ts)
                count += mine.num_rows
        done.set()

    async def main() -> None:
        parsed = parse_config({
            "clusters": {"main": {"bootstrap.servers": bootstrap}},
            "sinks": {name: {"plugin": "iceberg", "topics": [topic], "config": config}},
        })
        supervisor = SinkSupervisor(get_plugin_manager(), lambda c: {"main": bootstrap})
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.serve, supervisor.prepare(parsed))
            progress = supervisor.runners[name].progress
            with trio.fail_after(120):  # the group's join is not part of the delay
                while len(progress.owned()) < args.partitions:
                    await trio.sleep(0.05)
            threads = [threading.Thread(target=f, daemon=True) for f in (produce, read)]
            for t in threads:
                t.start()
            while not done.is_set():
                await trio.sleep(0.1)
            await supervisor.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
    delays.sort()
    start, end = (window + [time.time() * 1000] * 2)[:2]
    during = [t for t in snapshots if start <= t <= end]
    return {
        "records": len(delays), "produced": total,
        "p50": delays[len(delays) // 2] if delays else float("nan"),
        "p99": delays[min(len(delays) - 1, int(len(delays) * 0.99))] if delays else float("nan"),
        "max": delays[-1] if delays else float("nan"),
        "snapshots": len(snapshots),
        "per_minute": len(during) / ((end - start) / 60_000) if end > start else float("nan"),
    }


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table

    values = json_values(args.records, args.record_size)
    size = sum(map(len, values)) // len(values)
    results: list[Result] = []
    commits = {}
    with broker_for(args) as (bootstrap, cpu):
        topic = f"bench-iceberg-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        results.append(Result("fill (confluent-kafka)", args.records,
                              fill(bootstrap, topic, values), size))
        for plugin in ("parquet", "iceberg"):
            with tempfile.TemporaryDirectory(prefix=f"databus-bench-{plugin}-") as out:
                before = cpu.seconds()
                seconds, commits[plugin] = with_runtime(plugin, bootstrap, topic,
                                                        args.records, out, args)
                used = None if before is None else cpu.seconds() - before
                results.append(Result(f"sinks runtime + {plugin}", args.records, seconds,
                                      size, used))
        seen = None
        if args.visibility_seconds > 0:
            with tempfile.TemporaryDirectory(prefix="databus-bench-iceberg-") as out:
                seen = visibility(bootstrap, out, args)
    for plugin in ("parquet", "iceberg"):
        with tempfile.TemporaryDirectory(prefix=f"databus-bench-{plugin}-") as out:
            seconds = sink_alone(plugin, topic, values, out, args)
            results.append(Result(f"{plugin} sink alone", args.records, seconds, size))
    rate = {r.name: r.records_per_s for r in results}
    print_table(
        [Column("run"), *(Column(h, justify="right") for h in (
            "records", "seconds", "records/s", "MB/s", "vs parquet"))],
        [(r.name, f"{r.records:,}", f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
          f"{r.mb_per_s:.1f}",
          f"{r.records_per_s / rate[r.name.replace('iceberg', 'parquet')]:.2f}x"
          if "iceberg" in r.name else "")
         for r in results],
        title=f"databus bench iceberg: {args.records:,} JSON records of ~{size} B, "
        f"{args.partitions} partitions, commit.interval.ms {args.commit_interval_ms:,} "
        f"(iceberg snapshots in the runtime run: {commits.get('iceberg')})",
    )
    if seen is not None:
        interval = args.commit_interval_ms / 1000
        print_table(
            [Column(h, justify="right") for h in (
                "records seen / produced", "p50 s", "p99 s", "max s", "aim: p99 <= interval + 5 s",
                "snapshots", "commits/min while producing", "bound 60/interval")],
            [(f"{seen['records']:,} / {seen['produced']:,}", f"{seen['p50']:.2f}",
              f"{seen['p99']:.2f}", f"{seen['max']:.2f}",
              "yes" if seen["p99"] <= interval + 5 else "no", str(seen["snapshots"]),
              f"{seen['per_minute']:.1f}", f"{60 / interval:.1f}")],
            title=f"visibility: produce -> seen by a pyiceberg scan, {args.visibility_rate:,} "
            f"records/s for {args.visibility_seconds:g} s, commit.interval.ms "
            f"{args.commit_interval_ms:,}",
        )
    return 0
