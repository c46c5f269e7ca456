import json
import os

import pytest

from databus.storage.config import LogConfig
from databus.storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
    kafka_error_code,
)
from databus.storage.topic_metadata import read_partition_metadata

from .conftest import batch


def test_topics_persist_with_ids_partitions_and_overrides(manager):
    lm = manager()
    lm.open()
    info = lm.create_topic("orders.v1_x-y", 3, {"retention.ms": "1000", "cleanup.policy": "compact"})
    assert info.partitions == 3 and info.config == {"retention.ms": "1000", "cleanup.policy": "compact"}
    for p in range(3):
        d = os.path.join(lm.data_dir, f"orders.v1_x-y-{p}")
        assert read_partition_metadata(d) == info.topic_id
        assert sorted(f for f in os.listdir(d) if not f.startswith("partition")) == [
            "00000000000000000000.index", "00000000000000000000.log",
            "00000000000000000000.timeindex"]
    lm.get_log("orders.v1_x-y", 2).append(batch([b"a", b"b"], key=b"k"))  # compacted: keyed
    lm.close()
    lm2 = manager()
    lm2.open()
    again = lm2.topics()["orders.v1_x-y"]
    assert (again.topic_id, again.partitions, again.config) == (info.topic_id, 3, info.config)
    plog = lm2.get_log("orders.v1_x-y", 2)
    assert plog.log_end_offset == 2 and plog.config.retention_ms == 1000 and plog.config.compact
    assert lm2.get_log("orders.v1_x-y", 3) is None


def test_create_topic_accepts_an_effective_log_config(manager):
    base = LogConfig(retention_ms=5)
    lm = manager(default=base)
    lm.open()
    info = lm.create_topic("t", 1, LogConfig.from_topic_config({"segment.bytes": "4096"}, base=base))
    assert info.config == {"segment.bytes": "4096"}


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "späß", "a b"])
def test_illegal_topic_names(manager, name):
    lm = manager()
    lm.open()
    with pytest.raises(InvalidTopicError) as exc:
        lm.create_topic(name, 1)
    assert kafka_error_code(exc.value) == 17
    assert lm.topics() == {}


def test_topic_errors(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 2)
    with pytest.raises(TopicExistsError):
        lm.create_topic("t", 1)
    with pytest.raises(InvalidPartitionsError):
        lm.create_topic("u", 0)
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        lm.create_topic("u", 1, {"segment.bytes": "x"})
    assert "u" not in lm.topics() and not os.path.exists(os.path.join(lm.data_dir, "u-0"))
    with pytest.raises(InvalidPartitionsError, match="has 2 partitions"):
        lm.add_partitions("t", 2)
    with pytest.raises(UnknownTopicError):
        lm.add_partitions("nope", 3)
    with pytest.raises(UnknownTopicError):
        lm.delete_topic("nope")


def test_add_partitions_alter_config_and_delete(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"retention.ms": "100"})
    assert lm.add_partitions("t", 3).partitions == 3
    assert lm.get_log("t", 2) is not None
    lm.alter_topic_config("t", {"segment.bytes": "1000"}, incremental=True)
    assert lm.topics()["t"].config == {"retention.ms": "100", "segment.bytes": "1000"}
    assert lm.get_log("t", 1).config.segment_bytes == 1000
    lm.alter_topic_config("t", {"retention.bytes": "5"})
    assert lm.topics()["t"].config == {"retention.bytes": "5"}
    assert lm.get_log("t", 0).config.retention_ms == LogConfig().retention_ms
    doomed = lm.get_log("t", 0)
    doomed.append(batch())
    lm.delete_topic("t")
    assert lm.get_log("t", 0) is None and "t" not in lm.topics()
    with pytest.raises(UnknownTopicError, match="t-0 was deleted"):
        doomed.flush()  # a produce waiting for this fsync fails instead of waiting forever
    assert not any(e.startswith("t-") for e in os.listdir(lm.data_dir))
    lm.close()
    lm2 = manager()
    lm2.open()
    assert lm2.topics() == {}


def test_orphan_directories_and_lost_metadata(manager):
    lm = manager()
    lm.open()
    info = lm.create_topic("keep", 2)
    lm.get_log("keep", 1).append(batch([b"x"]))
    lm.close()
    os.makedirs(os.path.join(lm.data_dir, "ghost-0"))
    with open(os.path.join(lm.data_dir, "ghost-0", "00000000000000000000.log"), "wb"):
        pass
    os.makedirs(os.path.join(lm.data_dir, "old-0.abc-delete"))
    os.makedirs(os.path.join(lm.data_dir, "not-ours-7"))  # someone else's: left alone
    lm2 = manager()
    actions = lm2.open()
    assert not os.path.exists(os.path.join(lm.data_dir, "ghost-0"))
    assert not os.path.exists(os.path.join(lm.data_dir, "old-0.abc-delete"))
    assert any("ghost-0" in a for a in actions) and any("old-0.abc-delete" in a for a in actions)
    assert os.path.isdir(os.path.join(lm.data_dir, "not-ours-7"))
    lm2.close()
    os.unlink(os.path.join(lm.data_dir, "topic-metadata.json"))
    lm3 = manager()
    actions = lm3.open()
    rebuilt = lm3.topics()["keep"]
    assert (rebuilt.topic_id, rebuilt.partitions) == (info.topic_id, 2)
    assert any("config overrides are lost" in a for a in actions)
    assert lm3.get_log("keep", 1).log_end_offset == 1
    with open(os.path.join(lm.data_dir, "topic-metadata.json")) as f:
        assert [t["name"] for t in json.load(f)["topics"]] == ["keep"]


def test_checkpoints_written_on_close_and_by_flush_all_when_due(manager, clock):
    lm = manager(checkpoint_interval_ms=1000)
    lm.open()
    lm.create_topic("t", 2)
    lm.get_log("t", 0).append(batch([b"a", b"b", b"c"]))
    # t-1 is dirty too: its new directory and files are not fsynced yet
    assert sorted(p.name for p in lm.dirty_logs()) == ["t-0", "t-1"]
    lm.flush_all()
    assert lm.dirty_logs() == []
    path = os.path.join(lm.data_dir, "recovery-point-offset-checkpoint")
    assert not os.path.exists(path)
    clock.ms += 1000
    lm.flush_all()
    with open(path) as f:
        assert f.read() == "0\n2\nt 0 3\nt 1 0\n"
    lm.close()
    with open(os.path.join(lm.data_dir, "log-start-offset-checkpoint")) as f:
        assert f.read() == "0\n2\nt 0 0\nt 1 0\n"
