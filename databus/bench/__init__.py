"""Benchmarks behind ``databus bench NAME``: each module prints figures (tables, through
databus.tools.table), never asserts."""
