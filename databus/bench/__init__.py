"""Benchmarks behind ``databus bench NAME``: each module prints figures (rich tables), never asserts."""
