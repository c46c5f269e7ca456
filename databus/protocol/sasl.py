"""SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677): the exchanges as plain
data in, data out, for both ends.  No I/O: the broker's SaslAuthenticate handler feeds a
``ScramServer`` the client's messages; the client's connection feeds a ``ScramClient`` the
broker's.

Credentials (``ScramCredential``) are what a server keeps: salt, iteration count, StoredKey
and ServerKey, never the password nor the salted password (StoredKey = H(HMAC(SaltedPassword,
"Client Key")) cannot be turned back into something that logs in).  Kafka's
AlterUserScramCredentials carries the salted password; ``credential_from_salted`` derives the
stored keys from it.  PLAIN is checked against the same credentials (``check_password``), as
Redpanda does: one user store, no plain passwords anywhere.

Every malformed message raises ``SaslError`` with a short reason; the server never says
whether the user or the password was wrong (``authentication failed: invalid credentials``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)

# Kafka's ScramMechanism enum as AlterUserScramCredentials / Describe... carry it.
MECHANISM_CODES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_CODES.items()}
_HASHES = {SCRAM_SHA_256: hashlib.sha256, SCRAM_SHA_512: hashlib.sha512}

# Kafka's floor for SCRAM iterations (ScramMechanism.minIterations) and its default (4096).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
MAX_MESSAGE_BYTES = 4096  # no legitimate PLAIN or SCRAM message comes near this
INVALID_CREDENTIALS = "authentication failed: invalid credentials"


class SaslError(Exception):
    """A SASL message is malformed, out of order, or the credentials are wrong."""


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {"mechanism": self.mechanism, "salt": b64(self.salt).decode(),
                "iterations": self.iterations, "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode()}

    @classmethod
    def from_json(cls, data: dict) -> ScramCredential:
        b64 = base64.b64decode
        return cls(str(data["mechanism"]), b64(data["salt"]), int(data["iterations"]),
                   b64(data["stored_key"]), b64(data["server_key"]))


def _hash(mechanism: str):
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise SaslError(f"unknown SCRAM mechanism {mechanism!r} "
                        f"(known: {', '.join(SCRAM_MECHANISMS)})") from None


def _hmac(mechanism: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, _hash(mechanism)).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802 (PBKDF2 with the mechanism's HMAC).
    Normalize (SASLprep) is the identity here, as in Kafka's Java client."""
    return hashlib.pbkdf2_hmac(_hash(mechanism)().name, password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, iterations: int,
                           salted: bytes) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        mechanism, salt, iterations, _hash(mechanism)(client_key).digest(),
        _hmac(mechanism, salted, b"Server Key"),
    )


