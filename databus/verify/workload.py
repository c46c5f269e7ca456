"""Jepsen's Kafka "queue" workload against a real cluster: the I/O shell around the pure
history (history.py) and checker (checker.py).

Clients, each a thread recording its operations into one Recorder:
- idempotent producers (confluent-kafka and databus's own SyncProducer): one ``send`` op
  per record, to a partition chosen at random, completed by its delivery report;
- transactional producers (confluent-kafka and databus's SyncProducer): one ``send`` op
  per transaction of a few records over several partitions, committed (ok) or aborted on
  purpose (fail);
- an assign consumer (confluent-kafka, every partition from the beginning) and a consumer
  group of subscribers (confluent-kafka and databus's SyncConsumer), all read_committed,
  recording ``assign`` on each (re)assignment and ``poll`` for every batch delivered;
- after the run (faults healed, producers stopped) a drain: a fresh read_committed
  consumer reads every partition to its end and records how far it got.

``unsafe`` picks a deliberately broken producer setup, to show the checker can fail:
``acks0`` (acks=0: delivered as soon as written to the socket) or ``no-idempotence``
(acks=1, retries, no idempotence: a retried batch can be appended twice).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from .history import FAIL, INFO, INVOKE, OK, Op, Read, Write

log = logging.getLogger(__name__)

UNSAFE = ("acks0", "no-idempotence", "mirror-at-least-once")  # the last: pipeline --stages

# librdkafka logs every refused reconnect while the nemesis has the broker down; the
# history records what matters.  Our clients' settings have no such key: it is removed
# for them (_ours).
RDKAFKA_QUIET = {"log_level": 0}


def _ours(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in ("bootstrap.servers", *RDKAFKA_QUIET)}


class Recorder:
    """The run's history, appended to by every client thread (and written to ``sink``)."""

    def __init__(self, sink: IO[str] | None = None) -> None:
        self.ops: list[Op] = []
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._next_id = 0
        self._sink = sink

    def _append(self, op: Op) -> None:
        self.ops.append(op)
        if self._sink is not None:
            self._sink.write(op.to_json() + "\n")

    def invoke(self, process: str, f: str, **kw: Any) -> int:
        with self._lock:
            op_id = self._next_id
            self._next_id += 1
            self._append(Op(op_id, process, INVOKE, f, time.monotonic() - self.t0, **kw))
            return op_id

    def complete(self, op_id: int, process: str, type_: str, f: str, **kw: Any) -> None:
        with self._lock:
            self._append(Op(op_id, process, type_, f, time.monotonic() - self.t0, **kw))

    def event(self, process: str, f: str, **kw: Any) -> None:
        """An operation that completes as it is invoked (poll results, assignments, faults)."""
        op_id = self.invoke(process, f, **{k: v for k, v in kw.items() if k in ("partitions",
                                                                              "fault")})
        self.complete(op_id, process, OK, f, **kw)


@dataclass
class QueueOptions:
    bootstrap: str
    topic: str = "verify-queue"
    partitions: int = 4
    seed: int = 0
    idempotent_producers: int = 2    # one confluent-kafka, one databus; more alternate
    txn_producers: int = 2
    group_consumers: int = 2         # one confluent-kafka, one databus; more alternate
    assign_consumers: int = 1
    rate: float = 200.0              # records/s per idempotent producer
    abort_ratio: float = 0.25
    unsafe: str | None = None
    session_timeout_ms: int = 6000
    drain_timeout: float = 60.0
    recover: float = 10.0            # seconds the clients go on after the faults healed
    extra: dict[str, str] = field(default_factory=dict)


def _producer_config(opts: QueueOptions) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": opts.bootstrap, "linger.ms": 5, **RDKAFKA_QUIET,
                              "delivery.timeout.ms": 60000, "request.timeout.ms": 5000}
    if opts.unsafe == "acks0":
        config.update({"acks": 0, "enable.idempotence": False})
    elif opts.unsafe == "no-idempotence":
        config.update({"acks": 1, "enable.idempotence": False, "retries": 100,
                       "request.timeout.ms": 2000})
    else:
        config.update({"acks": "all", "enable.idempotence": True})
    return config


