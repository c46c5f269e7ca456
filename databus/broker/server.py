"""The TCP side of the broker: accept connections, split frames, dispatch, answer in order.

Per connection two tasks share a bounded queue.  The reader decodes one request at a time and
runs its handler (so appends happen in request order); the writer sends the answers in the
same order, awaiting a ``Deferred`` answer (acks=all Produce) only when it is its turn.  While
the writer waits for an fsync, the reader already handles the next pipelined request, so one
group commit covers them all.  The queue bound (MAX_IN_FLIGHT) and the frame-size check
before buffering (FrameBuffer) keep a connection's memory bounded.

A frame that cannot be decoded, or a handler that fails, closes only that connection, logged
as one WARNING with the peer, API key, version and reason (never a traceback: fuzzed
requests must not flood the log; it is logged at DEBUG).  An unknown key or version is answered with
UNSUPPORTED_VERSION (see protocol/unsupported.py; ApiVersions gets its v0-format key list).

Listeners (listeners.py): the server accepts on every listener of the broker at once.  On an
SSL or SASL_SSL listener the TLS handshake happens in the connection's task (bounded by
``TLS_HANDSHAKE_TIMEOUT``; a failed handshake closes that connection only).  Each connection
has a ``Session`` (api.py): on a SASL listener nothing but ApiVersions, SaslHandshake and
SaslAuthenticate is answered until the login succeeds; any other request closes the
connection, as Kafka does.  A handler that marks the session ``close_after_response`` (a
failed login) gets its answer written at once, and the connection is closed
``connection.failed.authentication.delay.ms`` later (Kafka's KIP-306).

Shutdown (``Server.stop``): stop accepting, stop reading new requests, let every connection
write the answers it owes (bounded by ``drain_timeout``), then close.
"""

from __future__ import annotations

import functools
import logging
import ssl
import struct
from dataclasses import dataclass

import trio

from databus.protocol.addresses import format_host_port
from databus.protocol.api_keys import ApiKey
from databus.protocol.error_downgrades import downgrade_response
from databus.protocol.framing import (
    FrameBuffer,
    FramingError,
    UnsupportedVersion,
    decode_request,
    encode_response,
    response_header_flexible,
)
from databus.protocol.unsupported import bare_error_body, error_response
from databus.service.limits import ConnectionLimits, RequestMemory

from .api import Deferred, HandlerTable, RawResponse, RequestContext, Session
from .authorizer import refusal
from .handlers import handler_table
from .handlers.api_versions import unsupported_version_response
from .listeners import Listener, certificate_principal

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
RECV_BYTES = 1 << 18
JOIN_BELOW = 1 << 16  # smaller answers are joined into one send; bigger ones are not copied
_I32 = struct.Struct(">i")
TLS_HANDSHAKE_TIMEOUT = 10.0
# What a connection on a SASL listener may ask before it has logged in.
BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class _NotLoggedIn(Exception):
    """A request other than the login ones before SASL authentication, or after the login
    expired (KIP-368, connections.max.reauth.ms): close."""


class _LoginExpired(_NotLoggedIn):
    """A request other than a re-authentication after the SASL login expired: close (the
    usual end of a client that does not re-authenticate, logged at INFO)."""


# What a connection whose SASL login has expired may still send: a re-authentication.
REAUTHENTICATION = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass
class Endpoint:
    """One listener as served: its sockets (bound by the caller) and, for SSL and SASL_SSL,
    the TLS context."""

    listener: Listener
    sockets: list
    ssl_context: ssl.SSLContext | None = None


def _frame_parts(header, result) -> list:
    """Size-prefixed response frame for ``result`` as a list of buffers."""
    if isinstance(result, RawResponse):
        head = _I32.pack(header.correlation_id)
        if response_header_flexible(header.api_key, header.api_version):
            head += b"\0"
        size = len(head) + sum(len(part) for part in result.parts)
        return [_I32.pack(size) + head, *result.parts]
    return [encode_response(header.api_key, header.api_version, header.correlation_id, result)]


