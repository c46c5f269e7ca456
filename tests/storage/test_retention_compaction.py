import os
import threading

import pytest

from databus.protocol.records import decode_batches

from .conftest import keyed


def records(plog, start=None):
    out = []
    offset = plog.log_start_offset if start is None else start
    while offset < plog.log_end_offset:
        batches = decode_batches(plog.read(offset, 1 << 20))
        out += [(r.offset, r.key, r.value) for _h, rs in batches for r in rs]
        offset = batches[-1][0].next_offset
    return out


def test_time_retention_deletes_old_segments_never_the_active_one(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "200", "retention.ms": "1000"})
    plog = lm.get_log("t", 0)
    for i in range(10):
        plog.append(keyed([(None, b"%02d" % i)] * 2, ts=10_000 + 100 * i))
    segs = [(s.base_offset, s.max_timestamp) for s in plog.segments]
    assert len(segs) >= 4
    now = 10_000 + 100 * 9 + 1 + 1000 + 1  # everything is older than retention.ms
    actions = lm.run_retention(now_ms=now)
    assert len(plog.segments) == 1, "only the active segment survives"
    assert plog.log_start_offset == plog.active_segment.base_offset == segs[-1][0]
    assert len(actions) == len(segs) - 1 and "retention.ms=1000" in actions[0]
    assert sorted(f for f in os.listdir(plog.directory) if f.endswith(".log")) == [
        f"{segs[-1][0]:020d}.log"]
    # an older segment inside retention stops the deletion
    lm.close()


def test_time_retention_stops_at_first_segment_inside_retention(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "200", "retention.ms": "1000"})
    plog = lm.get_log("t", 0)
    for i in range(10):
        plog.append(keyed([(None, b"%02d" % i)] * 2, ts=10_000 + 1000 * i))
    by_segment = [(s.base_offset, s.max_timestamp) for s in plog.segments]
    now = by_segment[2][1] + 1001  # segments 0..2 expired, 3 not
    lm.run_retention(now_ms=now)
    assert plog.segments[0].base_offset == by_segment[3][0]
    assert plog.log_start_offset == by_segment[3][0]
    assert records(plog)[0][0] == by_segment[3][0]


def test_size_retention(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "300", "retention.bytes": "700", "retention.ms": "-1"})
    plog = lm.get_log("t", 0)
    for i in range(20):
        plog.append(keyed([(None, b"%02d" % i)], ts=1000))
    lm.run_retention(now_ms=10**13)
    assert plog.size_in_bytes >= 700
    assert plog.size_in_bytes - plog.segments[0].size < 700
    assert records(plog)[-1][0] == 19


