"""Changing topic configs at runtime (IncrementalAlterConfigs, AlterConfigs) and the rule of
compacted topics (every record needs a key), with real clients against a real broker, plus
the golden bytes of the responses involved."""

from __future__ import annotations

import struct
import warnings

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from databus.protocol.entities import build
from tests.helpers.broker import BrokerProcess

from .clients import Msg, confluent_consume, confluent_produce
from .test_api_versions import MS, create_topic, make, req
from .wire import WireClient

WEEK_MS = str(7 * 24 * 3600 * 1000)
KEYLESS_MESSAGE = "Compacted topic cannot accept message without key in topic partition {}-0."


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def incremental(admin, resource_type, name, ops, validate_only=False):
    """Run one IncrementalAlterConfigs on one resource; None or the KafkaError."""
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=op) for key, op, value in ops])
    (future,) = admin.incremental_alter_configs(
        [resource], validate_only=validate_only).values()
    try:
        future.result(30)
    except KafkaException as exc:
        return exc.args[0]
    return None


def described(admin, topic):
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return {key: (entry.value, ConfigSource(entry.source)) for key, entry in
            future.result(30).items()}


DYNAMIC, DEFAULT = ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DEFAULT_CONFIG


def produce_outcome(bootstrap, topic, key, value):
    """Produce one record with librdkafka: None if stored, else the error's code."""
    producer = Producer({"bootstrap.servers": bootstrap})
    reports = []
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, _m: reports.append(err))
    assert producer.flush(30) == 0
    (err,) = reports
    return None if err is None else err.code()


def test_incremental_set_delete_append_subtract_show_in_describe(admin):
    admin.create_topics([NewTopic("iac", 1, config={"retention.ms": "60000"})])["iac"].result(30)
    assert incremental(admin, "topic", "iac", [
        ("segment.bytes", AlterConfigOpType.SET, "100000"),
        ("retention.ms", AlterConfigOpType.DELETE, None),
        ("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
    ]) is None
    configs = described(admin, "iac")
    assert configs["segment.bytes"] == ("100000", DYNAMIC)
    assert configs["retention.ms"] == (WEEK_MS, DEFAULT)
    assert configs["cleanup.policy"] == ("compact,delete", DYNAMIC)
    assert configs["max.message.bytes"] == ("1048588", DEFAULT)
    assert incremental(admin, "topic", "iac", [
        ("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")]) is None
    assert described(admin, "iac")["cleanup.policy"] == ("compact", DYNAMIC)
    # validate_only checks and changes nothing
    assert incremental(admin, "topic", "iac", [("segment.bytes", AlterConfigOpType.SET, "200000")],
                       validate_only=True) is None
    assert described(admin, "iac")["segment.bytes"] == ("100000", DYNAMIC)


@pytest.mark.parametrize("resource_type,name,ops,code,fragment", [
    ("topic", "iac-missing", [("retention.ms", AlterConfigOpType.SET, "1")],
     KafkaError.UNKNOWN_TOPIC_OR_PART, "no topic 'iac-missing'"),
    ("topic", "iac-err", [("retention.msx", AlterConfigOpType.SET, "1")],
     KafkaError.INVALID_CONFIG, "unknown topic config 'retention.msx'"),
    ("topic", "iac-err", [("retention.ms", AlterConfigOpType.SET, "soon")],
     KafkaError.INVALID_CONFIG, "invalid value 'soon' for configuration retention.ms"),
    ("topic", "iac-err", [("cleanup.policy", AlterConfigOpType.SET, "shred")],
     KafkaError.INVALID_CONFIG, "cleanup.policy"),
    ("topic", "iac-err", [("retention.ms", AlterConfigOpType.APPEND, "1")],
     KafkaError.INVALID_CONFIG, "append is not allowed for config key: retention.ms"),
    ("topic", "iac-err", [("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")],
     KafkaError.INVALID_CONFIG, "cleanup.policy"),  # nothing left: not a valid policy
    ("broker", "1", [("num.partitions", AlterConfigOpType.SET, "3")],
     KafkaError.INVALID_REQUEST, "Cannot update these configs dynamically: num.partitions"),
])
def test_incremental_refusals_name_the_problem_and_change_nothing(
        admin, resource_type, name, ops, code, fragment):
    if "iac-err" not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic("iac-err", 1, config={"retention.ms": "60000"})]
                            )["iac-err"].result(30)
    error = incremental(admin, resource_type, name, ops)
    assert error is not None and error.code() == code
    assert fragment in error.str()
    configs = described(admin, "iac-err")
    assert configs["retention.ms"] == ("60000", DYNAMIC)
    assert configs["cleanup.policy"] == ("delete", DEFAULT)


