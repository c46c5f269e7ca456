"""HTTP basic authentication of the registry by the broker's SASL users.

When the broker has a SASL listener (security is on), every request must carry
``Authorization: Basic base64(user:password)`` of a user ``databus users`` created (the
password checked as a PLAIN login is, against the user's SCRAM credentials); otherwise the
answer is 401 with Confluent's ``{"error_code": 40101, "message": "Unauthorized"}``.
Checking a password costs a PBKDF2 (milliseconds, off the event loop); a password that
passed is remembered (as a hash) for ``REMEMBER_SECONDS``, so a serializer's every request
does not pay it again, and a user deleted or a password changed is refused within that time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time

import trio

REMEMBER_SECONDS = 30.0


class BasicAuth:
    def __init__(self, check_password) -> None:
        self.check_password = check_password  # (user, password) -> bool, blocking
        self._passed: dict[tuple[str, bytes], float] = {}

    async def user(self, header: str | None) -> str | None:
        """The authenticated user of an Authorization header, or None."""
        if not header or not header[:6].lower() == "basic ":
            return None
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        name, sep, password = decoded.partition(":")
        if not sep or not name:
            return None
        key = (name, hashlib.sha256(password.encode()).digest())
        now = time.monotonic()
        if self._passed.get(key, 0.0) > now:
            return name
        if not await trio.to_thread.run_sync(self.check_password, name, password):
            return None
        if len(self._passed) > 10_000:
            self._passed = {k: t for k, t in self._passed.items() if t > now}
        self._passed[key] = now + REMEMBER_SECONDS
        return name