def test_compaction_keeps_latest_per_key_and_offsets(manager):
    lm = manager()
    lm.open()
    lm.create_topic("c", 1, {"segment.bytes": "250", "cleanup.policy": "compact",
                             "delete.retention.ms": "1000"})
    plog = lm.get_log("c", 0)
    expected = {}
    offset = 0
    for i in range(30):
        pairs = [(b"k%d" % (i % 4), b"v%d" % i), (b"k%d" % ((i + 1) % 5), b"w%d" % i)]
        plog.append(keyed(pairs, ts=5_000 + i, codec=i % 5))  # every codec, kept by cleaning
        for k, v in pairs:
            expected[k] = (offset, v)
            offset += 1
    before = records(plog)
    active_base = plog.active_segment.base_offset
    actions = lm.run_compaction(now_ms=6_000)
    assert actions and all("compact" in a for a in actions)
    after = records(plog)
    # every record in the cleaned range is the latest of its key within that range
    latest_in_range = {}
    for off, k, _v in before:
        if off < active_base:
            latest_in_range[k] = off
    assert [r for r in after if r[0] < active_base] == sorted(
        (off, k, v) for off, k, v in before if off < active_base and latest_in_range[k] == off)
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert plog.log_end_offset == 60
    for h, _records in decode_batches(plog.read(0, 1 << 20)):
        assert h.codec == (h.base_offset // 2) % 5
    for k, (off, v) in expected.items():
        assert (off, k, v) in after
    # reading from a compacted-away offset returns the next kept batch
    assert records(plog, start=0)[0][0] >= 0
    # survives a restart with indexes that match
    lm.close()
    lm2 = manager()
    assert not any("rebuilt" in a for a in lm2.open())
    assert records(lm2.get_log("c", 0)) == after
    assert lm2.run_compaction(now_ms=6_000) == [], "nothing new to clean"


def test_tombstones_are_kept_for_delete_retention_then_removed(manager):
    lm = manager()
    lm.open()
    lm.create_topic("c", 1, {"segment.bytes": "100", "cleanup.policy": "compact",
                             "delete.retention.ms": "1000"})
    plog = lm.get_log("c", 0)
    plog.append(keyed([(b"a", b"1"), (b"b", b"1")], ts=10_000))
    plog.append(keyed([(b"a", None)], ts=20_000))  # tombstone for a
    plog.append(keyed([(b"z", b"active")], ts=20_000))
    plog.roll()
    plog.append(keyed([(b"z", b"2")], ts=20_001))
    lm.run_compaction(now_ms=20_500)
    assert [(o, k, v) for o, k, v in records(plog) if o < 4] == [(1, b"b", b"1"), (2, b"a", None),
                                                                 (3, b"z", b"active")]
    assert lm.run_compaction(now_ms=20_999) == []
    actions = lm.run_compaction(now_ms=21_000)
    assert actions
    assert [(o, k, v) for o, k, v in records(plog)] == [(1, b"b", b"1"), (3, b"z", b"active"),
                                                        (4, b"z", b"2")]


def test_min_compaction_lag_protects_recent_segments(manager):
    lm = manager()
    lm.open()
    lm.create_topic("c", 1, {"segment.bytes": "100", "cleanup.policy": "compact",
                             "min.compaction.lag.ms": "5000"})
    plog = lm.get_log("c", 0)
    for i in range(4):
        plog.append(keyed([(b"k", b"%d" % i)], ts=10_000 + 1000 * i))
    assert len(plog.segments) == 4
    assert lm.run_compaction(now_ms=14_000) == [], "no inactive segment is 5 s old yet"
    actions = lm.run_compaction(now_ms=16_500)  # segments at 10 s and 11 s are cleanable
    assert len(actions) == 1 and "removed all 1 records" in actions[0]
    assert [o for o, _k, _v in records(plog)] == [1, 2, 3]
    assert plog.log_start_offset == 0


def test_dirty_ratio_and_max_compaction_lag_decide_when_to_reclean(manager):
    lm = manager()
    lm.open()
    lm.create_topic("c", 1, {"segment.bytes": "100", "cleanup.policy": "compact",
                             "min.cleanable.dirty.ratio": "0.5",
                             "max.compaction.lag.ms": "10000"})
    plog = lm.get_log("c", 0)
    for i in range(6):
        plog.append(keyed([(b"k%d" % i, b"v")], ts=1_000))
    assert lm.run_compaction(now_ms=2_000) == [], "all keys distinct: nothing to remove"
    plog.append(keyed([(b"k0", b"new")], ts=2_000))
    plog.append(keyed([(b"k9", b"x")], ts=2_000))  # rolls: the k0 update becomes cleanable
    # 1 dirty segment of 7 cleanable: below the 0.5 ratio, and only 0 ms old
    assert lm.run_compaction(now_ms=2_000) == []
    assert [k for _o, k, _v in records(plog)][:1] == [b"k0"]
    actions = lm.run_compaction(now_ms=12_000)  # the dirty segment is max.compaction.lag.ms old
    assert len(actions) == 1 and "removed all 1 records" in actions[0]
    assert [k for _o, k, _v in records(plog)] == [b"k1", b"k2", b"k3", b"k4", b"k5", b"k0", b"k9"]


def test_retention_ms_and_cleanup_policy_changes_apply_to_the_open_log(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "200"})  # retention.ms: a week
    plog = lm.get_log("t", 0)
    for i in range(10):
        plog.append(keyed([(b"same", b"%02d" % i)] * 2, ts=10_000 + 100 * i))
    now = 10_000 + 100 * 9 + 2_000
    assert lm.run_retention(now_ms=now) == [] and lm.run_compaction(now_ms=now) == []
    lm.alter_topic_config("t", {"cleanup.policy": "compact,delete"})
    compacted = lm.run_compaction(now_ms=now)
    assert compacted, "the altered cleanup.policy compacts the same open log"
    lm.alter_topic_config("t", {"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    assert any("retention.ms=1000" in line for line in lm.run_retention(now_ms=now))
    assert len(plog.segments) == 1


def test_a_config_change_that_cannot_be_persisted_changes_nothing(manager):
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"retention.ms": "1000"})
    # the atomic write's temp file cannot be created: a directory is in its place
    os.mkdir(os.path.join(lm.data_dir, "topic-metadata.json.tmp"))
    with pytest.raises(IsADirectoryError):
        lm.alter_topic_config("t", {"retention.ms": "2000"})
    assert lm.topics()["t"].config == {"retention.ms": "1000"}
    assert lm.get_log("t", 0).config.retention_ms == 1000
    assert lm.topic_config("t").retention_ms == 1000


def _fill_compacted(lm, name, rounds=12):
    lm.create_topic(name, 1, {"segment.bytes": "300", "cleanup.policy": "compact"})
    plog = lm.get_log(name, 0)
    for i in range(rounds):
        plog.append(keyed([(b"k%d" % (i % 3), b"v%d" % i), (b"j", b"w%d" % i)], ts=1_000 + i))
    return plog


