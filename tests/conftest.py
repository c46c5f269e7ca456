"""Shared test fixtures.  Per-area fixtures live in each tests/<area>/conftest.py."""
