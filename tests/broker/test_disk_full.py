"""A data directory that fills up while producing: one ERROR naming the directory and the
errno when writes start failing, KAFKA_STORAGE_ERROR to producers meanwhile, one INFO when
they succeed again; counted in the broker's storage health (metrics).  The directory is a
4 MiB tmpfs mounted for the test (root only: skipped, with the reason, elsewhere)."""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest

from databus.protocol.errors import ErrorCode
from databus.protocol.records import build_batch
from tests.helpers.broker import BrokerProcess

from .test_api_versions import create_topic, produce
from .wire import WireClient


@pytest.fixture
def small_disk(tmp_path):
    data = tmp_path / "broker" / "data"
    data.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(data)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs to fill (needs root and CAP_SYS_ADMIN): "
                    + mounted.stderr.strip())
    try:
        yield data
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def batch(i: int) -> bytes:
    return build_batch([(None, bytes([i % 251]) * 100_000, (), 1_700_000_000_000)])


def test_disk_full_is_one_error_then_one_info(small_disk):
    with BrokerProcess(small_disk.parent, args=("--metrics-listen", "127.0.0.1:0")) as broker:
        port = int(re.search(r"metrics on http://127.0.0.1:(\d+)/metrics",
                             broker.log_text()).group(1))
        with WireClient(broker.bootstrap) as client:
            create_topic(client, "full")
            filler = small_disk / "filler"
            with open(filler, "wb") as f:  # leave room for a few batches only
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            filler.write_bytes(filler.read_bytes()[: -300_000])
            codes = []
            for i in range(12):
                part = produce(client, "full", batch(i)).responses[0].partition_responses[0]
                codes.append(part.error_code)
            assert ErrorCode.none in codes
            assert codes[-5:] == [ErrorCode.kafka_storage_error] * 5
            failing = scrape(port)
            assert "databus_broker_storage_failing 1" in failing
            assert "databus_broker_storage_failure_episodes_total 1" in failing
            filler.unlink()  # room again
            part = produce(client, "full", batch(99)).responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.none
        assert "databus_broker_storage_failing 0" in scrape(port)
        log = broker.log_text()
        errors = [line for line in log.splitlines() if " ERROR " in line]
        assert len(errors) == 1, log[-3000:]
        assert f"{small_disk}: writes are failing (errno 28 ENOSPC" in errors[0]
        assert log.count("writes succeed again") == 1
        assert "Traceback" not in log
