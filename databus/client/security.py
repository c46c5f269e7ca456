"""TLS and SASL for the client's connections, from Kafka's settings (config.py):
``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism`` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), ``sasl.username`` / ``sasl.password``, ``ssl.ca.location``
(else the system's CAs), ``ssl.certificate.location`` + ``ssl.key.location`` (+
``ssl.key.password``) for a client certificate, ``ssl.endpoint.identification.algorithm``
(``https``, the default, checks the broker's name against its certificate; ``none`` does
not).

``Security.from_config`` is built once per client; ``wrap`` turns a connected byte stream
into a TLS one (handshake done), ``login`` runs SaslHandshake + SaslAuthenticate on a
connection (the exchanges themselves are protocol/sasl.py's) and says how long the login
lasts (KIP-368; the connection logs in again before then).  A refused login raises
SaslAuthenticationFailedError with the broker's message, a TLS handshake refused on a
certificate or protocol check SslAuthenticationError (both AuthenticationError); the password appears in no message
and no log.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.sasl import PLAIN, SaslError, ScramClient, plain_token
from . import errors


@dataclass(frozen=True)
class Security:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str = PLAIN
    username: str | None = None
    password: Any = None  # SecretStr

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_config(cls, config) -> Security:
        protocol = getattr(config, "security_protocol", "PLAINTEXT")
        if protocol == "PLAINTEXT":
            return cls()
        context = None
        check = config.ssl_endpoint_identification_algorithm == "https"
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=config.ssl_ca_location)
            context.check_hostname = check
            if config.ssl_certificate_location:
                key_password = (config.ssl_key_password.get_secret_value()
                                if config.ssl_key_password else None)
                try:
                    context.load_cert_chain(config.ssl_certificate_location,
                                            config.ssl_key_location, password=key_password)
                except (OSError, ssl.SSLError) as exc:
                    raise errors.ConfigError(
                        f"ssl.certificate.location={config.ssl_certificate_location}: cannot "
                        f"load it with ssl.key.location={config.ssl_key_location}: {exc}"
                    ) from None
        return cls(protocol, context, check, config.sasl_mechanism, config.sasl_username,
                   config.sasl_password)

    async def wrap(self, stream: trio.abc.Stream, host: str) -> trio.abc.Stream:
        if self.ssl_context is None:
            return stream
        tls = trio.SSLStream(stream, self.ssl_context,
                             server_hostname=host if self.check_hostname else None)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            await trio.aclose_forcefully(stream)
            cause = exc.__cause__ or exc
            # A certificate or protocol check that failed is an authentication failure
            # (Java's SslAuthenticationException): the same handshake fails again.  A
            # connection that just ended mid-handshake is a network error.
            refused = (isinstance(cause, ssl.SSLError)
                       and not isinstance(cause, (ssl.SSLEOFError, ssl.SSLZeroReturnError,
                                                  ssl.SSLSyscallError)))
            raise (errors.SslAuthenticationError if refused else errors.KafkaConnectionError)(
                f"TLS handshake with {host} failed: {cause}") from None
        return tls

    async def login(self, conn) -> int:
        """SaslHandshake then SaslAuthenticate on ``conn`` (a BrokerConnection whose api
        versions are negotiated); the login's lifetime in ms that the broker gave
        (KIP-368, SaslAuthenticate v1+; 0: it does not expire).  The same exchange, on a
        logged-in connection, is a re-authentication."""
        response = await conn.request(ApiKey.SASL_HANDSHAKE, {"mechanism": self.mechanism})
        if response.error_code != ErrorCode.none:
            raise errors.from_code(
                response.error_code,
                f"{conn}: SASL mechanism {self.mechanism} refused (the broker offers "
                f"{', '.join(response.mechanisms) or 'none'})")
        password = self.password.get_secret_value()
        try:
            if self.mechanism == PLAIN:
                last = await self._step(conn, plain_token(self.username, password))
            else:
                scram = ScramClient(self.mechanism, self.username, password)
                server_first = await self._step(conn, scram.first())
                last = await self._step(conn, scram.final(bytes(server_first.auth_bytes)))
                scram.verify(bytes(last.auth_bytes))
        except SaslError as exc:
            raise errors.for_code(ErrorCode.sasl_authentication_failed)(
                f"{conn}: {exc}") from None
        lifetime = getattr(last, "session_lifetime", None)  # v1+
        return max(0, int(lifetime.total_seconds() * 1000)) if lifetime else 0

    @staticmethod
    async def _step(conn, token: bytes):
        response = await conn.request(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token})
        if response.error_code != ErrorCode.none:
            raise errors.from_code(response.error_code,
                                   f"{conn}: {response.error_message or 'login refused'}")
        return response
