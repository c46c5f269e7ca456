import pytest

from databus.storage.config import KNOWN_TOPIC_CONFIG_NAMES, TOPIC_CONFIG_NAMES, LogConfig
from databus.storage.errors import InvalidConfigError


def test_defaults_are_kafkas():
    c = LogConfig()
    assert c.segment_bytes == 1 << 30
    assert c.retention_ms == 7 * 24 * 3600 * 1000
    assert c.retention_bytes == -1
    assert c.max_message_bytes == 1048588
    assert c.index_interval_bytes == 4096
    assert c.segment_index_bytes == 10 << 20
    assert c.cleanup_policy == "delete"
    assert c.delete_retention_ms == 86400000


def test_overrides_apply_on_base():
    base = LogConfig(retention_ms=1000)
    c = LogConfig.from_topic_config({"segment.bytes": "2048", "cleanup.policy": "delete,compact",
                                     "flush.messages": 1}, base=base)
    assert (c.segment_bytes, c.retention_ms, c.flush_interval_messages) == (2048, 1000, 1)
    assert c.cleanup_policy == "compact,delete" and c.compact and c.delete


def test_round_trip_through_topic_config():
    c = LogConfig.from_topic_config({"retention.bytes": "77", "min.cleanable.dirty.ratio": "0.25",
                                     "message.timestamp.type": "LogAppendTime"})
    rendered = c.to_topic_config()
    assert set(rendered) == set(TOPIC_CONFIG_NAMES)
    assert LogConfig.from_topic_config(rendered) == c
    assert c.overrides_against(LogConfig()) == {
        "retention.bytes": "77", "min.cleanable.dirty.ratio": "0.25",
        "message.timestamp.type": "LogAppendTime"}


@pytest.mark.parametrize("key,value,fragment", [
    ("retention.msx", "1", "unknown topic config 'retention.msx'"),
    ("retention.ms", "soon", "'soon' for configuration retention.ms"),
    ("retention.ms", "-2", "-2 for configuration retention.ms"),
    ("segment.bytes", "13", "segment.bytes"),
    ("cleanup.policy", "shred", "cleanup.policy"),
    ("compression.type", "brotli", "must be one of uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio"),
    ("message.timestamp.type", "Now", "message.timestamp.type"),
])
def test_bad_config_names_the_key(key, value, fragment):
    with pytest.raises(InvalidConfigError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        LogConfig.from_topic_config({key: value})


def test_config_ops_set_delete_append_subtract():
    from databus.storage.config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, apply_config_ops

    effective = LogConfig().to_topic_config()
    overrides = {"retention.ms": "1000", "segment.bytes": "4096"}
    result = apply_config_ops(overrides, effective, [
        ("retention.ms", OP_SET, "2000"), ("segment.bytes", OP_DELETE, None),
        ("cleanup.policy", OP_APPEND, "compact"),  # on the effective default "delete"
    ])
    assert result == {"retention.ms": "2000", "cleanup.policy": "delete,compact"}
    assert overrides == {"retention.ms": "1000", "segment.bytes": "4096"}, "input untouched"
    # APPEND keeps each item once; SUBTRACT works on the override when there is one
    assert apply_config_ops(result, effective, [("cleanup.policy", OP_APPEND, "compact,delete")]
                            )["cleanup.policy"] == "delete,compact"
    assert apply_config_ops(result, effective, [("cleanup.policy", OP_SUBTRACT, "delete")]
                            )["cleanup.policy"] == "compact"
    # removing every item leaves an empty list, which validation then refuses
    emptied = apply_config_ops({}, effective, [("cleanup.policy", OP_SUBTRACT, "delete")])
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        LogConfig.from_topic_config(emptied)
    # deleting an override that does not exist is fine (already the default)
    assert apply_config_ops({}, effective, [("retention.ms", OP_DELETE, None)]) == {}


@pytest.mark.parametrize("name,op,fragment", [
    ("retention.msx", 0, "unknown topic config 'retention.msx'"),
    ("retention.ms", 2, "append is not allowed for config key: retention.ms"),
    ("segment.bytes", 3, "subtract is not allowed for config key: segment.bytes"),
])
def test_config_ops_refuse_unknown_names_and_list_ops_on_scalars(name, op, fragment):
    from databus.storage.config import apply_config_ops

    with pytest.raises(InvalidConfigError, match=fragment.replace(".", r"\.")):
        apply_config_ops({}, LogConfig().to_topic_config(), [(name, op, "1")])


def test_configs_kafka_knows_but_that_act_not_here_are_validated_and_ignored():
    base = LogConfig(retention_ms=1000)
    c = LogConfig.from_topic_config({"message.format.version": "0.10.0", "preallocate": "true",
                                     "retention.ms": "5"}, base=base)
    assert c == LogConfig(retention_ms=5)  # only retention.ms acts
    with pytest.raises(InvalidConfigError, match="preallocate"):
        LogConfig.from_topic_config({"preallocate": "maybe"})
    with pytest.raises(InvalidConfigError, match="retention.mss"):
        LogConfig.from_topic_config({"retention.mss": "1"})
    assert "message.format.version" in KNOWN_TOPIC_CONFIG_NAMES
