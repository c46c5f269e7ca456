"""The sidecar in front of librdkafka's three-broker mock cluster (a third-party Kafka),
driven through the real SDK and through raw sockets speaking the wire protocol."""

from __future__ import annotations

import os
import re
import socket
import stat
import struct
import urllib.request
from pathlib import Path

import msgpack
import pytest
import trio

from databus import Client, SidecarUnavailableError, UnknownStreamError
from databus.client.partitioners import murmur2_partition
from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode
from databus.sidecar.app import Sidecar
from databus.startup import StartupError
from tests.helpers.mock_cluster import MockCluster

from .harness import RawConnection, consume_all, running_sidecar, sidecar_config


def mock_config(sock_dir, mock_cluster, **sections):
    return sidecar_config(
        sock_dir, clusters={"mock": {"bootstrap.servers": mock_cluster.bootstrap}}, **sections
    )


async def test_keyed_messages_land_where_java_puts_them_in_order(sock_dir, mock_cluster):
    topic = "sc-keyed"
    config = mock_config(sock_dir, mock_cluster, streams={"orders": {"topic": topic}})
    n = 4000

    def app(path):
        with Client(path) as client:
            futures = [
                client.send("orders", b"v%d" % i, key=b"key-%d" % (i % 40),
                            headers=[("i", str(i).encode())])
                for i in range(n)
            ]
            client.flush(60)
            return [f.result(0) for f in futures]

    async with running_sidecar(config) as sidecar:
        deliveries = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
        producer_stats = list(sidecar.pool.statistics())  # for the failure message

    assert {d.topic for d in deliveries} == {topic}
    last_offset: dict[int, int] = {}
    for i, d in enumerate(deliveries):
        # The mock cluster auto-creates topics with 4 partitions.
        assert d.partition == murmur2_partition(b"key-%d" % (i % 40), 4)
        # send order kept per partition
        assert d.offset > last_offset.get(d.partition, -1), (i, d, last_offset, producer_stats)
        last_offset[d.partition] = d.offset
    records = await trio.to_thread.run_sync(consume_all, mock_cluster.bootstrap, topic, n)
    assert sorted((p, o) for p, o, *_ in records) == sorted(
        (d.partition, d.offset) for d in deliveries
    )
    by_value = {v: (k, h) for _, _, k, v, h in records}
    assert by_value[b"v7"] == (b"key-7", [("i", b"7")])


async def test_unknown_stream_is_a_clear_error_unless_there_is_a_default_route(
    sock_dir, mock_cluster
):
    config = mock_config(sock_dir, mock_cluster, streams={"known": {"topic": "sc-known"}})

    def app(path):
        with Client(path) as client:
            ok = client.send("known", b"x").result(30)
            with pytest.raises(UnknownStreamError) as info:
                client.send("nowhere", b"x").result(30)
            return ok, info.value

    async with running_sidecar(config) as sidecar:
        ok, error = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
    assert ok.topic == "sc-known" and ok.offset >= 0
    assert error.code == ErrorCode.UNKNOWN_STREAM and "nowhere" in str(error)

    with_default = mock_config(
        sock_dir, mock_cluster, default_route={"topic": "sc-default-{stream}"}
    )

    def app2(path):
        with Client(path) as client:
            return client.send("anything", b"x").result(30)

    async with running_sidecar(with_default) as sidecar:
        delivery = await trio.to_thread.run_sync(app2, sidecar.addresses.socket)
    assert delivery.topic == "sc-default-anything"


HOSTILE = [
    ("garbage before hello", b"\x00\x00\x00\x03abc", ErrorCode.MALFORMED_FRAME),
    ("oversized prefix", struct.pack(">I", 2**31), ErrorCode.FRAME_TOO_LARGE),
    ("array body", wire.LENGTH_PREFIX.pack(3) + msgpack.packb([1, 2]), ErrorCode.MALFORMED_FRAME),
    ("produce before hello", wire.encode_frame(wire.produce([[1, "s", b"v"]])),
     ErrorCode.HELLO_REQUIRED),
    ("future version", wire.encode_frame(wire.hello("x", version=9)),
     ErrorCode.UNSUPPORTED_VERSION),
]


def hostile_exchange(path: str, payload: bytes, after_hello: bool):
    conn = RawConnection(path)
    try:
        if after_hello:
            conn.send(wire.hello("hostile"))
            assert conn.receive()["type"] == "hello"
        conn.send_raw(payload)
        error = conn.receive()
        return error, conn.receive()  # then EOF
    finally:
        conn.close()


