"""kafka-producer-perf-test and kafka-consumer-perf-test, with databus's client.

``databus bench produce --throughput T`` and ``databus bench consume --messages N`` take the
options of Kafka's two perf tools and print their lines, so a Kafka user's scripts and
habits carry over:

    databus bench produce --topic T --num-records N --record-size S --throughput T
                          [--producer-props K=V ...] [--producer.config F] [--print-metrics]
    5000 records sent, 999.8 records/sec (0.10 MB/sec), 1.3 ms avg latency, 9.0 ms max latency.
    10000 records sent, 999.900010 records/sec (0.10 MB/sec), 1.25 ms avg latency, 9.00 ms
        max latency, 1 ms 50th, 2 ms 95th, 4 ms 99th, 8 ms 99.9th.

    databus bench consume --topic T --messages N [--group G] [--timeout MS] [--fetch-size B]
                          [--show-detailed-stats] [--reporting-interval MS] [--hide-header]
                          [--consumer.config F] [--print-metrics]
    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
        rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-01-01 10:00:00:000, 2026-01-01 10:00:01:500, 9.5367, 6.3578, 100000, 66666.6667, ...

Latency is send -> acknowledgement per record (Kafka's tool measures the same, sampling;
here every record counts); MB is 2**20 bytes, as Kafka prints.  Without ``--topic`` a
topic is created for the run (for consume: filled with N records first) and deleted after
it unless ``--keep-topic``; a named topic that does not exist is created and likewise
deleted.  The statistics are plain code (ProducerStats, consumer_summary) the tests drive
directly; the trio loops around them only send, receive and read the clock.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
from dataclasses import dataclass, field

from .common import bench_topic, broker_for, fill_topic, with_admin

MB = 1024 * 1024
REPORT_INTERVAL_S = 5.0  # kafka-producer-perf-test's progress line period


# -- options ---------------------------------------------------------------------------------


def add_producer_perf_options(parser) -> None:
    group = parser.add_argument_group("kafka-producer-perf-test options (--throughput "
                                      "selects this mode)")
    group.add_argument("--topic", help="topic to produce to (default: a new one, deleted "
                                       "after the run)")
    group.add_argument("--throughput", type=float, metavar="T",
                       help="records/s to pace to; -1: as fast as possible")
    group.add_argument("--producer-props", nargs="+", default=[], metavar="K=V",
                       help="producer settings by Kafka's names (bootstrap.servers too)")
    group.add_argument("--producer.config", dest="config_file", metavar="FILE",
                       help="producer settings from a properties file")
    group.add_argument("--print-metrics", action="store_true",
                       help="print the producer's statistics at the end")


def add_consumer_perf_options(parser) -> None:
    group = parser.add_argument_group("kafka-consumer-perf-test options (--messages selects "
                                      "this mode)")
    group.add_argument("--topic", help="topic to read (default: a new one filled with "
                                       "--messages records, deleted after the run)")
    group.add_argument("--messages", type=int, metavar="N", help="records to consume")
    group.add_argument("--group", help="consumer group (default perf-consumer-NNNNN)")
    group.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="BYTES",
                       help="max.partition.fetch.bytes (default 1048576)")
    group.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                       help="give up when nothing arrived for this long (default 10000)")
    group.add_argument("--from-latest", action="store_true",
                       help="start at the end when the group has no committed offset")
    group.add_argument("--show-detailed-stats", action="store_true",
                       help="a line per --reporting-interval")
    group.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")
    group.add_argument("--hide-header", action="store_true")
    group.add_argument("--consumer.config", dest="config_file", metavar="FILE",
                       help="consumer settings from a properties file")
    group.add_argument("--print-metrics", action="store_true",
                       help="print the consumer's statistics at the end")


def _settings(args, props: list[str]) -> dict[str, str]:
    from types import SimpleNamespace

    from databus.cli_helpers.options import client_settings

    return client_settings(SimpleNamespace(config_file=args.config_file, overrides=props))


# -- producer statistics ---------------------------------------------------------------------


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Kafka's Stats.percentiles: the value at index floor(fraction * count)."""
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


