"""Helpers for the storage tests: batches built with the real RecordBatch v2 encoder."""

from __future__ import annotations

import pytest

from databus.protocol.records import build_batch
from databus.storage.config import LogConfig
from databus.storage.log_manager import LogManager
from databus.storage.partition_log import PartitionLog


def batch(values=(b"v",), *, key=None, ts=1_000, **kwargs) -> bytes:
    """One batch of records with the given values (keys all ``key``), timestamps ts, ts+1..."""
    return build_batch([(key, v, (), ts + i) for i, v in enumerate(values)], **kwargs)


def keyed(pairs, *, ts=1_000, **kwargs) -> bytes:
    return build_batch([(k, v, (), ts + i) for i, (k, v) in enumerate(pairs)], **kwargs)


class Clock:
    """A settable clock in seconds (LogManager/PartitionLog take ``clock=``)."""

    def __init__(self, ms: int = 1_700_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def open_log(tmp_path, clock):
    """open_log(**config) -> PartitionLog in tmp_path/t-0; reopen with the same call."""
    opened = []

    def _open(clean=True, recovery_point=0, **config):
        plog, _actions = PartitionLog.open(
            str(tmp_path / "t-0"), "t", 0, LogConfig(**config), clean=clean,
            recovery_point=recovery_point, clock=clock)
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        plog.delete()


@pytest.fixture
def manager(tmp_path, clock):
    managers = []

    def _make(default=None, **kwargs):
        lm = LogManager(tmp_path / "data", default or LogConfig(), clock=clock, **kwargs)
        managers.append(lm)
        return lm

    yield _make
    for lm in managers:
        for plog in lm.logs():
            plog.delete()
