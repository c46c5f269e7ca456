import pytest

from .harness import MockCluster, short_tmpdir


@pytest.fixture(scope="session")
def mock_cluster():
    cluster = MockCluster()
    yield cluster
    cluster.close()


@pytest.fixture
def sock_dir():
    with short_tmpdir() as path:
        yield path
