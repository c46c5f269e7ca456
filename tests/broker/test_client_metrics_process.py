"""KIP-714 client metrics against a real broker process: subscriptions made with
``databus client-metrics`` (Kafka's kafka-client-metrics.sh options), librdkafka clients at
their default settings pushing into the broker's /metrics, and the named errors of bad
pushes, which leave the connection and everything else working."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
import urllib.request
import uuid
from typing import NamedTuple

import confluent_kafka
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.get_telemetry_subscriptions.v0.request import GetTelemetrySubscriptionsRequest
from kio.schema.push_telemetry.v0.request import PushTelemetryRequest

from databus.cli import main
from databus.protocol.errors import ErrorCode
from tests.broker.test_client_metrics import GOLDEN, gauge, metrics_data
from tests.broker.wire import WireClient
from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for

ZERO = uuid.UUID(int=0)


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def databus(*args: str) -> Ran:
    """The command run in this process (each subprocess would pay a second of imports);
    one run as a real subprocess below shows the two agree."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["--log-level", "WARNING", *args])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("telemetry"),
                       args=("--metrics-listen", "127.0.0.1:0")) as broker:
        port = int(re.search(r"metrics on http://127.0.0.1:(\d+)/metrics",
                             wait_for(lambda: "metrics on" in broker.log_text()
                                      and broker.log_text(), "the metrics listener")).group(1))
        broker.metrics_port = port
        yield broker


def scrape(broker) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics",
                                timeout=10) as response:
        return response.read().decode()


def cli(broker, *args: str) -> subprocess.CompletedProcess:
    return databus("client-metrics", "--bootstrap-server", broker.bootstrap, *args)


def test_the_command_makes_describes_lists_and_deletes_subscriptions(telemetry_broker):
    made = cli(telemetry_broker, "--alter", "--name", "cli-sub", "--metrics",
               "org.apache.kafka.producer.", "--interval", "60000",
               "--match", "client_id=nobody-.*", "--match", "client_software_name=java")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "Altered client metrics config for cli-sub."
    described = cli(telemetry_broker, "--describe", "--name", "cli-sub")
    assert described.stdout.splitlines() == [
        "Client metrics configs for cli-sub are:", "  interval.ms=60000",
        "  match=client_id=nobody-.*,client_software_name=java",
        "  metrics=org.apache.kafka.producer."]
    listed = subprocess.run([sys.executable, "-m", "databus.cli", "client-metrics",
                             "--bootstrap-server", telemetry_broker.bootstrap, "--list"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0 and "cli-sub" in listed.stdout.split()
    bad = cli(telemetry_broker, "--alter", "--name", "cli-sub", "--interval", "50")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr and "interval.ms" in bad.stderr
    assert cli(telemetry_broker, "--alter", "--metrics", "*").returncode == 2  # no name
    gone = cli(telemetry_broker, "--delete", "--name", "cli-sub")
    assert gone.returncode == 0 and "Deleted client metrics config for cli-sub." in gone.stdout
    assert "cli-sub" not in cli(telemetry_broker, "--list").stdout.split()
    missing = cli(telemetry_broker, "--describe", "--name", "cli-sub")
    assert missing.returncode == 1 and "no subscription named 'cli-sub'" in missing.stderr


def _instances(text: str, client_id: str) -> set[str]:
    return set(re.findall(rf'client_id="{client_id}",client_instance_id="([0-9a-f-]+)"', text))


def test_librdkafka_clients_metrics_appear_on_metrics_and_vanish_when_they_stop(
        telemetry_broker):
    made = cli(telemetry_broker, "--alter", "--name", "librdkafka", "--metrics",
               "org.apache.kafka.", "--interval", "1000",
               "--match", "client_software_name=confluent-kafka-python|librdkafka")
    assert made.returncode == 0, made.stderr
    # default settings: client.id "rdkafka", metrics pushed by default (enable.metrics.push)
    producer = confluent_kafka.Producer({"bootstrap.servers": telemetry_broker.bootstrap})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": telemetry_broker.bootstrap,
                                         "group.id": "telemetry-e2e"})
    try:
        consumer.subscribe(["telemetry-e2e"])
        producer.produce("telemetry-e2e", b"x")
        producer.flush(30)

        def both_seen():
            consumer.poll(0.1)
            producer.poll(0)
            text = scrape(telemetry_broker)
            if ("org_apache_kafka_producer_" in text and "org_apache_kafka_consumer_" in text
                    and len(_instances(text, "rdkafka")) >= 2):
                return text
            return None

        text = wait_for(both_seen, "both clients' pushed metrics on /metrics", timeout=60,
                        log=telemetry_broker.log_text)
        assert re.search(r'org_apache_kafka_producer_node_request_latency_avg\{'
                         r'client_id="rdkafka",client_instance_id="[0-9a-f-]+",node_id="1"\} ',
                         text)
        assert 'databus_broker_client_metrics_pushes_total{result="none"}' in text
    finally:
        consumer.close()
        producer.close()  # librdkafka sends its terminating push as it closes
    wait_for(lambda: not _instances(scrape(telemetry_broker), "rdkafka"),
             "the stopped clients' series to vanish", timeout=60)
    assert cli(telemetry_broker, "--delete", "--name", "librdkafka").returncode == 0