@dataclass
class ProducerStats:
    """kafka-producer-perf-test's Stats: all latencies plus a 5-second window."""

    record_size: int
    start: float
    latencies_ms: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    window_total_ms: float = 0.0
    window_max_ms: float = 0.0

    def __post_init__(self) -> None:
        self.window_start = self.start

    def record(self, latency_ms: float, now: float) -> str | None:
        """Count one acknowledged record; returns a progress line when a window closed."""
        self.latencies_ms.append(latency_ms)
        self.window_count += 1
        self.window_bytes += self.record_size
        self.window_total_ms += latency_ms
        self.window_max_ms = max(self.window_max_ms, latency_ms)
        if now - self.window_start < REPORT_INTERVAL_S:
            return None
        elapsed = now - self.window_start
        line = (f"{self.window_count} records sent, {self.window_count / elapsed:.1f} "
                f"records/sec ({self.window_bytes / MB / elapsed:.2f} MB/sec), "
                f"{self.window_total_ms / self.window_count:.1f} ms avg latency, "
                f"{self.window_max_ms:.1f} ms max latency.")
        self.window_start, self.window_count, self.window_bytes = now, 0, 0
        self.window_total_ms = self.window_max_ms = 0.0
        return line

    def summary(self, end: float) -> dict:
        lat = sorted(self.latencies_ms)
        count = len(lat)
        elapsed = max(end - self.start, 1e-9)
        return {
            "records": count, "records_per_s": count / elapsed,
            "mb_per_s": count * self.record_size / MB / elapsed,
            "avg_latency_ms": sum(lat) / count if count else 0.0,
            "max_latency_ms": lat[-1] if lat else 0.0,
            "p50_ms": percentile(lat, 0.5), "p95_ms": percentile(lat, 0.95),
            "p99_ms": percentile(lat, 0.99), "p999_ms": percentile(lat, 0.999),
        }


def summary_line(s: dict) -> str:
    """kafka-producer-perf-test's last line (its printf format, percentiles as whole ms)."""
    return (f"{s['records']} records sent, {s['records_per_s']:f} records/sec "
            f"({s['mb_per_s']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
            f"{s['max_latency_ms']:.2f} ms max latency, {int(s['p50_ms'])} ms 50th, "
            f"{int(s['p95_ms'])} ms 95th, {int(s['p99_ms'])} ms 99th, "
            f"{int(s['p999_ms'])} ms 99.9th.")


def pacing_delay(sent: int, throughput: float, elapsed: float) -> float:
    """Seconds to wait before the next send so that ``sent`` records took at least
    sent / throughput seconds (Kafka's ThroughputThrottler; <= 0: send now)."""
    if throughput <= 0:
        return 0.0
    return sent / throughput - elapsed


def payload(size: int) -> bytes:
    """Kafka's perf-test payload: random upper-case letters (so compression is realistic)."""
    return bytes(65 + b % 26 for b in os.urandom(size))


# -- topics ----------------------------------------------------------------------------------


@contextlib.contextmanager
def perf_topic(bootstrap: str, topic: str | None, partitions: int, keep: bool, prefix: str):
    """The run's topic: the named one if it exists (never deleted), else a new one (named or
    not) deleted after the run unless ``keep``.  Yields (name, created)."""
    if topic is not None:
        async def exists(admin):
            found = await admin.describe_topics([topic])
            return not isinstance(found[topic], Exception)

        if with_admin(bootstrap, exists):
            yield topic, False
            return
    with bench_topic(bootstrap, topic or f"{prefix}-{time.time_ns()}", partitions,
                     keep) as name:
        yield name, True


