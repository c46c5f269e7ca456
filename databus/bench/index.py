"""``databus bench index``: an index's build rate and its point-query latency.

Fills a topic (``--partitions``) with ``--records`` JSON records of about ``--record-size``
bytes, ``{"user_id": .., "log_id": .., "amount": .., "pad": ..}`` (``log_id`` unique,
``user_id`` shared by ``--records / --users`` records), by confluent-kafka with
``batch.size`` ``--batch-size`` (default 16384, Kafka's producers' default; librdkafka's own
default is 1 MB, ~10,000 such records per batch); then:

* **build (sinks runtime + index)**: the sinks runtime in this process (the code ``databus
  sinks`` runs) builds the index of both fields from the beginning of the topic into a
  temporary directory; timed from the first record handed to the plugin until every record
  is indexed (its entries and offset committed in SQLite).  Includes fetching, decoding,
  extracting, SQLite, and the group's commits.
* **index sink alone**: the plugin's own cost, the same kind of records already in memory
  as ConsumerRecords, fed to a fresh index in batches of ``max.poll.records`` (5,000).
* **queries**: ``--queries`` point queries through one ``databus.index.Index`` (the reusable
  query object: SQLite lookup, then the messages fetched from the broker), for random
  ``log_id`` values (one message each) and ``user_id`` values (``--limit`` newest messages
  each), every answer checked (count, values, newest first); p50 / p99 / max of each, and
  of the lookup alone; and, for comparison, a few
  one-shot ``databus.index.query()`` calls (a new connection each).

``--full`` is the issue's size, 10,000,000 records (an hour or more on a small machine).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time

from .common import Result, add_broker_options, broker_for, create_topic, print_results

FULL = 10_000_000
CHUNK = 100_000


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=1_000_000, help="records to index "
                        "(default 1,000,000)")
    parser.add_argument("--full", action="store_true",
                        help=f"the issue's size: {FULL:,} records")
    parser.add_argument("--record-size", type=int, default=100, help="JSON bytes per record")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--batch-size", type=int, default=16384,
                        help="the producer's batch.size: a query reads the whole batch "
                        "holding a message (default 16384, Kafka's default)")
    parser.add_argument("--users", type=int, default=100_000, help="distinct user_id values")
    parser.add_argument("--queries", type=int, default=1000, help="queries of each kind")
    parser.add_argument("--limit", type=int, default=10, help="messages per user_id query")
    parser.add_argument("--skip-alone", action="store_true",
                        help="leave out the 'index sink alone' row")


def value(i: int, users: int, size: int) -> bytes:
    doc = {"user_id": i % users, "log_id": f"L{i}", "amount": i / 8, "pad": ""}
    base = len(json.dumps(doc, separators=(",", ":")))
    doc["pad"] = "x" * max(0, size - base)
    return json.dumps(doc, separators=(",", ":")).encode()


def fill(bootstrap: str, topic: str, args) -> float:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.size": args.batch_size,
                         "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    start = time.perf_counter()
    for first in range(0, args.records, CHUNK):
        todo = [{"value": value(i, args.users, args.record_size)}
                for i in range(first, min(first + CHUNK, args.records))]
        while todo:
            # produce_batch does not raise when the queue is full: it marks the messages it
            # could not take (``_error``), to be offered again once deliveries made room.
            if producer.produce_batch(topic, todo) == len(todo):
                break
            todo = [m for m in todo if "_error" in m]
            for m in todo:
                if m.pop("_error").code() != KafkaError._QUEUE_FULL:
                    raise RuntimeError(f"fill: {m}: not queued")
            producer.poll(0.05)
    if producer.flush(600):
        raise RuntimeError("fill: records undelivered")
    seconds = time.perf_counter() - start
    # The build waits for every record: a record short would make it wait forever.
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-index-fill"})
    try:
        held = sum(watermarks.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(args.partitions))
    finally:
        watermarks.close()
    if held != args.records:
        raise RuntimeError(f"fill: the topic holds {held:,} records, not {args.records:,}")
    return seconds


def index_config(bootstrap: str, topic: str, path: str):
    from databus.config import parse_config

    return parse_config({
        "clusters": {"main": {"bootstrap.servers": bootstrap}},
        "indexes": {"bench": {"topics": [topic], "path": path,
                              "fields": {"user_id": "value.user_id",
                                         "log_id": "value.log_id"}}},
    })


def indexed(path: str) -> int:
    """Records committed in the index database at ``path`` (its partitions' next offsets)."""
    from databus_plugins.index.store import IndexStore

    try:
        store = IndexStore(path, readonly=True)
    except FileNotFoundError:
        return 0
    try:
        return sum(store.offsets().values())
    finally:
        store.close()


def build_with_runtime(config, records: int) -> float:
    import trio

    from databus.plugins import get_plugin_manager
    from databus.sinks.runtime import SinkSupervisor

    bootstrap = config.clusters["main"].bootstrap_servers
    path = config.indexes["bench"].db_path("bench")

    async def main() -> float:
        supervisor = SinkSupervisor(get_plugin_manager(), lambda c: {"main": bootstrap})
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.serve, supervisor.prepare(config))
            progress = supervisor.runners["index.bench"].progress
            with trio.fail_after(24 * 3600):
                while progress.records_in == 0:
                    await trio.sleep(0.001)
                start = time.perf_counter()
                while progress.records_in < records:
                    await trio.sleep(0.01)
                # Handed is not yet committed: until SQLite has every record's entries.
                while await trio.to_thread.run_sync(indexed, path) < records:
                    await trio.sleep(0.01)
            seconds = time.perf_counter() - start
            await supervisor.aclose()
            nursery.cancel_scope.cancel()
            return seconds

    return trio.run(main)


