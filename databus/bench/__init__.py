"""Benchmarks behind ``databus bench NAME``: each module prints figures (tables, through
databus.cli_helpers.table), never asserts."""
