"""``databus bench mirror``: A -> B replication throughput and latency, beside the broker's
own ingest from librdkafka in the same run.

Starts two broker subprocesses (regions A and B) in a temporary directory, then:

1. ingest   librdkafka (confluent-kafka) produces ``--records`` values of ``--record-size``
            bytes to A (acks=all): the rate A takes records in;
2. copy     a mirror (databus.mirror's engine, in this process) copies that backlog to B:
            records/s from start until B acknowledged the last one (exactly-once: until
            the transaction holding it committed);
3. paced    librdkafka produces ``--rate`` records/s to another topic on A for
            ``--seconds`` while the mirror runs; replication latency (when readers of B
            can see the copy: B's acknowledgement, exactly-once the commit, minus the
            record's timestamp) p50/p99 over every record.

Steps 2 and 3 run for each ``--mode`` (both by default: at-least-once, then exactly-once,
each into target topics of its own), so the two are compared in one run.

On a 2-core machine the two brokers, librdkafka and the mirror share the cores: the figures
are end to end.
"""

from __future__ import annotations

import os
import tempfile
import time


def add_arguments(parser) -> None:
    parser.add_argument("--records", type=int, default=500_000, help="backlog records to copy")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=50_000, help="paced records/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="paced run length")
    parser.add_argument("--mode", choices=("both", "at-least-once", "exactly-once"),
                        default="both", help="the mirror's modes to run, one after the other")
    parser.add_argument("--transaction-interval-ms", type=int, default=100,
                        help="exactly-once: transaction.boundary.interval.ms")
    parser.add_argument("--kernel", action="store_true",
                        help="only the copy's CPU per record in this process, no brokers: "
                        "record by record (the old path) beside the columnar one")


def run(args) -> int:
    if args.kernel:
        return copy_kernel(args)
    import trio

    from databus.broker.process import BrokerProcess
    from databus.cli_helpers.table import Column, print_table

    from .common import create_topic, produce_records

    results = {}
    with tempfile.TemporaryDirectory(prefix="databus-bench-mirror-") as root, \
            BrokerProcess(os.path.join(root, "a")) as a, \
            BrokerProcess(os.path.join(root, "b")) as b:
        for topic in ("backlog", "paced"):
            create_topic(a.bootstrap, topic, args.partitions)
        ingest_s = produce_records(a.bootstrap, "backlog", args.records, args.record_size,
                                   acks="all")
        for mode in MODES:
            if args.mode in (mode, "both"):
                results[mode] = trio.run(_mirror_runs, a.bootstrap, b.bootstrap, args, mode)

    def q(latencies, p: float) -> str:
        return f"{latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000:.0f} ms" \
            if latencies else "-"

    mb = args.record_size / 1e6
    rows = [["librdkafka -> broker A (acks=all)", f"{args.records:,}", f"{ingest_s:.2f}",
             f"{args.records / ingest_s:,.0f}", f"{args.records * mb / ingest_s:.1f}", "-", "-"]]
    for mode, (copy_s, latencies, paced_sent) in results.items():
        latencies.sort()
        rows += [
            [f"mirror A -> B, {mode}, backlog", f"{args.records:,}", f"{copy_s:.2f}",
             f"{args.records / copy_s:,.0f}", f"{args.records * mb / copy_s:.1f}", "-", "-"],
            [f"mirror A -> B, {mode}, paced {args.rate:,}/s", f"{paced_sent:,}",
             f"{args.seconds:.0f}", f"{len(latencies) / args.seconds:,.0f}", "-",
             q(latencies, 0.5), q(latencies, 0.99)],
        ]
    print_table([Column("RUN"), Column("RECORDS", "right"), Column("SECONDS", "right"),
                 Column("RECORDS/S", "right"), Column("MB/S", "right"),
                 Column("P50", "right"), Column("P99", "right")], rows,
                title=f"{args.record_size}-byte records, {args.partitions} partitions")
    if len(results) == 2:
        ratio = results["at-least-once"][0] / results["exactly-once"][0]
        print(f"exactly-once backlog copy: {ratio:.2f}x at-least-once's records/s")
    return 0


MODES = ("at-least-once", "exactly-once")


