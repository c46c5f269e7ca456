"""The sinks tests' broker: a ``databus broker`` subprocess per module, four partitions per
topic and no initial rebalance delay (tests use their own topic names)."""

from __future__ import annotations

import pytest

from tests.helpers.broker import BrokerProcess

from .harness import BROKER_OPTIONS


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker"), options=BROKER_OPTIONS) as running:
        yield running
