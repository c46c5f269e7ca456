"""``databus bench share``: a share group (KIP-932) beside a classic consumer on one topic.

Fills a one-partition topic with ``--records`` records; then, per client (``--client``:
confluent-kafka's ShareConsumer, databus's own trio ShareConsumer, or both one after the
other), sets a new share group's ``share.auto.offset.reset`` to ``earliest``
(IncrementalAlterConfigs on the GROUP resource) and starts ``--consumers`` share consumers
of that client (explicit mode, every record accepted), each in its own process, and beside
them one classic consumer reading the same records from offset 0 (no group; ``databus bench
consume``'s reader) in a thread.  A share group is timed from the moment its consumers
subscribe (joining the group is included) until every record is accepted.  Reported per
client: records/s of the share group (all records accepted) and of the classic consumer
of the same phase, their ratio, how many records were delivered more than once, and the
share state writes: the records appended to ``__share_group_state`` (one per changed
share-partition per write round; each round waits for one group-commit fsync), in total and
per second, beside the acknowledgements per second, so the cost of durability per
acknowledgement shows.

``--reject-every N`` REJECTs every Nth offset instead of accepting it; ``--dlq on`` gives
each share group a dead-letter topic (KIP-1191, ``errors.deadletterqueue.topic.name``), so
those records are copied there; ``--dlq both`` runs each client's group without and then
with one, beside each other in the same run.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from dataclasses import dataclass

from .common import add_broker_options, broker_for, create_topic, produce_records

STATE_TOPIC = "__share_group_state"


def add_arguments(parser) -> None:
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=200_000, help="records to deliver")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--consumers", type=int, default=3, help="share consumers")
    parser.add_argument("--max-poll-records", type=int, default=500,
                        help="the share consumers' max.poll.records (librdkafka's default "
                             "500): also the max_records of each ShareFetch")
    parser.add_argument("--batch-size", type=int, default=16384,
                        help="batch.size of the fill (Kafka's default; share fetches acquire "
                             "whole batches, so this sets how many records one fetch takes)")
    parser.add_argument("--client", choices=["both", "confluent-kafka", "databus"],
                        default="both",
                        help="whose ShareConsumer: confluent-kafka's (librdkafka), databus's "
                             "own trio client, or both, one group after the other")
    parser.add_argument("--reject-every", type=int, default=0,
                        help="REJECT every Nth offset instead of accepting it (0: accept all)")
    parser.add_argument("--dlq", choices=["off", "on", "both"], default="off",
                        help="give each share group a dead-letter topic (KIP-1191): off, on, "
                             "or both one group after the other")


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


def _set_earliest(bootstrap: str, group: str, dlq: bool = False) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    configs = {"share.auto.offset.reset": "earliest"}
    if dlq:
        configs["errors.deadletterqueue.topic.name"] = f"dlq.{group}"
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    admin.incremental_alter_configs([resource])[resource].result(30)


def _share_worker(bootstrap: str, group: str, topic: str, records: int, max_poll: int,
                  reject_every: int, accepted, ready, go, results) -> None:
    """One confluent-kafka share consumer, in its own process (as share consumers are
    deployed, and so that the Python work per record of one does not hold the others'
    GIL).  Once started it says ``ready`` and waits for ``go`` before it subscribes (the
    clock starts then, so the interpreter's start-up is not timed); it accepts every
    record, counts into the shared ``accepted`` until it reaches ``records``, then puts its
    offsets (and any errors) on ``results``."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": max_poll})
    offsets: list[int] = []
    errors: list[str] = []
    accept, reject = AcknowledgeType.ACCEPT, AcknowledgeType.REJECT
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
                offset = message.offset()
                consumer.acknowledge(message, reject if reject_every and
                                     offset % reject_every == 0 else accept)
                offsets.append(offset)
                good += 1
            if good:
                with accepted.get_lock():
                    accepted.value += good
        consumer.commit_sync(30)
    finally:
        consumer.close()
        results.put((offsets, errors))


def _our_share_worker(bootstrap: str, group: str, topic: str, records: int, max_poll: int,
                      reject_every: int, accepted, ready, go, results) -> None:
    """``_share_worker`` with databus's own trio ShareConsumer."""
    import trio

    from databus.client import AcknowledgeType, KafkaError, ShareConsumer

    offsets: list[int] = []
    errors: list[str] = []

    async def main() -> None:
        async with ShareConsumer(bootstrap, {
                "group.id": group, "share.acknowledgement.mode": "explicit",
                "max.poll.records": max_poll}) as consumer:
            ready.release()
            await trio.to_thread.run_sync(go.wait, 600)
            consumer.subscribe([topic])
            accept, reject = AcknowledgeType.ACCEPT, AcknowledgeType.REJECT
            with trio.move_on_after(600):
                while accepted.value < records:
                    try:
                        batch = await consumer.poll(0.2)
                    except KafkaError as exc:
                        errors.append(str(exc))
                        continue
                    for record in batch:
                        consumer.acknowledge(record, reject if reject_every and
                                             record.offset % reject_every == 0 else accept)
                    offsets.extend(r.offset for r in batch)
                    if batch:
                        with accepted.get_lock():
                            accepted.value += len(batch)
            for tp, error in (await consumer.commit(30)).items():
                if error is not None:
                    errors.append(f"{tp}: {error}")

    try:
        trio.run(main)
    finally:
        results.put((offsets, errors))