async def _mirror_runs(source: str, target: str, args, mode: str):
    """One mode's backlog copy and paced run, into target topics of its own."""
    import trio

    from databus.config import parse_config
    from databus.mirror.engine import MirrorEngine
    from databus.mirror.metrics import MirrorMetrics

    latencies: list[float] = []

    class TimedEngine(MirrorEngine):
        """Keeps every record's latency (the metrics keep a histogram only): from its
        timestamp to when readers of B can see it (acknowledged; exactly-once: committed)."""

        measuring = False

        def _count(self, part, chunk, start, count, visible_ms):
            super()._count(part, chunk, start, count, visible_ms)
            if self.measuring and part.tp[0] == "paced":
                latencies.extend((visible_ms - ts) / 1000
                                 for ts in chunk.timestamps[start:start + count])

    name = "eo" if mode == "exactly-once" else "alo"
    config = parse_config({
        "clusters": {"A": {"bootstrap.servers": source}, "B": {"bootstrap.servers": target}},
        "mirrors": [{"name": name, "source": "A", "target": "B", "rename": name + ".{topic}",
                     "topics": ["backlog", "paced"],
                     "exactly.once": mode == "exactly-once",
                     "transaction.boundary.interval.ms": args.transaction_interval_ms}],
    })
    metrics = MirrorMetrics()
    engine = TimedEngine(config.mirrors[0], config.clusters, metrics)
    stats = metrics.mirrors[name]

    def copied(topic: str) -> int:
        return sum(ps.records for (t, _), ps in stats.partitions.items() if t == topic)

    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        await nursery.start(engine.run)
        while copied("backlog") < args.records:
            await trio.sleep(0.01)
        copy_s = time.perf_counter() - start
        engine.measuring = True
        paced_start = copied("paced")
        sent = await trio.to_thread.run_sync(_paced, source, args)
        deadline = trio.current_time() + 60
        while copied("paced") < paced_start + sent and trio.current_time() < deadline:
            await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    return copy_s, latencies, sent


def _paced(bootstrap: str, args) -> int:
    """Produce ``args.rate`` records/s for ``args.seconds`` (in 10 ms steps)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all",
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(args.record_size)
    step = max(1, args.rate // 100)
    sent = 0
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= args.seconds:
            break
        due = int(elapsed * args.rate) + step
        while sent < due:
            try:
                producer.produce("paced", value)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(60)
    return sent


def copy_kernel(args) -> int:
    """CPU per record of the copy, fetch response -> target batches (what the mirror does
    between the two sockets, CRC and framing included): the record-by-record path it used
    (ConsumerRecords, the loop check, a header tuple, ``append_many``) beside the columnar one
    (``decode_fetched_columns``, ``scan_columns``, ``append_columns``); both must build the
    same bytes.  Best of 5, ``time.thread_time``."""
    import time

    from databus.client.fetcher import decode_fetched, decode_fetched_columns
    from databus.mirror import provenance
    from databus.protocol.records import BatchBuilder, build_batch, scan_columns

    n, per_batch, batch_size = args.records, 2000, 262144
    value = b"x" * args.record_size
    data = b"".join(build_batch([(None, value, (), 1_700_000_000_000 + i, o + i)
                                 for i in range(min(per_batch, n - o))], base_offset=o)
                    for o in range(0, n, per_batch))
    header, target, prefix = provenance.HEADER, provenance.prefix("B"), b"A/region/topic/0/"

    def per_record() -> list[bytes]:
        got, _ = decode_fetched("topic", 0, data, 0)
        out = [(r.timestamp, r.key, r.value, (*r.headers, (header, prefix + str(r.offset).encode())))
               for r in got if not (r.headers and provenance.came_from(r.headers, target))]
        built, builder, start = [], BatchBuilder(batch_size=batch_size), 0
        while start < len(out):
            start = builder.append_many(out, start)
            if start < len(out):
                built.append(builder.build())
                builder = BatchBuilder(batch_size=batch_size)
        return [*built, builder.build()]

    def columnar() -> list[bytes]:
        cols, _ = decode_fetched_columns("topic", 0, data, 0)
        row, stop = cols.row_range
        scan_columns(cols.buffers, row, stop, header, target, len(prefix), 2**30)
        built, builder = [], BatchBuilder(batch_size=batch_size)
        while row < stop:
            row = builder.append_columns(cols.buffers, row, stop, header, prefix, target)
            if row < stop:
                built.append(builder.build())
                builder = BatchBuilder(batch_size=batch_size)
        return [*built, builder.build()]

    if per_record() != columnar():
        raise SystemExit("the two paths built different batches")
    print(f"{n:,} records of {args.record_size} B, {per_batch:,} per source batch")
    for name, fn in (("record by record", per_record), ("columnar", columnar)):
        best = float("inf")
        for _ in range(5):
            start = time.thread_time()
            fn()
            best = min(best, time.thread_time() - start)
        print(f"{name:17s} {best / n * 1e9:6.0f} ns/record CPU  {n / best:12,.0f} records/s "
              "of one core")
    return 0
