"""The console's pure parts (databus/console/view.py and the reset form's reading): how
bytes are shown, the samples kept for charts and rates, the chart's geometry."""

from __future__ import annotations

import json

import msgpack
import pytest

from databus.console.app import _headers, _same_origin
from databus.console.cluster import ConsoleError, reset_args
from databus.console.view import (
    HEX_LIMIT,
    TEXT_LIMIT,
    Samples,
    chart,
    format_bytes,
    format_ms,
    show_bytes,
)


@pytest.mark.parametrize("data, kind, text", [
    (None, "null", "null"),
    (b'{"a": [1, 2], "b": "\xc3\xa9"}', "json", '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "é"\n}'),
    (b"  [1]\n", "json", "[\n  1\n]"),
    (b"{not json", "text", "{not json"),
    (b"42", "text", "42"),  # also a msgpack fixint: text wins
    (b"two\nlines\ttab", "text", "two\nlines\ttab"),
    (msgpack.packb({"user": "ann", "raw": b"\x01\x02"}), "msgpack",
     '{\n  "user": "ann",\n  "raw": "0102"\n}'),
    (b"\x00\xff\x10", "hex", "00 ff 10"),
    (bytes(range(17)).replace(b"\x00", b"\xff"), "hex",
     "ff 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f\n10"),
])
def test_show_bytes(data, kind, text):
    shown = show_bytes(data)
    assert (shown.kind, shown.text) == (kind, text)


def test_msgpack_with_int_keys_and_ext():
    shown = show_bytes(msgpack.packb({1: msgpack.ExtType(5, b"\xaa")}))
    assert shown.kind == "msgpack"
    assert json.loads(shown.text) == {"1": {"ext": 5, "data": "aa"}}


def test_long_binary_is_cut_and_says_how_much():
    shown = show_bytes(b"\xff" * (HEX_LIMIT + 10))
    assert shown.kind == "hex"
    assert shown.text.endswith("... 10 more bytes")
    assert shown.text.count("ff") == HEX_LIMIT


def test_long_text_is_cut_and_says_how_much():
    shown = show_bytes(b"x" * (TEXT_LIMIT + 5))
    assert shown.kind == "text"
    assert shown.text == "x" * TEXT_LIMIT + "\n... 5 more characters"


def test_samples_keep_the_last_n_and_give_a_rate():
    samples = Samples(keep=3)
    assert samples.rate("t") is None
    for t, v in [(0, 0), (1, 10), (2, 30), (4, 70)]:
        samples.add("t", t, v)
    assert samples.series("t") == [(1, 10), (2, 30), (4, 70)]
    assert samples.rate("t") == 20.0
    assert samples.rate("t", window=2) == 20.0  # the last two: (70 - 30) / 2 s
    samples.add("t", 5, 70)
    assert samples.rate("t", window=2) == 0.0  # quiet in the last second
    samples.add("gone", 0, 1)
    samples.forget_missing({"t"})
    assert samples.series("gone") == []


def test_chart_scales_time_and_value():
    c = chart([(10.0, 0), (12.0, 5), (14.0, 10)], width=108, height=58, pad=4, left=4)
    # x: 4..104 over 10..14 s; y: 54 (0) .. 4 (10, the top)
    assert c.points == "4.0,54.0 54.0,29.0 104.0,4.0"
    labelled = chart([(10.0, 0), (14.0, 10)], width=108, height=58, pad=4, left=24)
    assert labelled.points == "24.0,54.0 104.0,4.0"  # room for the axis labels
    assert (c.y_max, c.last, c.seconds) == (10, 10, 4.0)


def test_chart_of_nothing_and_of_zeros():
    assert chart([]).empty
    flat = chart([(0.0, 0), (1.0, 0)], width=108, height=58, pad=4, left=4)
    assert flat.points == "4.0,54.0 104.0,54.0"  # on the floor, not divided by zero
    one = chart([(5.0, 3)], width=108, height=58, pad=4, left=4)
    assert one.points == "4.0,4.0 104.0,4.0"  # one sample: a level line, not an unseen dot


def test_sizes_are_shown_in_binary_units():
    assert [format_bytes(n) for n in (None, 0, 1023, 1024, 1536 * 1024, 5 << 40, 5 << 50)] == [
        "-", "0 B", "1023 B", "1.0 KiB", "1.5 MiB", "5.0 TiB", "5120.0 TiB"]


def test_timestamps_are_shown_in_utc():
    assert format_ms(1704067200123) == "2024-01-01T00:00:00.123Z"
    assert format_ms(-1) == "-"


def test_reset_form_reads_as_the_tool_options():
    args = reset_args("orders", "shift-by", "-5")
    assert (args.shift_by, args.all_topics, args.topic_partitions) == (-5, False,
                                                                       [("orders", None)])
    assert reset_args(None, "earliest", None).all_topics
    assert reset_args("t", "datetime", "2024-01-01T00:00:00+00:00").timestamp == 1704067200000
    with pytest.raises(ConsoleError, match="'x' is not an integer"):
        reset_args("t", "offset", "x")
    with pytest.raises(ConsoleError, match="unknown reset target"):
        reset_args("t", "sideways", None)


def test_produce_form_headers():
    assert _headers("a=1\n\nb = two=2\n") == [("a", b"1"), ("b", b" two=2")]
    with pytest.raises(ConsoleError, match="expected name=value"):
        _headers("novalue")


class _Request:
    def __init__(self, **headers):
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}


def test_only_same_origin_posts_act():
    assert _same_origin(_Request(host="127.0.0.1:8080"))  # curl: no browser headers
    assert _same_origin(_Request(host="127.0.0.1:8080", origin="http://127.0.0.1:8080",
                                 sec_fetch_site="same-origin"))
    assert not _same_origin(_Request(host="127.0.0.1:8080", sec_fetch_site="cross-site"))
    assert not _same_origin(_Request(host="127.0.0.1:8080", origin="http://evil.example"))
