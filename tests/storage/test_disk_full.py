"""Disk full on a real 2 MiB tmpfs: the append fails with a clear error, nothing half-written
is visible, and appends resume once space is freed."""

import os
import subprocess

import pytest

from databus.protocol.records import decode_batches
from databus.storage.config import LogConfig
from databus.storage.errors import KafkaStorageError, kafka_error_code
from databus.storage.log_manager import LogManager

from .conftest import batch


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a 2 MiB tmpfs needs root; this run is not root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_disk_full_append_fails_cleanly_and_resumes(small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (512 * 1024))
    lm = LogManager(small_disk / "data", LogConfig())
    lm.open()
    try:
        lm.create_topic("t", 1, {"index.interval.bytes": "100"})
        plog = lm.get_log("t", 0)
        acked = []
        value = os.urandom(1000)
        with pytest.raises(KafkaStorageError) as exc:
            for _i in range(10_000):
                info = plog.append(batch([value] * 16))
                acked.append(info.last_offset)
        assert "no space left on the device holding" in str(exc.value)
        assert str(small_disk / "data" / "t-0") in str(exc.value)
        assert kafka_error_code(exc.value) == 56
        assert acked and plog.log_end_offset == acked[-1] + 1
        seg = plog.active_segment
        assert os.path.getsize(seg.log_path) == seg.size, "the failed write was cut back"
        assert os.path.getsize(seg.index.path) == 8 * len(seg.index)
        data = plog.read(0, 1 << 30)
        got = [r.offset for _h, rs in decode_batches(data) for r in rs]
        assert got == list(range(plog.log_end_offset))
        with pytest.raises(KafkaStorageError):  # still full
            plog.append(batch([value] * 16))
        assert plog.log_end_offset == acked[-1] + 1
        filler.unlink()
        info = plog.append(batch([value] * 16))
        assert info.first_offset == acked[-1] + 1
        assert plog.flush() == plog.log_end_offset
        end = plog.log_end_offset
    finally:
        lm.close()
    lm2 = LogManager(small_disk / "data", LogConfig())
    try:
        assert lm2.open() == []
        plog = lm2.get_log("t", 0)
        assert plog.log_end_offset == end
        data = plog.read(0, 1 << 30)
        assert [r.offset for _h, rs in decode_batches(data) for r in rs] == list(range(end))
    finally:
        lm2.close()
