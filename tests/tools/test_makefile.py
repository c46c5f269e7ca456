"""The Makefile's `browser` step, run by make with a stand-in apt-get.

`make test` runs `browser` first; on a shared machine another apt often holds the dpkg lock
for a while.  The step must wait for the lock (apt's DPkg::Lock::Timeout) and retry, and a
lock still held after the retries must not fail the whole run (tests/console then skip,
saying chromium is missing).  The stand-in apt-get prints apt's own lock message and fails
until its N-th call, recording every call's arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_APT = """#!/bin/sh
echo "$@" >> {calls}
n=$(wc -l < {calls})
if [ "$n" -lt {succeed_from} ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
exit 0
"""


def run_browser_step(tmp_path: Path, succeed_from: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    calls.touch()
    fake = tmp_path / "apt-get"
    fake.write_text(FAKE_APT.format(calls=calls, succeed_from=succeed_from))
    fake.chmod(0o755)
    result = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "browser", f"CHROMIUM_BINS={tmp_path}/no-chromium",
         f"APT_GET={fake}", "APT_RETRY_PAUSE=0"],
        capture_output=True, text=True, timeout=60, check=False, env=os.environ)
    return result, calls.read_text().splitlines()


@pytest.fixture(autouse=True)
def _as_root():
    if os.getuid() != 0:
        pytest.skip("the browser step installs chromium only as root (else it prints how to)")


def test_browser_step_waits_for_the_dpkg_lock_and_retries(tmp_path):
    # Fails twice (update, then update again), then update and install succeed.
    result, calls = run_browser_step(tmp_path, succeed_from=3)
    assert result.returncode == 0, result.stderr
    assert calls[0].startswith("-o DPkg::Lock::Timeout=600 ")
    assert all("DPkg::Lock::Timeout=600" in call for call in calls)
    assert [c.split()[-1] for c in calls if "update" in c.split()] == ["update"] * 3
    assert any(c.split()[-2:] == ["chromium", "chromium-driver"] for c in calls[3:])


def test_browser_step_never_fails_the_run_on_a_lock_held_throughout(tmp_path):
    result, calls = run_browser_step(tmp_path, succeed_from=1000)
    assert result.returncode == 0, result.stderr
    assert len(calls) >= 3
    assert "could not install chromium" in result.stdout + result.stderr
