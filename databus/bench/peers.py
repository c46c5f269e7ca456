"""The Python Kafka clients our client is compared with (aiokafka, kafka-python), and ours
run in a child process with a chosen implementation of the record kernels.

Used by ``bench client-produce`` and ``bench client-consume``: every client produces or
reads the same volume against the same broker in the same run, so their rows compare.
aiokafka and kafka-python come with the test extra; when one is missing its row is printed
as skipped with the command that installs it.

Our client runs twice, in child processes: once with the C extension (when it is built)
and once with ``DATABUS_PURE_PYTHON=1``, because which implementation runs is chosen when
databus is imported (databus/protocol/speedups.py).  ``client_rows`` runs the chosen clients
and prints the table both benches print.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

from .common import Result, librdkafka_missing, print_ratios, produce_ours

LIBRDKAFKA, AIOKAFKA, KAFKA_PYTHON = "librdkafka", "aiokafka", "kafka-python"
OURS_C, OURS_PURE = "databus-c", "databus-pure"
CLIENTS = (LIBRDKAFKA, OURS_C, AIOKAFKA, OURS_PURE, KAFKA_PYTHON)

PEER_PACKAGES = {"aiokafka": "aiokafka", "kafka-python": "kafka"}

# kafka-python logs every connection at INFO and its own slowness at WARNING: not our output
for _name in PEER_PACKAGES.values():
    logging.getLogger(_name).setLevel(logging.ERROR)


def peer_missing(name: str) -> str | None:
    """None when the peer client ``name`` can run, else how to install it."""
    if importlib.util.find_spec(PEER_PACKAGES[name]) is None:
        return f"pip install {name}"
    return None


def extension_missing() -> str | None:
    """None when the C extension is built, else why its row is skipped."""
    if importlib.util.find_spec("databus.protocol._speedups") is None:
        return "the C extension is not built (a C compiler at `pip install -e .`)"
    return None


@contextlib.contextmanager
def _environment(pure: bool):
    saved = os.environ.get("DATABUS_PURE_PYTHON")
    if pure:
        os.environ["DATABUS_PURE_PYTHON"] = "1"
    else:
        os.environ.pop("DATABUS_PURE_PYTHON", None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DATABUS_PURE_PYTHON", None)
        else:
            os.environ["DATABUS_PURE_PYTHON"] = saved


def in_child(pure: bool, fn, *args):
    """``fn(*args)`` in a fresh (spawned) process whose databus runs the pure-Python code
    (``pure``) or the C extension; returns its result."""
    with _environment(pure), ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        return pool.submit(_settled, fn, *args).result()


def _settled(fn, *args):
    """``fn(*args)`` after the child's first full garbage collection: a fresh process's
    first one walks everything its imports made (0.1-0.3 s here, once per process), which
    the peers, run in the bench's own long-lived process, paid before their clocks start."""
    import gc

    gc.collect()
    return fn(*args)


def ours_produce(bootstrap, topic, records, record_size, kafka_config) -> tuple[float, str]:
    """Our producer's seconds for the run (in the calling process), and the implementation."""
    import trio

    from databus.client import ProducerConfig
    from databus.protocol.speedups import implementation

    config = ProducerConfig.from_kafka(kafka_config)
    return trio.run(produce_ours, bootstrap, topic, records, record_size, config), implementation()


# The fetch settings of the "tuned" rows (--tuned): large fetches, a short long poll and
# large poll batches, the same for every client.  The default rows set none of them.
TUNED_FETCH = {"fetch.max.bytes": 64 * 1024 * 1024,
               "max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.wait.ms": 100}
TUNED_MAX_RECORDS = 100_000


def ours_consume(bootstrap, topic, partitions, records, tuned=False) -> tuple[float, str]:
    import trio

    from databus.protocol.speedups import implementation

    return (trio.run(consume_ours, bootstrap, topic, partitions, records, tuned),
            implementation())


