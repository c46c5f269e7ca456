"""databus.service.run's stop on signals, as databus up, databus sinks and databus mirror use
it: real signals sent to this process (SIGUSR1/SIGUSR2 standing for SIGINT/SIGTERM)."""

from __future__ import annotations

import logging
import os
import signal

import trio

from databus.service.run import stop_on_signals

log = logging.getLogger("test")


def _run(sent, **kwargs):
    """Send ``sent`` signals, then stop on them (a signal left unread would be handed back to
    Python's default handler when the receiver closes: each test sends what it reads)."""
    async def main():
        with trio.CancelScope() as scope, \
                trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2) as signals:
            for signum in sent:
                os.kill(os.getpid(), signum)
            return await stop_on_signals(signals, scope, log, **kwargs), scope.cancel_called
    return trio.run(main)


def test_without_a_drain_the_first_signal_stops_at_once():
    assert _run([signal.SIGUSR1]) == (0, True)


def test_the_first_signal_drains_and_a_second_stops_at_once():
    drains = []
    assert _run([signal.SIGUSR1, signal.SIGUSR2],
                drain=lambda: drains.append("drain")) == (130, True)
    assert drains == ["drain"]


def test_a_stop_already_under_way_makes_the_first_signal_stop_at_once():
    drains = []
    assert _run([signal.SIGUSR1], drain=lambda: drains.append("drain"),
                draining=lambda: True) == (130, True)
    assert drains == []
