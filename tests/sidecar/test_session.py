"""The sidecar's per-connection protocol as pure data (session.py, no trio, no sockets):
bytes in -> events, answers in -> golden bytes out (the examples docs/sidecar-protocol.md
shows), fed whole, one byte at a time, and cut anywhere."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode
from databus.sidecar.produce.session import (
    MAX_REPORTS_PER_FRAME,
    ConnectionClosed,
    Flush,
    Hello,
    Ping,
    Produce,
    ProtocolError,
    Session,
    State,
)

from .test_wire import doc_goldens

GOLDEN = doc_goldens()
# What an app sends first: hello, a produce frame of two messages, a flush and a ping.
APP_BYTES = GOLDEN["hello"] + GOLDEN["produce"] + GOLDEN["flush"] + GOLDEN["ping"]
APP_EVENTS = [
    Hello(wire.PROTOCOL_VERSION, "databus-python/0.1.0"),
    Produce(
        [(1, "orders", b'{"id":7}', b"c-42", None, None, None),
         (2, "clicks", b"x", None, [("trace", b"\x01")], None, None)],
        [8 + 4, 1 + len("trace") + 1],  # key + value + header bytes: what buffer.memory counts
    ),
    Flush(3),
    Ping(4),
]


def hello_reply(version: int) -> dict:
    return wire.hello_reply("databus/0.1.0", 16777216, 60000, version)


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def new_session(max_frame_bytes: int = wire.DEFAULT_MAX_FRAME_BYTES) -> tuple[Session, Wakes]:
    wakes = Wakes()
    return Session(max_frame_bytes, hello_reply, wakes), wakes


def open_session(version: int = 2) -> Session:
    session, _ = new_session()
    assert session.receive_data(wire.encode_frame(wire.hello("x", version))) == [
        Hello(version, "x")
    ]
    session.data_to_send()  # the hello reply
    return session


def test_fed_whole_or_one_byte_at_a_time_the_events_are_the_same():
    whole, _ = new_session()
    assert whole.receive_data(APP_BYTES) == APP_EVENTS

    by_byte, _ = new_session()
    events = []
    for i in range(len(APP_BYTES)):
        events += by_byte.receive_data(APP_BYTES[i : i + 1])
    assert events == APP_EVENTS
    assert by_byte.buffered == 0
    # The reply to the hello is the documented one, byte for byte, either way.
    assert whole.data_to_send() == by_byte.data_to_send() == GOLDEN["hello-reply"]
    assert whole.state is by_byte.state is State.OPEN


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(APP_BYTES)), max_size=12))
def test_cut_anywhere_the_events_are_the_same(cuts):
    session, _ = new_session()
    events = []
    bounds = [0, *sorted(cuts), len(APP_BYTES)]
    for start, end in itertools.pairwise(bounds):
        if end > start:  # b"" is EOF
            events += session.receive_data(APP_BYTES[start:end])
    assert events == APP_EVENTS


def test_reports_out_are_the_documented_bytes():
    session = open_session()
    session.send_report(wire.report_ok(1, "orders", 3, 1041, 1700000000000))
    session.send_error_report(2, 1000, "unknown stream 'clicks'")
    assert session.data_to_send() == GOLDEN["reports"]

    session.send_report(wire.report_group_ok([5, 6, 8], "orders", 1, 200, 1700000000000))
    session.send_report(
        wire.report_group_ok([7, 9], "orders", 2, 90, [1700000000001, 1700000000002])
    )
    session.send_report(wire.report_group_error([10, 11], 7, "timed out"))
    assert session.data_to_send() == GOLDEN["group-reports"]

    assert session.flush(3) is True  # nothing outstanding: answered at once
    assert session.data_to_send() == GOLDEN["flushed"]
    session.pong(4)
    assert session.data_to_send() == GOLDEN["pong"]
    assert session.data_to_send() == b""


def test_a_version_1_app_gets_one_report_per_message():
    session = open_session(version=1)
    session.send_report(wire.report_group_ok([5, 6, 8], "orders", 1, 200, 1700000000000))
    session.send_report(wire.report_group_ok([7, 9], "orders", 2, -1, [11, 12]))  # acks=0
    session.send_report(wire.report_group_error([10], 7, "timed out"))
    assert session.data_to_send() == wire.encode_frame(wire.reports([
        [5, 0, "orders", 1, 200, 1700000000000],
        [6, 0, "orders", 1, 201, 1700000000000],
        [8, 0, "orders", 1, 202, 1700000000000],
        [7, 0, "orders", 2, -1, 11],
        [9, 0, "orders", 2, -1, 12],
        [10, 7, "timed out"],
    ]))


def test_reports_coalesce_in_order_and_frames_stay_bounded():
    session, wakes = new_session()
    session.receive_data(GOLDEN["hello"])
    assert wakes.count == 1  # the hello reply is waiting
    session.data_to_send()
    session.send_report(wire.report_ok(1, "t", 0, 0, 5))
    session.send_report(wire.report_ok(2, "t", 0, 1, 5))
    session.pong(7)
    session.send_report(wire.report_ok(3, "t", 0, 2, 5))
    assert wakes.count == 2  # once for everything queued before the next data_to_send
    assert session.data_to_send() == (
        wire.encode_frame(wire.reports([[1, 0, "t", 0, 0, 5], [2, 0, "t", 0, 1, 5]]))
        + wire.encode_frame(wire.pong(7))
        + wire.encode_frame(wire.reports([[3, 0, "t", 0, 2, 5]]))
    )
    # A frame answers at most MAX_REPORTS_PER_FRAME messages, group items counted by ids.
    half = MAX_REPORTS_PER_FRAME // 2 + 1
    first = wire.report_group_ok(list(range(half)), "t", 0, 0, 5)
    second = wire.report_group_ok(list(range(half, 2 * half)), "t", 0, half, 5)
    session.send_report(first)
    session.send_report(second)
    assert session.data_to_send() == (
        wire.encode_frame(wire.reports([first])) + wire.encode_frame(wire.reports([second]))
    )


def test_flushed_follows_the_reports_of_every_message_before_the_flush():
    session = open_session()
    a, b = session.open_group(), session.open_group()
    assert session.flush(9) is False  # waits for a and b
    c = session.open_group()  # after the flush: not waited for
    session.send_report(wire.report_group_ok([1], "t", 0, 0, 5))
    session.close_group(a)
    assert session.data_to_send() == wire.encode_frame(
        wire.reports([wire.report_group_ok([1], "t", 0, 0, 5)])
    )
    session.send_report(wire.report_group_ok([2], "t", 1, 0, 5))
    session.close_group(b)
    assert session.data_to_send() == (
        wire.encode_frame(wire.reports([wire.report_group_ok([2], "t", 1, 0, 5)]))
        + wire.encode_frame(wire.flushed(9))
    )
    assert session.open_groups == 1
    session.close_group(c)
    assert session.data_to_send() == b""


def test_bad_bytes_end_the_session_with_an_error_frame_but_keep_the_frames_before_them():
    session, _ = new_session()
    bad = b"\x00\x00\x00\x01\xc1"  # 0xc1 is never valid msgpack
    events = session.receive_data(GOLDEN["hello"] + GOLDEN["ping"] + bad + GOLDEN["ping"])
    assert events[:2] == [Hello(wire.PROTOCOL_VERSION, "databus-python/0.1.0"), Ping(4)]
    assert len(events) == 3 and type(events[2]) is ProtocolError
    assert events[2].code == ErrorCode.MALFORMED_FRAME
    assert "invalid msgpack" in events[2].message
    assert session.state is State.ERROR
    assert session.data_to_send() == GOLDEN["hello-reply"] + wire.encode_frame(
        wire.error(ErrorCode.MALFORMED_FRAME, events[2].message)
    )
    assert session.receive_data(GOLDEN["ping"]) == []  # nothing more is read


def test_frames_are_parsed_as_asked_for_so_answers_to_earlier_frames_precede_the_error():
    session, _ = new_session()
    session.feed(GOLDEN["hello"] + GOLDEN["ping"] + b"\x00\x00\x00\x01\xc1")
    assert session.next_event() == Hello(wire.PROTOCOL_VERSION, "databus-python/0.1.0")
    assert session.next_event() == Ping(4)
    session.pong(4)  # what the I/O shell does with the ping, before it looks further
    error = session.next_event()
    assert type(error) is ProtocolError
    assert session.next_event() is None
    assert session.data_to_send() == (
        GOLDEN["hello-reply"] + GOLDEN["pong"]
        + wire.encode_frame(wire.error(ErrorCode.MALFORMED_FRAME, error.message))
    )


@pytest.mark.parametrize(
    "data, code, fragment",
    [
        (GOLDEN["ping"], ErrorCode.HELLO_REQUIRED, "the first frame must be hello"),
        (GOLDEN["produce"], ErrorCode.HELLO_REQUIRED, "got 'produce'"),
        (wire.encode_frame(wire.hello("x", version=4)), ErrorCode.UNSUPPORTED_VERSION, "4"),
        (GOLDEN["hello"] + GOLDEN["hello"], ErrorCode.MALFORMED_FRAME, "hello sent twice"),
        (GOLDEN["hello"] + wire.encode_frame({"type": "nope"}), ErrorCode.MALFORMED_FRAME,
         "unknown frame type 'nope'"),
        (GOLDEN["hello"] + wire.encode_frame({"type": "flush"}), ErrorCode.MALFORMED_FRAME,
         "'id' must be a non-negative integer"),
        (GOLDEN["hello"] + wire.encode_frame(wire.produce([[1, "s"]])),
         ErrorCode.MALFORMED_FRAME, "message 0: must be an array of 3 to 7 fields"),
        (GOLDEN["hello"] + b"\x00\x00\x10\x01", ErrorCode.FRAME_TOO_LARGE,
         "exceeds max_frame_bytes=4096"),
    ],
)
def test_protocol_errors(data, code, fragment):
    session, _ = new_session(max_frame_bytes=4096)
    events = session.receive_data(data)
    error = events[-1]
    assert type(error) is ProtocolError and error.code == code and fragment in error.message
    frames = wire.FrameDecoder().feed(session.data_to_send())
    assert frames[-1] == {"type": "error", "code": int(code), "message": error.message}


def test_eof_between_frames_closes_and_inside_a_frame_is_an_error():
    session = open_session()
    assert session.receive_data(b"") == [ConnectionClosed()]
    assert session.state is State.CLOSED

    session = open_session()
    assert session.receive_data(GOLDEN["ping"][:3]) == []
    [error] = session.receive_data(b"")
    assert error == ProtocolError(
        ErrorCode.MALFORMED_FRAME, "connection closed inside a frame (3 bytes pending)"
    )


def test_once_the_app_is_gone_answers_are_dropped():
    session = open_session()
    session.send_report(wire.report_ok(1, "t", 0, 0, 5))
    session.discard_output()
    session.send_report(wire.report_ok(2, "t", 0, 1, 5))
    session.pong(1)
    assert not session.has_output and session.data_to_send() == b""


def test_the_session_imports_no_trio():
    # Sans-I/O: the session and the wire format load without trio (or pydantic).
    out = subprocess.run(
        [sys.executable, "-c", (
            "import sys, databus.sidecar.produce.session; "
            "print(sorted(m for m in ('trio', 'pydantic', 'yaml') if m in sys.modules))"
        )],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out.strip() == "[]"
