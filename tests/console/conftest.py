"""The web console in a real browser: Debian's chromium (``make browser`` installs it) driven
by playwright's Python API, against ``databus console`` subprocesses and a real broker.

One browser (an empty profile in a temp dir) serves the whole module; each test gets a fresh
page that records console messages of level error and uncaught page errors
(``page.errors``), and on failure a screenshot of the page lands in the test's tmp_path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import wait_for_log

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium phones home at start; this closed
# network refuses those connections, and they would show as errors.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium "
                    "(needs root)")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1100, "height": 720})
        context.set_default_timeout(20_000)
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser, request, tmp_path):
    page = browser.new_page()
    page.errors = []
    page.on("console", lambda m: page.errors.append(f"console {m.type}: {m.text}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(f"page error: {e}"))
    try:
        yield page
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            shot = tmp_path / "failure.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot of the page at failure: {shot} ({page.url})")
        page.close()


class ConsoleProcess:
    """``databus console`` on a free port: started by the constructor, ``wait()`` for its
    ``.url`` (so several can start at once), killed by ``close()``."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.log = tmp / "console.log"
        self._log_file = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "databus.cli", "console", "--listen", "127.0.0.1:0", *args],
            stdout=self._log_file, stderr=subprocess.STDOUT, cwd=tmp)
        self.url = ""

    def wait(self) -> ConsoleProcess:
        try:
            text = wait_for_log(self.proc, self.log, "databus console on ",
                                "databus console started", timeout=30)
        except AssertionError:
            self.close()
            raise
        self.url = re.search(r"databus console on (http://\S+)", text).group(1)
        return self

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._log_file.close()


def databus(*args: str) -> subprocess.CompletedProcess:
    """The ``databus`` command line, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "databus.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)


def shoot(page, name: str) -> None:
    """Keep a picture of the page for docs/console.md when asked to
    (DATABUS_CONSOLE_SCREENSHOTS=DIR)."""
    where = os.environ.get("DATABUS_CONSOLE_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"))
