"""The source's and sink's options: Kafka's names and rules, and clear errors (no Spark)."""

from __future__ import annotations

import pytest
from databus_spark.options import (
    EARLIEST_SPEC,
    LATEST_SPEC,
    OffsetSpec,
    OptionError,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def source(streaming=False, **options):
    return parse_source_options({**BOOT, **options}, streaming=streaming)


def test_defaults_follow_kafka_source():
    batch = source(subscribe="a, b")
    assert batch.subscribe == ("a", "b")
    assert batch.starting == EARLIEST_SPEC and batch.ending == LATEST_SPEC
    assert batch.fail_on_data_loss is True and batch.include_headers is False
    assert batch.max_offsets_per_trigger is None and batch.min_partitions is None
    assert source(streaming=True, subscribe="a").starting == LATEST_SPEC


def test_names_are_case_insensitive_and_json_offsets_parse():
    opts = source(SUBSCRIBEPATTERN=r"region-a\..*", StartingOffsets='{"t": {"0": 5, "1": -2}}',
                  endingoffsets='{"t": {"0": 9, "1": -1}}', MINPARTITIONS="4",
                  failOnDataLoss="False", includeHeaders="true")
    assert opts.subscribe_pattern == r"region-a\..*"
    assert opts.starting == OffsetSpec("offsets", {("t", 0): 5, ("t", 1): -2})
    assert opts.ending == OffsetSpec("offsets", {("t", 0): 9, ("t", 1): -1})
    assert opts.min_partitions == 4 and opts.fail_on_data_loss is False and opts.include_headers
    assert opts.matches("region-a.orders") and not opts.matches("xregion-a.orders")


def test_assign_and_timestamps():
    opts = source(assign='{"t": [1, 0], "u": [2]}', startingTimestamp="1000",
                  startingOffsetsByTimestamp='{"t": {"0": 5}}')
    assert opts.assign == (("t", 0), ("t", 1), ("u", 2))
    # startingTimestamp beats startingOffsetsByTimestamp beats startingOffsets (Kafka's order)
    assert opts.starting == OffsetSpec("timestamp", timestamp=1000)
    opts = source(subscribe="t", startingOffsetsByTimestamp='{"t": {"0": 5}}',
                  startingOffsets="earliest", startingOffsetsByTimestampStrategy="latest")
    assert opts.starting == OffsetSpec("timestamps", {("t", 0): 5})
    assert opts.starting_timestamp_strict is False


def test_kafka_settings_go_to_the_client():
    opts = source(subscribe="t", **{"kafka.client.id": "job", "kafka.fetch.max.wait.ms": "50"})
    assert opts.kafka == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "job",
                          "fetch.max.wait.ms": "50"}


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "t", "startingOfsets": "earliest"}, False, "unknown option 'startingofsets'"),
    ({"subscribe": "t", "path": "/x"}, False, "unknown option 'path'"),
    ({}, False, "exactly one of the options 'assign', 'subscribe', 'subscribePattern'"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, False, "(got 'subscribe', 'assign')"),
    ({"subscribe": " , "}, False, "'subscribe' names no topic"),
    ({"subscribePattern": "("}, False, "'subscribePattern' is not a valid regex"),
    ({"assign": '{"t": "0"}'}, False, "'assign': topic 't' must map to a list"),
    ({"assign": "[1]"}, False, "'assign' must be a JSON object"),
    ({"subscribe": "t", "startingOffsets": "latest"}, False, "can't be latest for batch"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, False, "t-0 can't be latest"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, False, "ending offset can't be earliest"),
    ({"subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, False, "t-0 can't be earliest"),
    ({"subscribe": "t", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch"),
    ({"subscribe": "t", "startingOffsets": "first"}, True, "must be earliest, latest or a JSON"),
    ({"subscribe": "t", "startingOffsets": "{nope"}, True, "'startingOffsets' is not valid JSON"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, True, "partition 'x', not a number"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, True, "offset -3 of t-0"),
    ({"subscribe": "t", "startingTimestamp": "soon"}, True, "'startingTimestamp' must be a"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be a"),
    ({"subscribe": "t", "minPartitions": "x"}, False, "'minPartitions' must be a positive"),
    ({"subscribe": "t", "failOnDataLoss": "yes"}, False, "'failOnDataLoss' must be true or"),
    ({"subscribe": "t", "minOffsetsPerTrigger": "5"}, True, "'minoffsetspertrigger' is not supp"),
    ({"subscribe": "t", "kafka.group.id": "g"}, True, "'kafka.group.id' is not supported"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, True, "'startingOffsets' instead"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "skip"}, True, "error or latest"),
    ({"assign": '{"t":[0]}', "startingOffsets": '{"u":{"0":1}}'}, False,
     "names partitions that 'assign' does not: u-0"),
])
def test_bad_options_fail_naming_the_option(options, streaming, message):
    with pytest.raises(OptionError) as info:
        source(streaming=streaming, **options)
    assert message in str(info.value)


def test_bootstrap_is_required():
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers' is required"):
        parse_source_options({"subscribe": "t"}, streaming=False)


def test_load_time_check_accepts_what_either_mode_accepts():
    """load() asks for the schema before Spark says batch or stream."""
    parse_source_options({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, streaming=None)
    parse_source_options({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, streaming=None)
    with pytest.raises(OptionError, match="unknown option"):
        parse_source_options({**BOOT, "subscribe": "t", "ending": "1"}, streaming=None)


def test_sink_options():
    assert parse_sink_options({**BOOT, "topic": "out"}).topic == "out"
    assert parse_sink_options(BOOT).topic is None
    with pytest.raises(OptionError, match="unknown option 'subscribe' for the databus sink"):
        parse_sink_options({**BOOT, "subscribe": "t"})


def test_kafka_settings_are_checked_by_the_client_config():
    from databus_spark.cluster import consumer_config, producer_config

    assert consumer_config({"fetch.max.wait.ms": "50"}).fetch_max_wait_ms == 50
    assert consumer_config({}).enable_auto_commit is False
    with pytest.raises(OptionError, match="kafka.\\* options: unknown ConsumerConfig key 'linger.ms'"):
        consumer_config({"linger.ms": "5"})
    with pytest.raises(OptionError, match="'linger.ms'"):
        producer_config({"linger.ms": "-1"})
