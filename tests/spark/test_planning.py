"""Offset planning (no Spark, no cluster): starting/ending offsets, ranges, data loss,
minPartitions, maxOffsetsPerTrigger."""

from __future__ import annotations

import pytest
from databus_spark.options import EARLIEST, LATEST, OffsetSpec, OptionError
from databus_spark.planning import (
    DataLossError,
    OffsetRange,
    cap,
    from_json,
    plan_ranges,
    rate_limit,
    require_all_partitions,
    resolve_offsets,
    split_for_min_partitions,
    start_requests,
    to_json,
)

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_json_offsets_round_trip_in_kafkas_shape():
    offsets = {A1: 7, A0: 5, B0: 0}
    assert to_json(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets
    assert from_json('{"a": {"1": 7}}') == {A1: 7}
    assert from_json(None) == {}


def test_start_requests_and_resolution():
    parts = [A0, A1]
    spec = OffsetSpec("offsets", {A0: 3, A1: LATEST})
    assert start_requests(spec, parts, "x") == {A1: LATEST}
    assert resolve_offsets(spec, parts, {A1: 40}, {A0: 10, A1: 40}, strict=True,
                           display="startingOffsets") == {A0: 3, A1: 40}
    assert start_requests(OffsetSpec("earliest"), parts, "x") == {A0: EARLIEST, A1: EARLIEST}
    assert start_requests(OffsetSpec("timestamp", timestamp=99), parts, "x") == {A0: 99, A1: 99}
    assert start_requests(OffsetSpec("timestamps", {A0: 5, A1: 6}), parts, "x") == {A0: 5, A1: 6}


def test_timestamp_with_no_record_after_it():
    spec = OffsetSpec("timestamps", {A0: 5, A1: 6})
    looked_up = {A0: 2, A1: -1}  # ListOffsets: no record of a-1 at or after 6
    with pytest.raises(OptionError, match="no record of a-1 has a timestamp >= 6"):
        resolve_offsets(spec, [A0, A1], looked_up, {A0: 9, A1: 4}, strict=True,
                        display="startingOffsetsByTimestamp")
    assert resolve_offsets(spec, [A0, A1], looked_up, {A0: 9, A1: 4}, strict=False,
                           display="x") == {A0: 2, A1: 4}


def test_per_partition_json_must_name_every_partition():
    spec = OffsetSpec("offsets", {A0: 1, B0: 2})
    with pytest.raises(OptionError) as info:
        require_all_partitions(spec, [A0, A1], "startingOffsets")
    assert "missing a-1" in str(info.value) and "not read by this query b-0" in str(info.value)
    require_all_partitions(OffsetSpec("earliest"), [A0], "startingOffsets")
    # checked before any lookup is planned
    with pytest.raises(OptionError, match="option 'endingOffsets' must give every partition"):
        start_requests(OffsetSpec("offsets", {A0: 4}), [A0, A1], "endingOffsets")


def test_ranges_skip_empty_partitions():
    ranges, warnings = plan_ranges({A0: 0, A1: 5}, {A0: 10, A1: 5}, {A0: 0, A1: 0},
                                   fail_on_data_loss=True)
    assert ranges == [OffsetRange("a", 0, 0, 10)] and warnings == []


def test_offsets_lost_to_retention():
    with pytest.raises(DataLossError, match=r"records \[2, 6\) of a-0 are gone: its earliest offset is now 6"):
        plan_ranges({A0: 2}, {A0: 10}, {A0: 6}, fail_on_data_loss=True)
    ranges, warnings = plan_ranges({A0: 2}, {A0: 10}, {A0: 6}, fail_on_data_loss=False)
    assert ranges == [OffsetRange("a", 0, 6, 10)]
    assert warnings == ["records [2, 6) of a-0 are gone: its earliest offset is now 6"]


def test_deleted_recreated_and_new_partitions():
    with pytest.raises(DataLossError, match="partition a-1 is gone"):
        plan_ranges({A0: 0, A1: 3}, {A0: 1}, {A0: 0}, fail_on_data_loss=True)
    with pytest.raises(DataLossError, match="a-0 ends at offset 2, before the start 5"):
        plan_ranges({A0: 5}, {A0: 2}, {A0: 0}, fail_on_data_loss=True)
    # a partition new since the last batch starts at its earliest offset
    ranges, _ = plan_ranges({A0: 1}, {A0: 1, A1: 4}, {A0: 0, A1: 0}, fail_on_data_loss=True,
                            new_partitions_from_zero=True)
    assert ranges == [OffsetRange("a", 1, 0, 4)]
    with pytest.raises(DataLossError, match=r"new partition a-1 starts at offset 2, not 0"):
        plan_ranges({A0: 1}, {A0: 1, A1: 4}, {A0: 0, A1: 2}, fail_on_data_loss=True,
                    new_partitions_from_zero=True)
    ranges, warnings = plan_ranges({A0: 5, B0: 1}, {A0: 2}, {A0: 0}, fail_on_data_loss=False)
    assert ranges == [] and len(warnings) == 2


def test_min_partitions_splits_in_proportion():
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 10), OffsetRange("b", 0, 5, 5)]
    split = split_for_min_partitions(ranges, 5)
    # 100 of 110 offsets -> round(4.55) = 5 pieces; 10 -> round(0.45) = 0, at least 1
    assert split == [OffsetRange("a", 0, 0, 20), OffsetRange("a", 0, 20, 40),
                     OffsetRange("a", 0, 40, 60), OffsetRange("a", 0, 60, 80),
                     OffsetRange("a", 0, 80, 100), OffsetRange("a", 1, 0, 10)]
    # half rounds up, as Java's Math.round: 30 of 60 offsets for 3 tasks -> 1.5 -> 2 pieces
    halves = split_for_min_partitions([OffsetRange("a", 0, 0, 30), OffsetRange("a", 1, 0, 30)], 3)
    assert len(halves) == 4
    assert split_for_min_partitions(ranges, 2) == ranges[:2]
    assert split_for_min_partitions(ranges, None) == ranges[:2]
    # every offset once, whatever the split
    for n in range(1, 40):
        pieces = split_for_min_partitions([OffsetRange("a", 0, 3, 40)], n)
        assert [o for r in pieces for o in range(r.start, r.end)] == list(range(3, 40))


