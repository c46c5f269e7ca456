"""databus.Client against a scripted peer (a socket speaking the wire protocol by hand) and
against a real sidecar from several threads at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from databus import (
    AsyncClient,
    BufferExhaustedError,
    Client,
    Delivery,
    ProtocolError,
    SidecarUnavailableError,
    SubscriptionError,
    UnknownStreamError,
)
from databus.protocol import sidecar_wire as wire
from databus.sdk.outbox import Outbox

from .harness import running_sidecar, short_tmpdir, sidecar_config


class ScriptedSidecar:
    """Accepts one connection, answers hello, then runs ``script(conn, decoder)``."""

    def __init__(self, path: str, script) -> None:
        self.path = path
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(1)
        self.received: list[dict] = []
        self.pending: list[dict] = []
        self.script = script
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            decoder = wire.FrameDecoder()
            while not self.received:
                self.received += decoder.feed(conn.recv(65536))
            conn.sendall(wire.encode_frame(wire.hello_reply("scripted", 1 << 20, 200)))
            self.script(self, conn, decoder)

    def read_frames(self, conn, decoder, count: int) -> list[dict]:
        """The next ``count`` frames (fewer at EOF); extra frames wait for the next call."""
        while len(self.pending) < count:
            data = conn.recv(65536)
            if not data:
                break
            self.pending += decoder.feed(data)
        frames, self.pending = self.pending[:count], self.pending[count:]
        return frames

    def close(self) -> None:
        self.server.close()
        self.thread.join(10)


def test_hello_then_reports_resolve_futures_in_any_order(sock_dir):
    path = os.path.join(sock_dir, "fake.sock")

    def script(fake, conn, decoder):
        messages = []
        while len(messages) < 2:  # the client may split them over produce frames
            (produce,) = fake.read_frames(conn, decoder, 1)
            messages += produce["messages"]
        ids = [m[0] for m in messages]
        fake.received.append({"type": "produce", "messages": messages})
        conn.sendall(wire.encode_frame(wire.reports([
            wire.report_error(ids[1], 1000, "unknown stream 'b'"),
            wire.report_ok(ids[0], "topic-a", 2, 41, 1700000000000),
        ])))
        (flush,) = fake.read_frames(conn, decoder, 1)
        conn.sendall(wire.encode_frame(wire.flushed(flush["id"])))
        fake.read_frames(conn, decoder, 1)  # until the client closes

    fake = ScriptedSidecar(path, script)
    try:
        with Client(path, client_name="test-sdk/1") as client:
            assert client.server == "scripted" and client.max_block_ms == 200
            a = client.send("a", b"1", key="k", headers={"h": b"v"}, partition=2, timestamp=5)
            b = client.send("b", bytearray(b"2"))
            client.flush(10)
            assert a.result(0) == Delivery("topic-a", 2, 41, 1700000000000)
            with pytest.raises(Exception) as info:
                b.result(0)
            assert info.value.code == 1000 and "unknown stream 'b'" in str(info.value)
    finally:
        fake.close()
    hello, produce = fake.received
    assert hello == {"type": "hello", "version": 3, "client": "test-sdk/1"}
    first_id = produce["messages"][0][0]
    assert produce["messages"][0] == [first_id, "a", b"1", b"k", [["h", b"v"]], 2, 5]
    assert produce["messages"][1][1:] == ["b", b"2"]


def test_group_reports_resolve_each_future_at_its_offset(sock_dir):
    """Protocol version 2: a report item for many ids at once, both timestamp forms, acks=0's
    -1 offsets, an error group, a single report beside them, and an id nobody waits for."""
    path = os.path.join(sock_dir, "fake.sock")

    def script(fake, conn, decoder):
        ids = []
        while len(ids) < 9:
            (produce,) = fake.read_frames(conn, decoder, 1)
            ids += [m[0] for m in produce["messages"]]
        conn.sendall(wire.encode_frame(wire.reports([
            wire.report_group_ok([ids[0], ids[2], ids[4]], "t", 1, 100, 1700),
            wire.report_group_ok([ids[1], ids[3]], "t", 2, 7, [11, 12]),
            wire.report_group_ok([ids[5], 999_999], "t", 0, -1, 5),
            wire.report_group_error([ids[6], ids[7]], 7, "timed out"),
            wire.report_ok(ids[8], "u", 3, 4, 5),
        ])))
        (flush,) = fake.read_frames(conn, decoder, 1)  # close() flushes first
        conn.sendall(wire.encode_frame(wire.flushed(flush["id"])))
        fake.read_frames(conn, decoder, 1)  # until the client closes

    fake = ScriptedSidecar(path, script)
    try:
        with Client(path) as client:
            futures = [client.send("s", b"%d" % i) for i in range(9)]
            called = []
            futures[3].add_done_callback(lambda f: called.append(f.result(0)))
            futures[7].add_done_callback(lambda f: called.append(type(f.exception(0))))
            for f in futures:
                f.exception(10)  # wait for every outcome
            assert [f.result(0) for f in (futures[0], futures[2], futures[4])] == [
                Delivery("t", 1, 100, 1700), Delivery("t", 1, 101, 1700),
                Delivery("t", 1, 102, 1700),
            ]
            assert futures[1].result(0) == Delivery("t", 2, 7, 11)
            assert futures[3].result(0) == Delivery("t", 2, 8, 12)
            assert futures[5].result(0) == Delivery("t", 0, -1, 5)
            for f in futures[6:8]:
                assert f.exception(0).code == 7 and "timed out" in str(f.exception(0))
            assert futures[8].result(0) == Delivery("u", 3, 4, 5)
            assert called == [Delivery("t", 2, 8, 12), type(futures[7].exception(0))]
            stats = client.statistics()
            assert stats.pending_reports == 0
            # the 6 delivered and 2 failed of the groups, 1 single; the unknown id counts too
            assert (stats.delivered, stats.failed) == (7 + 1, 2)
    finally:
        fake.close()


def test_a_malformed_reports_frame_fails_the_futures_instead_of_hanging(sock_dir):
    path = os.path.join(sock_dir, "fake.sock")

    def script(fake, conn, decoder):
        fake.read_frames(conn, decoder, 1)
        conn.sendall(wire.encode_frame({"type": "reports", "reports": [["not", "an id"], 5]}))
        fake.read_frames(conn, decoder, 1)

    fake = ScriptedSidecar(path, script)
    try:
        client = Client(path)
        future = client.send("s", b"v")
        with pytest.raises(ProtocolError, match="bad reports frame"):
            future.result(10)
        client.close()
    finally:
        fake.close()


def test_send_blocks_at_most_max_block_ms_when_the_sidecar_stops_reading(sock_dir):
    path = os.path.join(sock_dir, "fake.sock")
    release = threading.Event()

    def script(fake, conn, decoder):
        release.wait(30)  # never read: the socket buffers fill, then the client's

    fake = ScriptedSidecar(path, script)
    try:
        client = Client(path, max_buffer_bytes=64 * 1024)
        try:
            value = b"x" * 4096
            started = time.monotonic()
            with pytest.raises(BufferExhaustedError) as info:
                for _ in range(100_000):
                    started = time.monotonic()
                    client.send("s", value)
            blocked = time.monotonic() - started
            assert blocked >= 0.2  # max_block_ms from the sidecar's hello
            assert blocked < 20  # ...and then it gave up instead of hanging
            assert info.value.code == wire.ErrorCode.BUFFER_EXHAUSTED
            assert "max_block_ms=200" in str(info.value)
        finally:
            release.set()
            client.close(timeout=1)
    finally:
        fake.close()


def test_pending_futures_fail_when_the_connection_is_lost_or_refused(sock_dir):
    path = os.path.join(sock_dir, "fake.sock")

    def script(fake, conn, decoder):
        fake.read_frames(conn, decoder, 1)
        conn.sendall(wire.encode_frame(wire.error(1002, "you sent garbage")))

    fake = ScriptedSidecar(path, script)
    try:
        client = Client(path)
        future = client.send("s", b"v")
        with pytest.raises(ProtocolError, match="you sent garbage"):
            future.result(10)
        with pytest.raises(ProtocolError):
            client.send("s", b"again")
        client.close()
    finally:
        fake.close()

    def drop(fake, conn, decoder):
        fake.read_frames(conn, decoder, 1)  # then the connection closes

    fake = ScriptedSidecar(path + "2", drop)
    try:
        client = Client(path + "2")
        future = client.send("s", b"v")
        with pytest.raises(SidecarUnavailableError, match="closed the connection"):
            future.result(10)
        client.close()
    finally:
        fake.close()


# send() calls of every shape: the C outbox takes the common case (a str stream, bytes value,
# bytes or no key, nothing else) and hands the rest to the Python send(), so each call here
# sits on one side of that line or the other.
SEND_CALLS = [
    (("s", b"v"), {}),
    (("s", b""), {}),
    (("s", b"v", None), {}),
    (("s", b"v", b"k"), {}),
    (("s", b"v"), {"key": b"k"}),
    (("s", b"v"), {"key": None}),
    (("s", b"v", b""), {}),
    (("strom-\u00e9\u4e16", b"v", b"k"), {}),  # len(stream) counts code points, as in Python
    (("s", b"v", "str key"), {}),
    (("s", "str value"), {}),
    (("s", bytearray(b"ba"), memoryview(b"mv")), {}),
    (("s", None), {}),
    (("s", b"v", b"k", {"h": b"1"}), {}),
    (("s", b"v"), {"partition": 1}),
    (("s", b"v", None, None, None, 7), {}),
    (("s", b"v"), {"block": False}),
    (("s", b"v"), {"lane": "blue"}),
    (("s", b"v"), {"tag": "t"}),
    # the scripted sidecar's max_frame_bytes (1 MiB), counted as send() counts: exactly at
    # it, then one byte over
    (("s", b"x" * ((1 << 20) - 25 - wire.MESSAGE_OVERHEAD)), {}),
    (("s", b"x" * ((1 << 20) - 24 - wire.MESSAGE_OVERHEAD)), {}),
    ((b"s", b"v"), {}),
    (("s", 42), {}),
    (("s", b"v", 42), {}),
    (("s",), {}),
    (("s", b"v"), {"nope": 1}),
    (("s", b"v", b"k", None, None, None, True, "too many"), {}),
]


def _send_all(path: str, python_send: bool, calls=SEND_CALLS) -> tuple[list, list]:
    """Each of ``calls`` through one Client: (what each returned or raised, the messages
    the sidecar received)."""
    received = []

    def script(fake, conn, decoder):
        receive_until_flush(fake, conn, decoder, received)

    fake = ScriptedSidecar(path, script)
    outcomes = []
    try:
        with Client(path) as client:
            if python_send:
                del client.send  # the class's send(): Python throughout
            for args, kwargs in calls:
                try:
                    future = client.send(*args, **kwargs)
                except Exception as exc:
                    outcomes.append((type(exc), str(exc)))
                    continue
                exc = future.exception(0) if future.done() else None
                outcomes.append(("queued", type(exc), str(exc), future.delay_id))
            client.flush(10)
    finally:
        fake.close()
    return outcomes, received


def test_the_c_send_does_what_the_python_send_does(sock_dir):
    """Every shape of call gives the same result, error and messages on the wire (ids
    included) whether the C outbox's send() or the Python one takes it."""
    if not hasattr(Outbox, "bind_send"):
        pytest.skip("the C extension is not used here (DATABUS_PURE_PYTHON, or not built)")
    c_outcomes, c_received = _send_all(os.path.join(sock_dir, "c.sock"), False)
    py_outcomes, py_received = _send_all(os.path.join(sock_dir, "py.sock"), True)
    assert c_outcomes == py_outcomes
    assert c_received == py_received
    # the calls on the C side of the line were taken there, the others raised or were sent
    assert [o[0] for o in c_outcomes].count("queued") == 20
    assert c_outcomes[18][1] is type(None)
    assert c_outcomes[19][1].__name__ == "MessageTooLargeError"
    assert [m[1:] for m in c_received[:3]] == [["s", b"v"], ["s", b""], ["s", b"v"]]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=40),
                          st.none() | st.binary(max_size=8), st.booleans()),
                min_size=1, max_size=30))
