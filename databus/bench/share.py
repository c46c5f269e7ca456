"""``databus bench share``: a share group (KIP-932) beside a classic consumer on one topic.

Fills a one-partition topic with ``--records`` records, sets the share group's
``share.auto.offset.reset`` to ``earliest`` (IncrementalAlterConfigs on the GROUP resource),
then in the same run starts ``--consumers`` confluent-kafka ShareConsumers (explicit mode,
every record accepted), each in its own process, and one classic consumer reading the same
records from offset 0 (no group; ``databus bench consume``'s reader) in a thread.  The share
group is timed from the moment its consumers subscribe (joining the group is included)
until every record is accepted.  Reported: records/s of the share group (all records accepted) and of
the classic consumer, their ratio, how many records were delivered more than once, and the
share state writes: the records appended to ``__share_group_state`` (one per changed
share-partition per write round; each round waits for one group-commit fsync), in total and
per second, beside the acknowledgements per second, so the cost of durability per
acknowledgement shows.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter

from .produce import broker_for, create_topic, produce_records

STATE_TOPIC = "__share_group_state"


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap",
                        help="HOST:PORT of a running broker (default: start one)")
    parser.add_argument("--records", type=int, default=200_000, help="records to deliver")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--consumers", type=int, default=3, help="share consumers")
    parser.add_argument("--max-poll-records", type=int, default=500,
                        help="the share consumers' max.poll.records (librdkafka's default "
                             "500): also the max_records of each ShareFetch")
    parser.add_argument("--batch-size", type=int, default=16384,
                        help="batch.size of the fill (Kafka's default; share fetches acquire "
                             "whole batches, so this sets how many records one fetch takes)")
    parser.add_argument("-o", "--broker-option", action="append", default=[],
                        metavar="KEY=VALUE", help="option for the started broker")


def _state_records(bootstrap: str) -> int:
    """Records ever appended to ``__share_group_state`` (its partitions' end offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-share-watermarks"})
    try:
        metadata = consumer.list_topics(STATE_TOPIC, timeout=10).topics.get(STATE_TOPIC)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(STATE_TOPIC, p), 10)[1]
                   for p in metadata.partitions)
    finally:
        consumer.close()


def _set_earliest(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    admin.incremental_alter_configs([resource])[resource].result(30)


def _share_worker(bootstrap: str, group: str, topic: str, records: int, max_poll: int,
                  accepted, ready, go, results) -> None:
    """One share consumer, in its own process (as share consumers are deployed, and so
    that the Python work per record of one does not hold the others' GIL).  Once started
    it says ``ready`` and waits for ``go`` before it subscribes (the clock starts then, so
    the interpreter's start-up is not timed); it accepts every record, counts into the
    shared ``accepted`` until it reaches ``records``, then puts its offsets (and any
    errors) on ``results``."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": max_poll})
    offsets: list[int] = []
    errors: list[str] = []
    accept = AcknowledgeType.ACCEPT
    try:
        ready.release()
        go.wait(600)
        consumer.subscribe([topic])
        deadline = time.monotonic() + 600
        while accepted.value < records and time.monotonic() < deadline:
            batch = consumer.poll(0.2) or ()
            good = 0
            for message in batch:
                if message.error() is not None:
                    errors.append(str(message.error()))
                    continue
                consumer.acknowledge(message, accept)
                offsets.append(message.offset())
                good += 1
            if good:
                with accepted.get_lock():
                    accepted.value += good
        consumer.commit_sync(30)
    finally:
        consumer.close()
        results.put((offsets, errors))


def _classic_reader(bootstrap: str, topic: str, records: int, out: dict) -> None:
    from .consume import consume_all

    out["seconds"] = consume_all(bootstrap, topic, 1, records)


def run(args) -> int:
    from databus.tools.table import Column, print_table

    with broker_for(args) as (bootstrap, cpu):
        topic = f"bench-share-{time.time_ns()}"
        group = f"bench-share-{time.time_ns()}"
        create_topic(bootstrap, topic, 1)
        # batches of Kafka's default batch.size: a share fetch acquires whole batches
        produce_records(bootstrap, topic, args.records, args.record_size,
                        batch_size=args.batch_size)
        _set_earliest(bootstrap, group)
        state_before = _state_records(bootstrap)
        context = multiprocessing.get_context("spawn")
        accepted = context.Value("q", 0)
        ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
        workers = [context.Process(target=_share_worker, args=(
            bootstrap, group, topic, args.records, args.max_poll_records, accepted, ready, go,
            results))
            for _ in range(args.consumers)]
        for worker in workers:
            worker.start()
        for _ in workers:
            if not ready.acquire(timeout=120):
                raise RuntimeError("a share consumer process did not start in 120 s")
        classic: dict = {}
        reader = threading.Thread(target=_classic_reader,
                                  args=(bootstrap, topic, args.records, classic))
        cpu_before = cpu.seconds()
        start = time.perf_counter()
        go.set()  # the share consumers join, fetch and accept from now on
        reader.start()
        outcomes = [results.get(timeout=660) for _ in workers]
        share_seconds = time.perf_counter() - start
        reader.join()
        for worker in workers:
            worker.join(30)
        cpu_after = cpu.seconds()
        state_writes = _state_records(bootstrap) - state_before
    delivered: Counter = Counter(o for offsets, _ in outcomes for o in offsets)
    errors = [e for _, errs in outcomes for e in errs]
    if errors:
        print(f"errors: {errors[:5]}")
    if len(delivered) < args.records:
        print(f"only {len(delivered)} of {args.records} records were delivered")
        return 1
    share_rate = args.records / share_seconds
    classic_rate = args.records / classic["seconds"]
    broker_cpu = ("-" if cpu_before is None or cpu_after is None
                  else f"{(cpu_after - cpu_before) / share_seconds:.0%}")
    print_table(
        [Column("run"), *(Column(h, justify="right") for h in (
            "records", "seconds", "records/s", "broker CPU"))],
        [(f"share group, {args.consumers} consumers, explicit accept", f"{args.records:,}",
          f"{share_seconds:.2f}", f"{share_rate:,.0f}", broker_cpu),
         ("classic consumer, same topic, same run", f"{args.records:,}",
          f"{classic['seconds']:.2f}", f"{classic_rate:,.0f}", "")],
        title=f"databus bench share ({args.record_size}-byte records, one partition)",
    )
    redelivered = sum(count - 1 for count in delivered.values())
    print(f"share / classic: {share_rate / classic_rate:.2f}x; records delivered more than "
          f"once: {redelivered}")
    print(f"share state writes: {state_writes} ({state_writes / share_seconds:,.1f}/s, "
          f"{args.records / max(state_writes, 1):,.0f} acknowledgements per write; each "
          "write waits for one group-commit fsync)")
    return 0