def test_rate_limit_in_proportion_to_lag():
    start = {A0: 0, A1: 0, B0: 100}
    latest = {A0: 900, A1: 100, B0: 101}
    # lags 900, 100, 1 of 1001: shares 899.1 -> 899, 99.9 -> 99, 0.999 -> ceiled to 1
    assert rate_limit(start, latest, 1000) == {A0: 899, A1: 99, B0: 101}
    # a limit above the total lag reads everything
    assert rate_limit(start, latest, 10_000) == latest
    # nothing to read
    assert rate_limit(latest, latest, 10) == latest


def test_rate_limit_counts_new_partitions_from_earliest():
    start = {A0: 10}
    latest = {A0: 20, A1: 30}
    # lags 10 and 20 of 30: 8 * 1/3 = 2.67 -> 2, 8 * 2/3 = 5.33 -> 5
    assert rate_limit(start, latest, 8, {A1: 10}) == {A0: 12, A1: 15}


def test_rate_limited_batches_read_everything_once():
    """Micro-batches of at most `limit` offsets each, until caught up."""
    position = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 10, A1: 10, B0: 10}
    sizes = []
    while position != latest:
        end = rate_limit(position, latest, 8)
        sizes.append(sum(end[tp] - position[tp] for tp in end))
        position = end
    # equal lags of 10: 8 * 1/3 floored = 2 each per batch, until the last 1 of each
    assert sizes == [6, 6, 6, 6, 6]


def test_cap_to_the_available_now_target():
    assert cap({A0: 50, A1: 5, B0: 9}, {A0: 40, A1: 10}) == {A0: 40, A1: 5}