def test_bad_pushes_get_kafkas_named_errors_and_disturb_nothing(telemetry_broker):
    for name, interval, client in (("wire-slow", "3600000", "wire-slow"),
                                   ("wire-fast", "100", "wire-fast")):
        made = cli(telemetry_broker, "--alter", "--name", name, "--metrics", "*",
                   "--interval", interval, "--match", f"client_id={client}")
        assert made.returncode == 0, made.stderr
    with WireClient(telemetry_broker.bootstrap) as wire:
        def get(client_id: str, instance=ZERO):
            return wire.request(GetTelemetrySubscriptionsRequest(client_instance_id=instance),
                                client_id=client_id)

        def push(client_id, instance, sub, payload, compression=0, terminating=False):
            return wire.request(PushTelemetryRequest(
                client_instance_id=instance, subscription_id=sub, terminating=terminating,
                compression_type=compression, metrics=payload), client_id=client_id).error_code

        slow = get("wire-slow")
        assert slow.error_code == ErrorCode.none and slow.requested_metrics == ("",)
        me, sub = slow.client_instance_id, slow.subscription_id
        assert push("wire-slow", me, sub + 1, GOLDEN) == ErrorCode.unknown_subscription_id
        assert push("wire-slow", ZERO, sub, GOLDEN) == ErrorCode.invalid_request
        assert push("wire-slow", me, sub, GOLDEN, compression=9) == \
            ErrorCode.unsupported_compression_type
        again = get("wire-slow", me)  # allowed at once after UNSUPPORTED_COMPRESSION_TYPE
        assert again.error_code == ErrorCode.none and again.subscription_id == sub
        assert push("wire-slow", me, sub, b"\x0a\xff\xff\xff\xff\x0f") == ErrorCode.invalid_record
        # the next push an hour-long interval too early
        assert push("wire-slow", me, sub, GOLDEN) == ErrorCode.throttling_quota_exceeded
        assert get("wire-slow", me).error_code == ErrorCode.throttling_quota_exceeded

        # the same connection still serves everything else
        versions = wire.request(ApiVersionsRequest(client_software_name="wire",
                                                   client_software_version="1"))
        assert versions.error_code == ErrorCode.none

        fast = get("wire-fast")
        me, sub = fast.client_instance_id, fast.subscription_id
        payload = metrics_data(gauge("wire.queue.depth", 7.0, topic="t1"))
        assert push("wire-fast", me, sub, payload) == ErrorCode.none
        text = scrape(telemetry_broker)
        assert (f'wire_queue_depth{{client_id="wire-fast",client_instance_id="{me}",'
                'topic="t1"} 7.0') in text
        assert not _instances(text, "wire-slow")  # its refused pushes exported nothing
        # a terminating push is accepted at any time, and takes the series with it
        assert push("wire-fast", me, sub, payload, terminating=True) == ErrorCode.none
        assert not _instances(scrape(telemetry_broker), "wire-fast")
    for name in ("wire-slow", "wire-fast"):
        assert cli(telemetry_broker, "--delete", "--name", name).returncode == 0