async def consume_ours(bootstrap: str, topic: str, partitions: int, records: int,
                       tuned: bool = False) -> float:
    """At the defaults: ``poll(1.0)`` as docs/client.md shows it (max.poll.records 500);
    ``tuned``: TUNED_FETCH and ``getmany`` of up to TUNED_MAX_RECORDS."""
    import trio

    from databus.client import Consumer

    config = {"auto.offset.reset": "earliest"}
    if tuned:
        config |= TUNED_FETCH | {"max.poll.records": TUNED_MAX_RECORDS}
    async with Consumer(bootstrap, config) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        seen = 0
        start = trio.current_time()
        with trio.fail_after(600):
            while seen < records:
                seen += len(await consumer.poll(1.0))
        return trio.current_time() - start


def ours_consume_columns(bootstrap, topic, partitions, records) -> tuple[float, str]:
    import trio

    from databus.protocol.speedups import implementation

    return trio.run(consume_ours_columns, bootstrap, topic, partitions, records), implementation()


async def consume_ours_columns(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """``getmany_columns(timeout=1.0)`` at the defaults, each result made one Arrow table."""
    import trio

    from databus.client import Consumer, arrow_table

    async with Consumer(bootstrap, {"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        seen = 0
        start = trio.current_time()
        with trio.fail_after(600):
            while seen < records:
                got = await consumer.getmany_columns(timeout=1.0)
                seen += arrow_table(got.values()).num_rows
        return trio.current_time() - start


def arrow_from_records(rows) -> object:
    """The columns databus's Arrow table has, built in Python from (topic, partition,
    offset, timestamp, key, value, headers) tuples: what a peer client's user writes."""
    import pyarrow as pa

    topics, parts, offsets, stamps, keys, values, headers = zip(*rows) if rows else ([],) * 7
    return pa.table({
        "topic": pa.array(topics, pa.string()).dictionary_encode(),
        "partition": pa.array(parts, pa.int32()), "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array(stamps, pa.int64()), "key": pa.array(keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[{"key": k, "value": v} for k, v in h or ()] for h in headers],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })


def aiokafka_consume_columns(bootstrap, topic, partitions, records) -> float:
    """aiokafka's ``getmany()`` at its defaults, each result made an Arrow table in Python."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            seen = 0
            start = time.perf_counter()
            while seen < records:
                got = await consumer.getmany(timeout_ms=1000)
                seen += arrow_from_records([
                    (m.topic, m.partition, m.offset, m.timestamp, m.key, m.value, m.headers)
                    for batch in got.values() for m in batch]).num_rows
                if time.perf_counter() - start > 600:
                    raise TimeoutError(f"aiokafka read {seen} of {records} records in 600 s")
            return time.perf_counter() - start
        finally:
            await consumer.stop()

    return asyncio.run(main())


def librdkafka_consume_columns(bootstrap, topic, partitions, records) -> float:
    """librdkafka's ``consume(500, 1.0)`` at its defaults, each result an Arrow table."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        start = time.perf_counter()
        while seen < records:
            seen += arrow_from_records([
                (m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                 m.headers()) for m in consumer.consume(num_messages=500, timeout=1.0)]).num_rows
            if time.perf_counter() - start > 600:
                raise TimeoutError(f"librdkafka read {seen} of {records} records in 600 s")
        return time.perf_counter() - start
    finally:
        consumer.close()


def client_rows(args, names: dict[str, str], runners: dict, title: str,
                clients: list[str] | None = None) -> int:
    """Run the chosen clients (``clients``, else ``--clients``) ``--rounds`` times,
    alternating; print each one's best round.

    ``names`` maps a client to its row name, ``runners`` to a function returning seconds."""
    chosen = clients if clients is not None else [c for c in args.clients.split(",") if c]
    unknown = sorted(set(chosen) - set(CLIENTS))
    if unknown:
        raise SystemExit(f"unknown --clients {','.join(unknown)} (known: {','.join(CLIENTS)})")
    missing = {LIBRDKAFKA: librdkafka_missing(), AIOKAFKA: peer_missing(AIOKAFKA),
               KAFKA_PYTHON: peer_missing(KAFKA_PYTHON), OURS_C: extension_missing()}
    skipped = {names[c]: missing[c] for c in chosen if missing.get(c)}
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for client in chosen:
            if not missing.get(client):
                seconds = runners[client]()
                best[client] = min(seconds, best.get(client, seconds))
    results = {c: Result(names[c], args.records, s, args.record_size) for c, s in best.items()}
    rounds = f", best of {args.rounds} rounds" if args.rounds > 1 else ""
    print_ratios(title + rounds, [results[c] for c in chosen if c in results],
                 results.get(LIBRDKAFKA), skipped=skipped, as_json=args.json,
                 peer=results.get(AIOKAFKA))
    return 0


# -- aiokafka -------------------------------------------------------------------------------

def _settings(acks, linger_ms, batch_size, batch_size_name: str) -> dict:
    """The keyword arguments of a Python client for the settings given (None: its default)."""
    out = {}
    if acks is not None:
        out["acks"] = acks if acks == "all" else int(acks)
    if linger_ms is not None:
        out["linger_ms"] = linger_ms
    if batch_size is not None:
        out[batch_size_name] = batch_size
    return out


def aiokafka_produce(bootstrap, topic, records, record_size, *, acks=None, linger_ms=None,
                     batch_size=None, compression="none") -> float:
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main() -> float:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if compression == "none" else compression,
            **_settings(acks, linger_ms, batch_size, "max_batch_size"),
        )
        await producer.start()
        try:
            value = os.urandom(record_size)
            send = producer.send
            start = time.perf_counter()
            last = None
            for _ in range(records):
                last = await send(topic, value)
            await producer.flush()
            if last is not None:
                await last  # raises if the last record failed
            return time.perf_counter() - start
        finally:
            await producer.stop()

    return asyncio.run(main())


def aiokafka_consume(bootstrap, topic, partitions, records, tuned=False) -> float:
    """At its defaults: ``getmany(timeout_ms=1000)`` (no max_records: all that is buffered)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main() -> float:
        settings = {}
        if tuned:
            settings = {key.replace(".", "_"): value for key, value in TUNED_FETCH.items()}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
            auto_offset_reset="earliest", **settings,
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            seen = 0
            start = time.perf_counter()
            while seen < records:
                got = await consumer.getmany(timeout_ms=1000,
                                             max_records=TUNED_MAX_RECORDS if tuned else None)
                seen += sum(len(v) for v in got.values())
                if time.perf_counter() - start > 600:
                    raise TimeoutError(f"aiokafka read {seen} of {records} records in 600 s")
            return time.perf_counter() - start
        finally:
            await consumer.stop()

    return asyncio.run(main())


# -- kafka-python ---------------------------------------------------------------------------

def kafka_python_produce(bootstrap, topic, records, record_size, *, acks=None, linger_ms=None,
                         batch_size=None, compression="none") -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        **_settings(acks, linger_ms, batch_size, "batch_size"),
    )
    try:
        value = os.urandom(record_size)
        send = producer.send
        start = time.perf_counter()
        last = None
        for _ in range(records):
            last = send(topic, value)
        producer.flush()
        if last is not None:
            last.get(timeout=60)  # raises if the last record failed
        return time.perf_counter() - start
    finally:
        producer.close()


def kafka_python_consume(bootstrap, topic, partitions, records, tuned=False) -> float:
    from kafka import KafkaConsumer, TopicPartition

    settings = {}
    if tuned:
        settings = {key.replace(".", "_"): value for key, value in TUNED_FETCH.items()}
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", **settings,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        seen = 0
        start = time.perf_counter()
        while seen < records:
            got = consumer.poll(timeout_ms=1000, max_records=TUNED_MAX_RECORDS if tuned else None)
            seen += sum(len(v) for v in got.values())
            if time.perf_counter() - start > 600:
                raise TimeoutError(f"kafka-python read {seen} of {records} records in 600 s")
        return time.perf_counter() - start
    finally:
        consumer.close()
