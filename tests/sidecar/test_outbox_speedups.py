"""The SDK's outbox in C (databus.sdk._outbox_speedups) against its Python twin, PyOutbox.

Both run through the same operations (hypothesis) and must give the same results and
states; both resolve the same reports frames (well-formed, hostile, cut short, mutated) to
the same futures, errors and callbacks.
"""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from databus.protocol import sidecar_wire as wire
from databus.protocol import speedups
from databus.protocol.sidecar_wire import WireError
from databus.sdk import outbox
from databus.sdk.outbox import QUEUED, WAKE, PyOutbox
from tests.helpers.blocked_import import python_without

try:
    from databus.sdk import _outbox_speedups
except ImportError:  # reported by test_speedups.test_the_extension_is_built_where_a_compiler_is
    _outbox_speedups = None

needs_ext = pytest.mark.skipif(
    _outbox_speedups is None, reason="the C extension is not built here (no C compiler at install)"
)

offset = st.one_of(st.just(-1), st.integers(0, 2**63 - 1))
timestamp = st.integers(-(2**63), 2**63 - 1)


def test_this_process_runs_what_the_environment_says():
    """Also run on the pure-Python code (test_speedups.py's subset)."""
    expected = speedups.load_native(name="_outbox_speedups", package="databus.sdk")
    assert (outbox.Outbox is PyOutbox) == (expected is None)


# -- the SDK's outbox -----------------------------------------------------------------------

operation = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 500),
              st.one_of(st.tuples(st.text(max_size=3), st.binary(max_size=3)),
                        st.tuples(st.text(max_size=3), st.none(), st.binary(max_size=3)))),
    st.tuples(st.sampled_from(["next_id", "arm", "take", "idle", "fail", "reopen", "close"])),
    st.tuples(st.just("add_marker"), st.integers(0, 9)),
    st.tuples(st.just("release"), st.integers(0, 500)),
)


class Future:
    """A future as the Client's: the slots the outbox fills (DeliveryFuture's)."""

    __slots__ = ("_client", "_done", "_report", "_index", "_exc", "_callbacks", "delay_id")

    def __init__(self, client):
        self._client = client
        self.delay_id = None
        self._done = False
        self._report = None
        self._exc = None
        self._callbacks = None

    def state(self):
        return (self._client, self.delay_id, self._done, self._report, self._exc,
                self._callbacks, hasattr(self, "_index"))


def run_outbox(cls, operations, max_messages):
    """Every result and the state after each step (futures by their state)."""
    box = cls(max_messages, Future, "the client")
    seen = []
    for op in operations:
        name = op[0]
        if name == "add":
            then, future = box.add(op[1], op[2])
            result = (then, None if future is None else future.state())
        elif name == "add_marker":
            result = box.add_marker(("flush", op[1]))
        elif name == "release":
            result = box.release(op[1])
        elif name == "reopen":
            box.refusing = False
            result = None
        elif name == "close":
            box.refusing = True
            result = None
        elif name == "fail":
            result = sorted((k, f.state()) for k, f in box.fail().items())
        else:
            result = getattr(box, name)()
        seen.append((result, box.last_id, box.buffered, box.unencoded, bool(box.armed),
                     bool(box.refusing), sorted((k, f.state()) for k, f in box.futures.items())))
    return seen


@needs_ext
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=40), st.integers(1, 5))
def test_the_c_outbox_does_what_the_python_one_does(operations, max_messages):
    assert (run_outbox(_outbox_speedups.Outbox, operations, max_messages)
            == run_outbox(PyOutbox, operations, max_messages))


