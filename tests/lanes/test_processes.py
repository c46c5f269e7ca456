"""Swimlanes across processes: two `databus sidecar` processes sharing one registry, and
`databus lanes` run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio
import yaml

from databus.cli import main as databus
from databus.client import SyncAdmin, SyncProducer
from databus.lanes import model
from databus.lanes.registry import RegistryWriter, now_ms, read_registry
from databus.sdk import Client
from tests.helpers.wait import wait_for
from tests.sidecar.harness import consume_all

DEADLINE = 30.0


def registry(bootstrap, topic):
    return trio.run(read_registry, bootstrap, topic)


async def write_heartbeat(bootstrap, topic, lane):
    async with RegistryWriter(bootstrap, topic) as writer:
        await writer.put(model.consumer_key(lane, "dead"),
                         model.LaneConsumer(lane, "dead", now_ms(), 1000))


def test_two_sidecars_agree_on_the_registry_and_one_cleans_an_expired_lane_up(
        lane_broker, tmp_path, sock_dir):
    bootstrap, reg = lane_broker.bootstrap, "lanes-t4"
    processes, logs, sockets, configs = [], [], [], []
    try:
        for n in (1, 2):
            socket_path = os.path.join(sock_dir, f"s{n}.sock")
            config = tmp_path / f"s{n}.yaml"
            config.write_text(yaml.safe_dump({
                "sidecar": {"socket": socket_path, "metrics_listen": None},
                "clusters": {"main": {"bootstrap.servers": bootstrap}},
                "default_route": {"topic": "{stream}"},
                "lanes": {"registry.topic": reg, "expiry.check.ms": 100},
            }))
            log = tmp_path / f"s{n}.log"
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "databus.cli", "sidecar", "-c", str(config)],
                stdout=open(log, "wb"), stderr=subprocess.STDOUT))
            logs.append(log)
            sockets.append(socket_path)
            configs.append(config)
        for log in logs:
            wait_for(lambda log=log: "databus is up" in log.read_text(), f"{log.name} up",
                     timeout=DEADLINE)
        # the lane is made through the command, with the first sidecar's file
        assert databus(["lanes", "create", "x", "--ttl", "1h", "-c", str(configs[0])]) == 0
        for socket_path in sockets:  # both route it (each as soon as it has read it)
            with Client(socket_path) as client:
                wait_for(lambda c=client: c.send("t4", b"v", lane="x").result(30).topic
                         == "t4.lane.x", f"{socket_path} routes lane x", timeout=DEADLINE)
        # shortened to expire now: exactly one of the two sidecars cleans it up
        assert databus(["lanes", "extend", "x", "--ttl", "1ms", "-c", str(configs[0])]) == 0
        with SyncAdmin(bootstrap) as admin:
            wait_for(lambda: "t4.lane.x" not in admin.list_topics()
                     and "x" not in registry(bootstrap, reg).lanes, "lane x cleaned up",
                     timeout=DEADLINE)
    finally:
        for process in processes:
            process.terminate()
            process.wait(30)
    cleanups = [line for log in logs for line in log.read_text().splitlines()
                if "lane x expired" in line]
    assert len(cleanups) == 1, cleanups


def test_the_command_lists_lanes_and_merges_a_lane_into_main(lane_broker, tmp_path, capsys):
    bootstrap, reg = lane_broker.bootstrap, "lanes-t5"
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump({
        "clusters": {"main": {"bootstrap.servers": bootstrap}},
        "lanes": {"registry.topic": reg},
    }))
    c = ["-c", str(config)]
    assert databus(["lanes", "create", "m", "--ttl", "2h", "--partitions", "2", *c]) == 0
    assert databus(["lanes", "create", "m", *c]) == 1
    assert "lane 'm' exists" in capsys.readouterr().err
    with SyncProducer(bootstrap) as producer:
        for topic, value in (("t5", b"main"), ("t5.lane.m", b"l1"), ("t5.lane.m", b"l2")):
            producer.send(topic, value, headers=[("databus-lane", b"m")] if "lane" in topic
                          else None).result(30)
    assert databus(["lanes", "list", "--json", *c]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["lane"], row["live"], row["topics"]) == ("m", True, ["t5.lane.m"])
    trio.run(write_heartbeat, bootstrap, reg, "m")  # of a consumer that died (no tombstone)
    assert databus(["lanes", "delete", "m", "--merge", *c]) == 0
    assert "t5.lane.m" in capsys.readouterr().out
    merged = consume_all(bootstrap, "t5", 3)
    assert sorted(r[3] for r in merged) == [b"l1", b"l2", b"main"]
    assert [r[4] for r in merged if r[3] == b"l1"] == [[("databus-lane", b"m")]]
    with SyncAdmin(bootstrap) as admin:
        assert "t5.lane.m" not in admin.list_topics()
    assert registry(bootstrap, reg).lanes == {}
    assert registry(bootstrap, reg).consumers == {}  # its heartbeat went with the lane
    assert databus(["lanes", "delete", "m", *c]) == 1
    assert "no lane 'm'" in capsys.readouterr().err
    # bad usage is exit 2, named
    assert databus(["lanes", "create", "a.b", *c]) == 2
    assert "invalid lane name 'a.b'" in capsys.readouterr().err
    assert databus(["lanes", "create", "ok", "--ttl", "2 hours", *c]) == 2
    assert "'2 hours' is not a duration" in capsys.readouterr().err


# `databus sidecar` in an interpreter where pyarrow cannot be imported (the parquet extra
# not installed), as the user who hit the refused reload had.
WITHOUT_PYARROW = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'pyarrow' or name.startswith('pyarrow.'): raise ImportError('blocked')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from databus.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_lanes_turned_on_by_reload_a_refused_reload_acts_not_and_metrics_follow(
        lane_broker, tmp_path, sock_dir):
    """A reload refused (a parquet sink without pyarrow) changes nothing: the lanes it would
    have turned on create no registry topic.  A valid reload turning lanes on routes them
    and /metrics has the lane series at once, without a restart."""
    import re
    import signal
    import time
    import urllib.request
    import uuid

    registry_topic = f"reg-{uuid.uuid4().hex[:8]}"
    sock = os.path.join(sock_dir, "reload-lanes.sock")
    base = {"sidecar": {"socket": sock, "metrics_listen": "127.0.0.1:0", "reload_poll_ms": 0},
            "clusters": {"main": {"bootstrap.servers": lane_broker.bootstrap}},
            "streams": {"reload-lanes": {"topic": "reload-lanes"}}}
    config, log_path = tmp_path / "sidecar.yaml", tmp_path / "sidecar.log"
    config.write_text(yaml.safe_dump(base))
    lanes = {"registry.topic": registry_topic}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-c", WITHOUT_PYARROW, "sidecar", "-c",
                                    str(config)], stdout=log, stderr=subprocess.STDOUT,
                                   cwd=tmp_path)

    def logged(text):
        def look():
            assert process.poll() is None, log_path.read_text()
            return text in log_path.read_text()
        wait_for(look, text, DEADLINE, log=log_path.read_text)

    def metrics() -> str:
        url = re.search(r"http://(\S+?)/metrics", log_path.read_text()).group(0)
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    try:
        logged("databus is up")
        assert "databus_sidecar_lane" not in metrics()
        config.write_text(yaml.safe_dump({**base, "lanes": lanes, "sinks": {"export": {
            "plugin": "parquet", "topics": ["t"], "config": {"path": str(tmp_path / "out")}}}}))
        process.send_signal(signal.SIGHUP)
        logged("config rejected")
        # Nothing to wait for when nothing happens: the refused lanes would have created
        # their registry topic within a second (its follower starts at once); look for 3 s.
        with SyncAdmin(lane_broker.bootstrap) as admin:
            for _ in range(15):
                assert registry_topic not in admin.list_topics()
                time.sleep(0.2)
        assert "databus_sidecar_lane" not in metrics()

        config.write_text(yaml.safe_dump({**base, "lanes": lanes}))
        process.send_signal(signal.SIGHUP)
        logged("reload applied")
        with Client(sock) as client:
            client.send("reload-lanes", b"x", lane="nobody").result(DEADLINE)
        text = metrics()
        assert ('databus_sidecar_lane_messages_total{lane="nobody",outcome="fallback",'
                'stream="reload-lanes"} 1.0') in text, text
        assert "databus_sidecar_lanes_live 0.0" in text
        with SyncAdmin(lane_broker.bootstrap) as admin:
            wait_for(lambda: registry_topic in admin.list_topics(), "the registry topic",
                     DEADLINE)
    finally:
        process.terminate()
        process.wait(30)


def test_the_docs_lane_consumer_example_runs_as_printed_under_asyncio(tmp_path):
    """docs/lanes.md's LaneConsumer block, run as printed (asyncio.run) in a fresh
    interpreter, with only its 127.0.0.1:9092 -> a fresh broker's address: it reads the
    lane's message and the main topic's (lane.consume.main)."""
    import re
    from pathlib import Path

    from tests.helpers.broker import BrokerProcess

    doc = (Path(__file__).resolve().parents[2] / "docs" / "lanes.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, flags=re.S)
                if "LaneConsumer(" in b]
    assert "asyncio.run(main())" in block
    with BrokerProcess(tmp_path / "broker",
                       options={"group.initial.rebalance.delay.ms": 0}) as broker:
        bootstrap = broker.bootstrap
        assert databus(["lanes", "create", "feature-x", "--bootstrap-server", bootstrap]) == 0
        with SyncProducer(bootstrap) as producer:
            producer.send("orders", b"main").result(30)
            producer.send("orders.lane.feature-x", b"lane",
                          headers=[("databus-lane", b"feature-x")]).result(30)
        code = block.replace("127.0.0.1:9092", bootstrap)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        printed = set(done.stdout.splitlines())
        assert printed <= {"orders b'main'", "orders.lane.feature-x b'lane'"}, done.stdout
        assert printed, done.stdout