class _Worker(threading.Thread):
    def __init__(self, name: str, opts: QueueOptions, rec: Recorder, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.opts, self.rec, self.stop = opts, rec, stop
        self.rng = random.Random(f"{opts.seed}-{name}")
        self.errors = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.work()
            except Exception as exc:  # a client that broke: record nothing false, start anew
                self.errors += 1
                log.info("%s: %s (starting a new client)", self.name, exc)
                self.stop.wait(0.5)

    def work(self) -> None:
        raise NotImplementedError


class ConfluentIdempotentProducer(_Worker):
    def work(self) -> None:
        import confluent_kafka

        producer = confluent_kafka.Producer(_producer_config(self.opts))
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                value = f"{self.name}-{n}-{self.rng.randrange(1 << 30):x}"
                partition = self.rng.randrange(self.opts.partitions)
                op_id = self.rec.invoke(self.name, "send", writes=(Write(partition, value),))

                def done(err, msg, op_id=op_id, partition=partition, value=value):
                    if err is None:
                        offset = msg.offset()  # None or negative: acks=0 learns none
                        offset = offset if offset is not None and offset >= 0 else None
                        self.rec.complete(op_id, self.name, OK, "send",
                                          writes=(Write(partition, value, offset),))
                    else:
                        self.rec.complete(op_id, self.name, INFO, "send",
                                          writes=(Write(partition, value),), error=str(err))

                producer.produce(self.opts.topic, value.encode(), partition=partition,
                                 on_delivery=done)
                producer.poll(0)
                self.stop.wait(1.0 / self.opts.rate)
        finally:
            producer.flush(30)  # undelivered ones stay invoked: unknown outcome


class DatabusIdempotentProducer(_Worker):
    def work(self) -> None:
        from databus.client import SyncProducer

        config = _ours(_producer_config(self.opts))
        with SyncProducer(self.opts.bootstrap, config) as producer:
            n = 0
            while not self.stop.is_set():
                n += 1
                value = f"{self.name}-{n}-{self.rng.randrange(1 << 30):x}"
                partition = self.rng.randrange(self.opts.partitions)
                op_id = self.rec.invoke(self.name, "send", writes=(Write(partition, value),))

                def done(fut, op_id=op_id, partition=partition, value=value):
                    exc = fut.exception()
                    if exc is None:
                        offset = fut.result().offset
                        self.rec.complete(op_id, self.name, OK, "send", writes=(
                            Write(partition, value, offset if offset >= 0 else None),))
                    else:
                        self.rec.complete(op_id, self.name, INFO, "send",
                                          writes=(Write(partition, value),), error=str(exc))

                producer.send(self.opts.topic, value.encode(), partition=partition
                              ).add_done_callback(done)
                self.stop.wait(1.0 / self.opts.rate)
            producer.flush(30)


class ConfluentTransactionalProducer(_Worker):
    """A transaction = 2-5 records over random partitions; some aborted on purpose.  A
    commit whose outcome is unknown is ``info``; after any error the producer is replaced
    (init_transactions fences the old one and aborts what it left open)."""

    def work(self) -> None:
        import confluent_kafka

        config = _producer_config(self.opts)
        config.update({"transactional.id": f"verify-{self.opts.seed}-{self.name}",
                       "transaction.timeout.ms": 30000, "delivery.timeout.ms": 30000,
                       "acks": "all",
                       "enable.idempotence": True})
        producer = confluent_kafka.Producer(config)
        producer.init_transactions(30)
        n = 0
        while not self.stop.is_set():
            n += 1
            txn = f"{self.name}-{n}-{self.rng.randrange(1 << 30):x}"
            planned = [Write(self.rng.randrange(self.opts.partitions), f"{txn}.{i}")
                       for i in range(self.rng.randint(2, 5))]
            abort = self.rng.random() < self.opts.abort_ratio
            op_id = self.rec.invoke(self.name, "send", writes=tuple(planned), txn=txn)
            offsets: dict[str, int] = {}

            def done(err, msg, offsets=offsets):
                if err is None:
                    offsets[msg.value().decode()] = msg.offset()

            try:
                producer.begin_transaction()
                for w in planned:
                    producer.produce(self.opts.topic, w.value.encode(), partition=w.partition,
                                     on_delivery=done)
                producer.flush(30)
                if abort:
                    producer.abort_transaction(30)
                else:
                    producer.commit_transaction(30)
            except confluent_kafka.KafkaException as exc:
                error = exc.args[0]
                outcome = INFO
                if not abort and error.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        outcome = FAIL
                    except confluent_kafka.KafkaException:
                        pass
                self.rec.complete(op_id, self.name, outcome, "send", writes=tuple(planned),
                                  txn=txn, error=str(error))
                raise
            writes = tuple(Write(w.partition, w.value, None if abort else offsets.get(w.value))
                           for w in planned)
            self.rec.complete(op_id, self.name, FAIL if abort else OK, "send", writes=writes,
                              txn=txn, error="aborted on purpose" if abort else None)
            self.stop.wait(self.rng.uniform(0.0, 0.05))


class DatabusTransactionalProducer(_Worker):
    """The same transactions through databus's own SyncProducer.  After an error whose
    outcome is unknown the producer is replaced (init_transactions fences the old one)."""

    def work(self) -> None:
        from databus.client import SyncProducer

        config = _ours(_producer_config(self.opts))
        config.update({"transactional.id": f"verify-{self.opts.seed}-{self.name}",
                       "transaction.timeout.ms": 30000, "delivery.timeout.ms": 30000,
                       "acks": "all", "enable.idempotence": True})
        with SyncProducer(self.opts.bootstrap, config) as producer:
            producer.init_transactions()
            n = 0
            while not self.stop.is_set():
                n += 1
                txn = f"{self.name}-{n}-{self.rng.randrange(1 << 30):x}"
                planned = [Write(self.rng.randrange(self.opts.partitions), f"{txn}.{i}")
                           for i in range(self.rng.randint(2, 5))]
                abort = self.rng.random() < self.opts.abort_ratio
                op_id = self.rec.invoke(self.name, "send", writes=tuple(planned), txn=txn)
                try:
                    producer.begin_transaction()
                    futures = [producer.send(self.opts.topic, w.value.encode(),
                                             partition=w.partition) for w in planned]
                    if abort:
                        producer.abort_transaction()
                    else:
                        producer.commit_transaction()
                except Exception as exc:
                    self.rec.complete(op_id, self.name, INFO, "send", writes=tuple(planned),
                                      txn=txn, error=f"{type(exc).__name__}: {exc}")
                    raise
                if abort:
                    writes = tuple(planned)
                else:
                    writes = tuple(Write(w.partition, w.value, f.result(0).offset)
                                   for w, f in zip(planned, futures))
                self.rec.complete(op_id, self.name, FAIL if abort else OK, "send",
                                  writes=writes, txn=txn,
                                  error="aborted on purpose" if abort else None)
                self.stop.wait(self.rng.uniform(0.0, 0.05))


def _consumer_config(opts: QueueOptions, group: str | None) -> dict[str, Any]:
    config = {"bootstrap.servers": opts.bootstrap, "isolation.level": "read_committed",
              **RDKAFKA_QUIET,
              "auto.offset.reset": "earliest", "enable.auto.commit": True,
              "session.timeout.ms": opts.session_timeout_ms, "heartbeat.interval.ms": 1000}
    if group:
        config["group.id"] = group
    return config


class ConfluentConsumer(_Worker):
    def __init__(self, *args, group: str | None = None, **kw) -> None:
        super().__init__(*args, **kw)
        self.group = group

    def work(self) -> None:
        import confluent_kafka

        config = _consumer_config(self.opts, self.group or f"verify-assign-{self.name}")
        consumer = confluent_kafka.Consumer(config)
        try:
            if self.group:
                consumer.subscribe([self.opts.topic], on_assign=lambda c, tps: self.rec.event(
                    self.name, "assign", partitions=tuple(tp.partition for tp in tps)))
            else:
                parts = range(self.opts.partitions)
                consumer.assign([confluent_kafka.TopicPartition(
                    self.opts.topic, p, confluent_kafka.OFFSET_BEGINNING) for p in parts])
                self.rec.event(self.name, "assign", partitions=tuple(parts))
            while not self.stop.is_set():
                messages = consumer.consume(200, 0.5)
                for m in messages:
                    if m.error() is not None:  # e.g. an offset reset: say why reads jump
                        log.warning("%s: p%s: %s", self.name, m.partition(), m.error())
                reads = tuple(Read(m.partition(), m.offset(), m.value().decode())
                              for m in messages if m.error() is None)
                if reads:
                    self.rec.event(self.name, "poll", reads=reads)
        finally:
            consumer.close()


class DatabusGroupConsumer(_Worker):
    def work(self) -> None:
        from databus.client import SyncConsumer

        config = _ours(_consumer_config(self.opts, "verify-group"))

        def assigned(partitions):
            self.rec.event(self.name, "assign", partitions=tuple(tp.partition for tp in partitions))

        with SyncConsumer(self.opts.bootstrap, config, on_assigned=assigned) as consumer:
            consumer.subscribe([self.opts.topic])
            while not self.stop.is_set():
                records = consumer.poll(0.5)
                reads = tuple(Read(r.partition, r.offset, r.value.decode()) for r in records)
                if reads:
                    self.rec.event(self.name, "poll", reads=reads)


def create_topic(opts: QueueOptions) -> None:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": opts.bootstrap})
    futures = admin.create_topics([NewTopic(opts.topic, opts.partitions, 1)])
    try:
        futures[opts.topic].result(30)
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def drain(opts: QueueOptions, rec: Recorder) -> dict[int, int]:
    """Read every partition from the beginning to its end (the last stable offset once the
    producers stopped); records the reads and how far each partition was read."""
    import confluent_kafka

    config = _consumer_config(opts, f"verify-drain-{opts.seed}")
    config["enable.auto.commit"] = False
    consumer = confluent_kafka.Consumer(config)
    name = "drain"
    try:
        tps = [confluent_kafka.TopicPartition(opts.topic, p, confluent_kafka.OFFSET_BEGINNING)
               for p in range(opts.partitions)]
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(opts.topic, p),
                                                  timeout=30, cached=False)[1]
                for p in range(opts.partitions)}
        consumer.assign(tps)
        rec.event(name, "assign", partitions=tuple(range(opts.partitions)))
        reached = {p: 0 for p in ends}
        deadline = time.monotonic() + opts.drain_timeout
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            messages = consumer.consume(500, 0.5)
            reads = tuple(Read(m.partition(), m.offset(), m.value().decode())
                          for m in messages if m.error() is None)
            if reads:
                idle_since = time.monotonic()
                rec.event(name, "poll", reads=reads)
                for r in reads:
                    reached[r.partition] = max(reached[r.partition], r.offset + 1)
            for tp in consumer.position([confluent_kafka.TopicPartition(opts.topic, p)
                                         for p in ends]):
                if tp.offset >= 0:
                    reached[tp.partition] = max(reached[tp.partition], tp.offset)
            if all(reached[p] >= ends[p] for p in ends):
                break
            if time.monotonic() - idle_since > 5:  # trailing markers: nothing more to read
                break
        rec.event(name, "drain", ends=dict(reached))
        return reached
    finally:
        consumer.close()


