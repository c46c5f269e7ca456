"""databus.cli_helpers.times: the ISO-8601 date-times and durations `databus groups
reset-offsets`, the console's forms and `databus index query --since` read, as Kafka's tools
read them (Java's Duration.parse; a naive date-time is local)."""

from __future__ import annotations

import datetime

import pytest

from databus.cli_helpers.times import parse_datetime, parse_duration


@pytest.mark.parametrize("text, ms", [
    ("PT30M", 30 * 60_000),
    ("P1DT2H", (24 + 2) * 3_600_000),
    ("P2D", 2 * 86_400_000),
    ("PT1H30M15S", (90 * 60 + 15) * 1000),
    ("PT0.5S", 500),
    ("pt10s", 10_000),  # Duration.parse is case-insensitive
    (" PT1M ", 60_000),
])
def test_durations_as_java_reads_them(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "1h", "PT1H2D", "30m", ""])
def test_a_bad_duration_is_refused_naming_the_option(text):
    with pytest.raises(ValueError, match=r"--by-duration .* is not a duration such as PT30M"):
        parse_duration(text)
    with pytest.raises(ValueError, match=r"^--since "):
        parse_duration(text, option="--since")


def test_date_times_with_and_without_an_offset():
    assert parse_datetime("2024-01-01T00:00:00+00:00") == 1_704_067_200_000
    assert parse_datetime("2024-01-01T01:00:00+01:00") == 1_704_067_200_000
    # a naive time is the machine's local time, as kafka-consumer-groups.sh reads it
    local = datetime.datetime(2024, 5, 1, 12, 0).timestamp()
    assert parse_datetime("2024-05-01T12:00:00") == int(local * 1000)


def test_a_bad_date_time_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"^--to-datetime 'yesterday' is not an ISO-8601"):
        parse_datetime("yesterday")
    with pytest.raises(ValueError, match=r"^--since 'x' is not"):
        parse_datetime("x", option="--since")
