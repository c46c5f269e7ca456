"""The console's Clients page (KIP-714): a real broker with ``--metrics-listen``, a
subscription made with ``databus client-metrics``, a librdkafka producer pushing its
metrics, and ``databus console --broker-metrics`` showing them per client id and instance
beside the broker's own series, read through the console's HTTP."""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.request

import confluent_kafka
import pytest

from databus.console.client_metrics import metrics_url, split_metrics
from tests.console.conftest import ConsoleProcess, databus
from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def telemetry(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"),
                       args=("--metrics-listen", "127.0.0.1:0")) as broker:
        port = re.search(r"metrics on http://127.0.0.1:(\d+)/metrics",
                         wait_for(lambda: "metrics on" in broker.log_text()
                                  and broker.log_text(), "the metrics listener")).group(1)
        tmp = tmp_path_factory.mktemp("console")
        consoles = [ConsoleProcess(tmp, "--bootstrap", broker.bootstrap,
                                   "--broker-metrics", f"127.0.0.1:{port}"),
                    ConsoleProcess(tmp_path_factory.mktemp("bare"), "--bootstrap",
                                   broker.bootstrap)]
        try:
            for console in consoles:
                console.wait()
            yield broker, *consoles
        finally:
            for console in consoles:
                console.close()


def test_a_pushing_client_shows_beside_the_brokers_series(telemetry):
    broker, console, _ = telemetry
    made = databus("client-metrics", "--bootstrap-server", broker.bootstrap, "--alter",
                   "--name", "console", "--metrics", "org.apache.kafka.producer.",
                   "--interval", "1000", "--match", "client_id=console-view")
    assert made.returncode == 0, made.stderr
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "client.id": "console-view"})
    try:
        producer.produce("console-view", b"x")
        producer.flush(30)

        def shown():
            producer.poll(0)
            status, body = get(f"{console.url}/clients")
            assert status == 200, body
            return body if 'data-client-id="console-view"' in body else None

        body = html.unescape(wait_for(shown, "the producer on the Clients page", timeout=60))
    finally:
        producer.close()
    instance = re.search(r'data-client-id="console-view" data-instance="([0-9a-f-]{36})"',
                         body)
    assert instance is not None, body
    # its own series, the org.apache.kafka. prefix dropped, with their attributes
    client = body[instance.start():body.index("</details>", instance.start())]
    assert "producer_node_request_latency_avg" in client and 'node_id="1"' in client
    assert "consumer_" not in client  # (only what its subscription asked for)
    # and the broker's, in their own table
    broker_table = body[body.index('id="broker-series"'):]
    assert 'databus_broker_client_metrics_pushes_total' in broker_table
    assert 'result="none"' in broker_table


def test_without_broker_metrics_the_page_says_how_to_get_them(telemetry):
    _, _, bare = telemetry
    status, body = get(f"{bare.url}/clients")
    assert status == 200 and 'id="no-metrics"' in body and "--broker-metrics" in body


def test_an_unreachable_metrics_endpoint_is_named(tmp_path, telemetry):
    broker = telemetry[0]
    console = ConsoleProcess(tmp_path, "--bootstrap", broker.bootstrap,
                             "--broker-metrics", "127.0.0.1:1").wait()
    try:
        status, body = get(f"{console.url}/clients")
    finally:
        console.close()
    assert status == 502 and 'id="metrics-error"' in body
    assert "Cannot read http://127.0.0.1:1/metrics" in body


def test_split_and_urls():
    view = split_metrics(
        "# TYPE org_apache_kafka_producer_record_queue_time_avg gauge\n"
        'org_apache_kafka_producer_record_queue_time_avg{client_id="a",'
        'client_instance_id="i1"} 2.5\n'
        "# TYPE databus_broker_requests_total counter\n"
        'databus_broker_requests_total{api="Produce"} 7\n'
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 1\n')
    [client] = view.clients
    assert (client.client_id, client.instance_id, client.kinds) == ("a", "i1", "producer")
    assert [(s.name, s.labels, s.value) for s in client.series] == [
        ("producer_record_queue_time_avg", "", 2.5)]
    assert [(s.name, s.labels) for s in view.broker] == [
        ("databus_broker_requests_total", 'api="Produce"')]
    assert metrics_url("0.0.0.0:9100") == "http://127.0.0.1:9100/metrics"
    assert metrics_url("http://h:1/m") == "http://h:1/m"