def make_credential(mechanism: str, password: str, *, salt: bytes | None = None,
                    iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(
        mechanism, salt, iterations, salted_password(mechanism, password, salt, iterations))


def check_password(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    derived = make_credential(credential.mechanism, password, salt=credential.salt,
                              iterations=credential.iterations)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


# -- PLAIN ------------------------------------------------------------------------------------

def plain_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode() + b"\0" + password.encode()


def parse_plain(token: bytes) -> tuple[str, str]:
    """``[authzid] NUL authcid NUL passwd`` -> (username, password).  An authzid other than
    the user itself is refused, as Kafka does (no impersonation)."""
    if len(token) > MAX_MESSAGE_BYTES:
        raise SaslError("PLAIN message too long")
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslError("PLAIN message must be authzid NUL username NUL password")
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise SaslError("PLAIN message is not UTF-8") from None
    if not user or not password:
        raise SaslError("PLAIN message has an empty username or password")
    if authzid and authzid != user:
        raise SaslError("PLAIN authorization id must be empty or the username")
    return user, password


# -- SCRAM messages ---------------------------------------------------------------------------

def _attributes(message: bytes, what: str) -> list[tuple[str, str]]:
    if len(message) > MAX_MESSAGE_BYTES:
        raise SaslError(f"{what} too long")
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise SaslError(f"{what} is not UTF-8") from None
    pairs = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise SaslError(f"{what}: malformed attribute {item[:40]!r}")
        pairs.append((key, value))
    return pairs


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslError("invalid escape in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise SaslError(f"{what} is not base64") from None


class ScramServer:
    """The server side of one SCRAM exchange: ``first(client_first)`` returns server-first,
    ``final(client_final)`` returns server-final and sets ``username``; either raises SaslError.

    ``lookup(username)`` returns the user's ScramCredential for this mechanism or None.  An
    unknown user gets a server-first with a made-up salt and fails at the end like a wrong
    password, so the exchange does not tell which users exist.
    """

    def __init__(self, mechanism: str,
                 lookup: Callable[[str], ScramCredential | None]) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._user = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.username: str | None = None  # set once authenticated

    @property
    def stage(self) -> str:
        """Which message is expected next: "first", "final"; or "done" / "failed"."""
        return self._state

    @property
    def claimed_user(self) -> str:
        """The user name the client-first message gave (for logs), "" before it."""
        return self._user

    def first(self, client_first: bytes) -> bytes:
        if self._state != "first":
            raise SaslError("SCRAM client-first message out of order")
        self._state = "failed"
        text = client_first.decode("utf-8", "replace")
        if not text.startswith(("n,", "y,")):
            # "p=" is channel binding, which Kafka does not support either
            raise SaslError("SCRAM client-first: channel binding is not supported")
        gs2_rest = text[2:]
        authzid, sep, bare = gs2_rest.partition(",")
        if not sep:
            raise SaslError("SCRAM client-first: malformed GS2 header")
        attrs = _attributes(bare.encode(), "SCRAM client-first")
        keys = [k for k, _ in attrs]
        if keys[:2] != ["n", "r"]:
            raise SaslError("SCRAM client-first must start with n=user,r=nonce")
        user = _unescape_name(attrs[0][1])
        client_nonce = attrs[1][1]
        if not user or not client_nonce:
            raise SaslError("SCRAM client-first: empty user name or nonce")
        if authzid and authzid != f"a={escape_name(user)}":
            raise SaslError("SCRAM authorization id must be empty or the user name")
        self._user = user
        self._credential = self._lookup(user)
        credential = self._credential or ScramCredential(
            self.mechanism, hashlib.sha256(b"unknown-user" + user.encode()).digest(),
            DEFAULT_ITERATIONS, b"", b"")
        self._client_first_bare = bare
        self._nonce = client_nonce + base64.b64encode(os.urandom(18)).decode()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._state = "final"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        if self._state != "final":
            raise SaslError("SCRAM client-final message out of order")
        self._state = "failed"
        attrs = _attributes(client_final, "SCRAM client-final")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise SaslError("SCRAM client-final must be c=...,r=...,p=...")
        if attrs[1][1] != self._nonce:
            raise SaslError("SCRAM client-final: nonce mismatch")
        channel = _b64decode(attrs[0][1], "SCRAM channel binding")
        if channel not in (b"n,,", f"n,a={escape_name(self._user)},".encode()):
            raise SaslError("SCRAM client-final: unexpected channel binding")
        proof = _b64decode(attrs[-1][1], "SCRAM proof")
        without_proof = client_final.decode().rsplit(",p=", 1)[0]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        if credential is None or len(proof) != len(credential.stored_key):
            raise SaslError(INVALID_CREDENTIALS)
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(_hash(self.mechanism)(client_key).digest(),
                                   credential.stored_key):
            raise SaslError(INVALID_CREDENTIALS)
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        self._state = "done"
        self.username = self._user
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side: ``first()``, then ``final(server_first)``, then
    ``verify(server_final)`` (which checks that the server knew the credential too)."""

    def __init__(self, mechanism: str, username: str, password: str,
                 *, nonce: str | None = None) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self._bare = f"n={escape_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(_attributes(server_first, "SCRAM server-first"))
        if "e" in attrs:
            raise SaslError(f"SCRAM server error: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise SaslError("SCRAM server-first: nonce does not extend ours")
        if not iterations.isdigit() or not 1 <= int(iterations) <= 1_000_000:
            raise SaslError(f"SCRAM server-first: bad iteration count {iterations[:20]!r}")
        salted = salted_password(self.mechanism, self._password,
                                 _b64decode(salt, "SCRAM salt"), int(iterations))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{server_first.decode()},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = _hash(self.mechanism)(client_key).digest()
        signature = _hmac(self.mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(server_final, "SCRAM server-final"))
        if "e" in attrs:
            raise SaslError(f"SCRAM server error: {attrs['e']}")
        signature = _b64decode(attrs.get("v", ""), "SCRAM server signature")
        if not hmac.compare_digest(signature, self._server_signature):
            raise SaslError("SCRAM server signature does not match: not the real server")
