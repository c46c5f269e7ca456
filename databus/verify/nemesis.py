"""Faults for a verification run: a schedule fixed by a seed (pure) and the thread that
inflicts it on a broker process (the I/O shell).

Kinds:
- ``kill``: kill -9 of the broker, restarted after a moment on the same port and data.
- ``pause``: SIGSTOP of the broker for longer than the consumers' session timeout (their
  group expires them; producers' requests time out and are retried), then SIGCONT.
- ``hang-kill``: SIGSTOP, then kill -9 while stopped, then restart: a broker that hangs
  and is killed by a watchdog.  Whatever sat unread in its sockets is gone: a producer that
  counted it as delivered (acks=0) has lost it.
- ``partition``: a network partition between the clients and the broker: iptables rules
  dropping every packet to and from the broker's port on loopback, removed when healed
  (needs root and iptables; both processes stay up, connections hang rather than fail).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

KINDS = ("kill", "pause", "hang-kill", "partition")


def partition_unavailable() -> str | None:
    """Why the ``partition`` fault cannot run here, or None when it can."""
    if shutil.which("iptables") is None:
        return "the partition fault needs iptables (apt-get install iptables)"
    if os.geteuid() != 0:
        return "the partition fault needs root (iptables rules)"
    probe = subprocess.run(["iptables", "-w", "-L", "INPUT", "-n"], capture_output=True,
                           text=True)
    if probe.returncode != 0:  # e.g. a container without NET_ADMIN
        return f"iptables cannot read its rules here: {probe.stderr.strip()}"
    return None


def available_kinds() -> tuple[str, ...]:
    return tuple(k for k in KINDS if k != "partition" or partition_unavailable() is None)


@dataclass(frozen=True)
class Fault:
    start: float      # seconds after the run's start, as planned
    kind: str
    length: float     # seconds the fault lasts (down, or stopped)
    quiet: float = 0.0  # seconds of no fault before it, kept even when restarts ran late


def schedule(seed: int, duration: float, kinds: Sequence[str] = KINDS, *,
             pause_seconds: float = 8.0, gap: tuple[float, float] = (3.0, 8.0),
             warmup: float = 3.0) -> list[Fault]:
    """The faults of a run, the same for the same arguments: each kind once first (in an
    order the seed picks), then kinds drawn at random, with a random quiet gap after each;
    every fault ends before ``duration``."""
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r} (one of {', '.join(KINDS)})")
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    faults: list[Fault] = []
    at = warmup
    quiet = warmup
    while kinds:
        kind = first.pop(0) if first else rng.choice(list(kinds))
        if kind in ("pause", "partition"):
            length = pause_seconds + rng.uniform(0, 2)
        elif kind == "hang-kill":
            length = rng.uniform(1.0, 2.0)
        else:
            length = rng.uniform(0.2, 2.0)
        if at + length > duration:
            break
        faults.append(Fault(round(at, 2), kind, round(length, 2), round(quiet, 2)))
        quiet = rng.uniform(*gap)
        at += length + quiet
    return faults


class Nemesis:
    """Runs a schedule against a broker (databus.broker.process.BrokerProcess or anything
    with ``pid``, ``kill9()`` and ``start()``), recording each fault through ``record``."""

    def __init__(self, broker, faults: list[Fault], record: Callable[..., None]) -> None:
        self.broker = broker
        self.faults = faults
        self.record = record
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def start(self, t0: float) -> None:
        self._t0 = t0
        self._thread.start()

    def join(self) -> None:
        """Wait for the rest of the schedule: the seed fixes which faults a run gets, so a
        run whose restarts ran late lasts longer rather than losing its last faults."""
        self._thread.join()

    def _run(self) -> None:
        """Each fault at its planned time, but never before its quiet gap after the last one
        healed: a restart that ran late (a loaded machine) delays the rest of the schedule
        rather than leaving the clients no moment without a fault."""
        try:
            healed = self._t0
            for fault in self.faults:
                at = max(self._t0 + fault.start, healed + fault.quiet)
                delay = at - time.monotonic()
                if delay > 0 and self.stop.wait(delay):
                    return
                if self.stop.is_set():
                    return
                self._inflict(fault)
                healed = time.monotonic()
        except BaseException as exc:  # reported by the workload: a broker that won't restart
            self.error = exc

    def _inflict(self, fault: Fault) -> None:
        self.record("start", f"{fault.kind} {fault.length}s")
        if fault.kind == "kill":
            self.broker.kill9()
            time.sleep(fault.length)
            self._restart()
        elif fault.kind == "pause":
            os.kill(self.broker.pid, signal.SIGSTOP)
            time.sleep(fault.length)
            os.kill(self.broker.pid, signal.SIGCONT)
        elif fault.kind == "hang-kill":
            os.kill(self.broker.pid, signal.SIGSTOP)
            time.sleep(fault.length)
            self.broker.kill9()
            self._restart()
        elif fault.kind == "partition":
            rules = partition_rules(self.broker.port)
            for rule in rules:
                _iptables("-I", rule)
            try:
                time.sleep(fault.length)
            finally:
                for rule in rules:
                    _iptables("-D", rule)
        self.record("end", f"{fault.kind} healed")

    def _restart(self) -> None:
        deadline = time.monotonic() + 30
        while True:  # the port can linger a moment after the kill
            try:
                self.broker.start()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)


def partition_rules(port: int) -> list[list[str]]:
    """Drop loopback packets to and from ``port`` (the INPUT chain sees both directions on
    lo); the comment marks them as ours."""
    mark = ["-m", "comment", "--comment", f"databus-verify-{port}"]
    return [["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port), *mark, "-j", "DROP"],
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", str(port), *mark, "-j", "DROP"]]


def _iptables(action: str, rule: list[str]) -> None:
    subprocess.run(["iptables", "-w", action, *rule], check=True, capture_output=True)


def heal(broker) -> None:
    """Leave the broker running (a fault cut short by the end of the run)."""
    if broker.alive():
        os.kill(broker.pid, signal.SIGCONT)
