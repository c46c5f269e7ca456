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

Shutdown (``Server.stop``): stop accepting, stop reading new requests, let every connection
write the answers it owes (bounded by ``drain_timeout``), then close.
"""

from __future__ import annotations

import logging
import struct

import trio

from databus.protocol.addresses import format_host_port
from databus.protocol.api_keys import ApiKey
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

from .api import Deferred, HandlerTable, RawResponse, RequestContext
from .handlers import handler_table
from .handlers.api_versions import unsupported_version_response

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
RECV_BYTES = 1 << 18
JOIN_BELOW = 1 << 16  # smaller answers are joined into one send; bigger ones are not copied
_I32 = struct.Struct(">i")


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
    def __init__(self, server: Server, stream: trio.SocketStream) -> None:
        self.server = server
        self.broker = server.broker
        self.handlers = server.handlers
        self.stream = stream
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:
            host, port = "?", 0
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
        frames = FrameBuffer(config.socket_request_max_bytes)
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
            if frames.pending_frame_size and not self._reserved:
                # queued.max.request.bytes: the rest of the body is read once its size fits
                await memory.reserve(frames.pending_frame_size)
                self._reserved = frames.pending_frame_size

    async def _dispatch(self, frame: bytes):
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion as exc:
            header, request = exc.header, None
        self._current = header
        registration = self.handlers.get(header.api_key)
        if registration is None or not registration.supports(header.api_version):
            log.info(
                "unsupported api key %d v%d from %s (client %r)",
                header.api_key, header.api_version, self.peer, header.client_id,
            )
            return header, self._unsupported(header, self.handlers)
        ctx = RequestContext(self.broker, header, self.host, self.port, frame, self.handlers)
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
        self.address: tuple[str, int] | None = None
        config = broker.config
        self.request_memory = RequestMemory(config.queued_max_request_bytes)
        self.connection_limits = ConnectionLimits(config.max_connections,
                                                  config.max_connections_per_ip)

    async def serve(self, listeners, host: str, *, task_status=trio.TASK_STATUS_IGNORED):
        """Serve on ``listeners`` (bound by the caller, see databus.startup, so that a port
        in use is known before storage is touched); ``host`` is the address as configured.
        Closes them when done."""
        try:
            bound = listeners[0].socket.getsockname()
            self.address = (host or bound[0], bound[1])
            self.broker.port = bound[1]
            # in the form every --bootstrap and listener setting accepts ([v6] bracketed)
            log.info("listening on %s", format_host_port(*self.address))
            async with trio.open_nursery() as connections:
                with self._accept_scope:
                    task_status.started(self.address)
                    await trio.serve_listeners(
                        self._handle, listeners, handler_nursery=connections
                    )
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
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    def stop(self) -> None:
        """Stop accepting; ``serve`` returns once connections have drained."""
        self._accept_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        connection = _Connection(self, stream)
        if not self.connection_limits.admit(connection.host, connection.peer):
            await trio.aclose_forcefully(stream)
            return
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            self.connection_limits.release(connection.host)
            self.request_memory.release(connection._reserved)
            self._connections.discard(connection)
            self._drained.set()
            await trio.aclose_forcefully(stream)
