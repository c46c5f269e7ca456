"""The sinks runtime's pure core and the Parquet export's layout and rolling, as plain data
(no trio, no broker, no files)."""

from __future__ import annotations

import pytest
from databus_plugins.parquet import layout

from databus.sinks.core import (
    HEADER_MESSAGE,
    HEADER_OFFSET,
    PluginReportError,
    SinkProgress,
    dead_letter_headers,
)

TP = ("t", 0)


def test_only_reported_owned_forward_offsets_are_committed():
    progress = SinkProgress()
    progress.assigned(TP, 10)
    assert progress.to_commit({TP: 10}) == {}  # nothing new
    progress.handed(TP, 5, 15, now=1.0)
    assert progress.to_commit({}) == {}  # not reported durable: not committed
    assert progress.to_commit({TP: 12}) == {TP: 12}
    assert progress.to_commit({("other", 0): 3}) == {}  # not owned (revoked meanwhile)
    with pytest.raises(PluginReportError, match="up to 15"):
        progress.to_commit({TP: 16})  # never handed: a plugin bug, not committed
    progress.committed({TP: 12}, now=2.0)
    assert progress.to_commit({TP: 12}) == {}
    assert progress.to_commit({TP: 11}) == {}  # never backwards
    progress.revoked(TP)
    assert progress.to_commit({TP: 15}) == {}


def test_a_new_partition_without_commits_accepts_its_first_report():
    progress = SinkProgress()
    progress.assigned(TP, None)
    with pytest.raises(PluginReportError, match="none"):
        progress.to_commit({TP: 1})
    progress.handed(TP, 3, 3, now=0.0)
    assert progress.to_commit({TP: 3}) == {TP: 3}


def test_durable_age_and_lag():
    progress = SinkProgress()
    progress.assigned(TP, 0)
    assert progress.durable_age(now=100.0) == 0.0
    progress.handed(TP, 10, 10, now=100.0)
    progress.handed(TP, 10, 20, now=103.0)  # still the same wait
    assert progress.durable_age(now=105.0) == 5.0
    progress.committed({TP: 10}, now=106.0)  # moved, but records are still pending
    assert progress.durable_age(now=107.0) == 1.0
    progress.committed({TP: 20}, now=108.0)
    assert progress.durable_age(now=200.0) == 0.0
    progress.end_offsets[TP] = 50
    assert progress.lag() == {TP: 30}
    assert progress.records_in == 20 and progress.commits == 2


def test_dead_letter_headers_keep_the_records_own_and_use_connects_names():
    headers = dead_letter_headers("s", [("h", b"1")], "t", 2, 41, "bad json")
    assert headers[0] == ("h", b"1")
    assert (HEADER_OFFSET, b"41") in headers and (HEADER_MESSAGE, b"bad json") in headers
    assert ("__connect.errors.topic", b"t") in headers
    assert ("__connect.errors.partition", b"2") in headers


# -- the parquet export's layout -------------------------------------------------------------

def options(**config):
    return layout.parse_options({"path": "/x", **config})


def test_file_names_sort_by_offset_and_parse_back():
    name = layout.file_name("orders.v1", 3, 0, 99)
    assert name == "orders.v1+3+00000000000000000000+00000000000000000099.parquet"
    assert layout.parse_file_name(name) == ("orders.v1", 3, 0, 99)
    assert layout.file_name("t", 0, 100, 199) > layout.file_name("t", 0, 99, 99)
    assert layout.parse_file_name("t+0+1+2.parquet.tmp") is None
    assert layout.parse_file_name("_SUCCESS") is None
    temp = layout.temp_name(name, "abc")
    assert temp.startswith(".") and layout.is_temp_for(temp, "orders.v1", 3)
    assert not layout.is_temp_for(temp, "orders.v1", 30)