def test_the_c_send_gives_the_same_messages_for_any_stream_value_and_key(calls):
    if not hasattr(Outbox, "bind_send"):
        pytest.skip("the C extension is not used here (DATABUS_PURE_PYTHON, or not built)")
    calls = [((stream, value), {"key": key}) if by_name else ((stream, value, key), {})
             for stream, value, key, by_name in calls]
    with short_tmpdir() as where:
        c = _send_all(os.path.join(where, "c.sock"), False, calls)
        py = _send_all(os.path.join(where, "py.sock"), True, calls)
    assert c == py



def test_rounds_queued_while_the_sidecar_does_not_read_arrive_whole_and_in_order(sock_dir):
    """Rounds of frames wait, each in its own buffer, while the socket is full; once the
    sidecar reads, they go out several buffers per write, each byte once, in order."""
    path = os.path.join(sock_dir, "fake.sock")
    go = threading.Event()
    received = []

    def script(fake, conn, decoder):
        go.wait(30)
        receive_until_flush(fake, conn, decoder, received)

    fake = ScriptedSidecar(path, script)
    try:
        with Client(path) as client:
            sent = []
            for burst in range(20):  # ~2.4 MB: far more than the socket's buffers hold
                for i in range(12):
                    value = b"%d.%d:" % (burst, i) + bytes([i]) * 10_000
                    client.send("s", value)
                    sent.append(value)
                time.sleep(0.005)  # let the I/O thread take this burst as a round
            go.set()
            client.flush(30)
    finally:
        fake.close()
    assert [m[2] for m in received] == sent
    assert [m[0] for m in received] == list(range(received[0][0], received[0][0] + len(sent)))


