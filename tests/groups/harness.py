"""Test-side helpers for group tests: consumer subprocesses, topic creation, producing.

ConsumerProcess runs tests/groups/consumer_proc.py (a real client in its own process) and
collects what it reports; it is always killed on exit, even when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ConsumerProcess:
    def __init__(self, client: str, bootstrap: str, group: str, topic: str, *,
                 assignor: str = "range", session_ms: int = 6000) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.assignment: list[int] | None = None
        self.records: list[tuple[int, int, str]] = []
        self.lines: list[str] = []
        self.closed = False
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.groups.consumer_proc", "--client", client,
             "--bootstrap", bootstrap, "--group", group, "--topic", topic,
             "--assignor", assignor, "--session-ms", str(session_ms)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.lines.append(line)
                if event["event"] == "assigned":
                    self.assignment = event["partitions"]
                elif event["event"] == "records":
                    self.records.extend(tuple(r) for r in event["records"])
                elif event["event"] == "closed":
                    self.closed = True

    def _read_stderr(self) -> None:
        for raw in self.process.stderr:
            self._stderr.append(raw.decode(errors="replace"))

    def values(self) -> set[str]:
        with self.lock:
            return {v for _, _, v in self.records}

    def current_assignment(self) -> list[int]:
        with self.lock:
            return list(self.assignment or [])

    def describe(self) -> str:
        return f"{self.client}: assignment={self.assignment} stderr={''.join(self._stderr)[-2000:]}"

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM: the consumer closes cleanly (LeaveGroup)."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill9(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def __enter__(self) -> ConsumerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [confluent_kafka.admin.NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    futures[topic].result(15)


def produce(bootstrap: str, topic: str, values: list[str], partitions: int) -> None:
    """Produce ``values`` round-robin over the partitions and wait until all are acked."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors = []
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0
    assert not errors, errors