def test_hive_directories_from_record_time_utc():
    ts = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    assert layout.hive_dir("t", layout.bucket(ts, "hour"), "hour") == (
        "topic=t/date=2023-11-14/hour=22")
    assert layout.hive_dir("t", layout.bucket(ts, "day"), "day") == "topic=t/date=2023-11-14"
    assert layout.hive_dir("t", layout.bucket(ts, "none"), "none") == "topic=t"
    assert layout.bucket(ts, "hour") != layout.bucket(ts + 3_600_000, "hour")


def test_roll_by_count_carries_over_batches():
    group = layout.OpenGroup()
    opts = options(**{"flush.size": 3})
    assert layout.cut_points(opts, group, [1] * 5, [0] * 5, now=0) == [3]
    assert group.records == 2
    assert layout.cut_points(opts, group, [1] * 4, [0] * 4, now=0) == [1, 4]
    assert group.records == 0


def test_roll_by_bytes_after_the_row_that_reaches_it():
    group = layout.OpenGroup()
    opts = options(**{"rotate.size.bytes": 100})
    assert layout.cut_points(opts, group, [40, 40, 40, 10, 90], [0] * 5, now=0) == [3, 5]


def test_roll_by_record_time_before_the_row_past_the_interval():
    group = layout.OpenGroup()
    opts = options(**{"rotate.interval.ms": 1000})
    assert layout.cut_points(opts, group, [1] * 4, [0, 500, 999, 1000], now=0) == [3]
    assert group.first_timestamp == 1000
    # replaying from the same offset cuts at the same places: the names repeat
    assert layout.cut_points(opts, layout.OpenGroup(), [1] * 4, [0, 500, 999, 1000], 5) == [3]


def test_roll_by_wall_clock_is_due_after_the_schedule():
    group = layout.OpenGroup()
    opts = options(**{"rotate.schedule.interval.ms": 2000})
    assert not layout.schedule_due(opts, group, now=100.0)  # nothing open
    layout.cut_points(opts, group, [1], [0], now=100.0)
    assert not layout.schedule_due(opts, group, now=101.9)
    assert layout.schedule_due(opts, group, now=102.0)


@pytest.mark.parametrize("config, problem", [
    ({}, "path is required"),
    ({"path": "/x", "format": "avro"}, "format must be one of json, msgpack, raw"),
    ({"path": "/x", "parquet.codec": "lzo"}, "parquet.codec must be one of"),
    ({"path": "/x", "flush.size": 0}, "flush.size must be a positive integer"),
    ({"path": "/x", "rotate.interval.ms": "1h"}, "rotate.interval.ms must be"),
    ({"path": "/x", "format": "raw", "schema": {"a": "int64"}}, "schema does not apply"),
    ({"path": "/x", "schema": ["a"]}, "schema must map field names"),
    ({"path": "/x", "colour": "blue"}, "unknown option(s) colour"),
])
def test_bad_options_are_named(config, problem):
    with pytest.raises(ValueError, match="parquet: .*" + problem.replace("(", r"\(")
                       .replace(")", r"\)")):
        layout.parse_options(config)


def test_the_fast_path_agrees_with_the_row_by_row_cuts():
    import random

    rng = random.Random(7)
    for _ in range(300):
        opts = options(**{"flush.size": rng.randint(1, 50), "rotate.size.bytes":
                          rng.randint(1, 2000), "rotate.interval.ms": rng.choice([None, 500])})
        start = rng.randint(0, 30)
        fast, slow = layout.OpenGroup(), layout.OpenGroup()
        layout.cut_points(opts, fast, [10] * start, list(range(start)), now=0)
        layout.cut_points(opts, slow, [10] * start, list(range(start)), now=0)
        n = rng.randint(1, 40)
        sizes = [rng.randint(0, 60) for _ in range(n)]
        times = sorted(rng.randint(0, 1000) for _ in range(n))
        if layout.no_cut(opts, fast, n, sum(sizes), times[0], max(times), now=1):
            assert layout.cut_points(opts, slow, sizes, times, now=1) == []
            assert (fast.records, fast.bytes, fast.first_timestamp) == (
                slow.records, slow.bytes, slow.first_timestamp)
        else:
            assert (fast.records, fast.bytes) == (slow.records, slow.bytes)  # untouched