def _classic_reader(bootstrap: str, topic: str, records: int, out: dict) -> None:
    from .common import consume_all

    out["seconds"] = consume_all(bootstrap, topic, 1, records)


@dataclass
class Phase:
    """One share group (``consumers`` processes of one client) beside a classic reader."""

    label: str
    seconds: float
    classic_seconds: float
    delivered: Counter
    errors: list[str]
    broker_cpu: str


def _phase(label: str, worker, args, bootstrap: str, topic: str, cpu,
           dlq: bool = False) -> Phase:
    group = f"bench-share-{time.time_ns()}"
    _set_earliest(bootstrap, group, dlq)
    context = multiprocessing.get_context("spawn")
    accepted = context.Value("q", 0)
    ready, go, results = context.Semaphore(0), context.Event(), context.Queue()
    workers = [context.Process(target=worker, args=(
        bootstrap, group, topic, args.records, args.max_poll_records, args.reject_every,
        accepted, ready, go, results)) for _ in range(args.consumers)]
    for process in workers:
        process.start()
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
    seconds = time.perf_counter() - start
    cpu_after = cpu.seconds()
    reader.join()
    for process in workers:
        process.join(30)
    broker_cpu = ("-" if cpu_before is None or cpu_after is None
                  else f"{(cpu_after - cpu_before) / seconds:.0%}")
    return Phase(label, seconds, classic["seconds"],
                 Counter(o for offsets, _ in outcomes for o in offsets),
                 [e for _, errs in outcomes for e in errs], broker_cpu)


def run(args) -> int:
    from databus.cli_helpers.table import Column, print_table

    clients = {"confluent-kafka": _share_worker, "databus": _our_share_worker}
    chosen = list(clients) if args.client == "both" else [args.client]
    with broker_for(args) as (bootstrap, cpu):
        topic = f"bench-share-{time.time_ns()}"
        create_topic(bootstrap, topic, 1)
        # batches of Kafka's default batch.size: a share fetch acquires whole batches
        produce_records(bootstrap, topic, args.records, args.record_size,
                        batch_size=args.batch_size)
        state_before = _state_records(bootstrap)
        dlqs = {"off": [False], "on": [True], "both": [False, True]}[args.dlq]
        phases = [_phase(f"{name}{', DLQ on' if dlq else ''}", clients[name], args,
                         bootstrap, topic, cpu, dlq)
                  for name in chosen for dlq in dlqs]
        state_writes = _state_records(bootstrap) - state_before
    failed = False
    rows = []
    for phase in phases:
        if phase.errors:
            print(f"{phase.label}: errors: {phase.errors[:5]}")
        if len(phase.delivered) < args.records:
            print(f"{phase.label}: only {len(phase.delivered)} of {args.records} records "
                  "were delivered")
            failed = True
            continue
        share_rate = args.records / phase.seconds
        classic_rate = args.records / phase.classic_seconds
        redelivered = sum(count - 1 for count in phase.delivered.values())
        rows.append((f"share group, {args.consumers} x {phase.label}", f"{share_rate:,.0f}",
                     f"{classic_rate:,.0f}", f"{share_rate / classic_rate:.2f}x",
                     str(redelivered), phase.broker_cpu))
    print_table(
        [Column("share consumers (explicit accept" +
                (f", every {args.reject_every}th rejected)" if args.reject_every else ")")), *(Column(h, justify="right") for h in (
            "share records/s", "classic records/s", "share / classic", "delivered twice",
            "broker CPU"))],
        rows,
        title=f"databus bench share ({args.records:,} {args.record_size}-byte records, one "
              "partition; each share group beside a classic consumer reading the same "
              "records in the same run)",
    )
    seconds = sum(phase.seconds for phase in phases)
    acks = args.records * len(phases)
    print(f"share state writes: {state_writes} ({state_writes / seconds:,.1f}/s, "
          f"{acks / max(state_writes, 1):,.0f} acknowledgements per write; each "
          "write waits for one group-commit fsync)")
    return 1 if failed else 0
