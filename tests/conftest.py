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



@pytest.fixture(scope="session")
def mock_cluster():
    """librdkafka's three-broker mock cluster (tests/helpers/mock_cluster.py), one per test
    session and worker; tests use their own topic names."""
    pytest.importorskip("confluent_kafka", reason="the mock cluster is librdkafka's")
    from tests.helpers.mock_cluster import MockCluster

    cluster = MockCluster()
    yield cluster
    cluster.close()

@pytest.fixture
def sock_dir():
    """A short directory for Unix sockets (a path is limited to ~107 bytes: tmp_path is
    too long), removed after the test."""
    from tests.sidecar.harness import short_tmpdir

    with short_tmpdir() as path:
        yield path


def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n`` (xdist, ``--dist loadgroup``) keep each module on one worker, so
    module-scoped fixtures (a broker subprocess) start once, and every Spark test on one
    worker, so the run builds one Spark session (a JVM) and not one per worker."""
    for item in items:
        module = item.nodeid.split("::")[0]
        group = "spark" if module.startswith("tests/spark/") else module
        item.add_marker(pytest.mark.xdist_group(group))