async def test_hostile_frames_close_only_their_connection(sock_dir, mock_cluster):
    config = mock_config(
        sock_dir, mock_cluster, streams={"s": {"topic": "sc-hostile"}},
        sidecar={"max_frame_bytes": 4096},
    )
    after_hello = [
        ("malformed message", wire.encode_frame(wire.produce([[1, "s", "not bin"]])),
         ErrorCode.MALFORMED_FRAME),
        ("unknown frame type", wire.encode_frame({"type": "bogus"}), ErrorCode.MALFORMED_FRAME),
        ("second hello", wire.encode_frame(wire.hello("x")), ErrorCode.MALFORMED_FRAME),
        ("frame over max_frame_bytes", wire.LENGTH_PREFIX.pack(5000) + b"\x00" * 10,
         ErrorCode.FRAME_TOO_LARGE),
        ("flush without id", wire.encode_frame({"type": "flush"}), ErrorCode.MALFORMED_FRAME),
    ]

    def scenario(path):
        with Client(path) as bystander:
            first = bystander.send("s", b"before", key=b"k").result(30)
            results = []
            for name, payload, code in HOSTILE:
                results.append((name, code, *hostile_exchange(path, payload, False)))
            for name, payload, code in after_hello:
                results.append((name, code, *hostile_exchange(path, payload, True)))
            # A connection that dies mid-frame.
            conn = RawConnection(path)
            conn.send(wire.hello("x"))
            conn.send_raw(wire.encode_frame(wire.ping(1))[:6])
            conn.close()
            second = bystander.send("s", b"after", key=b"k").result(30)
            return first, second, results

    async with running_sidecar(config) as sidecar:
        first, second, results = await trio.to_thread.run_sync(
            scenario, sidecar.addresses.socket
        )
        metrics_port = sidecar.addresses.metrics[1]
        metrics = await trio.to_thread.run_sync(fetch, metrics_port, "/metrics")
    for name, code, error, eof in results:
        assert error is not None and error["type"] == "error", name
        assert error["code"] == code, name
        assert isinstance(error["message"], str) and error["message"], name
        assert eof is None, name
    assert second.offset == first.offset + 1  # the bystander never noticed
    assert 'databus_sidecar_errors_total{code="1003",name="FRAME_TOO_LARGE"} 2.0' in metrics


@pytest.mark.parametrize("version", [1, 2])
async def test_raw_protocol_reports_flush_and_ping_in_order(sock_dir, mock_cluster, version):
    """Version 1 gets a report per message; version 2 may get one report for messages that
    landed together (here 1 and 2: same key, same frame), meaning the same."""
    config = mock_config(sock_dir, mock_cluster, streams={"s": {"topic": "sc-raw"}},
                         producer={"linger.ms": 50})

    def scenario(path):
        conn = RawConnection(path)
        try:
            conn.send(wire.hello("raw-test", version))
            hello = conn.receive()
            # Pipelined: three produce frames, a flush, a ping, without reading.
            conn.send(wire.produce([[1, "s", b"a", b"k"], [2, "s", b"b", b"k"]]))
            conn.send(wire.produce([[3, "nope", b"c"]]))
            conn.send(wire.produce([[4, "s", None, None, [["h", b"1"]], 2, 1700000000123]]))
            conn.send(wire.flush(99))
            conn.send(wire.ping(7))
            frames = []
            while {"flushed", "pong"} - {f["type"] for f in frames}:
                frames.append(conn.receive())
            return hello, frames
        finally:
            conn.close()

    async with running_sidecar(config) as sidecar:
        hello, frames = await trio.to_thread.run_sync(scenario, sidecar.addresses.socket)
    assert hello["type"] == "hello" and hello["version"] == version
    assert hello["max_frame_bytes"] == config.sidecar.max_frame_bytes
    kinds = [f["type"] for f in frames]
    flushed_at = kinds.index("flushed")
    assert frames[flushed_at]["id"] == 99 and frames[kinds.index("pong")]["id"] == 7
    # Every report precedes the flushed frame.
    items = [r for f in frames[:flushed_at] if f["type"] == "reports" for r in f["reports"]]
    grouped = [item for item in items if type(item[0]) is list]
    if version == 1:
        assert grouped == []
    else:
        assert [item[0] for item in grouped if item[0] == [1, 2]] == [[1, 2]]
    reports = {r.id: r for item in items for r in wire.parse_reports(item)}
    assert sorted(reports) == [1, 2, 3, 4]
    assert (reports[1].code, reports[1].topic) == (0, "sc-raw")
    assert reports[2].offset == reports[1].offset + 1
    assert reports[2].partition == reports[1].partition
    assert reports[3].code == ErrorCode.UNKNOWN_STREAM
    assert (reports[4].code, reports[4].topic, reports[4].partition) == (0, "sc-raw", 2)


def fetch(port: int, path: str) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.read().decode()
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}: {exc.read().decode()}"


