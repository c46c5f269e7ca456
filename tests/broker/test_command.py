"""``databus broker``: options, errors at start, the ready file, clean shutdown on SIGTERM
or when its launcher goes away."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from databus.broker.config import BrokerConfig, BrokerConfigError
from tests.helpers.broker import BrokerProcess
from tests.helpers.ports import taken_port

from .clients import Msg, confluent_consume, confluent_produce


def test_options_use_kafka_names_and_defaults():
    config = BrokerConfig.from_options(["num.partitions=3", "auto.create.topics.enable=false",
                                        "log.segment.bytes=1048576", "node.id=7"],
                                       log_dir="/data")
    assert (config.num_partitions, config.auto_create_topics_enable) == (3, False)
    assert (config.log_segment_bytes, config.node_id, config.log_dir) == (1048576, 7, "/data")
    defaults = BrokerConfig()
    assert defaults.socket_request_max_bytes == 100 * 1024 * 1024
    assert defaults.message_max_bytes == 1048588
    assert defaults.num_partitions == 1 and defaults.auto_create_topics_enable is True
    assert config.topic_defaults()["segment.bytes"] == "1048576"


@pytest.mark.parametrize(("option", "message"), [
    ("nonsense.key=1", "unknown broker option 'nonsense.key'"),
    ("num.partitions=many", "num.partitions='many'"),
    ("num.partitions=0", "num.partitions='0'"),
    ("log.cleanup.policy=shred", "log.cleanup.policy='shred'"),
    ("no-equals-sign", "is not key=value"),
    ("listeners=::1:9092", ("listeners='::1:9092': Value error, listeners must be HOST:PORT, "
                            "got '::1:9092': an IPv6 address needs brackets")),
    ("advertised.listeners=bus:0", "advertised.listeners must be HOST:PORT, got 'bus:0': port 0"),
    ("advertised.listeners=:9092", "advertised.listeners must be HOST:PORT, got ':9092': no host"),
])
def test_bad_options_are_named(option, message):
    with pytest.raises(BrokerConfigError, match=message.replace("(", r"\(")):
        BrokerConfig.from_options([option])


@pytest.mark.parametrize(("listeners", "address"), [
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("PLAINTEXT://:9092", ("", 9092)),  # every interface, as in Kafka
    ("PLAINTEXT://[::1]:9092,SSL://h:9093", ("::1", 9092)),  # the first listener is served
])
def test_listen_address_is_the_first_listener(listeners, address):
    assert BrokerConfig.from_options([f"listeners={listeners}"]).listen_address == address


def test_bad_option_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "databus.cli", "broker", "--data-dir", str(tmp_path),
         "--listen", "127.0.0.1:0", "-o", "num.partitions=lots"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "num.partitions" in lines[0] and "Traceback" not in result.stderr


def test_sigterm_is_a_clean_shutdown_and_data_survives(tmp_path):
    broker = BrokerProcess(tmp_path, {"num.partitions": 2})
    with broker:
        confluent_produce(broker.bootstrap, "kept", [Msg(b"k", b"v%d" % i) for i in range(50)],
                          acks="1")
        assert broker.stop() == 0
        assert (broker.data_dir / ".kafka_cleanshutdown").exists()
        assert "broker stopped cleanly" in broker.log_text()
        broker.start()
        assert "no clean-shutdown marker" not in broker.log_text()
        got = confluent_consume(broker.bootstrap, "kept", 50, (0, 1))
        assert sorted(g.value for g in got) == sorted(b"v%d" % i for i in range(50))


def test_advertised_listener_is_what_metadata_reports(tmp_path):
    from .test_api_versions import metadata
    from .wire import WireClient

    with BrokerProcess(tmp_path, {"advertised.listeners": "bus.example:19092",
                                  "node.id": 5}) as broker, \
            WireClient(broker.bootstrap) as client:
        response = metadata(client, [])
        (node,) = response.brokers
        assert (node.node_id, node.host, node.port) == (5, "bus.example", 19092)
        assert response.controller_id == 5


def run_broker(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "databus.cli", "broker", *args],
        capture_output=True, text=True, timeout=60, check=False, **kw,
    )


def test_port_in_use_is_one_line_exit_1_and_nothing_written(tmp_path):
    taken, port = taken_port()
    data = tmp_path / "data"
    try:
        result = run_broker("--data-dir", str(data), "--listen", f"127.0.0.1:{port}")
    finally:
        taken.close()
    assert result.returncode == 1
    assert result.stderr == (
        f"databus broker: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )
    assert not data.exists()  # no __consumer_offsets made before the port was known taken


def test_data_dir_that_cannot_be_created_is_one_line_exit_1(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = run_broker("--data-dir", str(tmp_path / "a-file" / "data"),
                        "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr == (
        f"databus broker: cannot create data directory {tmp_path}/a-file/data: "
        "not a directory\n"
    )


def test_ready_file_takes_the_start_up_error_instead_of_stderr(tmp_path):
    (tmp_path / "a-file").write_text("")
    ready = tmp_path / "ready.json"
    result = run_broker("--data-dir", str(tmp_path / "a-file" / "data"),
                        "--listen", "127.0.0.1:0", "--ready-file", str(ready))
    assert (result.returncode, result.stderr) == (1, "")  # the launcher reports it, once
    assert json.loads(ready.read_text()) == {
        "error": f"cannot create data directory {tmp_path}/a-file/data: not a directory"
    }


def test_ready_file_announces_the_bound_address_and_goes_at_shutdown(tmp_path):
    with BrokerProcess(tmp_path) as broker:
        announced = json.loads((tmp_path / "broker.ready").read_text())
        assert announced == {"host": "127.0.0.1", "port": broker.port, "pid": broker.pid,
                             "listeners": {"PLAINTEXT": broker.port}}
        assert broker.port != 0
        assert broker.stop() == 0
        assert not (tmp_path / "broker.ready").exists()


def test_lifeline_end_of_file_is_a_clean_shutdown(tmp_path):
    """The launcher's end of the --lifeline-fd pipe closing (it exited, or was killed -9)
    stops the broker as SIGTERM does."""
    ready = tmp_path / "ready.json"
    child_end, launcher_end = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "databus.cli", "broker", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--ready-file", str(ready),
         "--lifeline-fd", str(child_end)],
        stderr=subprocess.PIPE, text=True, pass_fds=(child_end,),
    )
    os.close(child_end)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        os.close(launcher_end)
        launcher_end = -1
        assert process.wait(60) == 0
        log = process.stderr.read()
        assert "the process that started the broker is gone: shutting down" in log
        assert "broker stopped cleanly" in log
        assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
    finally:
        if launcher_end >= 0:
            os.close(launcher_end)
        if process.poll() is None:
            process.kill()
            process.wait()
