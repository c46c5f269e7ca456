"""Shared test fixtures.  Per-area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A running ``databus broker`` subprocess (tests/helpers/broker.py), one per module.

    Tests sharing it must use their own topic names.  Tests that kill, restart or configure
    a broker create their own BrokerProcess instead.
    """
    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("broker")) as running:
        yield running
