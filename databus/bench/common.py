"""What the benches share: the common options, the broker (``--bootstrap-server`` or one
started here), bench topics, the librdkafka and databus writers that fill them, the
librdkafka reader, and the result tables.

Imports none of the bench modules, so each bench imports from here and no bench imports
another for its helpers.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import time
from dataclasses import dataclass

INSTALL_HINT = "pip install 'databus[bench]'"


def add_bootstrap_option(parser) -> None:
    """--bootstrap-server (Kafka's name; --bootstrap too): a running broker to measure."""
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                        metavar="HOST:PORT",
                        help="a running broker (default: start one); --bootstrap is an alias")


def add_broker_options(parser, *, defaults: tuple[str, ...] = ()) -> None:
    """What ``broker_for(args)`` reads: --bootstrap-server, or -o KEY=VALUE options (after
    ``defaults``) for the broker started here."""
    add_bootstrap_option(parser)
    parser.add_argument("-o", "--broker-option", action="append", default=list(defaults),
                        metavar="KEY=VALUE", help="option for the started broker")


def add_bench_options(parser, *, records: int, broker_defaults: tuple[str, ...] = ()) -> None:
    """The options every broker bench shares: where (add_broker_options), how much,
    --keep-topic, --json."""
    add_broker_options(parser, defaults=broker_defaults)
    parser.add_argument("--num-records", "--records", dest="records", type=int,
                        default=records, help=f"records per run (default {records:,})")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--keep-topic", action="store_true",
                        help="keep the topics the bench created (default: delete them)")
    parser.add_argument("--json", action="store_true",
                        help="print the results as one JSON document")


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


def with_admin(bootstrap: str, action):
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

    with_admin(bootstrap, create)


def delete_topics(bootstrap: str, topics) -> None:
    async def delete(admin):
        await admin.delete_topics(list(topics))

    with_admin(bootstrap, delete)


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
                    acks: str | None = "1", compression: str = "none",
                    linger_ms: int | None = 5, batch_size: int | None = 1_000_000,
                    api: str = "batch") -> float:
    """Produce ``records`` values of ``record_size`` bytes; the seconds until all are acked.
    ``acks``, ``linger_ms``, ``batch_size`` None: librdkafka's defaults (all, 5, 1,000,000)."""
    from confluent_kafka import Producer

    errors = []
    config = {
        "bootstrap.servers": bootstrap, "compression.type": compression,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: errors.append(err),
    }
    for key, value in (("acks", acks), ("linger.ms", linger_ms), ("batch.size", batch_size)):
        if value is not None:
            config[key] = value
    producer = Producer(config)
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


async def produce_ours(bootstrap: str, topic: str, records: int, record_size: int,
                       config) -> float:
    """Send ``records`` values with databus's producer, one send() per record; the seconds
    until all are acknowledged."""
    import trio

    from databus.client import Producer

    value = os.urandom(record_size)
    failures = []
    async with Producer(bootstrap, config) as producer:
        start = trio.current_time()
        send = producer.send
        last = None
        for _ in range(records):
            last = await send(topic, value)
        await producer.flush()
        seconds = trio.current_time() - start
        failures = producer.statistics().failed_records
    if failures or last is None or last.exception() is not None:
        raise RuntimeError(f"{failures} records failed")
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

    config = ProducerConfig.from_kafka({"linger.ms": 20, "batch.size": 1_000_000, "acks": "1",
                                        "compression.type": compression})
    return "databus.client", trio.run(produce_ours, bootstrap, topic, records, record_size,
                                      config)


def consume_all(bootstrap: str, topic: str, partitions: int, records: int, *,
                tuned: bool = True) -> float:
    """Read ``records`` records from the start of every partition; the seconds it took.

    ``tuned``: large fetches, a short long poll and a large prefetch queue, batches of
    10,000 (the other benches' reader); else librdkafka's defaults, ``consume(500, 1.0)``
    (500: Kafka's max.poll.records, our poll()'s batch)."""
    from confluent_kafka import Consumer, TopicPartition

    config = {
        "bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
        "enable.auto.commit": False, "enable.partition.eof": False,
    }
    if tuned:
        config |= {
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
            "queued.max.messages.kbytes": 1024 * 1024, "fetch.wait.max.ms": 100,
            # librdkafka's default (1000 ms) idles the fetcher for a second whenever its
            # prefetch queue is above queued.min.messages: the consumer, not the broker, waits
            "fetch.queue.backoff.ms": 5,
        }
    batch, timeout = (10_000, 0.1) if tuned else (500, 1.0)
    consumer = Consumer(config)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        start = time.perf_counter()
        deadline = start + 600
        consume = consumer.consume
        while seen < records:
            got = consume(num_messages=batch, timeout=timeout)
            seen += len(got)
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {seen} of {records} records arrived in 600 s")
        return time.perf_counter() - start
    finally:
        consumer.close()


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
    from databus.cli_helpers.table import Column, print_table

    skipped = skipped or {}
    if as_json:
        from databus.cli_helpers.options import print_json

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


def print_ratios(title: str, results: list[Result], baseline: Result | None, *,
                 skipped: dict[str, str], as_json: bool = False,
                 peer: Result | None = None) -> None:
    """Rows with their rate over librdkafka's (``baseline``) and aiokafka's (``peer``);
    either None when it was skipped."""
    from databus.cli_helpers.table import Column, print_table

    def ratio(r: Result, base: Result | None) -> float | None:
        return None if base is None else r.records_per_s / base.records_per_s

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    if as_json:
        from databus.cli_helpers.options import print_json

        doc = results_document(title, results, skipped)
        for row, r in zip(doc["results"], results):
            row["vs_librdkafka"] = ratio(r, baseline)
            row["vs_aiokafka"] = ratio(r, peer)
        print_json(doc)
        return
    print_table(
        [Column("client"), *(Column(header, justify="right") for header in (
            "records", "seconds", "records/s", "MB/s", "vs librdkafka", "vs aiokafka"))],
        [(r.name, f"{r.records:,}", f"{r.seconds:.2f}", f"{r.records_per_s:,.0f}",
          f"{r.mb_per_s:.1f}", shown(ratio(r, baseline)), shown(ratio(r, peer)))
         for r in results],
        title=title,
    )
    print_skipped(skipped)


def best_seconds(fn, rounds: int) -> float:
    """The fastest of ``rounds`` calls of ``fn()``, in seconds, with the garbage collector off
    (a collection in one round and not another is noise, not the code measured)."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best