async def test_metrics_and_healthz(sock_dir, mock_cluster):
    config = mock_config(sock_dir, mock_cluster, streams={"m": {"topic": "sc-metrics"}})

    def app(path):
        with Client(path) as client:
            for _i in range(100):
                client.send("m", b"x" * 10, key=b"k")
            client.flush(30)

    async with running_sidecar(config) as sidecar:
        await trio.to_thread.run_sync(app, sidecar.addresses.socket)
        port = sidecar.addresses.metrics[1]
        metrics = await trio.to_thread.run_sync(fetch, port, "/metrics")
        health = await trio.to_thread.run_sync(fetch, port, "/healthz")
        missing = await trio.to_thread.run_sync(fetch, port, "/nope")
    assert health == "ok\n"
    assert missing.startswith("HTTP 404")
    lines = set(metrics.splitlines())
    assert 'databus_sidecar_messages_in_total{stream="m"} 100.0' in lines
    assert 'databus_sidecar_messages_out_total{stream="m"} 100.0' in lines
    assert 'databus_sidecar_bytes_in_total{stream="m"} 1100.0' in lines
    # docs/operations.md lists every family /metrics has.
    documented = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    families = re.findall(r"^# TYPE (\S+)", metrics, re.M)
    assert len(families) > 15
    for family in families:
        if family.startswith("databus_sidecar_producer_"):
            name = family.removeprefix("databus_sidecar_producer_")
            assert f"`{name}`" in documented, name
        else:
            assert f"`{family}`" in documented or f"`{family}_total`" in documented, family
    # Batch size and compression ratio come from the upstream producer, per producer.
    for name in ("batch_size_avg", "compression_rate_avg", "records_per_batch_avg"):
        (line,) = [x for x in lines if x.startswith(f"databus_sidecar_producer_{name}{{")]
        assert float(line.rsplit(" ", 1)[1]) > 0, line
    assert "databus_sidecar_delivery_latency_seconds_count 100.0" in lines
    assert "databus_sidecar_buffer_bytes 0.0" in lines
    assert any(line.startswith("databus_sidecar_producer_delivered_records{") for line in lines)


async def test_socket_mode_stale_file_and_a_second_sidecar(sock_dir, mock_cluster):
    path = os.path.join(sock_dir, "s.sock")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(path)  # a leftover socket file nobody listens on (a killed sidecar's)
    stale.close()
    import grp

    # a group other than ours that this user may give files to (any, for root), so the
    # chown is seen; else our own
    mine = [g for g in grp.getgrall() if g.gr_gid != os.getgid()
            and (os.geteuid() == 0 or g.gr_gid in os.getgroups())]
    group = (mine[0] if mine else grp.getgrgid(os.getgid())).gr_name
    config = mock_config(sock_dir, mock_cluster,
                         sidecar={"socket_mode": "0660", "socket_group": group})
    async with running_sidecar(config):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        assert os.stat(path).st_gid == grp.getgrnam(group).gr_gid
        with pytest.raises(StartupError, match="another sidecar is listening"):
            await Sidecar(config).serve()
        assert os.path.exists(path)  # the refused one left the live socket alone
    assert not os.path.exists(path)  # removed on exit


def test_client_without_a_sidecar_says_so(sock_dir):
    with pytest.raises(SidecarUnavailableError, match="databus up"):
        Client(os.path.join(sock_dir, "none.sock"), connect_timeout=1)


async def test_streams_go_to_their_own_clusters(sock_dir, mock_cluster):
    other = MockCluster()  # a second, independent three-broker cluster
    try:
        config = sidecar_config(
            sock_dir,
            clusters={"east": {"bootstrap.servers": mock_cluster.bootstrap},
                      "west": {"bootstrap.servers": other.bootstrap, "client.id": "west"}},
            streams={"e": {"cluster": "east", "topic": "mc-east"},
                     "w": {"cluster": "west", "topic": "mc-west", "acks": 1}},
        )

        def app(path):
            with Client(path) as client:
                futures = [client.send(s, b"%s-%d" % (s.encode(), i)) for i in range(5)
                           for s in ("e", "w")]
                return [f.result(30) for f in futures]

        async with running_sidecar(config) as sidecar:
            deliveries = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
            assert len(sidecar.pool.handles) == 2
        assert {d.topic for d in deliveries} == {"mc-east", "mc-west"}
        east = await trio.to_thread.run_sync(consume_all, mock_cluster.bootstrap, "mc-east", 5)
        west = await trio.to_thread.run_sync(consume_all, other.bootstrap, "mc-west", 5)
        assert sorted(v for *_, v, _ in east) == [b"e-%d" % i for i in range(5)]
        assert sorted(v for *_, v, _ in west) == [b"w-%d" % i for i in range(5)]
    finally:
        other.close()
