"""kill -9 a process appending with durable acks, 22 times; after each restart every acked
batch is readable and byte-identical, the log's offsets have no gaps, and the idempotent
producer state rebuilt from the log recognises the child's last batches as duplicates."""

import random
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from databus.protocol.records import (
    HEADER_SIZE,
    build_batch,
    iter_headers,
    parse_header,
    validate_batch,
)
from databus.storage.config import LogConfig
from databus.storage.errors import OutOfOrderSequenceError
from databus.storage.log_manager import LogManager

ROOT = Path(__file__).resolve().parents[2]
CYCLES = 22


def run_child(data_dir, seed, lifetime_s, after_first_ack):
    """Start the child and kill -9 it lifetime_s after it started (possibly while it is
    still recovering), or with ``after_first_ack`` lifetime_s after its first ack; returns
    every complete ack line it printed (a line cut by the kill was never delivered)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_child", str(data_dir), str(seed)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []
    first_ack = threading.Event()

    def read():
        for line in proc.stdout:
            if line.endswith(b"\n"):
                lines.append(line)
                first_ack.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        if after_first_ack:
            first_ack.wait(timeout=60)
        time.sleep(lifetime_s)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join()
        stderr = proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"child died on its own:\n{stderr}"
    return lines


def check_producer_state(plog, stored, producer_id):
    """The child's last (up to 5) batches in the log are duplicates; the next sequence is
    accepted; a gap is refused."""
    mine = []
    for base, (_last, raw) in sorted(stored.items()):
        h = parse_header(struct.pack(">q", base) + raw[:HEADER_SIZE - 8])
        if h.producer_id == producer_id:
            mine.append((base, h, struct.pack(">q", base) + raw))
    if not mine:
        return False
    for base, h, full in mine[-5:]:
        dup = plog.check_producer(full)
        assert dup is not None and (dup.first_offset, dup.last_offset) == (base, h.last_offset)
    _base, h, _full = mine[-1]
    following = build_batch([(None, b"x", (), 0)], producer_id=producer_id, producer_epoch=0,
                            base_sequence=h.last_sequence + 1)
    assert plog.check_producer(following) is None
    gap = build_batch([(None, b"x", (), 0)], producer_id=producer_id, producer_epoch=0,
                      base_sequence=h.last_sequence + 2)
    with pytest.raises(OutOfOrderSequenceError):
        plog.check_producer(gap)
    return True


def test_kill_minus_nine_loses_no_acked_batch(tmp_path):
    rng = random.Random(2024)
    data_dir = tmp_path / "data"
    acked: dict[int, tuple[int, bytes]] = {}
    kills_with_acks = 0
    producer_checks = 0
    for cycle in range(CYCLES):
        lines = run_child(data_dir, cycle, rng.uniform(0.0, 0.4), after_first_ack=cycle % 2 == 0)
        kills_with_acks += bool(lines)
        for line in lines:
            base, last, raw = line.split()
            acked[int(base)] = (int(last), bytes.fromhex(raw.decode()))
        lm = LogManager(data_dir, LogConfig())
        lm.open()
        try:
            plog = lm.get_log("crash", 0)
            if plog is None:  # killed before it created the topic
                assert not acked
                continue
            data = plog.read(0, 1 << 30)
            expected_next = 0
            stored = {}
            for pos, h in iter_headers(data):
                validate_batch(data, pos)
                assert h.base_offset == expected_next, f"offset gap before {h.base_offset}"
                expected_next = h.last_offset + 1
                stored[h.base_offset] = (h.last_offset, data[pos + 8: pos + h.size])
            while expected_next < plog.log_end_offset:  # read() stops at a segment's end
                data = plog.read(expected_next, 1 << 30)
                for pos, h in iter_headers(data):
                    validate_batch(data, pos)
                    assert h.base_offset == expected_next, f"offset gap before {h.base_offset}"
                    expected_next = h.last_offset + 1
                    stored[h.base_offset] = (h.last_offset, data[pos + 8: pos + h.size])
            assert expected_next == plog.log_end_offset
            for base, (last, raw) in acked.items():
                assert stored.get(base) == (last, raw), f"acked batch at {base} lost or changed"
            producer_checks += check_producer_state(plog, stored, producer_id=cycle + 1)
        finally:
            if cycle % 2:
                lm.close()
            else:  # leave it unclean for the next child too
                for plog in lm.logs():
                    plog.delete()
    assert kills_with_acks >= CYCLES // 2, "every other child is killed after acking"
    assert len(acked) > 100
    assert producer_checks >= CYCLES // 2
