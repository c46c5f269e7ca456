"""Config sources, synonyms and dynamic broker configs, with confluent-kafka's AdminClient
doing what librdkafka's own tests do (0092: AlterConfigs with a deprecated topic config;
0081: broker-level AlterConfigs / IncrementalAlterConfigs of dynamic configs), plus raw
DescribeConfigs for the documentation field.

- Every topic config Kafka 3.9/4.x knows is accepted; one that has no effect here (the
  deprecated ``message.format.version``) is stored, described back, and says so in its
  documentation.
- DescribeConfigs lists a value's sources in precedence order (``include_synonyms``):
  ``compression.type=producer`` as DEFAULT_CONFIG, an override first, then the broker's.
- Dynamic broker configs: per broker (resource "1") and cluster-wide (resource ""), reported
  as DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG, applied where the broker uses
  them (a cluster-wide ``log.retention.ms`` becomes every topic's default), kept across a
  restart; a static config or a per-broker one at cluster level is refused.
"""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build, build_request
from databus.protocol.framing import request_schema
from tests.helpers.broker import BrokerProcess

from .wire import WireClient

S = ConfigSource


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("config-sources"),
                       {"log.retention.ms": "3600000"}) as running:
        yield running


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _describe(admin, kind: str, name: str) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([ConfigResource(kind, name)]).values()
    return future.result(30)


def _synonyms(entry: ConfigEntry) -> list[tuple[str, str | None, ConfigSource]]:
    return [(s.name, s.value, S(s.source)) for s in entry.synonyms.values()]


def _alter(admin, resource: ConfigResource):
    with warnings.catch_warnings():  # deprecated for incremental_alter_configs; 0092 uses it
        warnings.simplefilter("ignore", DeprecationWarning)
        (future,) = admin.alter_configs([resource]).values()
    return future.result(30)


def _raw_synonyms(broker, kind: int, name: str, key: str) -> list:
    module = __import__(request_schema(ApiKey.DESCRIBE_CONFIGS, 4).__module__, fromlist=["x"])
    with WireClient(broker.bootstrap) as client:
        response = client.request(build_request(ApiKey.DESCRIBE_CONFIGS, 4, {
            "include_synonyms": True, "include_documentation": False,
            "resources": [build(module.DescribeConfigsResource, resource_type=kind,
                                resource_name=name, configuration_keys=(key,))]}))
    (entry,) = response.results[0].configs
    return [(s.name, s.value, S(s.source)) for s in entry.synonyms]


def _cluster_wide(broker, ops) -> tuple[int, str | None]:
    """IncrementalAlterConfigs on the broker resource "" (cluster-wide), which librdkafka's
    AdminClient cannot name: (error code, message)."""
    module = __import__(request_schema(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1).__module__,
                        fromlist=["x"])
    with WireClient(broker.bootstrap) as client:
        response = client.request(build_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
            "validate_only": False, "resources": [build(
                module.AlterConfigsResource, resource_type=4, resource_name="",
                configs=tuple(build(module.AlterableConfig, name=key, config_operation=int(op),
                                    value=value) for key, op, value in ops))]}))
    (result,) = response.responses
    return result.error_code, result.error_message


def _incremental(admin, kind: str, name: str, ops) -> KafkaError | None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, op, value in ops])
    (future,) = admin.incremental_alter_configs([resource]).values()
    try:
        future.result(30)
    except KafkaException as exc:
        return exc.args[0]
    return None


def test_alter_configs_accepts_deprecated_topic_configs_as_no_ops(admin, broker):
    admin.create_topics([NewTopic("cs-0092", 1, 1)])["cs-0092"].result(30)
    # 0092: the deprecated message.format.version with a config that works here
    _alter(admin, ConfigResource("topic", "cs-0092", set_config={
        "message.format.version": "0.10.0", "retention.ms": "120000",
        "preallocate": "true", "unclean.leader.election.enable": "true"}))
    configs = _describe(admin, "topic", "cs-0092")
    assert (configs["message.format.version"].value, S(configs["message.format.version"].source)
            ) == ("0.10.0", S.DYNAMIC_TOPIC_CONFIG)
    assert configs["retention.ms"].value == "120000"
    assert configs["preallocate"].value == "true"
    # a name Kafka does not know is still refused, naming it
    with pytest.raises(KafkaException) as refused:
        _alter(admin, ConfigResource("topic", "cs-0092", set_config={"retention.mss": "1"}))
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "retention.mss" in refused.value.args[0].str()

    with WireClient(broker.bootstrap) as client:
        module = __import__(request_schema(ApiKey.DESCRIBE_CONFIGS, 4).__module__,
                            fromlist=["x"])
        response = client.request(build_request(ApiKey.DESCRIBE_CONFIGS, 4, {
            "include_synonyms": False, "include_documentation": True,
            "resources": [build(module.DescribeConfigsResource, resource_type=2,
                                resource_name="cs-0092",
                                configuration_keys=("message.format.version", "retention.ms"))],
        }))
    docs = {c.name: c.documentation for c in response.results[0].configs}
    assert "Deprecated" in docs["message.format.version"]
    assert "ignored" in docs["message.format.version"]
    assert docs["retention.ms"] is None  # it works here: nothing to warn about


