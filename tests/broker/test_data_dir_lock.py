"""One owner per data directory: a second ``databus broker`` on a live broker's directory
exits 1 with one line naming the directory and the owner's PID, and changes no byte there."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from databus.storage.dir_lock import DataDirInUseError, DirLock
from tests.helpers.broker import BrokerProcess

from .clients import Msg, confluent_produce


def _digest(directory) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_second_broker_on_a_live_data_dir_exits_1_and_changes_nothing(tmp_path):
    with BrokerProcess(tmp_path / "first", {"num.partitions": 1}) as broker:
        confluent_produce(broker.bootstrap, "t", [Msg(b"k", b"v")], acks="1")
        before = _digest(broker.data_dir)
        second = subprocess.run(
            [sys.executable, "-m", "databus.cli", "broker", "--data-dir", str(broker.data_dir),
             "--listen", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert second.stderr.splitlines() == [
            f"databus broker: data directory {broker.data_dir} is in use by process "
            f"{broker.pid} (it holds {broker.data_dir}/.lock)"
        ]
        assert _digest(broker.data_dir) == before
        assert broker.alive()


def test_lock_is_released_with_its_owner(tmp_path):
    lock = DirLock(tmp_path)
    with pytest.raises(DataDirInUseError, match="in use by process"):
        DirLock(tmp_path)
    lock.release()
    DirLock(tmp_path).release()  # a stale .lock file from a dead owner blocks nobody