def test_importing_the_sdk_stays_light():
    """An app that imports databus.Client does not pay for the sidecar's config models
    (pydantic, yaml) or the broker's protocol tables (kio): import time and, since the
    app's collector walks every object, its GC pauses."""
    code = (
        "import sys; from databus import Client; "
        "print(sorted(m for m in sys.modules if m == 'databus.config' "
        "or m.split('.')[0] in ('pydantic', 'yaml', 'kio', 'trio', 'asyncio')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_result_timeout_and_argument_checks(sock_dir):
    path = os.path.join(sock_dir, "fake.sock")
    done = threading.Event()
    fake = ScriptedSidecar(path, lambda fake, conn, decoder: done.wait(30))
    try:
        client = Client(path)
        try:
            future = client.send("s", b"v")
            with pytest.raises(TimeoutError):
                future.result(0.05)
            assert not future.done()
            with pytest.raises(TypeError, match="value must be bytes"):
                client.send("s", 42)
            with pytest.raises(TypeError, match="stream must be a str"):
                client.send(b"s", b"v")
            with pytest.raises(ValueError, match="partition"):
                client.send("s", b"v", partition=-1)
            with pytest.raises(TimeoutError):
                client.flush(0.05)
        finally:
            done.set()
            client.close(timeout=0.1)
        with pytest.raises(SidecarUnavailableError):  # "closed", or "lost" if the peer was quicker
            future.result(1)
    finally:
        fake.close()


async def test_one_client_shared_by_threads(sock_dir, mock_cluster):
    config = sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams={"s": {"topic": "sdk-threads"}},
    )
    per_thread, threads = 2000, 4

    def app(path):
        results: dict[int, list] = {}
        with Client(path) as client:
            def worker(n):
                results[n] = [client.send("s", b"%d-%d" % (n, i), key=b"%d" % n)
                              for i in range(per_thread)]

            pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            client.flush(60)
        return {n: [f.result(0) for f in fs] for n, fs in results.items()}

    async with running_sidecar(config) as sidecar:
        results = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
    all_positions = [(d.partition, d.offset) for ds in results.values() for d in ds]
    assert len(set(all_positions)) == per_thread * threads
    for deliveries in results.values():  # each thread's key: in order on one partition
        assert len({d.partition for d in deliveries}) == 1
        offsets = [d.offset for d in deliveries]
        assert offsets == sorted(offsets)