def build_sink_alone(args, path: str) -> tuple[float, float, int]:
    """Seconds (and CPU seconds, all threads) the sink takes for ``--records`` (up to 1M)
    records made beforehand, through its async methods as the runtime calls them (open,
    write per batch, a forced flush)."""
    import trio
    from databus_plugins.index.fields import Extractor
    from databus_plugins.index.sink import IndexSink

    from databus.client import ConsumerRecord

    records = min(args.records, 1_000_000)
    parts = args.partitions
    now = int(time.time() * 1000)
    batch = 5000  # the sinks runtime's default max.poll.records
    batches = []
    for first in range(0, records, batch * parts):
        chunks: dict[int, list] = {p: [] for p in range(parts)}
        for i in range(first, min(first + batch * parts, records)):
            chunks[i % parts].append(ConsumerRecord(
                "t", i % parts, i // parts, now, 0, None,
                value(i, args.users, args.record_size), ()))
        batches += [(("t", p), chunk) for p, chunk in chunks.items() if chunk]

    async def main() -> float:
        sink = IndexSink("alone", path, Extractor({"user_id": "value.user_id",
                                                   "log_id": "value.log_id"}))
        for p in range(parts):
            await sink.open(("t", p), None)
        start, cpu = time.perf_counter(), time.process_time()
        for tp, chunk in batches:
            await sink.write(tp, chunk)
        await sink.flush([("t", p) for p in range(parts)], True)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        await sink.aclose()
        return seconds, cpu

    return *trio.run(main), records


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return at(0.50), at(0.99), ordered[-1]


def check_answer(args, field: str, wanted: str, limit: int, messages) -> None:
    """The bench's data is known: a query's answer must be exactly the right number of
    messages, each with that value, newest first (else the figures would be of a wrong
    answer)."""
    if field == "log_id":
        matching = 1
    else:
        matching = len(range(int(wanted), args.records, args.users))
    values = [str(json.loads(m.value)[field]) for m in messages]
    stamps = [m.timestamp for m in messages]
    if len(messages) != min(limit, matching) or set(values) - {wanted} or \
            stamps != sorted(stamps, reverse=True):
        raise RuntimeError(f"{field}={wanted}: a wrong answer ({len(messages)} messages of "
                           f"{min(limit, matching)} expected, values {sorted(set(values))})")