def test_alter_configs_replaces_the_whole_set(admin):
    admin.create_topics([NewTopic("ac", 1, config={"retention.ms": "60000"})])["ac"].result(30)
    resource = ConfigResource("topic", "ac", set_config={"segment.bytes": "100000"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in favour of the above
        admin.alter_configs([resource])[resource].result(30)
        bad = ConfigResource("topic", "ac", set_config={"segment.bytes": "1"})
        with pytest.raises(KafkaException) as refused:
            admin.alter_configs([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "segment.bytes" in refused.value.args[0].str()
    configs = described(admin, "ac")
    assert configs["segment.bytes"] == ("100000", DYNAMIC)
    assert configs["retention.ms"] == (WEEK_MS, DEFAULT), "not in the new set: back to default"


def test_kafka_python_admin_alters_resets_and_describes(broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import NewTopic as KpTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpTopic("kp-ac", 1, 1)])
        assert admin.alter_configs([KpResource("topic", "kp-ac", {
            "retention.ms": "1234", "cleanup.policy": ("APPEND", "compact")})]) == {
            "topic": {"kp-ac": "OK"}}
        modified = admin.describe_configs([KpResource("topic", "kp-ac")])["topic"]["kp-ac"]
        assert {k: (v["value"], v["config_source"]) for k, v in modified.items()} == {
            "retention.ms": ("1234", "DYNAMIC_TOPIC_CONFIG"),
            "cleanup.policy": ("compact,delete", "DYNAMIC_TOPIC_CONFIG")}
        admin.reset_configs([KpResource("topic", "kp-ac", ["retention.ms"])])
        modified = admin.describe_configs([KpResource("topic", "kp-ac")])["topic"]["kp-ac"]
        assert set(modified) == {"cleanup.policy"}
    finally:
        admin.close()


# -- compacted topics need keys ---------------------------------------------------------------

def test_confluent_producer_gets_invalid_record_for_a_keyless_record_on_a_compacted_topic(
        admin, broker):
    admin.create_topics([NewTopic("keys-c", 1, config={"cleanup.policy": "compact"})]
                        )["keys-c"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100})
    reports = []
    for key, value in [(b"k1", b"1"), (None, b"keyless"), (b"k3", b"3")]:
        producer.produce("keys-c", key=key, value=value,
                         on_delivery=lambda err, msg: reports.append((err, msg.value())))
    assert producer.flush(30) == 0
    # The keyless record is refused; a batch holding it is refused whole, so the keyed
    # records share its fate only when librdkafka put them in the same batch (usually, with
    # linger.ms; not always on a loaded machine).
    codes = {value: err.code() if err else None for err, value in reports}
    assert codes[b"keyless"] == KafkaError.INVALID_RECORD
    assert {codes[b"1"], codes[b"3"]} <= {None, KafkaError.INVALID_RECORD}
    assert len(reports) == 3
    confluent_produce(broker.bootstrap, "keys-c", [Msg(b"k", b"after")])
    got = confluent_consume(broker.bootstrap, "keys-c", 1)
    assert [(g.offset, g.value) for g in got] == [(0, b"after")], "nothing was appended"


def test_kafka_python_producer_gets_the_record_errors(admin, broker):
    from kafka import KafkaProducer

    admin.create_topics([NewTopic("keys-kp", 1, config={"cleanup.policy": "compact"})]
                        )["keys-kp"].result(30)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=100)
    try:
        futures = [producer.send("keys-kp", key=b"k1", value=b"1"),
                   producer.send("keys-kp", value=b"keyless"),
                   producer.send("keys-kp", key=b"k3", value=b"3")]
        producer.flush(30)
    finally:
        producer.close()
    errors = [f.exception for f in futures]
    # the listed record fails with its own message, the rest of its batch as collateral
    assert type(errors[1]).__name__ == "InvalidRecordError"
    assert str(errors[1]).endswith(KEYLESS_MESSAGE.format("keys-kp"))
    for collateral in (errors[0], errors[2]):
        assert "part of a batch which had one more more invalid records" in str(collateral)


def test_config_changes_apply_live_and_survive_kill9(tmp_path):
    """cleanup.policy and segment.bytes take effect on the running logs; the change is on
    disk once answered (a kill -9 right after keeps it)."""
    with BrokerProcess(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("live", 1)])["live"].result(30)
        assert produce_outcome(broker.bootstrap, "live", None, b"keyless is fine") is None
        assert incremental(admin, "topic", "live", [
            ("cleanup.policy", AlterConfigOpType.SET, "compact"),
            ("segment.bytes", AlterConfigOpType.SET, "1000")]) is None
        assert produce_outcome(broker.bootstrap, "live", None, b"now refused") == (
            KafkaError.INVALID_RECORD)
        confluent_produce(broker.bootstrap, "live", [Msg(b"k%d" % i, b"x" * 300)
                                                     for i in range(10)],
                          **{"batch.num.messages": 1})
        segments = sorted(p.name for p in (broker.data_dir / "live-0").glob("*.log"))
        assert len(segments) >= 3, f"segment.bytes=1000 did not roll: {segments}"
        broker.kill9()
        broker.restart()
        configs = described(admin, "live")
        assert configs["cleanup.policy"] == ("compact", DYNAMIC)
        assert configs["segment.bytes"] == ("1000", DYNAMIC)
        assert produce_outcome(broker.bootstrap, "live", None, b"still refused") == (
            KafkaError.INVALID_RECORD)
        assert incremental(admin, "topic", "live", [
            ("cleanup.policy", AlterConfigOpType.DELETE, None)]) is None
        assert produce_outcome(broker.bootstrap, "live", None, b"keyless again") is None
        assert described(admin, "live")["cleanup.policy"] == ("delete", DEFAULT)