async def test_the_client_reconnects_when_the_sidecar_comes_back(sock_dir, mock_cluster):
    """A sidecar restart (an upgrade, a crash): while it is away, sends fail at once with
    SidecarUnavailableError; when it is back the same Client works again, no new object."""
    config = sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams={"s": {"topic": "sdk-reconnect"}},
    )
    path = config.sidecar.socket

    def send_when_up(client, value, timeout=20.0):
        deadline = time.monotonic() + timeout
        while True:
            try:
                future = client.send("s", value)
            except SidecarUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            try:
                return future.result(30)
            except TimeoutError:
                raise AssertionError(f"no report: {client.statistics()}") from None

    def until_down(client):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                client.send("s", b"probe").result(30)
            except SidecarUnavailableError as exc:
                return exc
            except TimeoutError:
                raise AssertionError(f"no report: {client.statistics()}") from None
            time.sleep(0.05)
        raise AssertionError("the client never noticed the sidecar was gone")

    async with running_sidecar(config):
        client = await trio.to_thread.run_sync(Client, path)
        first = await trio.to_thread.run_sync(send_when_up, client, b"before")
    try:
        error = await trio.to_thread.run_sync(until_down, client)
        assert "sidecar" in str(error)
        with pytest.raises(SidecarUnavailableError):
            client.send("s", b"while away")
        async with running_sidecar(config):
            second = await trio.to_thread.run_sync(send_when_up, client, b"after")
            assert client.reconnects == 1
            await trio.to_thread.run_sync(client.flush, 10)
    finally:
        await trio.to_thread.run_sync(client.close)
    assert (first.topic, second.topic) == ("sdk-reconnect", "sdk-reconnect")
    assert (second.partition, second.offset) != (first.partition, first.offset)