@contextlib.contextmanager
def perf_broker(args, settings: dict[str, str]):
    """bootstrap.servers from the props, else --bootstrap-server, else a broker of ours."""
    from argparse import Namespace

    given = settings.pop("bootstrap.servers", None) or args.bootstrap
    with broker_for(Namespace(bootstrap=given, broker_option=args.broker_option)) as (b, _cpu):
        yield b


# -- producer perf test ----------------------------------------------------------------------


def run_producer_perf(args) -> int:
    import trio

    from databus.client import KafkaError, ProducerConfig

    try:
        settings = _settings(args, args.producer_props)
        with perf_broker(args, settings) as bootstrap:
            config = ProducerConfig.from_kafka(settings)
            with perf_topic(bootstrap, args.topic, args.partitions, args.keep_topic,
                            "perf-test") as (topic, _created):
                summary, statistics = trio.run(_produce_perf, bootstrap, topic, args, config)
    except KafkaError as exc:
        print(f"databus bench produce: {exc}", file=sys.stderr)
        return 1
    if args.json:
        from databus.cli_helpers.options import print_json

        print_json({"topic": topic, **summary,
                    "metrics": vars(statistics) if args.print_metrics else None})
        return 0
    print(summary_line(summary))
    if args.print_metrics:
        _print_metrics("producer", statistics)
    return 0


async def _produce_perf(bootstrap: str, topic: str, args, config):
    import trio

    from databus.client import Producer

    value = payload(args.record_size)
    clock = time.perf_counter
    start = clock()
    stats = ProducerStats(args.record_size, start)
    failures: list[BaseException] = []

    def acknowledged(fut, sent_at: float) -> None:
        now = clock()
        if fut.exception() is not None:
            failures.append(fut.exception())
            return
        line = stats.record((now - sent_at) * 1000, now)
        if line and not args.json:
            print(line, flush=True)

    async with Producer(bootstrap, config) as producer:
        for sent in range(args.records):
            delay = pacing_delay(sent, args.throughput, clock() - start)
            if delay > 0.002:  # Kafka's throttler: sleep only when ahead by 2 ms or more
                await trio.sleep(delay)
            sent_at = clock()
            fut = await producer.send(topic, value)
            fut.add_done_callback(lambda f, t=sent_at: acknowledged(f, t))
        await producer.flush()
        end = clock()
        statistics = producer.statistics()
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, first: {failures[0]!r}")
    return stats.summary(end), statistics


def _print_metrics(kind: str, statistics) -> None:
    from databus.cli_helpers.table import Column, print_table

    print_table([Column("Metric Name"), Column("Value", justify="right")],
                [(f"{kind}-metrics:{name}", str(value))
                 for name, value in sorted(vars(statistics).items())])


# -- consumer perf test ----------------------------------------------------------------------


CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
                   "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def kafka_time(epoch_s: float) -> str:
    """Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS (local time)."""
    moment = datetime.datetime.fromtimestamp(epoch_s)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"


def consumer_summary(start: float, end: float, records: int, nbytes: int,
                     rebalance_ms: float) -> dict:
    """kafka-consumer-perf-test's figures: MB.sec over the whole run, fetch.* over the run
    less the time the group took to assign partitions."""
    elapsed = max(end - start, 1e-9)
    fetch_s = max(elapsed - rebalance_ms / 1000, 1e-9)
    mb = nbytes / MB
    return {"start_time": start, "end_time": end, "data_consumed_mb": mb,
            "mb_per_s": mb / elapsed, "records": records, "records_per_s": records / elapsed,
            "rebalance_time_ms": int(rebalance_ms), "fetch_time_ms": int(fetch_s * 1000),
            "fetch_mb_per_s": mb / fetch_s, "fetch_records_per_s": records / fetch_s}


def consumer_line(s: dict) -> str:
    return (f"{kafka_time(s['start_time'])}, {kafka_time(s['end_time'])}, "
            f"{s['data_consumed_mb']:.4f}, {s['mb_per_s']:.4f}, {s['records']}, "
            f"{s['records_per_s']:.4f}, {s['rebalance_time_ms']}, {s['fetch_time_ms']}, "
            f"{s['fetch_mb_per_s']:.4f}, {s['fetch_records_per_s']:.4f}")