# -- golden bytes -----------------------------------------------------------------------------

def _s(text: str) -> bytes:
    """A non-flexible (int16-length) string."""
    return struct.pack(">h", len(text)) + text.encode()


def _cs(text: str) -> bytes:
    """A flexible (compact, uvarint length + 1) string; every test string is < 127 bytes."""
    assert len(text) < 127
    return bytes([len(text) + 1]) + text.encode()


def _keyless_produce(client, version, topic):
    from databus.protocol.records import build_batch

    batch = build_batch([(b"k", b"v", (), 1_700_000_000_000),
                         (None, b"v", (), 1_700_000_000_001)])
    mod = req(0, version)
    client.send(make(0, version, acks=1, timeout=5000 * MS, transactional_id=None,
                     topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(
                         build(mod.PartitionProduceData, index=0, records=batch),)),)))
    return client.read_frame()


def _summary(topic: str) -> str:
    return ("One or more records have been rejected due to 1 record errors in total, and only "
            "showing the first three errors at most: [RecordError(batchIndex=1, message='"
            + KEYLESS_MESSAGE.format(topic) + "')]")


def test_produce_v8_response_with_record_errors_golden(broker):
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "gold-p8", configs=[("cleanup.policy", "compact")])
        frame = _keyless_produce(client, 8, "gold-p8")
    assert frame == (
        struct.pack(">i", 2)                      # correlation id (header v0)
        + struct.pack(">i", 1) + _s("gold-p8")    # responses[1].name
        + struct.pack(">i", 1)                    # partition_responses[1]
        + struct.pack(">ihqqq", 0, 87, -1, -1, -1)  # index, INVALID_RECORD, offsets, times
        + struct.pack(">i", 1)                    # record_errors[1]
        + struct.pack(">i", 1) + _s(KEYLESS_MESSAGE.format("gold-p8"))  # batch_index 1
        + _s(_summary("gold-p8"))                 # error_message
        + struct.pack(">i", 0)                    # throttle_time_ms
    )


