"""SaslHandshake (17) and SaslAuthenticate (36): logging in on a SASL listener.

The order is Kafka's (KIP-152): ApiVersions (optional), SaslHandshake naming a mechanism,
then SaslAuthenticate round trips carrying the mechanism's messages (protocol/sasl.py):
one for PLAIN, two for SCRAM.  Success sets the connection's principal (``User:NAME``).

Anything else closes the connection after the answer, as Kafka does: a mechanism not in
``sasl.enabled.mechanisms`` (UNSUPPORTED_SASL_MECHANISM, listing the enabled ones), a
handshake or an authenticate out of order or on a non-SASL listener (ILLEGAL_SASL_STATE),
wrong credentials or a malformed message (SASL_AUTHENTICATION_FAILED, with the same words for
an unknown user and a wrong password).  A failed login is logged with the user name and the
peer, never with the password.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0 a login lasts that
long, and SaslAuthenticate v1+ says so (``session_lifetime_ms``).  Before it ends the
client sends SaslHandshake (the same mechanism) and SaslAuthenticate again on the same
connection, as the same user; then the login lasts that long again.  A different mechanism
(UNSUPPORTED_SASL_MECHANISM) or user (SASL_AUTHENTICATION_FAILED) closes the connection; so
does any other request once the login has expired (server.py).  Without a lifetime a second
handshake is ILLEGAL_SASL_STATE, as in Kafka.
"""

from __future__ import annotations

import datetime
import logging

import trio

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.sasl import (
    INVALID_CREDENTIALS,
    PLAIN,
    SCRAM_MECHANISMS,
    SaslError,
    ScramServer,
    parse_plain,
)

from ..api import RequestContext, handles

log = logging.getLogger(__name__)


def enabled_mechanisms(ctx: RequestContext) -> list[str]:
    return ctx.broker.config.sasl_enabled_mechanisms.split(",")


@handles(ApiKey.SASL_HANDSHAKE, 1, 1)
async def sasl_handshake(ctx: RequestContext, request) -> object:
    session = ctx.session
    mechanisms = enabled_mechanisms(ctx)
    # A handshake on a logged-in connection is a re-authentication (KIP-368) if its login
    # has a lifetime, with the same mechanism; otherwise out of order, as a second one.
    reauthentication = session.authenticated and session.expires_at is not None
    if session.in_exchange or (session.authenticated and not reauthentication):
        code = ErrorCode.illegal_sasl_state
        session.close_after_response = True
    elif reauthentication and request.mechanism != session.mechanism:
        code = ErrorCode.unsupported_sasl_mechanism
        session.close_after_response = True
        log.info("closing connection from %s: re-authentication as %s with SASL mechanism "
                 "%r, not %s", ctx.client_host, session.principal, request.mechanism[:64],
                 session.mechanism)
    elif request.mechanism not in mechanisms:
        code = ErrorCode.unsupported_sasl_mechanism
        session.close_after_response = True
        log.info("closing connection from %s: SASL mechanism %r is not enabled",
                 ctx.client_host, request.mechanism[:64])
    else:
        code = ErrorCode.none
        session.mechanism = request.mechanism
        session.in_exchange = True
        if request.mechanism in SCRAM_MECHANISMS:
            credentials = ctx.broker.credentials
            session.exchange = ScramServer(
                request.mechanism, lambda user, m=request.mechanism: credentials.lookup(user, m))
    return build(ctx.response_class(), error_code=code, mechanisms=mechanisms)


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request) -> object:
    session = ctx.session
    if not session.in_exchange:
        session.close_after_response = True
        return _answer(ctx, ErrorCode.illegal_sasl_state,
                       "SaslAuthenticate must follow a SaslHandshake on a SASL listener")
    auth_bytes = bytes(request.auth_bytes)
    user = None
    try:
        if session.mechanism == PLAIN:
            user, password = parse_plain(auth_bytes)
            # PBKDF2 takes milliseconds: off the event loop, so other connections go on
            ok = await trio.to_thread.run_sync(ctx.broker.credentials.check_plain, user,
                                               password)
            if not ok:
                raise SaslError(INVALID_CREDENTIALS)
            return _success(ctx, user)
        exchange: ScramServer = session.exchange
        if exchange.stage == "first":
            return _answer(ctx, ErrorCode.none, None, exchange.first(auth_bytes))
        user = exchange.claimed_user or None
        server_final = exchange.final(auth_bytes)
        return _success(ctx, exchange.username, server_final)
    except SaslError as exc:
        session.close_after_response = True
        session.in_exchange = False
        log.info("authentication failed from %s (%s, user %r): %s", ctx.client_host,
                 session.mechanism, (user or "?")[:64], exc)
        return _answer(ctx, ErrorCode.sasl_authentication_failed,
                       f"Authentication failed during authentication due to invalid "
                       f"credentials with SASL mechanism {session.mechanism}"
                       if str(exc) == INVALID_CREDENTIALS else f"authentication failed: {exc}")


def _success(ctx: RequestContext, user: str, auth_bytes: bytes = b"") -> object:
    session = ctx.session
    principal = f"User:{user}"
    session.exchange = None
    session.in_exchange = False
    if session.authenticated and principal != session.principal:
        # Kafka: a re-authentication may not change who the connection is
        session.close_after_response = True
        log.info("closing connection from %s: re-authentication as %s, not %s",
                 ctx.client_host, principal, session.principal)
        return _answer(ctx, ErrorCode.sasl_authentication_failed,
                       f"cannot change principals during re-authentication from "
                       f"{session.principal}: {principal}")
    again = session.authenticated
    session.principal = principal
    session.authenticated = True
    # KIP-368: the login lasts connections.max.reauth.ms, told to clients that can hear it
    # (v1+); a v0 client is not told and is closed at expiry like any other.
    lifetime_ms = ctx.broker.config.connections_max_reauth_ms
    session.expires_at = trio.current_time() + lifetime_ms / 1000 if lifetime_ms else None
    log.debug("%s %s as %s (%s)", ctx.client_host,
              "re-authenticated" if again else "authenticated", session.principal,
              session.mechanism)
    return _answer(ctx, ErrorCode.none, None, auth_bytes, lifetime_ms)


def _answer(ctx: RequestContext, code: ErrorCode, message: str | None,
            auth_bytes: bytes = b"", lifetime_ms: int = 0) -> object:
    return build(ctx.response_class(), error_code=code, error_message=message,
                 auth_bytes=auth_bytes,
                 session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))
