"""kill -9 under an idempotent acks=all producer, ten times: nothing acknowledged is lost,
nothing is duplicated, per-key order holds.

One confluent-kafka producer (enable.idempotence, acks=all) keeps producing in short bursts
while the broker process is SIGKILLed and restarted on the same port and data dir.  The
producer retries what was in flight; the broker's idempotent-producer state, rebuilt from the
log at recovery, must recognise the retries that were already written (same offsets, no
duplicate) and accept the ones that were not.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer

from tests.helpers.broker import BrokerProcess

from .clients import confluent_consume

KEYS = 8
RESTARTS = 10


def test_kill9_restart_loop_loses_and_duplicates_nothing(tmp_path):
    with BrokerProcess(tmp_path, {"num.partitions": 2}) as broker:
        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
        })
        acked: dict[bytes, int] = {}  # value -> offset
        failures = []
        lock = threading.Lock()

        def on_delivery(err, msg):
            with lock:
                if err is not None:
                    failures.append(err)
                else:
                    assert msg.value() not in acked, "acknowledged twice"
                    acked[msg.value()] = (msg.partition(), msg.offset())

        stop = threading.Event()
        produced = [0]

        def produce_forever():
            seq = [0] * KEYS
            while not stop.is_set():
                for _ in range(200):
                    i = produced[0]
                    key = i % KEYS
                    value = b"%d:%d" % (key, seq[key])
                    seq[key] += 1
                    while True:
                        try:
                            producer.produce("crash", value, key=b"k%d" % key,
                                             on_delivery=on_delivery)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    produced[0] += 1
                producer.poll(0.01)

        worker = threading.Thread(target=produce_forever, daemon=True)
        worker.start()
        try:
            for _ in range(RESTARTS):
                time.sleep(0.6)
                broker.restart()  # kill -9, then start on the same port and data
            time.sleep(0.5)
        finally:
            stop.set()
            worker.join(30)
        assert producer.flush(60) == 0
        assert not failures, failures[:3]
        assert len(acked) == produced[0] > 1000

        got = confluent_consume(broker.bootstrap, "crash", len(acked), (0, 1))
        values = [g.value for g in got]
        assert len(values) == len(set(values)), "a message is in the log twice"
        assert set(values) == set(acked)
        assert {v: (g.partition, g.offset) for v, g in zip(values, got, strict=True)} == acked
        last: dict[int, int] = {}
        for g in sorted(got, key=lambda g: (g.partition, g.offset)):
            key, seq = map(int, g.value.split(b":"))
            assert seq == last.get(key, -1) + 1, f"key {key}: {seq} after {last.get(key)}"
            last[key] = seq
        assert "recovery" in broker.log_text() or "unclean" in broker.log_text().lower()