def run_consumer_perf(args) -> int:
    import trio

    from databus.client import ConsumerConfig, KafkaError

    try:
        settings = _settings(args, [])
        settings.setdefault("group.id", args.group or f"perf-consumer-{time.time_ns() % 100000}")
        settings.setdefault("auto.offset.reset", "latest" if args.from_latest else "earliest")
        settings.setdefault("max.partition.fetch.bytes", str(args.fetch_size))
        with perf_broker(args, settings) as bootstrap:
            config = ConsumerConfig.from_kafka(settings)
            with perf_topic(bootstrap, args.topic, args.partitions, args.keep_topic,
                            "perf-consumer-test") as (topic, created):
                if created:
                    fill_topic(bootstrap, topic, args.messages, args.record_size,
                               compression=args.compression)
                summary, statistics = trio.run(_consume_perf, bootstrap, topic, args, config)
    except KafkaError as exc:
        print(f"databus bench consume: {exc}", file=sys.stderr)
        return 1
    if args.json:
        from databus.cli_helpers.options import print_json

        print_json({"topic": topic, **summary,
                    "metrics": vars(statistics) if args.print_metrics else None})
    else:
        if not args.hide_header and not args.show_detailed_stats:
            print(CONSUMER_HEADER)
        if not args.show_detailed_stats:
            print(consumer_line(summary))
        if args.print_metrics:
            _print_metrics("consumer", statistics)
    if summary["records"] < args.messages:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout "
              f"({args.timeout} ms) exceeded; {summary['records']} of {args.messages} "
              "consumed.", file=sys.stderr)
        return 1
    return 0


async def _consume_perf(bootstrap: str, topic: str, args, config):

    from databus.client import Consumer

    wall_start, start = time.time(), time.perf_counter()
    records = nbytes = 0
    rebalance_ms: float | None = None
    last_data = start
    last_report = (start, 0, 0)
    if args.show_detailed_stats and not args.hide_header and not args.json:
        print(DETAILED_HEADER)
    async with Consumer(bootstrap, config) as consumer:
        consumer.subscribe([topic])
        while records < args.messages:
            batch = await consumer.poll(0.1, max_records=args.messages - records)
            now = time.perf_counter()
            if rebalance_ms is None and consumer.assignment():
                rebalance_ms = (now - start) * 1000
            if batch:
                last_data = now
                records += len(batch)
                nbytes += sum(len(r.value or b"") + len(r.key or b"") for r in batch)
            elif now - last_data >= args.timeout / 1000:
                break
            else:
                continue
            # Kafka's tool reports only when records arrived and an interval has passed.
            if args.show_detailed_stats and not args.json and \
                    now - last_report[0] >= args.reporting_interval / 1000:
                window = consumer_summary(last_report[0], now, records - last_report[1],
                                          nbytes - last_report[2], 0)
                print(f"{kafka_time(wall_start + now - start)}, 0, "
                      f"{nbytes / MB:.4f}, {window['mb_per_s']:.4f}, {records}, "
                      f"{window['records_per_s']:.4f}, "
                      f"{int(rebalance_ms or 0)}, {int((now - last_report[0]) * 1000)}, "
                      f"{window['fetch_mb_per_s']:.4f}, {window['fetch_records_per_s']:.4f}",
                      flush=True)
                last_report = (now, records, nbytes)
        end = time.perf_counter()
        statistics = consumer.statistics()
    summary = consumer_summary(start, end, records, nbytes, rebalance_ms or 0.0)
    offset = wall_start - start  # perf_counter -> wall clock for the printed times
    summary["start_time"] += offset
    summary["end_time"] += offset
    return summary, statistics


__all__ = ["ProducerStats", "consumer_summary", "pacing_delay", "percentile", "summary_line"]
