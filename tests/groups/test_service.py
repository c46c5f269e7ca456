"""The coordinator service inside a real, in-process Broker (real files, no sockets):
commits go to __consumer_offsets and come back on restart; expiry writes tombstones that
replay honours; group metadata restores the generation."""

from __future__ import annotations

import trio

from databus.broker.broker import Broker
from databus.broker.config import BrokerConfig
from databus.broker.coordinator.group_state import GroupState, JoinRequest, SyncRequest
from databus.broker.coordinator.service import OffsetCommitEntry
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records import partition_for
from databus.protocol.internal_records.consumer_offsets import OFFSETS_TOPIC


def make_broker(path) -> Broker:
    config = BrokerConfig.from_options([
        "offsets.topic.num.partitions=4", "group.initial.rebalance.delay.ms=0",
        "offsets.retention.minutes=1",
    ])
    return Broker(config, data_dir=path)


async def started(nursery, path):
    broker = await nursery.start(make_broker(path).run)
    return broker, broker.groups


async def test_commits_and_group_metadata_replay_after_restart(tmp_path):
    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        assert broker.topic(OFFSETS_TOPIC).partitions == 4
        broker.create_topic("t", 2)
        join = await groups.join(JoinRequest("g", "", "consumer", (("range", b"sub"),),
                                             10_000, 10_000, client_id="c"))
        assert join.error == ErrorCode.none and join.generation_id == 1
        sync = await groups.sync(SyncRequest("g", join.member_id, 1,
                                             ((join.member_id, b"assign"),)))
        assert sync.error == ErrorCode.none
        errors = await groups.commit_offsets("g", join.member_id, 1, [
            OffsetCommitEntry("t", 0, 11, 5, "meta"),
            OffsetCommitEntry("t", 1, 22, -1, None),
            OffsetCommitEntry("nope", 0, 1, -1, None),
            OffsetCommitEntry("t", 0, 12, -1, "x" * 5000),
        ])
        assert errors == [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                          ErrorCode.offset_metadata_too_large]
        stale = await groups.commit_offsets("g", join.member_id, 0,
                                            [OffsetCommitEntry("t", 0, 99, -1, "")])
        assert stale == [ErrorCode.illegal_generation]
        # The records sit in the group's partition of __consumer_offsets.
        plog = broker.get_log(OFFSETS_TOPIC, partition_for("g", 4))
        assert plog.log_end_offset >= 3
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        fetched = groups.fetch_offsets("g", None)
        assert {tp: (f.offset, f.leader_epoch, f.metadata) for tp, f in fetched.items()} == {
            ("t", 0): (11, 5, "meta"), ("t", 1): (22, -1, ""),
        }
        snapshot = groups.describe("g")
        assert snapshot.state is GroupState.STABLE and snapshot.generation_id == 1
        (member,) = snapshot.members
        assert member.assignment == b"assign" and member.client_id == "c"
        # The restored member keeps its generation: a commit needs no rejoin.
        assert await groups.commit_offsets("g", member.member_id, 1,
                                           [OffsetCommitEntry("t", 0, 13, -1, "")]) == [
            ErrorCode.none]
        nursery.cancel_scope.cancel()


async def test_expired_offsets_and_deleted_groups_stay_gone_after_restart(tmp_path):
    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        broker.create_topic("t", 1)
        start = groups.clock()
        groups.clock = lambda: start
        for group in ("old", "doomed"):
            assert await groups.commit_offsets(group, "", -1,
                                               [OffsetCommitEntry("t", 0, 5, -1, "")]) == [
                ErrorCode.none]
        groups.clock = lambda: start + 30_000
        assert await groups.commit_offsets("fresh", "", -1,
                                           [OffsetCommitEntry("t", 0, 7, -1, "")]) == [
            ErrorCode.none]
        assert await groups.delete_group("doomed") == ErrorCode.none
        assert groups.fetch_offsets("doomed", None) == {}
        # Groups that only commit expire offsets.retention.minutes (1) after each commit.
        assert groups.expire_offsets(start + 60_000 - 1) == (0, 0)
        assert groups.expire_offsets(start + 60_000) == (1, 1)
        assert groups.group_ids() == ["fresh"]
        nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        assert groups.group_ids() == ["fresh"]
        assert groups.fetch_offsets("old", [("t", 0)])[("t", 0)].offset == -1
        assert groups.fetch_offsets("fresh", [("t", 0)])[("t", 0)].offset == 7
        nursery.cancel_scope.cancel()


async def test_commit_with_retention_time_expires_on_its_own_schedule(tmp_path):
    """OffsetCommit v2-v4 may carry a retention time: the offset expires then, even for a
    group whose members still subscribe to the topic, and the v1 record survives restart."""
    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        broker.create_topic("t", 1)
        start = groups.clock()
        groups.clock = lambda: start
        assert await groups.commit_offsets("r", "", -1, [OffsetCommitEntry("t", 0, 3, -1, "")],
                                           retention_ms=5_000) == [ErrorCode.none]
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        assert groups.fetch_offsets("r", [("t", 0)])[("t", 0)].offset == 3
        assert groups.expire_offsets(start + 4_999) == (0, 0)
        assert groups.expire_offsets(start + 5_000) == (1, 1)
        nursery.cancel_scope.cancel()


async def test_a_foreign_or_damaged_record_does_not_cost_other_offsets(tmp_path):
    from databus.protocol.internal_records.consumer_offsets import OffsetKey, encode_offset_key
    from databus.protocol.records import build_batch

    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        broker.create_topic("t", 1)
        assert await groups.commit_offsets("g", "", -1, [OffsetCommitEntry("t", 0, 9, -1, "")]
                                           ) == [ErrorCode.none]
        partition = partition_for("g", 4)
        broker.append(OFFSETS_TOPIC, partition, build_batch([
            (encode_offset_key(OffsetKey("g", "t", 1)), b"\x00\x03\x00", (), 0),  # cut short
            (b"\x00\x07\x00\x01x", b"newer protocols' records", (), 0),  # KIP-848 et al.
        ]))
        # Appends refuse keyless records on compacted topics; one already in the log (written
        # before that rule) is placed there as stored data, with its offset.
        offsets_log = broker.get_log(OFFSETS_TOPIC, partition)
        offsets_log.append(build_batch([(None, b"no key", (), 0)],
                                       base_offset=offsets_log.log_end_offset),
                           assign_offsets=False)
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        broker, groups = await started(nursery, tmp_path)
        fetched = groups.fetch_offsets("g", None)
        assert {tp: f.offset for tp, f in fetched.items()} == {("t", 0): 9}
        nursery.cancel_scope.cancel()
