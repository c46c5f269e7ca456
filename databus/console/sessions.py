"""Login sessions of a console started with ``console.auth: sasl`` (docs/console.md).

The cluster checks a login itself: a ClusterView whose SASL settings are the user's name and
password connects (SaslHandshake + SaslAuthenticate, the configured ``sasl.mechanism``); when
the cluster accepts them, that view (its Admin connection and its lag sampler) is the user's
session, and every page and action the user asks for goes through it, so the cluster's ACLs
decide what the user sees and may do.  The password stays in that view's settings, in this
process's memory only, until the session ends (logout, idle expiry, the console stopping).

SessionTable and LoginThrottle are the pure parts (tokens and idle expiry; refused logins
counted per address and per user name); Sessions the trio shell that runs each session's view
in the console's nursery.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import trio

from .cluster import ClusterView, ConsoleError, LoginRefused, LoginThrottled

log = logging.getLogger("databus.console")

COOKIE = "databus_console_session"
# The user's own credentials replace these (a configured login is not the user's).
LOGIN_KEYS = ("sasl.username", "sasl.password")
# Refused logins allowed within the window per user name and per client address; past them
# the console answers 429 without asking the cluster (each try is a real SASL login there).
# An address gets more: several people may share one (a NAT, a proxy).
FAILED_LOGIN_LIMITS = {"user": 5, "address": 20}
FAILED_LOGIN_WINDOW = 300.0


@dataclass
class Entry:
    user: str
    value: Any  # what the shell keeps per session (Sessions: the view and its cancel scope)
    last_seen: float


class SessionTable:
    """Session tokens -> entries; an entry unused for ``idle_timeout`` seconds is expired.

    A token is 256 random bits, handed to the browser once (its cookie).  The table keeps
    only the token's HMAC under a secret drawn when the console process starts: the table
    holds no usable token, and a token means nothing to another console process or after a
    restart (everyone logs in again)."""

    def __init__(self, idle_timeout: float, clock=time.monotonic) -> None:
        self.idle_timeout = idle_timeout
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._entries: dict[bytes, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _key(self, token: str) -> bytes:
        return hmac.new(self._secret, token.encode(), hashlib.sha256).digest()

    def add(self, user: str, value: Any) -> str:
        token = secrets.token_urlsafe(32)
        self._entries[self._key(token)] = Entry(user, value, self._clock())
        return token

    def get(self, token: str | None) -> Entry | None:
        """The live entry of ``token`` (its idle time starts again), else None; an expired
        one stays in the table until ``expired()`` hands it over for closing."""
        entry = self._entries.get(self._key(token)) if token else None
        if entry is None:
            return None
        now = self._clock()
        if now - entry.last_seen >= self.idle_timeout:
            return None
        entry.last_seen = now
        return entry

    def remove(self, token: str | None) -> Entry | None:
        return self._entries.pop(self._key(token), None) if token else None

    def expired(self) -> list[Entry]:
        """Remove and return every entry unused for ``idle_timeout`` or longer."""
        now = self._clock()
        gone = [k for k, e in self._entries.items() if now - e.last_seen >= self.idle_timeout]
        return [self._entries.pop(k) for k in gone]


Key = tuple[str, str]  # (kind, value): ("user", "alice"), ("address", "10.0.0.7")


class LoginThrottle:
    """Refused logins per key in a sliding window, each kind of key with its own limit.

    The user name counts so that many addresses cannot guess one user's password; the
    address so that one client cannot guess many users'.  An accepted login clears its
    keys.  A key is forgotten once its last failure leaves the window, so guessing many
    names costs memory only for ``window`` seconds."""

    def __init__(self, limits: dict[str, int] = FAILED_LOGIN_LIMITS,
                 window: float = FAILED_LOGIN_WINDOW, clock=time.monotonic) -> None:
        self.limits = limits
        self.window = window
        self._clock = clock
        self._failures: dict[Key, deque[float]] = {}

    def __len__(self) -> int:
        return len(self._failures)

    def retry_after(self, keys: tuple[Key, ...]) -> float:
        """Seconds until a login for ``keys`` may ask the cluster again; 0: now."""
        now = self._clock()
        self._forget_before(now - self.window)
        wait = 0.0
        for key in keys:
            times, limit = self._failures.get(key), self.limits[key[0]]
            if times is not None and len(times) >= limit:
                # Allowed again when the oldest failure that keeps it at the limit expires.
                wait = max(wait, times[-limit] + self.window - now)
        return wait

    def failed(self, keys: tuple[Key, ...]) -> None:
        now = self._clock()
        for key in keys:
            times = self._failures.setdefault(key, deque(maxlen=self.limits[key[0]]))
            times.append(now)

    def succeeded(self, keys: tuple[Key, ...]) -> None:
        for key in keys:
            self._failures.pop(key, None)

    def _forget_before(self, oldest: float) -> None:
        stale = [k for k, times in self._failures.items() if times[-1] < oldest]
        for key in stale:
            del self._failures[key]


def login_keys(username: str, address: str | None) -> tuple[Key, ...]:
    return (("user", username),) + ((("address", address),) if address else ())


@dataclass
class _Live:
    view: ClusterView
    scope: trio.CancelScope


class Sessions:
    """The logged-in users of one console: ``await nursery.start(sessions.serve)`` first."""

    def __init__(self, bootstrap: str, settings: dict, *, idle_timeout: float,
                 sample_interval: float) -> None:
        self.bootstrap = bootstrap
        self._settings = {k: v for k, v in settings.items() if k not in LOGIN_KEYS}
        self.table = SessionTable(idle_timeout)
        self.throttle = LoginThrottle()
        self.sample_interval = sample_interval
        self._nursery: trio.Nursery | None = None

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the sessions' views (and close the idle ones) until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._expire_forever)
            task_status.started()
            await trio.sleep_forever()

    async def login(self, username: str, password: str, address: str | None = None) -> str:
        """A new session's token; LoginRefused when the cluster refuses the credentials,
        LoginThrottled after too many refusals for this user name or from ``address`` (the
        client's), ConsoleError when the cluster cannot be asked."""
        keys = login_keys(username, address)
        wait = self.throttle.retry_after(keys)
        if wait > 0:
            log.warning("console login of %r from %s throttled (%d s)", username, address,
                        math.ceil(wait))
            raise LoginThrottled(wait)
        if not username or not password:
            self.throttle.failed(keys)
            raise LoginRefused()
        view = ClusterView(self.bootstrap, {**self._settings, "sasl.username": username,
                                            "sasl.password": password}, user=username)
        assert self._nursery is not None, "Sessions.serve() first"
        started = await self._nursery.start(self._run, view)
        if isinstance(started, LoginRefused):
            self.throttle.failed(keys)
            log.warning("console login of %r from %s refused by the cluster", username, address)
        if isinstance(started, ConsoleError):
            raise started
        self.throttle.succeeded(keys)
        log.info("console login of %r", username)
        return self.table.add(username, _Live(view, started))

    async def _run(self, view: ClusterView, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The session's view until its scope is cancelled; ``started`` with that scope, or
        with the ConsoleError of a refused or failed login (handed over, not raised: raised
        here it would reach login() wrapped in the client's and this task's nurseries)."""
        with trio.CancelScope() as scope:
            async with view.open(), trio.open_nursery() as nursery:
                try:
                    await view.check_login()
                except ConsoleError as exc:
                    task_status.started(exc)
                    return
                await nursery.start(view.sample_forever, self.sample_interval)
                task_status.started(scope)
                await trio.sleep_forever()

    def find(self, token: str | None) -> ClusterView | None:
        """The view of a live session, else None."""
        self._close(self.table.expired(), "idle")
        entry = self.table.get(token)
        return entry.value.view if entry is not None else None

    def logout(self, token: str | None) -> None:
        entry = self.table.remove(token)
        if entry is not None:
            self._close([entry], "logout")

    def _close(self, entries: list[Entry], why: str) -> None:
        for entry in entries:
            entry.value.scope.cancel()
            log.info("console session of %r closed (%s)", entry.user, why)

    async def _expire_forever(self) -> None:
        # Often enough that an idle session's connections do not outlive it by much.
        while True:
            await trio.sleep(min(self.table.idle_timeout / 4, 60.0))
            self._close(self.table.expired(), "idle")
