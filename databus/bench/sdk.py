"""``databus bench sdk``: the Python SDK's own cost per message, without a real sidecar.

A stand-in sidecar in a child process answers every produce frame at once (one group report
per frame, as the real sidecar answers a batch, or one report per message as protocol
version 1 does), so what is measured in this process is ``databus.Client`` alone: ``send``
in a loop, packing frames, reading reports, resolving futures.  The figure that matters is
CPU µs per message in this process (the app's side of the SDK → sidecar path).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per message")
    parser.add_argument("--rounds", type=int, default=3, help="runs per case; the best is shown")
    # Internal: how this command runs its stand-in sidecar in a child process.
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--reports", default="group", help=argparse.SUPPRESS)


def serve(path: str, reports: str) -> None:
    """The stand-in sidecar: answers as fast as it reads."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    while True:  # one connection at a time, each numbered from offset 0
        conn, _ = listener.accept()
        with conn:
            _answer(conn, reports)


def _answer(conn: socket.socket, reports: str) -> None:
    from databus.protocol import sidecar_wire as wire

    decoder = wire.FrameDecoder()
    offset = 0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            return
        out = []
        for frame in decoder.feed(data):
            kind = frame["type"]
            if kind == "hello":
                out.append(wire.hello_reply("bench", wire.DEFAULT_MAX_FRAME_BYTES, 60000,
                                            frame["version"]))
            elif kind == "produce":
                ids = [m[0] for m in frame["messages"]]
                item = wire.report_group_ok(ids, "t", 0, offset, 1_700_000_000_000)
                offset += len(ids)
                items = [item] if reports == "group" else wire.expand_report(item)
                out.append(wire.reports(items))
            elif kind == "flush":
                out.append(wire.flushed(frame["id"]))
        conn.sendall(b"".join(wire.encode_frame(f) for f in out))


def measure(path: str, messages: int, size: int, keep: bool) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) to send ``messages`` and have every one
    answered; ``keep``: the app keeps every future (as a list) instead of dropping them."""
    from databus import Client

    value = b"x" * size
    with Client(path) as client:
        client.send("t", b"warm-up").result(30)
        send = client.send
        cpu, start = time.process_time(), time.perf_counter()
        if keep:
            futures = [send("t", value) for _ in range(messages)]
        else:
            for _ in range(messages):
                send("t", value)
        client.flush(300)
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        stats = client.statistics()
        assert stats.delivered == messages + 1 and stats.pending_reports == 0, stats
        if keep:
            assert futures[-1].result().offset == messages  # the warm-up took offset 0
    return elapsed, used


def run(args) -> int:
    if args.serve:
        serve(args.serve, args.reports)
        return 0
    from databus.cli_helpers.table import Column, print_table

    rows = []
    with tempfile.TemporaryDirectory(prefix="databus-bench-sdk-") as root:
        for reports in ("group", "per-message"):
            path = os.path.join(root, f"{reports}.sock")
            server = subprocess.Popen([sys.executable, "-m", "databus.cli", "bench", "sdk",
                                       "--serve", path, "--reports", reports])
            try:
                deadline = time.monotonic() + 30
                while not os.path.exists(path):
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the stand-in sidecar did not start")
                    time.sleep(0.02)
                for keep in (False, True):
                    elapsed, used = min(
                        (measure(path, args.messages, args.size, keep)
                         for _ in range(args.rounds)),
                        key=lambda run: run[1],
                    )
                    rows.append((reports, "yes" if keep else "no",
                                 f"{args.messages / elapsed:,.0f}",
                                 f"{used * 1e6 / args.messages:.2f}"))
            finally:
                server.kill()
                server.wait()
    print_table(
        [Column("reports"), *(Column(header, justify="right")
                              for header in ("app keeps futures", "msgs/s", "SDK CPU µs/msg"))],
        rows, title=f"SDK cost: {args.messages:,} sends of {args.size}-byte values against a "
                    f"stand-in sidecar (best of {args.rounds})",
    )
    return 0