def test_compaction_builds_on_a_worker_thread_while_the_owner_appends_and_reads(manager):
    """The thread contract: the expensive step runs on another thread while the owner keeps
    appending (rolling new segments) and reading; the swap happens on the owner thread."""
    lm = manager()
    lm.open()
    plog = _fill_compacted(lm, "c")
    before = records(plog)
    cleanable_end = plog.active_segment.base_offset
    steps = lm.compaction_steps(now_ms=10_000)
    work = next(steps)
    result = {}
    worker = threading.Thread(target=lambda: result.update(value=work()))
    worker.start()
    appended = []
    for i in range(40):  # meanwhile: appends that roll segments, and reads of everything
        info = plog.append(keyed([(b"k0", b"late%d" % i)], ts=5_000 + i))
        appended.append((info.first_offset, b"k0", b"late%d" % i))
        assert records(plog)[: len(before)] == before
    worker.join()
    assert records(plog) == before + appended, "nothing is swapped until the owner says so"
    assert any(f.endswith(".cleaned") for f in os.listdir(plog.directory))
    try:
        work = steps.send(result["value"])
        while True:  # the rest (unlink, directory fsync) inline
            work = steps.send(work())
    except StopIteration as done:
        actions = done.value
    assert actions and all("compact" in line for line in actions)
    latest = {}
    for off, k, _v in before:
        if off < cleanable_end:
            latest[k] = off
    after = records(plog)
    assert [r for r in after if r[0] < cleanable_end] == [
        r for r in before if r[0] < cleanable_end and latest[r[1]] == r[0]]
    assert [r for r in after if r[0] >= cleanable_end] == [
        r for r in before if r[0] >= cleanable_end] + appended
    assert not any(f.endswith(".cleaned") for f in os.listdir(plog.directory))
    lm.close()
    reopened = manager()
    assert not any("rebuilt" in a or "leftover" in a for a in reopened.open())
    assert records(reopened.get_log("c", 0)) == after


def test_a_topic_deleted_while_its_log_is_cleaned_is_skipped(manager):
    lm = manager()
    lm.open()
    _fill_compacted(lm, "a")
    other = _fill_compacted(lm, "b")
    expected_b = records(other)
    steps = lm.compaction_steps(now_ms=10_000)
    cleaned_a = next(steps)()  # a's cleaned segments are built...
    lm.delete_topic("a")       # ...and the topic goes away before the swap
    actions = []
    try:
        work = steps.send(cleaned_a)
        while True:
            work = steps.send(work())
    except StopIteration as done:
        actions = done.value
    assert actions and all(line.startswith("b-0: ") for line in actions)
    assert len(records(other)) < len(expected_b), "the next log is still compacted"
    assert [name for name in os.listdir(lm.data_dir) if name.startswith("a-")] == []


def test_delete_records_moves_the_start_and_retention_unlinks_the_segments_below(
        manager):
    """DeleteRecords: the start moves (never back), reads below it are out of range, the
    segments wholly below it go at the next retention run even with retention off, and the
    start survives a reopen through the log-start-offset checkpoint."""
    from databus.storage.errors import OffsetOutOfRangeError, PolicyViolationError

    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "200", "retention.ms": "-1"})
    lm.create_topic("kept", 1, {"cleanup.policy": "compact"})
    plog = lm.get_log("t", 0)
    for i in range(10):
        plog.append(keyed([(None, b"%02d" % i)] * 2))
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4 and bases[2] < 11 < bases[-1]
    assert lm.delete_records("t", 0, 11) == 11
    assert lm.delete_records("t", 0, 5) == 11  # never back
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(10, 1 << 20)
    # the whole batch holding 11 (10..11) is read, as Kafka does: clients skip what is below
    assert [r[0] for r in records(plog)][:3] == [10, 11, 12]
    with pytest.raises(OffsetOutOfRangeError, match="outside"):
        lm.delete_records("t", 0, 21)
    with pytest.raises(PolicyViolationError, match="cleanup.policy=compact"):
        lm.delete_records("kept", 0, 0)
    actions = lm.run_retention()
    below = [b for b, nxt in zip(bases, bases[1:]) if nxt <= 11]
    assert [s.base_offset for s in plog.segments] == [b for b in bases if b not in below]
    assert len(actions) == len(below) and "below the log start offset 11" in actions[0]
    lm.write_checkpoints()
    lm.close()
    again = manager()
    again.open()
    assert again.get_log("t", 0).log_start_offset == 11
    assert again.delete_records("t", 0, -1) == 20  # -1: up to the high watermark
    again.close()
