"""SaslHandshake (17) and SaslAuthenticate (36): logging in on a SASL listener.

The order is Kafka's (KIP-152): ApiVersions (optional), SaslHandshake naming a mechanism,
then SaslAuthenticate round trips carrying the mechanism's messages (protocol/sasl.py):
one for PLAIN, two for SCRAM.  Success sets the connection's principal (``User:NAME``).

Anything else closes the connection after the answer, as Kafka does: a mechanism not in
``sasl.enabled.mechanisms`` (UNSUPPORTED_SASL_MECHANISM, listing the enabled ones), a
handshake or an authenticate out of order or on a non-SASL listener (ILLEGAL_SASL_STATE),
wrong credentials or a malformed message (SASL_AUTHENTICATION_FAILED, with the same words for
an unknown user and a wrong password).  A failed login is logged with the user name and the
peer, never with the password.  Re-authentication (KIP-368) is not offered: the session
lifetime is 0 (no expiry).
"""

from __future__ import annotations

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
    if session.authenticated or session.mechanism is not None:
        code = ErrorCode.illegal_sasl_state
        session.close_after_response = True
    elif request.mechanism not in mechanisms:
        code = ErrorCode.unsupported_sasl_mechanism
        session.close_after_response = True
        log.info("closing connection from %s: SASL mechanism %r is not enabled",
                 ctx.client_host, request.mechanism[:64])
    else:
        code = ErrorCode.none
        session.mechanism = request.mechanism
        if request.mechanism in SCRAM_MECHANISMS:
            credentials = ctx.broker.credentials
            session.exchange = ScramServer(
                request.mechanism, lambda user, m=request.mechanism: credentials.lookup(user, m))
    return build(ctx.response_class(), error_code=code, mechanisms=mechanisms)


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, request) -> object:
    session = ctx.session
    if session.authenticated or session.mechanism is None:
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
        log.info("authentication failed from %s (%s, user %r): %s", ctx.client_host,
                 session.mechanism, (user or "?")[:64], exc)
        return _answer(ctx, ErrorCode.sasl_authentication_failed,
                       f"Authentication failed during authentication due to invalid "
                       f"credentials with SASL mechanism {session.mechanism}"
                       if str(exc) == INVALID_CREDENTIALS else f"authentication failed: {exc}")


def _success(ctx: RequestContext, user: str, auth_bytes: bytes = b"") -> object:
    session = ctx.session
    session.principal = f"User:{user}"
    session.authenticated = True
    session.exchange = None
    log.debug("%s authenticated as %s (%s)", ctx.client_host, session.principal,
              session.mechanism)
    return _answer(ctx, ErrorCode.none, None, auth_bytes)


def _answer(ctx: RequestContext, code: ErrorCode, message: str | None,
            auth_bytes: bytes = b"") -> object:
    return build(ctx.response_class(), error_code=code, error_message=message,
                 auth_bytes=auth_bytes, session_lifetime=0)