def test_synonyms_list_every_source_in_precedence_order(admin):
    admin.create_topics([NewTopic("cs-syn", 1, 1, config={"segment.bytes": "1048576"})]
                        )["cs-syn"].result(30)
    configs = _describe(admin, "topic", "cs-syn")
    compression = configs["compression.type"]
    assert (compression.value, S(compression.source)) == ("producer", S.DEFAULT_CONFIG)
    assert _synonyms(compression) == [("compression.type", "producer", S.DEFAULT_CONFIG)]
    # the topic's override first, then the broker's setting (log.segment.bytes) by source
    assert _synonyms(configs["segment.bytes"]) == [
        ("segment.bytes", "1048576", S.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", S.DEFAULT_CONFIG)]
    # the broker was started with -o log.retention.ms=3600000: the topic's default comes from it
    retention = configs["retention.ms"]
    assert (retention.value, S(retention.source)) == ("3600000", S.STATIC_BROKER_CONFIG)
    assert _synonyms(retention) == [("log.retention.ms", "3600000", S.STATIC_BROKER_CONFIG),
                                    ("log.retention.hours", "168", S.DEFAULT_CONFIG)]


def test_dynamic_broker_configs_per_broker_and_cluster_wide(admin, broker):
    # 0081: a per-broker security config Kafka updates dynamically (resource = the node id)
    _alter(admin, ConfigResource("broker", "1", set_config={
        "sasl.kerberos.min.time.before.relogin": "58000"}))
    assert _incremental(admin, "broker", "1", [
        ("sasl.kerberos.min.time.before.relogin", AlterConfigOpType.SET, "59000")]) is None
    # cluster-wide: the default of every topic that does not override it, applied at once
    assert _cluster_wide(broker, [
        ("log.retention.ms", AlterConfigOpType.SET.value, "7200000"),
        ("compression.type", AlterConfigOpType.SET.value, "zstd")]) == (0, None)
    admin.create_topics([NewTopic("cs-dyn", 1, 1)])["cs-dyn"].result(30)

    def check() -> None:
        node = _describe(admin, "broker", "1")
        relogin = node["sasl.kerberos.min.time.before.relogin"]
        assert (relogin.value, S(relogin.source)) == ("59000", S.DYNAMIC_BROKER_CONFIG)
        assert relogin.is_read_only is False
        assert node["num.partitions"].is_read_only is True  # not dynamic in Kafka
        retention = node["log.retention.ms"]
        assert (retention.value, S(retention.source)) == (
            "7200000", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
        # (confluent-kafka keys synonyms by name: one name in two sources needs the wire)
        assert _raw_synonyms(broker, 4, "1", "log.retention.ms") == [
            ("log.retention.ms", "7200000", S.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.ms", "3600000", S.STATIC_BROKER_CONFIG),
            ("log.retention.hours", "168", S.DEFAULT_CONFIG)]
        topic = _describe(admin, "topic", "cs-dyn")
        assert (topic["retention.ms"].value, S(topic["retention.ms"].source)) == (
            "7200000", S.DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert (topic["compression.type"].value, S(topic["compression.type"].source)) == (
            "zstd", S.DYNAMIC_DEFAULT_BROKER_CONFIG)

    check()
    broker.restart()  # stored in the data directory: in force again after a restart
    check()


SET = AlterConfigOpType.SET.value


@pytest.mark.parametrize("name,ops,code,fragment", [
    ("1", [("num.partitions", SET, "3")], KafkaError.INVALID_REQUEST,
     "Cannot update these configs dynamically: num.partitions"),
    ("", [("ssl.keystore.location", SET, "/x.pem")],
     KafkaError.INVALID_REQUEST, "broker id must be specified: ssl.keystore.location"),
    ("", [("log.retention.ms", SET, "soon")], KafkaError.INVALID_CONFIG, "log.retention.ms"),
    ("", [("compression.type", SET, "brotli")], KafkaError.INVALID_CONFIG, "compression.type"),
])
def test_refused_broker_configs_name_the_problem_and_change_nothing(admin, broker, name, ops,
                                                                   code, fragment):
    before = {k: (e.value, e.source) for k, e in _describe(admin, "broker", "1").items()}
    if name:
        error = _incremental(admin, "broker", name, [(k, AlterConfigOpType(o), v)
                                                     for k, o, v in ops])
        assert error is not None
        got, message = error.code(), error.str()
    else:
        got, message = _cluster_wide(broker, ops)
    assert got == code, message
    assert fragment in message
    after = {k: (e.value, e.source) for k, e in _describe(admin, "broker", "1").items()}
    assert after == before
