"""``databus verify`` as a user runs it: the queue workload against the built-in broker under
the nemesis.  The correct setup (idempotent and transactional producers, read_committed
consumers) comes out valid under one fault of each kind; a deliberately broken one (acks=0
producers, a broker that hangs and is killed) is caught with examples — a checker that
cannot fail proves nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from databus.verify.nemesis import available_kinds, schedule


def verify(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[int, str, list[dict]]:
    history = tmp_path / "history.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "verify",
         "--data-dir", str(tmp_path / "run"), "--history", str(history), *args],
        capture_output=True, text=True, timeout=timeout,
    )
    ops = [json.loads(line) for line in history.read_text().splitlines()] if history.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, ops


@pytest.mark.slow
def test_correct_setup_under_every_fault_is_valid(tmp_path):
    # every kind that can run here: the partition fault needs root and iptables (`make
    # test` installs it as root, as CI runs)
    kinds = available_kinds()
    first = schedule(11, 1000, kinds, pause_seconds=7)[: len(kinds)]  # one of each kind
    seconds = first[-1].start + first[-1].length + 1
    # The one anomaly this checker found that is still open (docs/verification.md,
    # "Anomalies found"): a librdkafka group consumer once re-read a partition from 0 with
    # no reassignment, in about one run in three.  Every other class stays strict here.
    known_open = "nonmonotonic-poll"
    code, out, ops = verify(tmp_path, "--time", f"{seconds:.2f}", "--seed", "11",
                            "--faults", ",".join(kinds), "--pause-seconds", "7",
                            "--allow", known_open)
    assert code == 0, out
    assert "verdict: VALID (seed 11" in out
    faults = [op["fault"] for op in ops
              if op["f"] == "nemesis" and op["type"] == "ok" and op["fault"].startswith("end")]
    assert sorted(f.split()[1] for f in faults) == sorted(kinds), faults
    # the run did what it claims: committed and aborted transactions, both clients' sends,
    # reads by the group (both clients), the assign consumer and the drain
    sends = [op for op in ops if op["f"] == "send" and op["type"] != "invoke"]
    assert any(op.get("txn") and op["type"] == "ok" for op in sends)
    assert any(op.get("txn") and op["type"] == "fail" for op in sends)
    assert {op["process"] for op in sends if op["type"] == "ok"} >= {"idem0", "idem1", "txn0"}
    readers = {op["process"] for op in ops if op["f"] == "poll" and op["type"] == "ok"}
    assert readers >= {"group0", "group1", "assign0", "drain"}, readers
    events = [op["fault"] for op in ops if op["f"] == "nemesis" and op["type"] == "ok"]
    log = (tmp_path / "run" / "broker" / "broker.log").read_text()
    if "disk-full" in kinds:
        # the disk really filled, the broker restarted on it, refused writes with
        # KAFKA_STORAGE_ERROR meanwhile and took them again once the filler was freed
        assert "restarted: on the full disk" in events, events
        assert "(errno 28 ENOSPC" in log and "writes succeed again" in log, log[-3000:]
    if "clock" in kinds:
        assert {"restarted: wall clock +7200s", "restarted: wall clock -7200s"} <= set(events)
    assert "Traceback" not in log, log[-3000:]


def test_acks0_with_a_hung_and_killed_broker_reports_lost_writes(tmp_path):
    code, out, _ = verify(tmp_path, "--time", "8", "--seed", "3", "--faults", "hang-kill",
                          "--recover", "2", "--unsafe", "acks0")
    assert code == 1, out
    assert "verdict: INVALID (seed 3" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("lost-write"))
    assert "FOUND" in line, out
    assert "e.g. value idem" in out and "never read, reads reached" in out, out


def test_bootstrap_with_faults_is_refused(tmp_path):
    code, out, _ = verify(tmp_path, "--bootstrap", "127.0.0.1:1", "--faults", "kill")
    assert code == 2
    assert "no faults are injected" in out