@pytest.mark.parametrize("cls", [PyOutbox, outbox.Outbox], ids=["python", "default"])
def test_senders_wake_the_io_thread_only_once_it_says_it_sleeps(cls):
    """While the I/O thread works (from a wake-up to idle()), what is queued or asked for
    wakes nobody: it takes again before it sleeps."""
    box = cls(8, Future, "the client")
    assert box.add(1, ("s", b"v"))[0] == WAKE
    assert box.add(1, ("s", b"v"))[0] == QUEUED
    box.take()
    assert box.add(1, ("s", b"v"))[0] == QUEUED  # the I/O thread is still at work
    assert box.add_marker(("flush", 1)) is False
    assert box.idle() is False  # so it takes again instead of sleeping
    box.take()
    assert box.arm() is False  # a subscription asks it to look: it is awake
    assert box.idle() is False
    box.take()
    assert box.idle() is True  # nothing left: it sleeps, and the next sender wakes it
    assert box.add(1, ("s", b"v"))[0] == WAKE
    assert box.idle() is False
    box.take()
    assert box.idle() is True
    assert box.arm() is True


@needs_ext
def test_the_c_outbox_queues_atomic_messages_untracked_by_the_collector():
    """A queued message of str, bytes, ints and None can be in no cycle: the app's collector
    need not walk it; one with headers (lists) stays tracked."""
    import gc

    box = _outbox_speedups.Outbox(8, Future, "the client")
    box.add(3, ("s", b"v"))
    box.add(3, ("s", b"v", None, [["h", b"x"]], None, None))
    box.bind_send(lambda *args, **kwargs: None, 1 << 20, 64, lambda seconds: None)
    box.max_frame_bytes = 1 << 20
    box.send("s", b"v", b"k")
    plain, with_headers, sent = box.take()[0]
    assert sent == (3, "s", b"v", b"k")
    assert not gc.is_tracked(plain) and not gc.is_tracked(sent) and gc.is_tracked(with_headers)


@needs_ext
def test_the_c_outbox_refuses_bad_calls_and_is_collected():
    import gc
    import weakref

    class Client:  # holds its outbox, which holds it: a cycle to collect
        pass

    client = Client()
    client.box = box = _outbox_speedups.Outbox(4, Future, client)
    with pytest.raises(TypeError):
        box.add(1, ["not", "a", "tuple"])
    with pytest.raises(ValueError):
        _outbox_speedups.Outbox(0, Future, client)
    with pytest.raises(TypeError, match="__slots__ member"):
        _outbox_speedups.Outbox(1, type("NoSlots", (), {s: None for s in Future.__slots__}),
                                 client)
    then, future = box.add(3, ("s", b"v"))
    assert then == WAKE and future._client is client and future._done is False
    assert box.take() == ([(1, "s", b"v")], 3)
    ref = weakref.ref(client)
    # The collector does not look into futures (see the next test): a pending one keeps
    # its client, as the running client keeps itself; closing fails what is pending.
    assert list(box.fail()) == [1]
    del box, future, client
    gc.collect()
    assert ref() is None


@needs_ext
@pytest.mark.skipif(outbox.Outbox is PyOutbox, reason="DATABUS_PURE_PYTHON: the SDK runs "
                    "PyOutbox, whose futures are made in Python and tracked")
def test_the_c_outbox_makes_futures_the_collector_does_not_track_until_they_fail():
    """A future in flight would survive the app's young collections and count toward its
    next full one (a pause over the whole heap).  Untracked, it holds no cycle that
    outlives it; a stored exception (whose traceback may lead back to it) tracks it."""
    import gc

    from databus.sdk.client import DeliveryFuture

    class Client:
        _lock = threading.Lock()

    box = _outbox_speedups.Outbox(100, DeliveryFuture, Client())
    delivered, failed = box.add(1, ("s", b"v"))[1], box.add(1, ("s", b"v"))[1]
    assert not gc.is_tracked(delivered) and not gc.is_tracked(failed)
    seen = []
    delivered.add_done_callback(lambda f: seen.append(f.result(0).offset))
    assert not gc.is_tracked(delivered._callbacks)  # emptied when done: no cycle outlives it
    with_callbacks: list = []
    assert box.resolve([[1, 0, "t", 0, 10, 5]], 0, with_callbacks) == (1, 1)
    for future in with_callbacks:
        future._run_callbacks()  # as the client's I/O thread does
    assert seen == [10] and delivered._callbacks == [] and not gc.is_tracked(delivered)
    try:
        raise RuntimeError("the sidecar went away")
    except RuntimeError as exc:
        failed._set(None, exc)  # as Client._fail_all does
    assert gc.is_tracked(failed) and failed.exception(0).__traceback__ is not None
    assert gc.is_tracked(DeliveryFuture(None))  # made in Python (PyOutbox): tracked