async def test_async_client_through_a_real_sidecar(sock_dir, mock_cluster):
    """asyncio apps: send_and_wait, many sends gathered (one key: one partition, in order),
    typed errors, flush, statistics of the Client underneath."""
    config = sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams={"s": {"topic": "sdk-asyncio"}},
    )

    async def app(path):
        async with AsyncClient(path) as client:
            first = await client.send_and_wait("s", b"first", key=b"k")
            futures = [await client.send("s", b"%d" % i, key=b"k") for i in range(2000)]
            deliveries = await asyncio.gather(*futures)
            await client.flush(10)
            with pytest.raises(UnknownStreamError):
                await client.send_and_wait("nope", b"x")
            stats = client.client.statistics()
        return first, deliveries, stats

    async with running_sidecar(config) as sidecar:
        first, deliveries, stats = await trio.to_thread.run_sync(
            lambda: asyncio.run(app(sidecar.addresses.socket))
        )
    assert first.topic == "sdk-asyncio"
    assert {d.partition for d in deliveries} == {first.partition}
    assert [d.offset for d in deliveries] == list(range(first.offset + 1, first.offset + 2001))
    assert (stats.delivered, stats.failed) == (2001, 1)


def test_async_send_waits_for_room_without_blocking_the_loop(sock_dir):
    """A sidecar that stops reading: the async send waits max_block_ms for buffer room as
    the sync one does, but by sleeping, so the loop's other tasks keep running."""
    path = os.path.join(sock_dir, "fake.sock")
    release = threading.Event()
    fake = ScriptedSidecar(path, lambda fake, conn, decoder: release.wait(30))

    async def app():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticking = asyncio.create_task(ticker())
        client = AsyncClient(path, max_buffer_bytes=64 * 1024)
        await client.start()
        try:
            with pytest.raises(BufferExhaustedError) as info:
                for _ in range(100_000):
                    await client.send("s", b"x" * 4096)
                    before = ticks
            assert "max_buffer_bytes=65536" in str(info.value)
            return ticks - before
        finally:
            release.set()
            await client.close(timeout=0.1)
            ticking.cancel()

    try:
        ticks_while_waiting = asyncio.run(app())
    finally:
        fake.close()
    assert ticks_while_waiting > 0  # the loop ran while send waited for room


