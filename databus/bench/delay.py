"""``databus bench delay``: delayed messages at volume, through the delay service.

Writes ``--messages`` delayed messages with random delays up to ``--max-delay`` seconds to
the delay topics (as the sidecar's router does for ``send(..., delay=)``), runs
``--members`` delay-service processes (one consumer group, as sidecars run it), optionally
SIGKILLs one of them ``--kill-after`` seconds in (its partitions move to the others after
the session timeout), and reads the target topic until every message arrived.  Reported:
messages delivered, missing, duplicated, early (written before their time: must be 0), and
the lateness (delivery write time minus due time) p50/p99/max, with the number more than
1 s late.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time

from .common import add_broker_options, broker_for, create_topic

TARGET = "bench-delay-out"


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--messages", type=int, default=100_000, help="delayed messages")
    parser.add_argument("--max-delay", type=float, default=60.0,
                        help="delays are uniform in [0, this] seconds")
    parser.add_argument("--members", type=int, default=2, help="delay-service processes")
    parser.add_argument("--partitions", type=int, default=None,
                        help="create the delay topics with this many partitions (default: "
                             "the service creates them with the broker's default, 1 here, so "
                             "each level topic, and all of its work, is one member's)")
    parser.add_argument("--kill-after", type=float, default=None,
                        help="SIGKILL one member this many seconds after the start")
    parser.add_argument("--session-timeout-ms", type=int, default=None,
                        help="the members' session.timeout.ms (how soon a dead one's "
                             "partitions move; default: the service's, 6000; below that "
                             "needs -o group.min.session.timeout.ms=...)")
    parser.add_argument("--warmup", type=float, default=8.0,
                        help="seconds the members get to start and join their group before "
                             "the messages are written")


def _member(bootstrap: str, session_timeout_ms: int | None) -> None:
    import trio

    from databus.sidecar.delay.service import DelayService

    # as a sidecar's delay.consumer: the service's defaults for what is not named
    consumer = {} if session_timeout_ms is None else {"session.timeout.ms": session_timeout_ms}
    service = DelayService("bench", bootstrap, group_id="bench-delay", consumer=consumer)
    trio.run(service.run)


def _write(bootstrap: str, count: int, max_delay: float) -> dict[bytes, int]:
    """The delayed messages, written as the router writes them; value -> due ms."""
    import trio

    from databus.client import Producer
    from databus.sidecar.delay.core import LEVEL_TOPICS, Delayed, level_for

    rng = random.Random(18)
    dues: dict[bytes, int] = {}

    async def main():
        async with Producer(bootstrap, {"linger.ms": 20, "batch.size": 262144}) as producer:
            for i in range(count):
                now = int(time.time() * 1000)
                due = now + int(rng.uniform(0, max_delay) * 1000)
                value = b"%d" % i
                dues[value] = due
                delayed = Delayed(TARGET, due, str(i), None, None, value, ())
                level = level_for(due - now) or 0
                await producer.send(LEVEL_TOPICS[level], value, None, delayed.stored_headers())
            await producer.flush()

    trio.run(main)
    return dues


def _read(bootstrap: str, dues: dict[bytes, int], deadline: float, out: dict) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    seen: dict[bytes, int] = {}
    duplicates = early = 0
    lateness = []
    try:
        partitions = consumer.list_topics(TARGET, timeout=10).topics[TARGET].partitions
        consumer.assign([TopicPartition(TARGET, p, 0) for p in partitions])
        while len(seen) < len(dues) and time.time() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error():
                    continue
                value, written = msg.value(), msg.timestamp()[1]
                if value in seen:
                    duplicates += 1
                    continue
                seen[value] = written
                late = written - dues[value]
                early += late < 0
                lateness.append(late)
    finally:
        consumer.close()
    out.update(seen=len(seen), duplicates=duplicates, early=early, lateness=sorted(lateness))


def run(args) -> int:
    from databus.cli_helpers.table import print_table

    with broker_for(args) as (bootstrap, _cpu):
        create_topic(bootstrap, TARGET, 1)
        if args.partitions:
            from databus.sidecar.delay.core import LEVEL_TOPICS

            for topic in LEVEL_TOPICS:
                create_topic(bootstrap, topic, args.partitions)
        context = multiprocessing.get_context("spawn")
        members = [context.Process(target=_member, args=(bootstrap, args.session_timeout_ms),
                                   daemon=True) for _ in range(args.members)]
        for member in members:
            member.start()
        time.sleep(args.warmup)  # interpreters start, the group forms: not measured
        started = time.time()
        dues = _write(bootstrap, args.messages, args.max_delay)
        written_s = time.time() - started
        result: dict = {}
        reader = threading.Thread(target=_read, args=(
            bootstrap, dues, started + args.max_delay + written_s + 120, result))
        reader.start()
        killed = ""
        if args.kill_after is not None:
            time.sleep(max(args.kill_after - (time.time() - started), 0))
            os.kill(members[0].pid, signal.SIGKILL)
            killed = f"member 0 SIGKILLed at {time.time() - started:.1f} s"
        reader.join()
        for member in members:
            if member.is_alive():
                member.kill()
        lateness = result.get("lateness") or [0]

        def pct(p: float) -> int:
            return lateness[min(int(len(lateness) * p), len(lateness) - 1)]

        delivered = result.get("seen", 0)
        print(f"{args.messages} delayed messages, delays uniform in [0, {args.max_delay}] s, "
              f"{args.members} delay-service processes"
              + (f", {args.partitions} partitions per delay topic" if args.partitions else "")
              + f"; written in {written_s:.1f} s"
              + (f"; {killed}" if killed else ""))
        print_table(
            ["messages", "delivered", "missing", "duplicates", "early", "p50 ms", "p99 ms",
             "max ms", "> 1 s late"],
            [[args.messages, delivered, args.messages - delivered,
              result.get("duplicates", 0), result.get("early", 0), pct(0.5), pct(0.99),
              lateness[-1], sum(1 for late in lateness if late > 1000)]])
    return 0
