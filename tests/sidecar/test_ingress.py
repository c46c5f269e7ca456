"""ingress.Connection over trio's in-memory streams (no socket, no sidecar process): the
reader, the session and the writer together, fed one byte per read."""

from __future__ import annotations

import trio
import trio.testing

from databus.config import parse_config
from databus.plugins import get_plugin_manager
from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode
from databus.sidecar.metrics import SidecarMetrics
from databus.sidecar.produce.budget import ByteBudget
from databus.sidecar.produce.gate import ReloadGate
from databus.sidecar.produce.ingress import Connection
from databus.sidecar.produce.router import RoutingTable


def connection(stream, metrics, kicks=None):
    config = parse_config({"sidecar": {"metrics_listen": None}})
    # No streams and no default route: every stream is unknown, so no producer is needed.
    table = RoutingTable(config, get_plugin_manager(), metrics)
    return Connection(
        stream, "conn-test", max_frame_bytes=4096,
        hello_reply=lambda v: wire.hello_reply("databus/test", 4096, 1000, v),
        budget=ByteBudget(1 << 20), gate=ReloadGate(table), metrics=metrics,
        kick=(lambda: kicks.append(1)) if kicks is not None else (lambda: None),
    )


async def read_frames(stream, frames: list, eof: trio.Event) -> None:
    decoder = wire.FrameDecoder()
    while data := await stream.receive_some(65536):
        frames += decoder.feed(data)
    eof.set()


async def test_one_byte_per_read_then_a_bad_frame_closes_only_this_connection():
    app, server = trio.testing.lockstep_stream_pair()
    metrics = SidecarMetrics()
    conn = connection(server, metrics)
    frames: list[dict] = []
    eof = trio.Event()
    data = b"".join(wire.encode_frame(f) for f in [
        wire.hello("test-app"),
        wire.produce([[1, "nowhere", b"v"], [2, "nowhere", b"w", b"k"]]),
        wire.ping(3),
        wire.flush(4),
    ])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(read_frames, app, frames, eof)
        for i in range(len(data)):
            await app.send_all(data[i : i + 1])  # lockstep: each byte is one read
        await trio.testing.wait_all_tasks_blocked()
        assert metrics.connections == 1
        await app.send_all(wire.LENGTH_PREFIX.pack(5000))  # over max_frame_bytes=4096
        await eof.wait()
    unknown = "unknown stream 'nowhere': it is not in the sidecar's streams and there is no " \
              "default_route"
    assert frames == [
        wire.hello_reply("databus/test", 4096, 1000),
        wire.reports([[1, 1000, unknown], [2, 1000, unknown]]),
        wire.pong(3),
        wire.flushed(4),  # nothing was outstanding: answered at once
        wire.error(ErrorCode.FRAME_TOO_LARGE,
                   "frame of 5000 bytes exceeds max_frame_bytes=4096"),
    ]
    assert metrics.errors == {1000: 2, 1003: 1}
    assert metrics.connections == 0


async def test_the_app_closing_ends_the_connection_quietly():
    app, server = trio.testing.memory_stream_pair()
    metrics = SidecarMetrics()
    conn = connection(server, metrics)
    frames: list[dict] = []
    eof = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.run)
        nursery.start_soon(read_frames, app, frames, eof)
        await app.send_all(wire.encode_frame(wire.hello("test-app", version=1)))
        await app.send_stream.aclose()  # EOF between frames: not an error
        await eof.wait()
    assert frames == [wire.hello_reply("databus/test", 4096, 1000, version=1)]
    assert metrics.errors == {} and metrics.connections == 0
