"""Real processes for the mirror tests: `databus mirror` as a child process, and reading a
cluster back with confluent-kafka (librdkafka), independent of our client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from databus.broker.process import _child_env
from databus.mirror import provenance
from tests.helpers.wait import wait_for


def mirror_config(path: Path, clusters: dict, mirrors: list[dict]) -> Path:
    path.write_text(yaml.safe_dump({
        "clusters": clusters, "mirrors": mirrors,
        "sidecar": {"metrics_listen": None, "reload_poll_ms": 200},
    }))
    return path


def fast(**extra) -> dict:
    """Mirror settings for tests: notice new topics within a second."""
    return {"consumer": {"metadata.max.age.ms": 1000, **extra.pop("consumer", {})}, **extra}


class MirrorProcess:
    """``python -m databus.cli mirror -c FILE`` with its stderr in ``log_path``."""

    def __init__(self, config: Path, *args: str) -> None:
        self.config = config
        self.args = args
        self.log_path = config.with_suffix(".log")
        self.process: subprocess.Popen | None = None
        self.kills = 0
        self.log_start = 0  # where the current process's lines begin in the log


    def start(self) -> MirrorProcess:
        with open(self.log_path, "ab") as log:
            self.log_start = log.tell()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "databus.cli", "mirror", "-c", str(self.config),
                 *self.args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=_child_env(),
            )
        return self

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.kills += 1

    def stop(self) -> int:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode if self.process else 0

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics_url(self) -> str:
        """http://HOST:PORT/metrics of the current process (``metrics_listen`` set in its
        config), once it serves it."""
        def current() -> str:
            return self.log_text()[self.log_start:]

        wait_for(lambda: "metrics on http://" in current(), "the mirror's metrics",
                 timeout=30, log=self.log_text)
        return current().split("metrics on ", 1)[1].split()[0]

    def metrics(self) -> str:
        """Its /metrics page."""
        url = self.metrics_url()
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    def __enter__(self) -> MirrorProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def produce(bootstrap: str, topic: str, records, **config) -> None:
    """records: (key, value, headers, partition or None, timestamp ms or None)."""
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, **config})
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    for key, value, headers, partition, ts in records:
        kwargs = {"key": key, "value": value, "headers": headers, "on_delivery": report}
        if partition is not None:
            kwargs["partition"] = partition
        if ts is not None:
            kwargs["timestamp"] = ts
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors


def read_all(bootstrap: str, topic: str, count: int, timeout: float = 90.0,
             settle: float = 0.0, partitions: int = 1, **config) -> dict[int, list]:
    """Every record of ``topic`` from the beginning, by partition, once ``count`` arrived (and
    then ``settle`` more seconds, to catch records that should not be there); ``config``:
    more librdkafka settings (security.protocol, ...)."""
    import confluent_kafka

    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{os.getpid()}-{time.monotonic()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 1000, **config,
    })
    out: dict[int, list] = {}
    try:
        deadline = time.monotonic() + timeout
        while True:
            md = c.list_topics(topic, timeout=10).topics.get(topic)
            if md is not None and not md.error and len(md.partitions) >= partitions:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic} never appeared on {bootstrap}")
            time.sleep(0.2)
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in sorted(md.partitions)])
        got = 0
        settle_until = None
        while True:
            now = time.monotonic()
            if got >= count and settle_until is None:
                settle_until = now + settle
            if settle_until is not None and now >= settle_until:
                break
            if now > deadline:
                raise AssertionError(f"{topic} on {bootstrap}: {got} of {count} records "
                                     f"after {timeout}s")
            for msg in c.consume(10000, 0.5):
                if msg.error():
                    continue
                out.setdefault(msg.partition(), []).append(msg)
                got += 1
    finally:
        c.close()
    return out


def source_of(msg, cluster: str) -> provenance.Provenance:
    p = provenance.last_from(msg.headers() or [], provenance.prefix(cluster))
    assert p is not None, f"no provenance from {cluster} on {msg.topic()}-{msg.partition()}@{msg.offset()}"
    return p


def own_headers(msg) -> list:
    return [(k, v) for k, v in (msg.headers() or []) if k != provenance.HEADER]
