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
    from databus.client import ConsumerRecord
    from databus.plugins import get_plugin_manager, make_sink

    _name, sink = make_sink(get_plugin_manager(), plugin, _sink_config(plugin, path, args))
    now = int(time.time() * 1000)
    parts = range(args.partitions)
    records = {p: [ConsumerRecord(topic, p, i, now, 0, None, v, ())
                   for i, v in enumerate(values[p::args.partitions])] for p in parts}
    batch = 5000  # the sinks runtime's default max.poll.records
    start = time.perf_counter()
    for p in parts:
        sink._open((topic, p), None)
    for offset in range(0, max(len(r) for r in records.values()), batch):
        for p in parts:
            chunk = records[p][offset:offset + batch]
            if chunk:
                sink._write((topic, p), chunk)
        sink._flush([(topic, p) for p in parts], False)
    sink._flush([(topic, p) for p in parts], True)
    return time.perf_counter() - start


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
    return 0