def test_produce_v9_response_with_record_errors_golden(broker):
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "gold-p9", configs=[("cleanup.policy", "compact")])
        frame = _keyless_produce(client, 9, "gold-p9")
    summary = _summary("gold-p9").encode()
    assert frame == (
        struct.pack(">i", 2) + b"\0"              # correlation id, header tagged fields
        + b"\x02" + _cs("gold-p9")                # responses[1].name
        + b"\x02"                                 # partition_responses[1]
        + struct.pack(">ihqqq", 0, 87, -1, -1, -1)
        + b"\x02"                                 # record_errors[1]
        + struct.pack(">i", 1) + _cs(KEYLESS_MESSAGE.format("gold-p9")) + b"\0"
        + bytes([0x80 | (len(summary) + 1) & 0x7F, (len(summary) + 1) >> 7]) + summary
        + b"\0"                                   # partition tagged fields
        + b"\0"                                   # topic tagged fields
        + struct.pack(">i", 0) + b"\0"            # throttle_time_ms, tagged fields
    )


def _alter(client, api_key, version, resources):
    """resources: (type, name, configs) with configs as for test_api_versions.alter_topic."""
    mod = req(api_key, version)

    def entry(config):
        if api_key == 44:
            name, op, value = config
            return build(mod.AlterableConfig, name=name, config_operation=op, value=value)
        name, value = config
        return build(mod.AlterableConfig, name=name, value=value)

    client.send(make(api_key, version, validate_only=False, resources=tuple(
        build(mod.AlterConfigsResource, resource_type=kind, resource_name=name,
              configs=tuple(entry(c) for c in configs))
        for kind, name, configs in resources)))
    return client.read_frame()


NO_TOPIC = "no topic 'gold-none'"


@pytest.mark.parametrize("api_key,version,configs", [
    (44, 0, [("retention.ms", 0, "1000")]), (44, 1, [("retention.ms", 0, "1000")]),
    (33, 0, [("retention.ms", "1000")]), (33, 2, [("retention.ms", "1000")]),
])
def test_alter_configs_responses_golden(broker, api_key, version, configs):
    topic = f"gold-{api_key}-{version}"
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        frame = _alter(client, api_key, version, [(2, topic, configs), (2, "gold-none", configs)])
    flexible = (api_key, version) in ((44, 1), (33, 2))
    if flexible:
        expected = (struct.pack(">i", 2) + b"\0"  # correlation id, header tagged fields
                    + struct.pack(">i", 0)        # throttle_time_ms
                    + b"\x03"                     # responses[2]
                    + struct.pack(">h", 0) + b"\0" + b"\x02" + _cs(topic) + b"\0"
                    + struct.pack(">h", 3) + _cs(NO_TOPIC) + b"\x02" + _cs("gold-none") + b"\0"
                    + b"\0")                      # response tagged fields
    else:
        expected = (struct.pack(">i", 2) + struct.pack(">i", 0)
                    + struct.pack(">i", 2)
                    + struct.pack(">h", 0) + struct.pack(">h", -1) + b"\x02" + _s(topic)
                    + struct.pack(">h", 3) + _s(NO_TOPIC) + b"\x02" + _s("gold-none"))
    assert frame == expected
