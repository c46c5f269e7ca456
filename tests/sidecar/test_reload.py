"""Hot reload under load: a changed file (and SIGHUP) applies without losing a message or a
connection; an invalid file is rejected and the old config keeps serving."""

from __future__ import annotations

import os
import signal
import threading

import trio
import yaml

from databus import Client
from databus.config import load_config
from tests.helpers.wait import wait_until

from .harness import running_sidecar


def write_config(
    path: str, sock_dir: str, bootstrap: str, topic: str, linger: int | str, poll_ms: int = 50
) -> None:
    data = {
        "sidecar": {
            "socket": os.path.join(sock_dir, "s.sock"),
            "metrics_listen": None,
            "reload_poll_ms": poll_ms,
        },
        "clusters": {"mock": {"bootstrap.servers": bootstrap}},
        "streams": {"events": {"topic": topic, "linger.ms": linger}},
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(data, f)
    os.replace(tmp, path)  # as editors do: a new inode, seen by the watcher


# How long a step of the reload test may take (the app sends all the while).
STEP = 20.0


async def test_reload_under_load_then_invalid_file(sock_dir, mock_cluster):
    path = os.path.join(sock_dir, "sidecar.yaml")
    write_config(path, sock_dir, mock_cluster.bootstrap, "reload-a", 0)
    config = load_config(path)
    keys = [b"k%d" % i for i in range(16)]
    futures = []
    stop = threading.Event()
    phase = {"n": 0}

    def app(socket_path):
        with Client(socket_path) as client:
            while not stop.is_set():
                for key in keys:
                    futures.append((phase["n"], key, client.send("events", b"v", key=key)))
                client.flush(30)
            client.flush(30)

    async with running_sidecar(config, config_path=path) as sidecar:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, app, sidecar.addresses.socket)
            try:
                await wait_until(lambda: len(futures) > 500, "500 sends", timeout=STEP)

                phase["n"] = 1
                # From this config on the file is not watched: later reloads are SIGHUP's.
                write_config(path, sock_dir, mock_cluster.bootstrap, "reload-b", 20, poll_ms=0)
                await wait_until(lambda: sidecar.metrics.reloads_ok == 1, "the file's reload",
                                 timeout=STEP)
                route = sidecar.table.routes["events"]
                assert route.topic == "reload-b"
                assert route.handle.settings["linger.ms"] == 20
                sent_at_reload = len(futures)
                await wait_until(lambda: len(futures) > sent_at_reload + 500,
                                 "500 sends after the reload", timeout=STEP)

                phase["n"] = 2
                write_config(path, sock_dir, mock_cluster.bootstrap, "reload-c", "-5")
                os.kill(os.getpid(), signal.SIGHUP)  # the watcher's receiver runs by now
                await wait_until(lambda: sidecar.metrics.reloads_failed == 1,
                                 "the invalid file's rejection", timeout=STEP)
                assert sidecar.table.routes["events"].topic == "reload-b"  # old config kept
                sent_at_reject = len(futures)
                await wait_until(lambda: len(futures) > sent_at_reject + 500,
                                 "500 sends after the rejection", timeout=STEP)

                phase["n"] = 3
                write_config(path, sock_dir, mock_cluster.bootstrap, "reload-d", 5, poll_ms=0)
                os.kill(os.getpid(), signal.SIGHUP)
                await wait_until(lambda: sidecar.table.routes["events"].topic == "reload-d",
                                 "the SIGHUP reload", timeout=STEP)
                sent_at_hup = len(futures)
                await wait_until(lambda: len(futures) > sent_at_hup + 200,
                                 "200 sends after the SIGHUP", timeout=STEP)
            finally:
                stop.set()  # the app thread must end even if an assertion failed

    results = [(ph, key, f.result(0)) for ph, key, f in futures]  # none failed, none lost
    topics_by_phase = {}
    for ph, _, d in results:
        topics_by_phase.setdefault(ph, set()).add(d.topic)
    assert topics_by_phase[0] == {"reload-a"}
    assert topics_by_phase[2] == {"reload-b"}
    assert "reload-d" in topics_by_phase[3]
    # Per-key order: within each topic, a key's offsets grow in send order.
    last: dict[tuple[str, bytes], int] = {}
    for _, key, d in results:
        assert d.offset > last.get((d.topic, key), -1)
        last[(d.topic, key)] = d.offset