async def test_an_oversized_message_fails_alone_and_the_rest_are_sent(sock_dir, mock_cluster):
    """Over max_frame_bytes (from the hello), one message is refused by the SDK itself with
    MESSAGE_TOO_LARGE naming its size and the limit; the messages around it are delivered
    (the sidecar used to answer FRAME_TOO_LARGE and close the connection, failing them
    all).  Messages that fit one by one but not together are cut into several frames."""
    from databus.sdk.errors import MessageTooLargeError

    limit = 64 * 1024
    config = sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams={"s": {"topic": "sdk-too-large"}}, sidecar={"max_frame_bytes": limit},
    )

    def app(path):
        with Client(path) as client:
            before = client.send("s", b"before")
            big = client.send("s", b"x" * (limit + 1))
            fits_alone = [client.send("s", b"y" * (limit // 3)) for _ in range(6)]
            after = [client.send("s", b"%d" % i) for i in range(1000)]
            client.flush(60)
        return before, big, fits_alone, after

    async with running_sidecar(config) as sidecar:
        before, big, fits_alone, after = await trio.to_thread.run_sync(
            app, sidecar.addresses.socket)
    error = big.exception(0)
    assert isinstance(error, MessageTooLargeError)
    assert error.detail == (f"message of {limit + 25} bytes for stream 's' is over the "
                            f"sidecar's max_frame_bytes={limit}; not sent")
    delivered = {(d.partition, d.offset)
                 for d in (f.result(0) for f in [before, *fits_alone, *after])}
    assert len(delivered) == 1007


async def test_partial_frames_hold_at_most_queued_max_frame_bytes(sock_dir, mock_cluster):
    """Eight app connections each sending 8 MiB of a 9 MiB frame: the sidecar reads two of
    them (sidecar.queued_max_frame_bytes = 16 MiB) and leaves the rest in the kernel's
    socket buffers; an app connected meanwhile is served; a connection beyond
    sidecar.max_connections is closed at once."""
    import struct as _struct

    from tests.broker.test_hostile import rss_kib

    mib = 1024 * 1024
    config = sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}},
        streams={"s": {"topic": "sdk-queued"}},
        sidecar={"queued_max_frame_bytes": 16 * mib, "max_frame_bytes": 12 * mib,
                 "max_connections": 9},
    )

    def attack(path):
        before = rss_kib(os.getpid())
        attackers = []
        try:
            for _ in range(8):
                attacker = socket.socket(socket.AF_UNIX)
                attacker.settimeout(0.5)
                attacker.connect(path)
                attackers.append(attacker)
                try:
                    attacker.sendall(_struct.pack(">I", 9 * mib) + b"\0" * (8 * mib))
                except TimeoutError:
                    pass  # not read: the point
            with Client(path) as client:  # the ninth connection: served
                assert client.send("s", b"still served").result(30).offset >= 0
                with socket.socket(socket.AF_UNIX) as extra:  # the tenth: over the limit
                    extra.settimeout(10)
                    extra.connect(path)
                    assert extra.recv(1) == b""
            return (rss_kib(os.getpid()) - before) / 1024
        finally:
            for attacker in attackers:
                attacker.close()

    async with running_sidecar(config) as sidecar:
        grown_mib = await trio.to_thread.run_sync(attack, sidecar.addresses.socket)
    assert grown_mib < 32, f"the sidecar grew by {grown_mib:.0f} MiB"


