import pytest


@pytest.fixture(scope="package")
def lane_broker(tmp_path_factory):
    """A broker subprocess whose groups form at once (lane and main consumers join
    several groups per test)."""
    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("broker"),
                       options={"group.initial.rebalance.delay.ms": 0}) as running:
        yield running
