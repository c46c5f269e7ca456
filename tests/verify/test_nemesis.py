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
