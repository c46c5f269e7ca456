"""Fixtures for the client tests: a fresh topic name per test.  librdkafka's mock cluster
(``mock_cluster``) and our broker (``broker``) are tests/conftest.py's."""

from __future__ import annotations

import itertools
import uuid

import pytest

_counter = itertools.count()


@pytest.fixture
def topic(request):
    """A fresh topic name for one test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]
    return f"{name}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
