"""Reusable test harnesses (real processes on loopback, ports chosen by the OS)."""
