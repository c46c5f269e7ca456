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
- ``disk-full``: the broker's data directory is a small tmpfs (mounted by ``databus
  verify`` before the broker starts: root only); the fault fills it with a filler file,
  kills -9 and restarts the broker halfway through (recovery on a full disk), then frees
  the filler.  Writes are refused with KAFKA_STORAGE_ERROR meanwhile; none acknowledged
  may be lost.
- ``clock``: the broker restarted under libfaketime with its wall clock jumped forward
  (hours), halfway restarted again with it jumped back behind real time, then restarted on
  the real clock (needs libfaketime: apt-get install faketime).  The monotonic clock is
  left alone: only what the broker takes from the wall clock (timestamps, retention,
  transaction and group timeouts measured in wall time) sees the jumps.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

KINDS = ("kill", "pause", "hang-kill", "partition", "disk-full", "clock")

# where Debian's libfaketime puts its preload library
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/faketime/libfaketime.so.1")
CLOCK_JUMP = 2 * 3600  # seconds the clock fault moves the broker's wall clock each way
FILLER = "verify-filler"  # the disk-full fault's file (a plain file: the broker ignores it)


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


def disk_full_unavailable() -> str | None:
    """Why the ``disk-full`` fault cannot run here, or None when it (probably) can: the
    mount itself may still be refused (a container without CAP_SYS_ADMIN), said then."""
    if os.geteuid() != 0:
        return "the disk-full fault needs root (it mounts a small tmpfs as the data dir)"
    if shutil.which("mount") is None:
        return "the disk-full fault needs mount(8)"
    return None


def faketime_library() -> str | None:
    return next((lib for lib in FAKETIME_LIBS if os.path.exists(lib)), None)


def clock_unavailable() -> str | None:
    if faketime_library() is None:
        return "the clock fault needs libfaketime (apt-get install faketime)"
    return None


UNAVAILABLE: dict[str, Callable[[], str | None]] = {
    "partition": partition_unavailable, "disk-full": disk_full_unavailable,
    "clock": clock_unavailable}


def unavailable(kind: str) -> str | None:
    check = UNAVAILABLE.get(kind)
    return check() if check is not None else None


def available_kinds() -> tuple[str, ...]:
    return tuple(k for k in KINDS if unavailable(k) is None)


def mount_small_disk(path: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` (mount's syntax: 64m) on ``path`` for the disk-full fault."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"cannot mount a {size} tmpfs on {path} for the disk-full fault: "
                      f"{done.stderr.strip()}")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(directory: Path) -> int:
    """Fill the filesystem of ``directory`` with a filler file up to ENOSPC; its size (0
    when the filesystem was already too full to create it: full is what the fault wants)."""
    path = directory / FILLER
    written = 0
    try:
        f = open(path, "ab")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            return 0
        raise
    with f:
        stat = os.statvfs(directory)
        free = stat.f_bavail * stat.f_frsize
        try:  # the bulk at once, then the last blocks by writing
            if free > 1 << 20:
                os.posix_fallocate(f.fileno(), f.tell(), free - (1 << 20))
                written += free - (1 << 20)
        except OSError:
            pass
        chunk = b"\0" * 65536
        while True:
            try:
                f.write(chunk)
                f.flush()
                written += len(chunk)
            except OSError:
                break
    return written


def used_bytes(directory: Path) -> int:
    stat = os.statvfs(directory)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def free_filler(directory: Path) -> None:
    try:
        (directory / FILLER).unlink()
    except FileNotFoundError:
        pass


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
        if kind in ("pause", "partition", "disk-full", "clock"):
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
    with ``pid``, ``kill9()`` and ``start()``; ``data_dir`` and ``env`` for disk-full and
    clock), recording each fault through ``record``."""

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
        elif fault.kind == "disk-full":
            directory = Path(self.broker.data_dir)
            try:
                used = used_bytes(directory)
                size = fill(directory)
                self.record("full", f"filler {size} bytes (the broker's data: {used} bytes)")
                time.sleep(fault.length / 2)
                self.broker.kill9()  # and recovery has to work on a full disk
                self._restart()
                self.record("restarted", "on the full disk")
                time.sleep(fault.length / 2)
            finally:
                free_filler(directory)
        elif fault.kind == "clock":
            lib = faketime_library()
            assert lib is not None
            try:
                for jump in (f"+{CLOCK_JUMP}", f"-{CLOCK_JUMP}"):
                    self.broker.kill9()
                    self.broker.env.update({"LD_PRELOAD": lib, "FAKETIME": jump,
                                            "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
                    self._restart()
                    self.record("restarted", f"wall clock {jump}s")
                    time.sleep(fault.length / 2)
            finally:
                for key in ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC"):
                    self.broker.env.pop(key, None)
                self.broker.kill9()
                self._restart()
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
