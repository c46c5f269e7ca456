"""The latency runs of ``databus bench sidecar``: an app sends at a fixed rate and times
each message from send() to its delivery report.

Each path's app runs in a process of its own (``python -m databus.bench.latency SPEC``)
that imports its client and nothing else.  A full collection of the app's cyclic collector
walks its whole heap while holding the interpreter (the reports wait), and the benchmark
process's heap (tables, YAML, the broker's launcher, the other path's client) made those
pauses about a third longer than the app's own.  The child writes its reports to stdout
(pickled arrays); ``run_in_child`` reads them back as LatencyRecorders.
"""

from __future__ import annotations

import array
import functools
import json
import pickle
import subprocess
import sys
import threading
import time


class LatencyRecorder:
    """A latency run's reports: per delivered message its send and report times, partition
    and offset, in arrays (the app's collector should not walk 200 000 floats)."""

    def __init__(self, expected: int) -> None:
        self.sent = array.array("d")
        self.answered = array.array("d")
        self.partitions = array.array("i")
        self.offsets = array.array("q")
        self.errors = 0
        self.done = threading.Event()
        self.expected = expected
        self._count = 0
        self._lock = threading.Lock()

    def record(self, sent_at: float, failed: bool, partition: int, offset: int) -> None:
        now = time.perf_counter()
        with self._lock:
            if failed:
                self.errors += 1
            else:
                self.sent.append(sent_at)
                self.answered.append(now)
                self.partitions.append(partition)
                self.offsets.append(offset)
            self._count += 1
            if self._count >= self.expected:
                self.done.set()

    @property
    def latencies(self) -> list[float]:
        return [a - s for a, s in zip(self.answered, self.sent)]

    def state(self) -> tuple:
        return self.sent, self.answered, self.partitions, self.offsets, self.errors

    @classmethod
    def from_state(cls, state: tuple) -> LatencyRecorder:
        recorder = cls(0)
        recorder.sent, recorder.answered, recorder.partitions, recorder.offsets, \
            recorder.errors = state
        return recorder


def paced(rate: int, seconds: float):
    """Yield (index, batch size) so that ``rate`` messages/s go out in ~1 ms batches."""
    total = int(rate * seconds)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        if due > sent:
            yield sent, due - sent
            sent = due
        else:
            time.sleep(0.0005)


def latency_runs(rates: list[int], seconds: float, send,
                 poll=None) -> dict[int, LatencyRecorder]:
    """One paced run per rate: ``send(i, recorder)`` sends message ``i`` and has its report
    call ``recorder.record``.  ``poll(timeout)``: for a client whose reports are served by
    polling (librdkafka), called after each burst and while waiting for the last reports;
    otherwise the reports arrive on their own."""
    recorders = {}
    for rate in rates:
        recorder = recorders[rate] = LatencyRecorder(int(rate * seconds))
        for first, n in paced(rate, seconds):
            for i in range(first, first + n):
                send(i, recorder)
            if poll is not None:
                poll(0)
        if poll is None:
            recorder.done.wait(120)
        else:
            deadline = time.monotonic() + 120
            while not recorder.done.is_set() and time.monotonic() < deadline:
                poll(0.01)
    return recorders


def keys_for(count: int) -> list[bytes | None]:
    return [b"key-%d" % i for i in range(count)] if count else [None]


def sdk_runs(spec: dict) -> dict[int, LatencyRecorder]:
    """The SDK app: ``spec`` names the sidecar's ``socket``, the ``topic``, value ``size``,
    ``keys``, ``rates`` and ``seconds``."""
    from databus import Client

    value, keys = b"x" * spec["size"], keys_for(spec["keys"])
    nkeys, topic = len(keys), spec["topic"]
    with Client(spec["socket"]) as client:
        client.send(topic, b"warm-up").result(30)  # connected, the topic known
        # One callback for every message, each future's send time in a dict: a float, which
        # the collector does not track (a closure per message would be three objects that
        # survive young collections and make the app's full collections come sooner).
        sent_at: dict = {}
        current: list[LatencyRecorder] = []

        def on_report(future) -> None:
            started = sent_at.pop(future)
            if future.exception(0) is not None:
                current[0].record(started, True, -1, -1)
            else:
                delivery = future.result(0)
                current[0].record(started, False, delivery.partition, delivery.offset)

        def send(i: int, recorder: LatencyRecorder) -> None:
            current[:] = [recorder]
            started = time.perf_counter()
            future = client.send(topic, value, keys[i % nkeys])
            sent_at[future] = started
            future.add_done_callback(on_report)

        return latency_runs(spec["rates"], spec["seconds"], send)


def librdkafka_runs(spec: dict) -> dict[int, LatencyRecorder]:
    """The librdkafka app: as sdk_runs, with ``bootstrap`` and the producer ``config``."""
    import confluent_kafka

    value, keys = b"x" * spec["size"], keys_for(spec["keys"])
    nkeys, topic = len(keys), spec["topic"]
    producer = confluent_kafka.Producer(spec["config"])
    producer.produce(topic, b"warm-up")
    producer.flush(30)

    def on_delivery(recorder: LatencyRecorder, started: float, err, msg) -> None:
        recorder.record(started, err is not None, msg.partition(), msg.offset())

    def send(i: int, recorder: LatencyRecorder) -> None:
        # librdkafka keeps a callable per message: a partial of the send time (its
        # Message.latency() ends at the broker's answer, not at the app's callback)
        producer.produce(topic, value, keys[i % nkeys], on_delivery=functools.partial(
            on_delivery, recorder, time.perf_counter()))

    recorders = latency_runs(spec["rates"], spec["seconds"], send, poll=producer.poll)
    producer.flush(30)
    return recorders


RUNS = {"sdk": sdk_runs, "librdkafka": librdkafka_runs}


def run_in_child(path: str, spec: dict) -> dict[int, LatencyRecorder]:
    """``RUNS[path](spec)`` in a process of its own; its recorders."""
    result = subprocess.run(
        [sys.executable, "-m", "databus.bench.latency", json.dumps({"path": path, **spec})],
        stdout=subprocess.PIPE, check=True,
    )
    return {rate: LatencyRecorder.from_state(state)
            for rate, state in pickle.loads(result.stdout).items()}


def main() -> None:
    spec = json.loads(sys.argv[1])
    recorders = RUNS[spec["path"]](spec)
    sys.stdout.buffer.write(pickle.dumps(
        {rate: recorder.state() for rate, recorder in recorders.items()}))


if __name__ == "__main__":
    main()
