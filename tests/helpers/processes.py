"""``databus`` commands run as a user runs them: a real process, its output in a log file.

    from tests.helpers.processes import kafka_listener, start_databus, start_up, stop, wait_for_log

    process, text = start_up(["-c", str(config)], tmp_path, tmp_path / "up.log")
    bootstrap = kafka_listener(text)              # "127.0.0.1:PORT" of its built-in broker
    ...
    stop(process)                                 # SIGTERM (it drains), SIGKILL after 30 s

    process = start_databus(["sidecar", "-c", str(config)], tmp_path, tmp_path / "s.log")
    wait_for_log(process, tmp_path / "s.log", "databus is up", "databus sidecar started")

- ``start_databus`` runs ``python -m databus.cli ARGS`` with the test's interpreter in
  ``cwd``, stdout and stderr into ``log_path`` (replaced).
- ``wait_for_log`` waits (tests/helpers/wait.py) until every ``ready`` string is in the log
  and returns the log's text; it fails at once, with the log, if the process exits first.
- ``start_up`` is ``databus up ARGS`` started and waited for ("databus is up"); a
  ``databus up`` that does not come up is killed before the failure is raised (the caller
  has no process to stop yet).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers.wait import wait_for

UP = "databus is up"  # the line databus up / sidecar / sinks log once they serve


def start_databus(args: list[str], cwd: Path, log_path: Path, *,
                  env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "databus.cli", *args], stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, env=env)


def wait_for_log(process: subprocess.Popen, log_path: Path, ready: str | tuple[str, ...],
                 what: str, timeout: float = 60) -> str:
    wanted = (ready,) if isinstance(ready, str) else ready

    def text() -> str:
        return log_path.read_text(errors="replace")

    def look() -> str | None:
        now = text()
        if all(line in now for line in wanted):
            return now
        if process.poll() is not None:
            raise AssertionError(f"{what}: the process exited ({process.returncode}):\n{now}")
        return None

    return wait_for(look, what, timeout, log=text)


def start_up(args: list[str], cwd: Path, log_path: Path, *, ready: tuple[str, ...] = (),
             timeout: float = 60) -> tuple[subprocess.Popen, str]:
    """``databus up ARGS`` once it serves (and every ``ready`` string is logged): the
    process and its log so far."""
    process = start_databus(["up", *args], cwd, log_path)
    try:
        return process, wait_for_log(process, log_path, (UP, *ready), "databus up started",
                                     timeout)
    except BaseException:
        process.kill()
        process.wait()
        raise


def kafka_listener(text: str) -> str:
    """The HOST:PORT of the built-in broker that databus up's banner names."""
    match = re.search(r"Kafka listener\s+(\S+:\d+)", text)
    assert match, text
    return match.group(1)


def stop(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM (a databus command drains and stops its broker child), SIGKILL if it is still
    running after ``timeout`` (the broker child then sees its lifeline close and stops)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
