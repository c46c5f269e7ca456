"""``databus bench consume-sdk``: broker -> sidecar -> SDK with an ack per message, beside
librdkafka reading the same topic in the same run.

Fills a topic with ``--records`` values (librdkafka producer), then reads all of it twice:
librdkafka's ``consume()`` straight from the broker (no group, no commits: the ceiling of a
Kafka client embedded in the app), and an app subscribed through a ``databus sidecar`` child
process (``Client.subscribe``, ``ack()`` on every message, the sidecar committing up to the
lowest unacked offset).  Records/s from the first message to the last ack, the ratio, and the
CPU the sidecar and the broker used per message (the app's own CPU is this process's).
"""

from __future__ import annotations

import tempfile
import time

from .common import (
    ProcessCpu,
    Result,
    add_bench_options,
    bench_topic,
    broker_for,
    consume_all,
    fill_topic,
    librdkafka_missing,
    print_ratios,
)


def add_arguments(parser) -> None:
    add_bench_options(parser, records=1_000_000,
                      broker_defaults=("group.initial.rebalance.delay.ms=0",))
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--window", type=int, default=5000,
                        help="the subscription's max_in_flight (default 5000)")
    parser.add_argument("--max-poll-records", type=int, default=5000,
                        help="the sidecar's max.poll.records for the stream (default 5000)")


def consume_sdk(bootstrap: str, topic: str, args) -> tuple[float, dict]:
    """Subscribe through a sidecar child process, ack every message; (seconds, CPU)."""
    from databus import Client

    from .sidecar import sidecar_process

    args.acks, args.linger_ms = "all", 5  # sidecar_process's producer settings (unused)
    with tempfile.TemporaryDirectory(prefix="databus-bench-consume-sdk-") as root:
        streams = {"bench": {"topic": topic, "consumer": {
            "max.poll.records": args.max_poll_records, "fetch.max.wait.ms": 100,
            "max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.bytes": 64 * 1024 * 1024,
        }}}
        with sidecar_process(root, bootstrap, args, streams=streams) as (socket_path, pid):
            sidecar_cpu = ProcessCpu(pid)
            with Client(socket_path) as client:
                sub = client.subscribe("bench", f"bench-{time.time_ns()}",
                                       max_in_flight=args.window)
                poll = sub.poll
                first = poll(60)
                start = time.perf_counter()
                cpu0 = (time.process_time(), sidecar_cpu.seconds())
                first.ack()
                seen = 1
                deadline = start + 600
                while seen < args.records:
                    message = poll(10)
                    if message is None:
                        if time.perf_counter() > deadline:
                            raise RuntimeError(f"only {seen} of {args.records} arrived")
                        continue
                    message.ack()
                    seen += 1
                elapsed = time.perf_counter() - start
                cpu = {"app": time.process_time() - cpu0[0],
                       "sidecar": sidecar_cpu.seconds() - cpu0[1]}
                sub.close()
    return elapsed, cpu


def _used(cpu: ProcessCpu, before: float | None) -> float | None:
    """CPU seconds since ``before`` (None for a broker this run did not start)."""
    now = cpu.seconds()
    return None if now is None or before is None else now - before


def run(args) -> int:
    missing = librdkafka_missing()
    baseline = None
    with broker_for(args) as (bootstrap, broker_cpu), bench_topic(
            bootstrap, f"bench-consume-sdk-{time.time_ns()}", args.partitions,
            args.keep_topic) as topic:
        fill_topic(bootstrap, topic, args.records, args.record_size)
        if not missing:
            before = broker_cpu.seconds()
            theirs = consume_all(bootstrap, topic, args.partitions, args.records)
            baseline = Result("librdkafka consume() from the broker", args.records, theirs,
                              args.record_size, _used(broker_cpu, before))
        before = broker_cpu.seconds()
        ours, cpu = consume_sdk(bootstrap, topic, args)
        mine = Result("SDK subscribe() + ack() through the sidecar", args.records, ours,
                      args.record_size, _used(broker_cpu, before))
    print_ratios(
        f"databus bench consume-sdk: {args.records:,} x {args.record_size} B, "
        f"{args.partitions} partitions, window {args.window}",
        [r for r in (baseline, mine) if r is not None], baseline,
        skipped={"librdkafka consume() from the broker": missing} if missing else {},
        as_json=args.json)
    if not args.json:
        per = 1e6 / args.records
        print(f"CPU per message through the sidecar: app {cpu['app'] * per:.2f} µs, "
              f"sidecar {cpu['sidecar'] * per:.2f} µs")
    return 0