class _Connection:
    def __init__(self, server: Server, stream: trio.abc.Stream, peer: tuple[str, int],
                 session: Session) -> None:
        self.server = server
        self.broker = server.broker
        self.handlers = server.handlers
        self.stream = stream
        self.session = session
        host, port = peer
        self.peer = f"{host}:{port}"
        self.host, self.port = host, port
        self.read_scope = trio.CancelScope()
        self._send_scope: trio.CancelScope | None = None
        self._current = None  # the header of the request being handled, for the log
        self._reserved = 0  # bytes of queued.max.request.bytes held by the frame being read

    def abort(self) -> None:
        """Drop what this connection still owes (shutdown after the drain timeout)."""
        if self._send_scope is not None:
            self._send_scope.cancel()

    async def run(self) -> None:
        send, receive = trio.open_memory_channel(MAX_IN_FLIGHT)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop, receive, nursery.cancel_scope)
            async with send:
                try:
                    with self.read_scope:
                        await self._read_loop(send)
                except FramingError as exc:
                    log.warning("closing connection from %s: %s", self.peer, exc)
                    nursery.cancel_scope.cancel()
                except _NotLoggedIn as exc:
                    log.log(logging.INFO if isinstance(exc, _LoginExpired) else logging.WARNING,
                            "closing connection from %s: %s", self.peer, exc)
                    nursery.cancel_scope.cancel()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    nursery.cancel_scope.cancel()
                except Exception as exc:
                    # A request that decodes but makes no sense (fuzzed, hostile) lands here:
                    # one line naming who sent what, the traceback only at DEBUG, so an
                    # attacker cannot flood the log with them.
                    header = self._current
                    log.warning(
                        "closing connection from %s: api key %s v%s (client %r) failed: %s: %s",
                        self.peer, header.api_key if header else "?",
                        header.api_version if header else "?",
                        header.client_id if header else None, type(exc).__name__, exc,
                    )
                    log.debug("the failed request's traceback", exc_info=True)
                    nursery.cancel_scope.cancel()

    async def _read_loop(self, send) -> None:
        config = self.broker.config
        # Before a SASL login a frame may be at most sasl.server.max.receive.size (Kafka's
        # bound on what an unauthenticated peer can make the broker buffer).
        frames = FrameBuffer(config.socket_request_max_bytes if self.session.authenticated
                             else config.sasl_server_max_receive_size)
        memory = self.server.request_memory
        while True:
            with trio.move_on_after(config.connections_max_idle_ms / 1000) as idle:
                data = await self.stream.receive_some(RECV_BYTES)
            if idle.cancelled_caught:
                log.info("closing connection from %s: nothing received for %d ms "
                         "(connections.max.idle.ms)", self.peer, config.connections_max_idle_ms)
                return
            if not data:
                return
            frames.feed(data)
            while (frame := frames.next_frame()) is not None:
                item = await self._dispatch(frame)
                memory.release(self._reserved)
                self._reserved = 0
                if item is not None:
                    # The request has been handled (maybe appended): its answer must reach
                    # the writer even if shutdown cancels reading right now.
                    with trio.CancelScope(shield=True) as self._send_scope:
                        await send.send(item)
                    self._send_scope = None
                if self.session.close_after_response:
                    # A refused login: the writer sends the answer now; the connection
                    # closes connection.failed.authentication.delay.ms later, as Kafka's
                    # (KIP-306).  Besides slowing guessers, this keeps the answer and the
                    # close apart: a client that reads them in one go may drop the answer
                    # (kafka-python 3.0 reports "socket disconnected" instead).
                    await trio.sleep(config.connection_failed_authentication_delay_ms / 1000)
                    return
                if self.session.authenticated:
                    frames.max_frame_bytes = config.socket_request_max_bytes
            if frames.pending_frame_size and not self._reserved:
                # queued.max.request.bytes: the rest of the body is read once its size fits
                await memory.reserve(frames.pending_frame_size)
                self._reserved = frames.pending_frame_size

    async def _dispatch(self, frame: bytes):
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion as exc:
            header, request = exc.header, None
        if not self.session.authenticated and header.api_key not in BEFORE_LOGIN:
            # not even an UNSUPPORTED_VERSION answer: nothing before the login
            name = self.session.listener.name if self.session.listener else "?"
            raise _NotLoggedIn(f"api key {header.api_key} before SASL authentication on "
                               f"listener {name}")
        if header.api_key not in REAUTHENTICATION and self.session.expired(trio.current_time()):
            raise _LoginExpired(f"its SASL login as {self.session.principal} expired "
                               f"(connections.max.reauth.ms) and api key {header.api_key} is "
                               "not a re-authentication")
        self._current = header
        registration = self.handlers.get(header.api_key)
        if registration is None or not registration.supports(header.api_version):
            log.info(
                "unsupported api key %d v%d from %s (client %r)",
                header.api_key, header.api_version, self.peer, header.client_id,
            )
            return header, self._unsupported(header, self.handlers)
        ctx = RequestContext(self.broker, header, self.host, self.port, frame, self.handlers,
                             self.session)
        refused = refusal(ctx, request)
        if refused is not None:
            return header, error_response(header.api_key, header.api_version, refused)
        result = await registration.handler(ctx, request)
        if result is None:
            return None
        return header, result

    @staticmethod
    def _unsupported(header, handlers):
        if header.api_key == ApiKey.API_VERSIONS:
            return _AsV0(unsupported_version_response(handlers))
        try:
            return error_response(header.api_key, header.api_version)
        except LookupError:
            return RawResponse([bare_error_body()])

    async def _write_loop(self, receive, connection_scope: trio.CancelScope) -> None:
        try:
            async with receive:
                async for header, result in receive:
                    if isinstance(result, Deferred):
                        result = await result.result()
                    if result is None:
                        continue
                    if isinstance(result, _AsV0):
                        parts = [encode_response(header.api_key, 0, header.correlation_id,
                                                 result.body)]
                    else:
                        if not isinstance(result, RawResponse):
                            # the one place error codes newer than the request's version
                            # are mapped down (raw encoders apply the same table themselves)
                            result = downgrade_response(header.api_key, header.api_version,
                                                        result)
                        parts = _frame_parts(header, result)
                    await self._send(parts)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            connection_scope.cancel()
        except Exception:
            log.exception("closing connection from %s: answering failed", self.peer)
            connection_scope.cancel()

    async def _send(self, parts: list) -> None:
        if len(parts) == 1:
            await self.stream.send_all(parts[0])
            return
        total = sum(len(p) for p in parts)
        if total < JOIN_BELOW:
            await self.stream.send_all(b"".join(parts))
            return
        for part in parts:
            if len(part):
                await self.stream.send_all(part)


