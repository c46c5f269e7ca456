"""`databus up` runs the mirrors of its config; hot reload adds and removes them without
touching the ingress."""

from __future__ import annotations

import trio

from databus.broker.process import BrokerProcess
from databus.config import parse_config
from databus.sdk import Client
from databus.up.host import MirrorsCompanion, companion
from tests.sidecar.harness import running_sidecar

from .harness import produce, read_all


def config(tmp_path, a, b, mirrors):
    return parse_config({
        "sidecar": {"socket": str(tmp_path / "s.sock"), "metrics_listen": "127.0.0.1:0"},
        "clusters": {"A": {"bootstrap.servers": a.bootstrap},
                     "B": {"bootstrap.servers": b.bootstrap}},
        "streams": {"clicks": {"cluster": "A", "topic": "clicks"}},
        "mirrors": mirrors,
    })


async def test_reload_adds_and_removes_a_mirror_beside_the_ingress(tmp_path):
    with BrokerProcess(tmp_path / "a") as a, BrokerProcess(tmp_path / "b") as b:
        await trio.to_thread.run_sync(
            produce, a.bootstrap, "clicks", [(b"k", b"before", [], None, None)])
        async with running_sidecar(config(tmp_path, a, b, [])) as sidecar:
            assert companion(sidecar, MirrorsCompanion).running == []
            mirror = {"name": "a2b", "source": "A", "target": "B", "topics": ["clicks"],
                      "consumer": {"metadata.max.age.ms": 1000}}
            assert await sidecar.apply(config(tmp_path, a, b, [mirror]))
            assert companion(sidecar, MirrorsCompanion).running == ["a2b"]

            def app():  # an app sends through the sidecar while the mirror runs
                with Client(sidecar.addresses.socket) as client:
                    client.send("clicks", b"through-the-sidecar")
                    client.flush(30)

            await trio.to_thread.run_sync(app)
            got = await trio.to_thread.run_sync(read_all, b.bootstrap, "A.clicks", 2)
            assert sorted(m.value() for ms in got.values() for m in ms) == [
                b"before", b"through-the-sidecar"]
            assert b"databus_mirror_records_total" in sidecar.metrics.render()
            assert await sidecar.apply(config(tmp_path, a, b, []))
            assert companion(sidecar, MirrorsCompanion).running == []