def test_an_older_sidecar_gets_the_previous_protocol_version(sock_dir):
    """A sidecar of protocol version 2 refuses the SDK's version 3 hello as an older
    `databus` does (UNSUPPORTED_VERSION, then it closes): the SDK says hello again with 2,
    sends, and refuses subscribe() with a clear error instead of failing the connection."""
    path = os.path.join(sock_dir, "old.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(2)
    hellos: list[dict] = []

    def old_sidecar():
        for _ in range(2):
            conn, _ = server.accept()
            with conn:
                decoder = wire.FrameDecoder()
                frames: list[dict] = []
                while not frames:
                    frames += decoder.feed(conn.recv(65536))
                hellos.append(frames[0])
                if frames[0]["version"] > 2:
                    conn.sendall(wire.encode_frame(wire.error(
                        wire.ErrorCode.UNSUPPORTED_VERSION,
                        f"protocol version {frames[0]['version']} is not supported "
                        "(supported: [1, 2])")))
                    continue
                conn.sendall(wire.encode_frame(wire.hello_reply("old", 1 << 20, 200, 2)))
                frames = frames[1:]
                while not frames:
                    frames += decoder.feed(conn.recv(65536))
                (produce,) = frames[:1]
                conn.sendall(wire.encode_frame(wire.reports([
                    wire.report_ok(produce["messages"][0][0], "t", 0, 7, 1700000000000)])))
                conn.recv(65536)  # until the client closes

    thread = threading.Thread(target=old_sidecar, daemon=True)
    thread.start()
    try:
        with Client(path) as client:
            assert client.protocol_version == 2
            assert client.send("s", b"v").result(10) == Delivery("t", 0, 7, 1700000000000)
            with pytest.raises(SubscriptionError, match="protocol version 2; consuming needs 3"):
                client.subscribe("s", "g")
    finally:
        server.close()
        thread.join(10)
    assert [h["version"] for h in hellos] == [3, 2]


def receive_until_flush(fake, conn, decoder, received: list) -> None:
    """A scripted sidecar's part: keep every produced message until the client's flush,
    answer it, then read until the client closes."""
    while True:
        (frame,) = fake.read_frames(conn, decoder, 1)
        if frame["type"] == "flush":
            conn.sendall(wire.encode_frame(wire.flushed(frame["id"])))
            break
        received.extend(frame["messages"])
    fake.read_frames(conn, decoder, 1)


@pytest.mark.parametrize("features", [[wire.FEATURE_ACK_RANGES], None])
def test_acks_in_order_go_as_one_range_to_a_sidecar_that_reads_ranges(sock_dir, features):
    """Messages 1-6 acked in order but 4, which is nacked: to a sidecar whose hello names
    ack_ranges the acks are [1, 3] and [5, 6] (and no id); to one that does not (older),
    the same acks as ids."""
    path = os.path.join(sock_dir, "ranges.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    acked: list[dict] = []

    def sidecar():
        conn, _ = server.accept()
        with conn:
            decoder = wire.FrameDecoder()
            frames: list[dict] = []

            def next_frame(kind: str) -> dict:
                while True:
                    while not frames:
                        data = conn.recv(65536)
                        if not data:
                            raise EOFError
                        frames.extend(decoder.feed(data))
                    frame = frames.pop(0)
                    if frame["type"] == kind:
                        return frame
                    if frame["type"] in ("ack", "nack"):
                        acked.append(frame)

            next_frame("hello")
            hello = wire.hello_reply("scripted", 1 << 20, 200)
            if features is None:
                del hello["features"]
            conn.sendall(wire.encode_frame(hello))
            sub = next_frame("subscribe")
            conn.sendall(wire.encode_frame(wire.subscribed(sub["id"], topic="t",
                                                           ordering="partition")))
            next_frame("fetch")
            conn.sendall(wire.encode_frame(wire.messages(sub["id"], [
                wire.consumed_array(i, 0, 100 + i, 1700000000000, 1, b"v%d" % i)
                for i in range(1, 7)])))
            with contextlib.suppress(EOFError):
                next_frame("unsubscribe")
                conn.sendall(wire.encode_frame(wire.unsubscribed(sub["id"])))
                flush = next_frame("flush")  # the client's close()
                conn.sendall(wire.encode_frame(wire.flushed(flush["id"])))
                next_frame("never")  # until the client closes

    thread = threading.Thread(target=sidecar, daemon=True)
    thread.start()
    try:
        with Client(path) as client:
            sub = client.subscribe("s", "g", max_in_flight=6)
            messages = [sub.poll(10) for _ in range(6)]
            assert [m.delivery_id for m in messages if m is not None] == [1, 2, 3, 4, 5, 6]
            # (the subscription's lock held: the I/O thread sends them in one go, as it
            # does whatever an app acked between two of its wake-ups)
            with sub._lock:
                for message in messages:
                    if message.delivery_id == 4:
                        message.nack(delay=1)
                    else:
                        message.ack()
            sub.close()
        thread.join(10)
    finally:
        server.close()
    acks = [f for f in acked if f["type"] == "ack"]
    ids = sorted(i for f in acks for i in f.get("ids", []))
    ranges = sorted(tuple(r) for f in acks for r in f.get("ranges", []))
    if features:
        assert (ids, ranges) == ([], [(1, 3), (5, 6)])
    else:
        assert ids == [1, 2, 3, 5, 6] and ranges == []
    assert [n["nacks"] for n in acked if n["type"] == "nack"] == [[[4, 1000, None]]]