def run_queries(config, args) -> list[tuple[str, list[float]]]:
    import databus.index

    rng = random.Random(7)
    out = []
    with databus.index.Index(config) as index:
        index.query("bench", "log_id", "L0")  # connect once (the first query's cost)
        for field, pick, limit in (
            ("log_id", lambda: f"L{rng.randrange(args.records)}", 1),
            ("user_id", lambda: str(rng.randrange(min(args.users, args.records))), args.limit),
        ):
            full, lookup = [], []
            for _ in range(args.queries):
                wanted = pick()
                start = time.perf_counter()
                messages = index.query("bench", field, wanted, limit=limit)
                full.append(time.perf_counter() - start)
                check_answer(args, field, wanted, limit, messages)
                start = time.perf_counter()
                index.stores.lookup(config, "bench", field, wanted, limit=limit)
                lookup.append(time.perf_counter() - start)
            out.append((f"{field}=… (limit {limit}): lookup + fetch", full))
            out.append((f"{field}=… (limit {limit}): lookup alone", lookup))
    # For comparison: databus.index.query(), which opens (and closes) a connection per call.
    once = []
    for _ in range(min(args.queries, 20)):
        start = time.perf_counter()
        databus.index.query(config, "bench", "log_id", f"L{rng.randrange(args.records)}")
        once.append(time.perf_counter() - start)
    out.append(("log_id=… one-shot databus.index.query() (connects each time)", once))
    return out


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table

    if args.full:
        args.records = FULL
    size = len(value(args.records - 1, args.users, args.record_size))
    results = []
    latencies = []
    cpu_per_record: dict[str, float] = {}
    db_size = 0
    with broker_for(args) as (bootstrap, cpu), \
            tempfile.TemporaryDirectory(prefix="databus-bench-index-") as tmp:
        topic = f"bench-index-{time.time_ns()}"
        create_topic(bootstrap, topic, args.partitions)
        results.append(Result("fill (confluent-kafka)", args.records,
                              fill(bootstrap, topic, args), size))
        config = index_config(bootstrap, topic, tmp)
        before, own = cpu.seconds(), time.process_time()
        seconds = build_with_runtime(config, args.records)
        used = None if before is None else cpu.seconds() - before
        cpu_per_record["build: sinks runtime + index"] = (
            time.process_time() - own) / args.records
        results.append(Result("build: sinks runtime + index (fetch, decode, SQLite, commit)",
                              args.records, seconds, size, used))
        db_size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
                      if f.startswith("bench.db"))
        latencies = run_queries(config, args)
    if not args.skip_alone:
        with tempfile.TemporaryDirectory(prefix="databus-bench-index-") as tmp:
            seconds, used, records = build_sink_alone(args, os.path.join(tmp, "alone.db"))
            cpu_per_record["build: index sink alone"] = used / records
            results.append(Result("build: index sink alone (extract + SQLite)", records,
                                  seconds, size))
    print_results(f"databus bench index: {args.records:,} JSON records of ~{size} B, "
                  f"{args.partitions} partitions, batch.size {args.batch_size:,}, fields user_id + log_id "
                  f"(index database {db_size / 1e6:,.0f} MB)", results)
    # On a shared machine the rate says how much CPU the build got as much as what it
    # costs; the CPU time this process used (all its threads) per record is the cost.
    for name, per_record in cpu_per_record.items():
        print(f"{name}: {per_record * 1e6:.1f} µs of this process's CPU per record")
    print_table(
        [Column("query"), *(Column(h, justify="right") for h in ("queries", "p50 ms",
                                                                  "p99 ms", "max ms"))],
        [(name, f"{len(samples):,}", *(f"{s * 1000:.2f}" for s in percentiles(samples)))
         for name, samples in latencies],
        title="point queries through databus.index.Index (messages fetched from the broker)")
    return 0