def test_a_process_without_the_extension_runs_the_python_twin():
    """As a machine without a C compiler meets it: the module cannot be imported (blocked
    here by a meta-path finder), and the outbox runs in Python."""
    out = python_without("databus.sdk._outbox_speedups", (
        "from databus.sdk.outbox import Outbox, PyOutbox\n"
        "assert Outbox is PyOutbox\n"
        "box = Outbox(8, lambda client: None, None)\n"
        "print(box.add(1, ('s', b'v'))[0], box.take())\n"
    ))
    assert out.strip() == "1 ([(1, 's', b'v')], 1)"


# -- the SDK's report resolution --------------------------------------------------------------

N_SENT = 12  # messages 1..12 wait for reports; ids beyond (and 0) name none

sent_id = st.integers(0, N_SENT + 2)
good_report = st.one_of(
    st.builds(wire.report_ok, sent_id, st.just("t"), st.integers(0, 3), offset, timestamp),
    st.builds(wire.report_error, sent_id, st.sampled_from([1, 6, 1001, 1005, 4242]), st.text()),
    st.lists(sent_id, max_size=6).flatmap(lambda ids: st.builds(
        wire.report_group_ok, st.just(ids), st.just("t"), st.integers(0, 3), offset,
        st.one_of(timestamp, st.lists(timestamp, min_size=len(ids), max_size=len(ids))))),
    st.builds(wire.report_group_error, st.lists(sent_id, max_size=6),
              st.sampled_from([1, 6, 1001, 1005]), st.text(max_size=5)),
)
odd = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=2),
                st.binary(max_size=2), st.lists(st.integers(0, 3), max_size=2),
                st.just({"a": 1}), st.just(2**64))
hostile_report = st.one_of(
    st.lists(st.one_of(sent_id, odd), max_size=7),  # anything in any place, short items too
    st.tuples(st.lists(st.one_of(sent_id, odd), max_size=4), st.one_of(st.just(0), odd),
              st.just("t"), st.just(0), st.just(5), st.just(9)).map(list),
    odd,
)


def resolve_outcome(outbox_type, frame):
    """A Client's state after its I/O thread met reports frame ``frame``: what it
    raised, its counters, every future's state, the callbacks run (the Client is made
    without a connection: only what _on_frame reads is set)."""
    from databus.sdk.client import Client, DeliveryFuture

    client = Client.__new__(Client)
    client._outbox = outbox_type(100, DeliveryFuture, client)
    client._delivered = client._failed = client._waiters = 0
    client._lock = threading.Lock()
    ran = []
    futures = [client._outbox.add(1, ("s", b"v"))[1] for _ in range(N_SENT)]
    for n, future in enumerate(futures):
        if n % 3 == 0:
            future.add_done_callback(lambda f, n=n: ran.append(n))
    try:
        client._on_frame(frame)
        raised = None
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        raised = (type(exc), str(exc))

    def state(f):
        if not f.done():
            return "waiting"
        try:  # a malformed delivered item fails here, when its Delivery is built
            return f.result()
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            return (type(exc), str(exc))

    return (raised, client._delivered, client._failed, [state(f) for f in futures], ran,
            sorted(client._outbox.futures))


def check_resolve(frame):
    c = resolve_outcome(_outbox_speedups.Outbox, frame)
    py = resolve_outcome(PyOutbox, frame)
    assert c == py


@needs_ext
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(good_report, max_size=8),
                 st.lists(st.one_of(good_report, hostile_report), max_size=8), odd))
