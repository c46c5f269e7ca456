"""KIP-714 client metrics, the pure part (broker/client_metrics/): subscriptions as configs,
Kafka's push rules per client instance, the OTLP decoding and the Prometheus series.  The
clock is passed in, so intervals are exact here; tests/broker/test_client_metrics_process.py
runs the same against a real broker with librdkafka clients."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

from databus.broker.client_metrics import otlp
from databus.broker.client_metrics.manager import ClientMetricsManager, subscription_id
from databus.broker.client_metrics.series import SeriesStore, metric_name
from databus.broker.client_metrics.subscriptions import (
    ClientMetricsConfigError,
    SubscriptionStore,
    parse,
)
from databus.protocol import codecs
from databus.protocol.errors import ErrorCode

# MetricsData{resource_metrics{scope_metrics{metrics{name "a.b" gauge{data_points{
# as_double 2.5}}}}}}, encoded by hand from the OTLP .proto field numbers.
GOLDEN = bytes.fromhex("0a16121412120a03612e622a0b0a09210000000000000440")
ME = {"client_id": "app-1", "client_software_name": "confluent-kafka-python",
      "client_software_version": "2.6.0", "client_source_address": "10.0.0.7",
      "client_source_port": "50123"}


def metrics_data(*metrics: metrics_pb2.Metric) -> bytes:
    data = metrics_pb2.MetricsData()
    data.resource_metrics.add().scope_metrics.add().metrics.extend(metrics)
    return data.SerializeToString()


def gauge(name: str, value: float, **attrs: str) -> metrics_pb2.Metric:
    metric = metrics_pb2.Metric(name=name)
    point = metric.gauge.data_points.add(as_double=value)
    for key, val in attrs.items():
        point.attributes.append(common_pb2.KeyValue(
            key=key, value=common_pb2.AnyValue(string_value=val)))
    return metric


def counter(name: str, value: int, delta: bool) -> metrics_pb2.Metric:
    metric = metrics_pb2.Metric(name=name)
    metric.sum.is_monotonic = True
    metric.sum.aggregation_temporality = otlp.DELTA if delta else otlp.CUMULATIVE
    metric.sum.data_points.add(as_int=value)
    return metric


def test_golden_bytes_decode_to_one_gauge_point_compressed_or_not():
    expected = [otlp.Point("a.b", False, False, (), 2.5, "")]
    assert otlp.decode(GOLDEN, ("",)) == expected
    for codec in otlp.ACCEPTED_COMPRESSION:
        packed = codecs.compress(codec, GOLDEN)
        assert otlp.decode(otlp.decompress(packed, codec, 1 << 20), ("",)) == expected
    assert otlp.decode(GOLDEN, ("b.",)) == []  # not under the subscribed prefixes
    assert otlp.decode(GOLDEN, ()) == []       # no metrics subscribed


def test_malformed_payloads_are_named():
    with pytest.raises(otlp.MalformedMetrics):
        otlp.decode(GOLDEN[:-3], ("",))  # a length running past the end
    with pytest.raises(otlp.MalformedMetrics):
        otlp.decompress(b"not zstd at all", codecs.CODEC_ZSTD, 1 << 20)
    with pytest.raises(otlp.UnsupportedCompression):
        otlp.decompress(GOLDEN, 9, 1 << 20)


def test_config_validation_as_kafka_refuses():
    sub = parse("s", {"metrics": "org.apache.kafka.producer., org.apache.kafka.consumer.",
                      "interval.ms": "1000", "match": "client_id=app-.*,client_source_port=5.*"})
    assert sub.metrics == ("org.apache.kafka.producer.", "org.apache.kafka.consumer.")
    assert sub.matches(ME)
    assert not sub.matches({**ME, "client_id": "other"})
    assert not sub.matches({**ME, "client_id": "xapp-1"})  # the whole value must match
    for bad in ({"interval.ms": "99"}, {"interval.ms": "3600001"}, {"interval.ms": "soon"},
                {"match": "client_host=x"}, {"match": "client_id"}, {"match": "client_id=("},
                {"metric": "x"}):
        with pytest.raises(ClientMetricsConfigError):
            parse("s", bad)
    with pytest.raises(ClientMetricsConfigError):
        parse("", {"metrics": "*"})


def test_subscriptions_persist_and_combine(tmp_path):
    store = SubscriptionStore(tmp_path)
    store.set("producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000",
                            "match": "client_id=app-.*"})
    store.set("fast", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "1000"})
    store.set("other", {"metrics": "*", "match": "client_software_name=java"})
    reopened = SubscriptionStore(tmp_path)
    assert reopened.names() == ["fast", "other", "producers"]
    manager = ClientMetricsManager(reopened)
    answer = manager.get_subscriptions(None, ME, now=0.0)
    assert answer.error == ErrorCode.none
    # the union of the matching prefixes, at the shortest interval
    assert answer.metrics == ("org.apache.kafka.consumer.", "org.apache.kafka.producer.")
    assert answer.interval_ms == 1000
    assert answer.subscription_id == subscription_id(answer.metrics, 1000, answer.instance_id)
    reopened.set("fast", {})  # deleted
    assert SubscriptionStore(tmp_path).names() == ["other", "producers"]


def test_no_subscription_means_no_metrics_at_the_default_interval():
    answer = ClientMetricsManager(SubscriptionStore(None)).get_subscriptions(None, ME, 0.0)
    assert answer.metrics == () and answer.interval_ms == 300_000
    assert answer.instance_id != uuid.UUID(int=0)


def _subscribed(interval_ms: int = 1000, metrics: str = "*"):
    store = SubscriptionStore(None)
    store.set("s", {"metrics": metrics, "interval.ms": str(interval_ms)})
    manager = ClientMetricsManager(store)
    answer = manager.get_subscriptions(None, ME, now=100.0)
    return manager, answer


def test_push_rules_and_their_errors():
    manager, ans = _subscribed()
    me, sub = ans.instance_id, ans.subscription_id
    push = manager.push
    payload = metrics_data(gauge("org.apache.kafka.producer.record.queue.time.avg", 1.5))
    assert push(me, sub + 1, False, 0, payload, ME, 100.1)[0] == ErrorCode.unknown_subscription_id
    assert push(uuid.UUID(int=0), sub, False, 0, payload, ME, 100.1)[0] == ErrorCode.invalid_request
    # the first push after a Get may come early (the client jitters it) ...
    assert push(me, sub, False, 0, payload, ME, 100.2)[0] == ErrorCode.none
    # ... the next one not before an interval has passed since the last
    assert push(me, sub, False, 0, payload, ME, 101.0)[0] == ErrorCode.throttling_quota_exceeded
    assert push(me, sub, False, 0, b"\xff" * 8, ME, 101.3)[0] == ErrorCode.invalid_record
    assert push(me, sub, False, 7, payload, ME, 102.4)[0] == ErrorCode.unsupported_compression_type
    # the refusals disturbed nothing: the one good push is exported
    text = "\n".join(manager.series.render())
    assert ('org_apache_kafka_producer_record_queue_time_avg{client_id="app-1",'
            f'client_instance_id="{me}"}} 1.5') in text
    assert push(me, sub, False, 0, b"x" * (manager.max_bytes + 1), ME,
                103.5)[0] == ErrorCode.telemetry_too_large
    # a Get right after UNSUPPORTED_COMPRESSION_TYPE is not throttled (the client re-asks)
    manager2, ans2 = _subscribed()
    manager2.push(ans2.instance_id, ans2.subscription_id, False, 7, payload, ME, 100.5)
    assert manager2.get_subscriptions(ans2.instance_id, ME, 100.6).error == ErrorCode.none
    # but a Get out of turn otherwise is
    assert manager2.get_subscriptions(ans2.instance_id, ME, 100.7).error == \
        ErrorCode.throttling_quota_exceeded
    assert manager.pushes == {"none": 1, "unknown_subscription_id": 1, "invalid_request": 1,
                              "throttling_quota_exceeded": 1, "invalid_record": 1,
                              "unsupported_compression_type": 1, "telemetry_too_large": 1}


def test_a_changed_subscription_gets_the_client_to_ask_again():
    manager, ans = _subscribed()
    manager.store.set("s", {"metrics": "org.apache.kafka.consumer.", "interval.ms": "1000"})
    code, _ = manager.push(ans.instance_id, ans.subscription_id, False, 0, GOLDEN, ME, 101.0)
    assert code == ErrorCode.unknown_subscription_id
    again = manager.get_subscriptions(ans.instance_id, ME, 101.1)
    assert again.error == ErrorCode.none and again.metrics == ("org.apache.kafka.consumer.",)
    assert again.subscription_id != ans.subscription_id


def test_after_a_broker_restart_pushes_go_on_with_the_same_subscription_id():
    manager, ans = _subscribed()
    fresh = ClientMetricsManager(manager.store)  # the same subscriptions, no instances
    code, _ = fresh.push(ans.instance_id, ans.subscription_id, False, 0, GOLDEN, ME, 5.0)
    assert code == ErrorCode.none
    assert len(fresh.series.clients) == 1


def test_series_follow_counters_and_expire_or_vanish_on_terminating():
    manager, ans = _subscribed()
    me, sub = ans.instance_id, ans.subscription_id
    name = "org.apache.kafka.consumer.connection.creation.total"
    manager.push(me, sub, False, 0, metrics_data(counter(name, 3, delta=True)), ME, 100.5)
    manager.push(me, sub, False, 0, metrics_data(counter(name, 2, delta=True)), ME, 101.6)
    text = "\n".join(manager.series.render())
    assert "# TYPE org_apache_kafka_consumer_connection_creation_total counter" in text
    assert f'client_instance_id="{me}"}} 5.0' in text  # deltas added up
    # three intervals without a push: gone
    manager.expire(101.6 + 1.9)
    assert manager.series.clients
    manager.expire(101.6 + 3.0)
    assert not manager.series.clients and manager.series.render() == []
    # a terminating push takes them at once
    manager3, ans3 = _subscribed()
    manager3.push(ans3.instance_id, ans3.subscription_id, False, 0, GOLDEN, ME, 100.5)
    assert manager3.series.clients
    code, _ = manager3.push(ans3.instance_id, ans3.subscription_id, True, 0, GOLDEN, ME, 100.6)
    assert code == ErrorCode.none and not manager3.series.clients
    code, _ = manager3.push(ans3.instance_id, ans3.subscription_id, True, 0, GOLDEN, ME, 102.0)
    assert code == ErrorCode.invalid_request  # terminating twice


def test_cardinality_is_bounded_per_client():
    store = SeriesStore(max_series_per_client=3)
    points = [otlp.Point("m", False, False, (("partition", str(i)),), 1.0, "") for i in range(5)]
    store.update("i1", "c", points, now=0.0, interval_s=1.0)
    assert len(store.clients["i1"].values) == 3 and store.dropped_series == 2
    # attribute names that would hide the client's own labels are renamed
    store.update("i2", "c", [otlp.Point("m", False, False, (("client_id", "x"),), 1.0, "")],
                 0.0, 1.0)
    assert any('_client_id="x"' in line for line in store.render())
    assert metric_name("org.apache.kafka.producer.x", True) == "org_apache_kafka_producer_x_total"


def test_client_instances_are_bounded_least_recently_heard_first(monkeypatch):
    from databus.broker.client_metrics import manager as manager_module

    monkeypatch.setattr(manager_module, "MAX_INSTANCES", 3)
    manager = ClientMetricsManager(SubscriptionStore(None))
    first, second = (manager.get_subscriptions(None, ME, 0.0).instance_id for _ in range(2))
    manager.get_subscriptions(None, ME, 0.0)
    manager.get_subscriptions(first, ME, 1.0)  # heard from again: kept
    manager.get_subscriptions(None, ME, 1.0)  # every Get with the zero id is a new instance
    assert len(manager.instances) == 3
    assert first in manager.instances and second not in manager.instances
