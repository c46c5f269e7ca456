"""Fetch sessions (KIP-227): the session cache as pure data, the protocol request by request,
and kafka-python's consumer (which uses sessions) on 1000 partitions sending incremental
fetches that carry only what changed."""

from __future__ import annotations

import datetime
import logging
import re
import sys
from types import SimpleNamespace

import pytest

from databus.broker.fetch_sessions import FetchSessionCache
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import request_schema

from .wire import WireClient

MS = datetime.timedelta(milliseconds=1)


def _topic(name, *partitions):
    return SimpleNamespace(topic=name, partitions=[
        SimpleNamespace(partition=p, fetch_offset=o) for p, o in partitions])


def _result(index, hw, records=b"", error=0):
    return SimpleNamespace(index=index, high_watermark=hw, last_stable_offset=hw,
                           log_start_offset=0, records=records, error_code=error)


def test_session_rules_as_pure_data():
    ids = iter(range(7, 100))
    cache = FetchSessionCache(max_slots=2, new_id=lambda: next(ids))
    full = cache.begin(0, 0, [_topic("t", (0, 0), (1, 0), (2, 0))], [])
    assert full.session_id == 7 and not full.incremental
    assert [i for _, (p) in full.partitions for i in [p.partition]] == [0, 1, 2]
    # partition 1 has data (high watermark 5); 0 and 2 are empty
    sent = full.respond([("t", _result(0, 0)), ("t", _result(1, 5, b"rec")),
                         ("t", _result(2, 0))])
    assert [[r.index for r in rs] for _, rs in sent] == [[0, 1, 2]]
    # incremental: partition 1 moves on, 2 is forgotten, u-0 joins.  Only those are read:
    # partition 0 had nothing beyond its offset and got no append since
    inc = cache.begin(7, 1, [_topic("t", (1, 5)), _topic("u", (0, 0))],
                      [SimpleNamespace(topic="t", partitions=[2])])
    assert inc.incremental
    assert [(t, p.partition, p.fetch_offset) for t, p in inc.to_read()] == [
        ("t", 1, 5), ("u", 0, 0)]
    cache.touch(("t", 0))  # an append to t-0 (and to a partition of no session)
    cache.touch(("x", 9))
    assert [(t, p.partition) for t, p in inc.to_read()] == [("t", 0), ("t", 1), ("u", 0)]
    sent = inc.respond([("t", _result(0, 2, b"new")), ("t", _result(1, 5)),
                        ("u", _result(0, 0))])
    assert [(t, [r.index for r in rs]) for t, rs in sent] == [("t", [0]), ("u", [0])]
    # t-0 still has data beyond offset 0: watched until the client moves on
    assert [(t, p.partition) for t, p in cache.begin(7, 2, [], []).to_read()] == [("t", 0)]
    assert cache.begin(7, 2, [], []).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.begin(99, 1, [], []).error == ErrorCode.fetch_session_id_not_found
    # two slots: a third session evicts the least recently used one (7 is used after 8)
    second = cache.begin(0, 0, [], [])
    assert cache.begin(7, 3, [], []).error == ErrorCode.none
    third = cache.begin(0, 0, [], [])
    assert len(cache) == 2 and cache.begin(second.session_id, 1, [], []).error == (
        ErrorCode.fetch_session_id_not_found)
    assert cache.begin(7, 4, [], []).error == ErrorCode.none
    closed = cache.begin(third.session_id, -1, [_topic("t", (0, 0))], [])
    assert (closed.session_id, len(cache)) == (0, 1)


def _fetch(client, v, session_id, epoch, partitions, forgotten=()):
    mod = sys.modules[request_schema(1, v).__module__]
    topics = {}
    for topic, p, offset in partitions:
        topics.setdefault(topic, []).append(build(
            mod.FetchPartition, partition=p, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1))
    return client.request(build(
        request_schema(1, v), replica_id=-1, max_wait=10 * MS, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
        cluster_id=None,
        topics=tuple(build(mod.FetchTopic, topic=t, partitions=tuple(ps))
                     for t, ps in topics.items()),
        forgotten_topics_data=tuple(build(mod.ForgottenTopic, topic=t, partitions=tuple(ps))
                                    for t, ps in forgotten)))


def _seen(response):
    return {(t.topic, p.partition_index): (p.high_watermark, len(p.records or b""))
            for t in response.responses for p in t.partitions}


@pytest.mark.parametrize("v", [7, 12])
def test_incremental_fetches_carry_only_changed_partitions(broker, v):
    from .test_api_versions import a_batch, create_topic, produce

    topic = f"fs-{v}"
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic, partitions=30)
        full = _fetch(client, v, 0, 0, [(topic, p, 0) for p in range(30)])
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert len(_seen(full)) == 30
        sid = full.session_id
        assert _seen(_fetch(client, v, sid, 1, [])) == {}  # nothing new: no partitions
        produce(client, topic, a_batch(3))  # partition 0
        assert _seen(_fetch(client, v, sid, 2, [])) == {(topic, 0): (3, len(a_batch(3)))}
        # the client moves its offset; the same high watermark is not news any more
        assert _seen(_fetch(client, v, sid, 3, [(topic, 0, 3)])) == {}
        forgot = _fetch(client, v, sid, 4, [], forgotten=[(topic, [0])])
        produce(client, topic, a_batch(2))
        assert _seen(forgot) == {} and _seen(_fetch(client, v, sid, 5, [])) == {}
        stale = _fetch(client, v, sid, 5, [])
        assert (stale.error_code, _seen(stale)) == (ErrorCode.invalid_fetch_session_epoch, {})
        closed = _fetch(client, v, sid, -1, [(topic, 0, 0)])
        assert closed.session_id == 0  # a sessionless full fetch: both batches
        assert _seen(closed) == {(topic, 0): (5, len(a_batch(3)) + len(a_batch(2)))}
        gone = _fetch(client, v, sid, 6, [])
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_kafka_python_consumer_of_1000_partitions_fetches_incrementally(broker):
    import kafka
    from kafka import KafkaConsumer, TopicPartition

    from .clients import Msg, confluent_produce

    topic, count = "fs-wide", 1000
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([kafka.admin.NewTopic(topic, count, 1)])
    admin.close()
    confluent_produce(broker.bootstrap, topic, [Msg(None, b"m%d" % p, partition=p)
                                                for p in range(0, count, 100)])
    lines = _Lines()
    fetcher_log = logging.getLogger("kafka.consumer.fetcher")
    fetcher_log.addHandler(lines)
    fetcher_log.setLevel(logging.DEBUG)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=50)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(count)])
        got = []
        for _ in range(200):
            for records in consumer.poll(timeout_ms=100).values():
                got += [r.value for r in records]
            if len(got) == 10 and sum("incremental fetch response for session" in line
                                      for line in lines.lines) >= 3:
                break
    finally:
        consumer.close()
        fetcher_log.removeHandler(lines)
    assert sorted(got) == sorted(b"m%d" % p for p in range(0, count, 100))
    assert any("created a new incremental fetch session" in line for line in lines.lines)
    incremental = [line for line in lines.lines
                   if "incremental fetch response for session" in line]
    assert len(incremental) >= 3, lines.lines[-5:]
    assert not [line for line in lines.lines if "invalid" in line]
    # each incremental response carried a handful of partitions, the rest implied
    carried = [int(m.group(1)) for line in incremental
               if (m := re.search(r"with (\d+) response partitions", line))]
    assert carried and max(carried) <= 10