def run_queue(opts: QueueOptions, rec: Recorder, duration: float,
              nemesis_start: Callable[[float], None] | None = None,
              nemesis_stop: Callable[[], None] | None = None,
              producer_class: type[_Worker] | None = None) -> list[_Worker]:
    """Run the clients for ``duration`` seconds (faults from ``nemesis_start``), heal, let
    them run ``opts.recover`` seconds more, stop them, drain.  Returns the workers (their
    ``errors`` say how often a client broke and was replaced)."""
    create_topic(opts)
    stop = threading.Event()
    workers: list[_Worker] = []
    if producer_class is not None:  # another way in (the pipeline's SDK senders)
        workers += [producer_class(f"{producer_class.prefix}{i}", opts, rec, stop)
                    for i in range(opts.idempotent_producers)]
    else:
        for i in range(opts.idempotent_producers):
            cls = DatabusIdempotentProducer if i % 2 else ConfluentIdempotentProducer
            workers.append(cls(f"idem{i}", opts, rec, stop))
        for i in range(opts.txn_producers):
            cls = DatabusTransactionalProducer if i % 2 else ConfluentTransactionalProducer
            workers.append(cls(f"txn{i}", opts, rec, stop))
    for i in range(opts.group_consumers):
        if i % 2:
            workers.append(DatabusGroupConsumer(f"group{i}", opts, rec, stop))
        else:
            workers.append(ConfluentConsumer(f"group{i}", opts, rec, stop, group="verify-group"))
    for i in range(opts.assign_consumers):
        workers.append(ConfluentConsumer(f"assign{i}", opts, rec, stop))
    for worker in workers:
        worker.start()
    if nemesis_start is not None:  # the schedule counts from the clients' start
        nemesis_start(time.monotonic())
    time.sleep(duration)
    if nemesis_stop is not None:
        nemesis_stop()
    # Jepsen's recovery period: a consumer group knocked over by the last fault forms again
    # and reads, so the history shows the system working once healed, not only broken.
    time.sleep(opts.recover)
    stop.set()
    for worker in workers:
        worker.join(90)
    drain(opts, rec)
    return workers