def test_both_outboxes_resolve_the_same_futures_the_same_way(items):
    check_resolve(wire.reports(items))


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(good_report, min_size=1, max_size=6), st.data())
def test_truncated_and_mutated_reports_frames_give_the_same_errors(items, data):
    """Bytes as the socket gives them: cut short or with a byte changed, then decoded (the
    decoder is the same code in both modes) and resolved."""
    frame = bytearray(wire.encode_reports(items))
    if data.draw(st.booleans()):
        at = data.draw(st.integers(4, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    else:
        frame = frame[: data.draw(st.integers(0, len(frame)))]
    try:
        frames = wire.FrameDecoder().feed(bytes(frame))
    except WireError:
        return
    for f in frames:
        if f.get("type") == "reports":
            check_resolve(f)


@needs_ext
def test_the_c_outbox_resolves_delivered_runs_and_leaves_the_rest():
    from databus.sdk.client import DeliveryFuture

    box = _outbox_speedups.Outbox(100, DeliveryFuture, None)
    futures = [box.add(1, ("s", b"v"))[1] for _ in range(4)]
    items = [[[1, 2], 0, "t", 0, 10, 5], [3, 0, "t", 1, 7, 6], [4, 6, "no"], [4, 0, "t", 0, 1, 1]]
    callbacks: list = []
    assert box.resolve(items, 0, callbacks) == (2, 3)  # stops at the error item
    assert [f._done for f in futures] == [True, True, True, False]
    assert [(f._report, f._index) for f in futures[:3]] == [
        (items[0], 0), (items[0], 1), (items[1], -1)]
    assert box.resolve(items, 3, callbacks) == (4, 1)
    assert callbacks == [] and box.futures == {}
    with pytest.raises(TypeError):
        box.resolve((), 0, callbacks)


# --- the app's messages, made from a messages frame's arrays ------------------------------

_consumed = st.builds(
    wire.consumed_array, st.integers(1, 2**63 - 1), st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1), st.integers(-1, 2**63 - 1), st.integers(1, 2**31),
    st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=10),
    st.lists(st.lists(st.text(max_size=8), min_size=1, max_size=1).map(
        lambda n: [n[0], b"v"]), max_size=3),
)


class _Sub:
    topic = "orders"


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_consumed, max_size=20), st.integers(0, 5))
def test_messages_wrapped_in_c_are_the_python_twins(items, epoch):
    """The C wrap (no __init__ call per message) gives the messages the Python one does:
    every field the app reads, and its ack going to the same subscription and epoch."""
    from databus.sdk.consume import Message, wrap_messages_py

    sub = _Sub()
    c = _outbox_speedups.wrap_messages(Message, sub, epoch, items)
    py = wrap_messages_py(Message, sub, epoch, items)
    fields = ("delivery_id", "partition", "offset", "timestamp", "attempt", "value", "key",
              "headers", "topic", "tag")
    assert [type(m) for m in c] == [Message] * len(items)
    assert [[getattr(m, f) for f in fields] for m in c] == \
        [[getattr(m, f) for f in fields] for m in py]
    assert [(m._sub, m._epoch, m._item) for m in c] == [(m._sub, m._epoch, m._item) for m in py]
    assert all(m._item is item for m, item in zip(c, items, strict=True))


@needs_ext
def test_wrapped_messages_hold_and_release_their_references():
    import gc
    import sys

    from databus.sdk.consume import Message

    sub, item = _Sub(), [1, 0, 5, 7, 1, b"v"]
    before = sys.getrefcount(sub), sys.getrefcount(item)
    messages = _outbox_speedups.wrap_messages(Message, sub, 0, [item] * 100)
    assert sys.getrefcount(sub) == before[0] + 100
    assert gc.is_tracked(messages[0])  # a cycle through a message can still be collected
    del messages
    assert (sys.getrefcount(sub), sys.getrefcount(item)) == before
    with pytest.raises(AttributeError):  # not a message class
        _outbox_speedups.wrap_messages(_Sub, sub, 0, [item])

    class Plain:  # the names, but not slots: nothing is written at a wrong offset
        _sub = _epoch = _item = None

    with pytest.raises(TypeError, match="__slots__"):
        _outbox_speedups.wrap_messages(Plain, sub, 0, [item])