class _AsV0:
    """An ApiVersions answer that must be encoded as v0 whatever the request version."""

    __slots__ = ("body",)

    def __init__(self, body) -> None:
        self.body = body


class Server:
    """Listens for Kafka clients and serves them from a running Broker."""

    def __init__(self, broker, *, handlers: HandlerTable | None = None,
                 drain_timeout: float = 5.0) -> None:
        self.broker = broker
        # The APIs this server answers: by default every handler of handlers/__init__.py.
        self.handlers = handler_table() if handlers is None else handlers
        self.drain_timeout = drain_timeout
        self._connections: set[_Connection] = set()
        self._accept_scope = trio.CancelScope()
        self._drained = trio.Event()  # set whenever a connection ends
        self.address: tuple[str, int] | None = None  # the first listener's
        self.addresses: dict[str, tuple[str, int]] = {}  # listener name -> bound address
        config = broker.config
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        self.connection_limits = ConnectionLimits(config.max_connections,
                                                  config.max_connections_per_ip)
        broker.config_listeners.append(self._reconfigure)

    async def serve(self, listeners, host: str = "", *,
                    task_status=trio.TASK_STATUS_IGNORED):
        """Serve on ``listeners``: a list of ``Endpoint`` (one per configured listener), or
        plain trio listeners for one PLAINTEXT listener.  They are bound by the caller (see
        databus.startup) so that a port in use is known before storage is touched; ``host``
        is a plain listener's address as configured.  Closes them all when done.
        ``task_status`` gets the first listener's (host, port)."""
        endpoints = [ep if isinstance(ep, Endpoint) else None for ep in listeners]
        if not all(endpoints):
            endpoints = [Endpoint(Listener("PLAINTEXT", "PLAINTEXT", host, 0), list(listeners))]
        try:
            for endpoint in endpoints:
                bound = endpoint.sockets[0].socket.getsockname()
                address = (endpoint.listener.host or bound[0], bound[1])
                self.addresses[endpoint.listener.name] = address
                self.broker.bound[endpoint.listener.name] = address
                # in the form every --bootstrap and listener setting accepts ([v6] bracketed)
                log.info("listening on %s (%s, %s)", format_host_port(*address),
                         endpoint.listener.name, endpoint.listener.protocol)
            self.address = self.addresses[endpoints[0].listener.name]
            self.broker.port = self.address[1]
            async with trio.open_nursery() as connections:
                with self._accept_scope:
                    task_status.started(self.address)
                    async with trio.open_nursery() as accepting:
                        for endpoint in endpoints:
                            accepting.start_soon(functools.partial(
                                trio.serve_listeners,
                                functools.partial(self._handle, endpoint),
                                endpoint.sockets, handler_nursery=connections))
                # Accepting stopped: let connections answer what they owe, then close them.
                for connection in list(self._connections):
                    connection.read_scope.cancel()
                with trio.move_on_after(self.drain_timeout):
                    while self._connections:
                        self._drained = trio.Event()
                        await self._drained.wait()
                for connection in list(self._connections):
                    connection.abort()
                connections.cancel_scope.cancel()
        finally:
            for endpoint in endpoints:
                for listener in endpoint.sockets:
                    await trio.aclose_forcefully(listener)

    def _reconfigure(self, config) -> None:
        """max.connections(.per.ip) changed by a dynamic broker config: from the next
        connection on."""
        self.connection_limits.max_connections = config.max_connections
        self.connection_limits.max_per_ip = config.max_connections_per_ip

    def stop(self) -> None:
        """Stop accepting; ``serve`` returns once connections have drained."""
        self._accept_scope.cancel()

    async def _handle(self, endpoint: Endpoint, stream: trio.SocketStream) -> None:
        try:
            peer = tuple(stream.socket.getpeername()[:2])
        except OSError:
            peer = ("?", 0)
        host = str(peer[0])
        # max.connections(.per.ip) before anything else, the TLS handshake included
        if not self.connection_limits.admit(host, f"{peer[0]}:{peer[1]}"):
            await trio.aclose_forcefully(stream)
            return
        principal = None
        if endpoint.ssl_context is not None:
            tls = trio.SSLStream(stream, endpoint.ssl_context, server_side=True)
            try:
                with trio.fail_after(TLS_HANDSHAKE_TIMEOUT):
                    await tls.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError) as exc:
                cause = exc.__cause__ or exc
                log.info("TLS handshake with %s:%s on listener %s failed: %s", *peer,
                         endpoint.listener.name, cause or type(exc).__name__)
                self.connection_limits.release(host)
                await trio.aclose_forcefully(stream)
                return
            if not endpoint.listener.sasl:
                principal = certificate_principal(tls.getpeercert())
            stream = tls
        connection = _Connection(self, stream, peer,
                                 Session.for_listener(endpoint.listener, principal))
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connection_limits.release(connection.host)
            self.request_memory.release(connection._reserved)
            self._connections.discard(connection)
            self._drained.set()
            await trio.aclose_forcefully(stream)
