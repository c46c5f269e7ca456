"""The fault schedule is fixed by its seed (a verdict's seed replays the same faults)."""

from __future__ import annotations

import pytest

from databus.verify.nemesis import KINDS, schedule


def test_same_seed_same_schedule_other_seed_other():
    assert schedule(7, 120) == schedule(7, 120)
    assert schedule(7, 120) != schedule(8, 120)


def test_each_kind_once_first_and_all_within_the_run():
    faults = schedule(3, 120, KINDS, pause_seconds=8)
    assert sorted(f.kind for f in faults[: len(KINDS)]) == sorted(KINDS)
    assert all(f.start + f.length <= 120 for f in faults)
    assert all(b.start >= a.start + a.length for a, b in zip(faults, faults[1:]))
    assert all(f.length >= 8 for f in faults if f.kind == "pause")


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown fault 'flood'"):
        schedule(1, 60, ["kill", "flood"])


def test_a_late_restart_keeps_the_quiet_gap_before_the_next_fault():
    import time

    from databus.verify.nemesis import Fault, Nemesis

    class SlowBroker:  # a kill whose restart takes longer than the planned gap
        pid = 0
        port = 0

        def kill9(self):
            pass

        def start(self):
            time.sleep(0.3)

        def alive(self):
            return True

    events: list[tuple[float, str]] = []
    faults = [Fault(0.0, "kill", 0.0, 0.0), Fault(0.1, "kill", 0.0, 0.2)]
    nemesis = Nemesis(SlowBroker(), faults, lambda what, text: events.append(
        (time.monotonic(), what)))
    nemesis.start(time.monotonic())
    nemesis.join()                  # runs the whole schedule
    (_, _), (healed, _), (second, _), _ = events
    assert second - healed >= 0.2   # planned at 0.1 s, but the first healed at ~0.3 s


def test_disk_full_fills_a_small_filesystem_and_frees_it(tmp_path):
    """The disk-full fault's shell on a real 2 MiB tmpfs: after fill() a write fails with
    ENOSPC, after free_filler() it succeeds."""
    import errno
    import os

    from databus.verify.nemesis import fill, free_filler, mount_small_disk, unmount

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; this run is not root")
    disk = tmp_path / "disk"
    try:
        mount_small_disk(disk, "2m")
    except OSError as exc:
        pytest.skip(str(exc))  # e.g. a container without CAP_SYS_ADMIN
    try:
        assert fill(disk) > 1 << 20
        with pytest.raises(OSError) as refused:
            with open(disk / "data", "wb") as f:
                f.write(b"x" * 65536)
                f.flush()
                os.fsync(f.fileno())
        assert refused.value.errno == errno.ENOSPC
        free_filler(disk)
        (disk / "data").write_bytes(b"x" * 65536)
        assert (disk / "data").stat().st_size == 65536
    finally:
        unmount(disk)


def test_broker_only_faults_are_refused_for_the_pipeline(tmp_path):
    from .test_queue import verify

    code, out, _ = verify(tmp_path, "--workload", "pipeline", "--faults", "kill,disk-full")
    assert code == 2
    assert "disk-full and clock faults hit the queue workload's broker" in out
