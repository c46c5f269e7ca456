"""The broker's SASL users: SCRAM credentials (salt, iterations, StoredKey, ServerKey) per user
and mechanism, kept durably in ``<log.dirs>/scram-credentials.json`` (mode 0600, written
whole and renamed over the old file).  No password and no salted password is ever stored:
see protocol/sasl.py.  PLAIN logins are checked against the same credentials.

Changed by AlterUserScramCredentials (``databus users add|delete --bootstrap-server``) or,
while the broker is stopped, by ``databus users add --data-dir`` (the first user of a
cluster whose every listener needs SASL).  A running broker re-reads the file when it
changes, so an offline change is never silently lost.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from databus.protocol.sasl import SCRAM_MECHANISMS, ScramCredential, check_password

from .durable import atomic_write

CREDENTIALS_FILE = "scram-credentials.json"


class CredentialError(ValueError):
    """The credential file cannot be read, or a request names an unknown mechanism."""


def _version(stat) -> tuple:
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class CredentialStore:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / CREDENTIALS_FILE
        self._users: dict[str, dict[str, ScramCredential]] = {}
        # (inode, mtime, size) of the file last read: every save renames a new file in, so
        # the inode changes even when two saves share an mtime tick
        self._version: tuple | None = None
        self._lock = threading.Lock()

    def load(self) -> CredentialStore:
        try:
            stat = self.path.stat()
            if self._version == _version(stat):
                return self
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            self._users, self._version = {}, None
            return self
        except (OSError, ValueError) as exc:
            raise CredentialError(f"cannot read {self.path}: {exc}") from None
        try:
            self._users = {
                user: {mech: ScramCredential.from_json(cred) for mech, cred in creds.items()}
                for user, creds in data.get("users", {}).items()
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise CredentialError(f"{self.path} is damaged: {exc!r}") from None
        self._version = _version(stat)
        return self

    def _save(self) -> None:

        document = {"version": 1, "users": {
            user: {mech: cred.to_json() for mech, cred in sorted(creds.items())}
            for user, creds in sorted(self._users.items())
        }}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, (json.dumps(document, indent=1) + "\n").encode(), mode=0o600)
        self._version = _version(self.path.stat())

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        self._refresh()
        return {user: dict(creds) for user, creds in self._users.items()}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        self._refresh()
        return self._users.get(user, {}).get(mechanism)

    def check_plain(self, user: str, password: str) -> bool:
        """A PLAIN login: the password against any SCRAM credential of the user."""
        self._refresh()
        creds = self._users.get(user, {})
        return any(check_password(cred, password) for cred in creds.values())

    def upsert(self, user: str, credential: ScramCredential) -> None:
        if credential.mechanism not in SCRAM_MECHANISMS:
            raise CredentialError(f"unknown SCRAM mechanism {credential.mechanism!r}")
        if not user:
            raise CredentialError("a user needs a name")
        with self._lock:
            self._refresh()
            self._users.setdefault(user, {})[credential.mechanism] = credential
            self._save()

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove the user's credential for ``mechanism`` (all when None); whether one was."""
        with self._lock:
            self._refresh()
            creds = self._users.get(user)
            if not creds or (mechanism is not None and mechanism not in creds):
                return False
            if mechanism is None:
                del self._users[user]
            else:
                del creds[mechanism]
                if not creds:
                    del self._users[user]
            self._save()
            return True

    def _refresh(self) -> None:
        try:
            self.load()
        except CredentialError:
            pass  # keep what we had; the error was logged when the file was first read

