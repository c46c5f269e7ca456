"""Fixtures for plugin tests: the example third-party plugin installed into the venv (the
mock cluster and ``sock_dir`` are tests/conftest.py's, as for tests/sidecar)."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def _installed_is_current(distribution: str, module: str, source: Path) -> bool:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    installed = dist.locate_file(f"{module}.py")
    source = source / f"{module}.py"
    return Path(installed).exists() and Path(installed).read_bytes() == source.read_bytes()


def install_example(distribution: str, module: str):
    """Install docs/examples/DISTRIBUTION like a user would (pip) unless it is current;
    returns its module."""
    source = EXAMPLES / distribution
    if not _installed_is_current(distribution, module, source):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", str(source)],
            check=True,
        )
        importlib.invalidate_caches()
    return importlib.import_module(module)


@pytest.fixture(scope="session")
def example_plugin():
    """docs/examples/databus-example-plugin, installed once."""
    return install_example("databus-example-plugin", "databus_example_plugin")
