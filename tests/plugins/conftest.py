"""Fixtures for plugin tests: the example third-party plugin installed into the venv, and the
sidecar harness shared with tests/sidecar."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

# The sidecar harness's fixtures, shared rather than written again.
from tests.sidecar.conftest import mock_cluster, sock_dir  # noqa: F401

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "databus-example-plugin"


def _installed_is_current() -> bool:
    try:
        dist = importlib.metadata.distribution("databus-example-plugin")
    except importlib.metadata.PackageNotFoundError:
        return False
    installed = dist.locate_file("databus_example_plugin.py")
    source = EXAMPLE / "databus_example_plugin.py"
    return Path(installed).exists() and Path(installed).read_bytes() == source.read_bytes()


@pytest.fixture(scope="session")
def example_plugin():
    """Install docs/examples/databus-example-plugin like a user would (pip), once."""
    if not _installed_is_current():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", str(EXAMPLE)],
            check=True,
        )
        importlib.invalidate_caches()
    return importlib.import_module("databus_example_plugin")
