"""One app connection's protocol, sans I/O: this module owns its state machine.

A Session is fed the bytes an app sent (``feed``) and turns them into events, in order, one
per ``next_event()`` call (``receive_data`` does both and returns a list): Hello, Produce,
Flush, Ping (and, from version 3, Subscribe, Fetch, Ack, Nack, Unsubscribe), then ConnectionClosed at EOF, or ProtocolError when the bytes break the
protocol (the error frame is queued for the app, and the session takes no more input).  Answers go the other way: ``send_report`` (single or group report items),
``send_error_report``, ``pong``, and the hello reply and ``flushed`` frames the session
writes by itself; ``data_to_send()`` returns everything queued as bytes, reports coalesced
into as few frames as possible, in the order queued.

It also keeps the bookkeeping that spans frames: the protocol version (a version 1 app gets
group reports expanded to one report per message), and flushes: every group of messages
handed upstream is ``open_group()``-ed and ``close_group()``-d once fully answered, and a
flush is answered when the groups open at its arrival are closed.  So a ``flushed`` follows
the reports of every message before its flush.

States: AWAIT_HELLO -> OPEN -> CLOSED (EOF seen) or ERROR (protocol broken).  No sockets,
no trio: ingress.py reads and writes; tests feed it bytes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, NamedTuple

from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode, WireError

# Messages answered per reports frame (at most ~9 bytes of id each, plus a header per
# group): far below any max_frame_bytes.
MAX_REPORTS_PER_FRAME = 8192


class State(enum.Enum):
    AWAIT_HELLO = "await-hello"
    OPEN = "open"
    CLOSED = "closed"
    ERROR = "error"


class Hello(NamedTuple):
    version: int
    client: Any
    app: str | None = None  # the name of the app's token (sidecar.tokens), if any


class Produce(NamedTuple):
    """A validated produce frame: message tuples (sidecar_wire.Message's field order) and
    each one's payload size (what buffer.memory counts)."""

    messages: list[tuple]
    sizes: list[int]


class Flush(NamedTuple):
    id: int


class Ping(NamedTuple):
    id: int


class Subscribe(NamedTuple):
    """Version 3: subscribe ``id`` to ``stream`` as a member of ``group``."""

    id: int
    stream: str
    group: str
    tags: tuple[str, ...] | None
    max_in_flight: int


class Fetch(NamedTuple):
    id: int
    max_messages: int
    max_wait_ms: int
    min_bytes: int


class Ack(NamedTuple):
    id: int
    ids: list[int]
    ranges: list[tuple[int, int]] = []  # inclusive [first, last] (the ack_ranges feature)


class Nack(NamedTuple):
    id: int
    nacks: list[tuple[int, int | None, str | None]]


class Unsubscribe(NamedTuple):
    id: int


# Frame types of consuming (version 3) and their parsers.
_CONSUME_FRAMES = {
    "subscribe": lambda f: Subscribe(*wire.parse_subscribe(f)),
    "fetch": lambda f: Fetch(*wire.parse_fetch(f)),
    "ack": lambda f: Ack(*wire.parse_ack(f)),
    "nack": lambda f: Nack(*wire.parse_nack(f)),
    "unsubscribe": lambda f: Unsubscribe(wire.frame_int(f, "id")),
}
class Checks(NamedTuple):
    """The app answers check-backs of these producer groups (half messages)."""

    groups: list


class ConnectionClosed(NamedTuple):
    pass


class ProtocolError(NamedTuple):
    """The app broke the protocol; the session has queued the error frame already."""

    code: int
    message: str


class Session:
    """See the module docstring.  ``hello_reply(version)`` makes the sidecar's hello;
    ``on_output()`` is called when output becomes waiting after ``data_to_send`` emptied
    it (once, not per item: the I/O shell wakes its writer there)."""

    def __init__(
        self,
        max_frame_bytes: int,
        hello_reply: Callable[[int], dict[str, Any]],
        on_output: Callable[[], None] = lambda: None,
        authorize: Callable[[Any], Any] | None = None,
    ) -> None:
        self.state = State.AWAIT_HELLO
        # sidecar.tokens: ``authorize(token)`` returns the app's access (access.py) or raises
        # WireError(UNAUTHORIZED); ``access`` is None when every stream is open
        self._authorize = authorize
        self.access: Any = None
        self.version = wire.PROTOCOL_VERSION
        self._decoder = wire.FrameDecoder(max_frame_bytes)
        self._hello_reply = hello_reply
        self._on_output = on_output
        self._notified = False
        self._out: list[Any] = []  # dict frames, lists of report items (one frame each), encoded frames
        self._cur: list | None = None  # the reports frame still taking items
        self._cur_answered = 0  # messages the items in _cur answer
        self._seq = 0
        self._open_groups: set[int] = set()
        self._flushes: list[tuple[set[int], int]] = []  # (groups waited for, flush id)
        self.discarding = False  # the app is gone: answers have nowhere to go
        self._eof = False

    # --- input ----------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as events."""
        return self._decoder.buffered

    @property
    def pending_frame_size(self) -> int:
        """The length of the frame being received once its prefix is in; 0 otherwise."""
        return self._decoder.pending_frame_size

    def receive_data(self, data: bytes) -> list:
        """``feed(data)``, then every event it completes, as a list."""
        self.feed(data)
        return list(iter(self.next_event, None))

    def feed(self, data: bytes) -> None:
        """Take bytes the app sent; ``b""`` means EOF.  They are parsed lazily, by
        ``next_event``."""
        if data:
            self._decoder.receive(data)
        else:
            self._eof = True

    def next_event(self):
        """The next event, or None until more bytes arrive.  A frame is parsed only when
        asked for, so what the caller did for the frames before it (reports queued, say)
        comes before the error frame of a bad one.  After ConnectionClosed or
        ProtocolError there are no more events."""
        if self.state is State.CLOSED or self.state is State.ERROR:
            return None
        try:
            frame = self._decoder.next_frame()
            if frame is not None:
                return self._event(frame)
            if not self._eof:
                return None
            if self._decoder.buffered:
                raise WireError(
                    ErrorCode.MALFORMED_FRAME,
                    f"connection closed inside a frame ({self._decoder.buffered} bytes "
                    "pending)",
                )
            self.state = State.CLOSED
            return ConnectionClosed()
        except WireError as exc:
            # The app hears why it is dropped; frames before the bad one were served.
            self.state = State.ERROR
            self._queue_frame(wire.error(exc.code, str(exc)))
            return ProtocolError(int(exc.code), str(exc))

    def _event(self, frame: dict[str, Any]):
        if self.state is State.AWAIT_HELLO:
            self.version = wire.check_hello(frame)  # HELLO_REQUIRED if it is not a hello
            if self._authorize is not None:
                self.access = self._authorize(frame.get("token"))
            self.state = State.OPEN
            # From here on a produce frame comes out of the decoder parsed, as a tuple.
            self._decoder.decode = wire.decode_body_or_produce
            self._queue_frame(self._hello_reply(self.version))
            return Hello(self.version, frame.get("client"),
                         getattr(self.access, "app", None))
        if type(frame) is tuple:  # a produce frame's (messages, sizes)
            return Produce(*frame)
        kind = frame["type"]
        if kind == "flush":
            return Flush(wire.frame_int(frame, "id"))
        if kind == "ping":
            return Ping(wire.frame_int(frame, "id"))
        parse = _CONSUME_FRAMES.get(kind)
        if parse is not None:
            if self.version < wire.CONSUME_VERSION:
                raise WireError(
                    ErrorCode.MALFORMED_FRAME,
                    f"{kind} frames need protocol version {wire.CONSUME_VERSION} "
                    f"(this connection said hello with {self.version})",
                )
            return parse(frame)
        if kind == "checks":
            return Checks(wire.parse_checks(frame))
        if kind == "hello":
            raise WireError(ErrorCode.MALFORMED_FRAME, "hello sent twice")
        raise WireError(ErrorCode.MALFORMED_FRAME, f"unknown frame type {kind!r}")

    # --- answers --------------------------------------------------------------------------

    def send_report(self, item: list) -> None:
        """Queue one report item: ``[id, 0, topic, partition, offset, timestamp]``,
        ``[id, code, message]``, or their group forms (a list of ids first)."""
        if self.discarding:
            return
        if self.version < 2 and type(item[0]) is list:
            for one in wire.expand_report(item):
                self.send_report(one)
            return
        cur = self._cur
        # Frames are bounded by the messages they answer (a group item answers many), so a
        # backlog never makes a frame bigger than an SDK's max_frame_bytes.
        answered = len(item[0]) if type(item[0]) is list else 1
        if cur is None or self._cur_answered + answered > MAX_REPORTS_PER_FRAME:
            cur = self._cur = []
            self._cur_answered = 0
            self._out.append(cur)
        self._cur_answered += answered
        cur.append(item)
        if not self._notified:  # once per data_to_send, not per report: it is measurable
            self._notified = True
            self._on_output()

    def send_error_report(self, id_: int, code: int, message: str) -> None:
        self.send_report([id_, int(code), message])

    def pong(self, id_: int) -> None:
        self._queue_frame(wire.pong(id_))

    def send_frame(self, frame: dict[str, Any]) -> None:
        """Queue a frame of consuming (subscribed, messages, unsubscribed)."""
        self._queue_frame(frame)
    def send_encoded(self, frame: bytes) -> None:
        """Queue a frame already encoded (length prefix included): a messages frame."""
        self._queue_frame(frame)

    def send_check(self, group: str, txn: str) -> None:
        """Ask the app about a transaction of ``group`` (it registered with ``checks``)."""
        self._queue_frame(wire.check(group, txn))

    def _queue_frame(self, frame: dict[str, Any] | bytes) -> None:
        if self.discarding:
            return
        self._cur = None
        self._out.append(frame)
        if not self._notified:
            self._notified = True
            self._on_output()

    @property
    def has_output(self) -> bool:
        return bool(self._out)

    def data_to_send(self) -> bytes:
        """Everything queued, as frames; b"" if nothing is."""
        self._notified = False
        if not self._out:
            return b""
        out, self._out, self._cur = self._out, [], None
        encode = wire.encode_frame
        encode_reports = wire.encode_reports
        return b"".join([
            item if type(item) is bytes
            else encode_reports(item) if type(item) is list else encode(item) for item in out
        ])

    def discard_output(self) -> None:
        """The app is gone: drop what is queued and whatever is answered from now on."""
        self.discarding = True
        self._out, self._cur = [], None

    # --- flush bookkeeping ----------------------------------------------------------------

    def open_group(self) -> int:
        """A group of messages was handed upstream; returns its number for close_group."""
        self._seq += 1
        self._open_groups.add(self._seq)
        return self._seq

    def close_group(self, seq: int) -> None:
        """Group ``seq`` has all its reports queued: answer the flushes that waited only
        for it."""
        self._open_groups.discard(seq)
        if self._flushes:
            still = []
            for pending, flush_id in self._flushes:
                pending.discard(seq)
                if pending:
                    still.append((pending, flush_id))
                else:
                    self._queue_frame(wire.flushed(flush_id))
            self._flushes = still

    @property
    def open_groups(self) -> int:
        return len(self._open_groups)

    def flush(self, id_: int) -> bool:
        """The app's flush ``id_``, in frame order: True if answered at once (nothing was
        outstanding), False if it waits for the groups open now."""
        if not self._open_groups:
            self._queue_frame(wire.flushed(id_))
            return True
        self._flushes.append((set(self._open_groups), id_))
        return False
