"""A group consumer in its own process, driven by the group tests (not a test module).

    python -m tests.groups.consumer_proc --client confluent|kafka-python|aiokafka \
        --bootstrap HOST:PORT --group G --topic T [--assignor range] [--session-ms 6000]

It consumes with manual commits after processing (at-least-once) and reports on stdout, one
JSON object per line, flushed at once:
    {"event": "assigned", "partitions": [0, 3]}          whenever its assignment changes
    {"event": "records", "records": [[p, offset, value], ...]}   after they are committed
SIGTERM closes the consumer cleanly (LeaveGroup) and exits 0; kill -9 is a crash.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

stopping = False


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _on_term(signum, frame):
    global stopping
    stopping = True


def run_confluent(args) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": args.assignor,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    consumer.subscribe([args.topic])
    last = None
    try:
        while not stopping:
            messages = consumer.consume(num_messages=200, timeout=0.2)
            records = []
            for m in messages:
                if m.error():
                    continue
                records.append([m.partition(), m.offset(), m.value().decode()])
            if records:
                consumer.commit(asynchronous=False)
                emit({"event": "records", "records": records})
            current = sorted(tp.partition for tp in consumer.assignment())
            if current != last:
                last = current
                emit({"event": "assigned", "partitions": current})
    finally:
        consumer.close()


def run_kafka_python(args) -> None:
    import kafka
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = kafka.KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=500,
        partition_assignment_strategy=[assignor[args.assignor]],
        metadata_max_age_ms=1000,
    )
    last = None
    try:
        while not stopping:
            polled = consumer.poll(timeout_ms=200)
            records = [
                [r.partition, r.offset, r.value.decode()]
                for batch in polled.values()
                for r in batch
            ]
            if records:
                consumer.commit()
                emit({"event": "records", "records": records})
            current = sorted(tp.partition for tp in consumer.assignment())
            if current != last:
                last = current
                emit({"event": "assigned", "partitions": current})
    finally:
        consumer.close()


def run_aiokafka(args) -> None:
    import asyncio

    import aiokafka
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}

    async def main():
        consumer = aiokafka.AIOKafkaConsumer(
            args.topic,
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=500,
            partition_assignment_strategy=(assignor[args.assignor],),
            metadata_max_age_ms=1000,
        )
        await consumer.start()
        last = None
        try:
            while not stopping:
                polled = await consumer.getmany(timeout_ms=200)
                records = [
                    [r.partition, r.offset, r.value.decode()]
                    for batch in polled.values()
                    for r in batch
                ]
                if records:
                    await consumer.commit()
                    emit({"event": "records", "records": records})
                current = sorted(tp.partition for tp in consumer.assignment())
                if current != last:
                    last = current
                    emit({"event": "assigned", "partitions": current})
        finally:
            await consumer.stop()

    asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", required=True,
                        choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--session-ms", type=int, default=6000)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    {"confluent": run_confluent, "kafka-python": run_kafka_python,
     "aiokafka": run_aiokafka}[args.client](args)
    emit({"event": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
