"""The registry's HTTP/1.1 server: h11 (the sans-I/O HTTP/1.1 parser hypercorn itself uses)
over trio sockets, running the ASGI app (http.py) one request at a time per connection.

Why not hypercorn, as the console: a lookup by id (``GET /schemas/ids/{id}``, what every
deserializer asks once per id) is answered from a cache in microseconds, and hypercorn's
per-request machinery (a task per request, its event queues, timers) cost more than that
several times over — a do-nothing app under hypercorn has a p99 of 5.7 ms on a loaded
2-core machine.  This server does only what the registry needs: HTTP/1.1 with keep-alive,
bodies streamed to the app as they arrive (a body larger than the registry takes is
answered 413 while the client still sends), ``Expect: 100-continue``, a 400 for what h11
cannot parse, a 500 for an app that fails before answering, and an idle connection closed
after ``KEEP_ALIVE_SEC`` — no HTTP/2, no pipelining beyond h11's one request at a time, no
TLS (the registry has none: docs/schemas.md "Not yet").
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from urllib.parse import unquote

import h11
import trio

from databus.protocol.addresses import format_host_port, parse_host_port

log = logging.getLogger("databus.schemas")

KEEP_ALIVE_SEC = 75.0  # idle keep-alive connections (hypercorn's default is 5 s; nginx's 75)
_READ = 65536
_DRAIN_LIMIT = 64 << 20  # what is read on of a body the app left unread, before closing
_SERVER = [(b"server", b"databus")]


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Disconnected(Exception):
    pass


async def serve(app, listen: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``listen`` (HOST:PORT, port 0: a free one) until cancelled;
    ``task_status.started(url)`` once it accepts connections."""
    host, port = parse_host_port(listen, allow_port_zero=True, what="schema.registry.listen")
    host = host or "0.0.0.0"
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()
    url = f"http://{format_host_port(host, bound[1])}"
    async with trio.open_nursery() as nursery:
        task_status.started(url)
        await trio.serve_listeners(lambda stream: _connection(app, stream, bound),
                                   listeners, handler_nursery=nursery)


async def _connection(app, stream: trio.SocketStream, server: tuple) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)
    try:
        peer = stream.socket.getpeername()
        client = (peer[0], peer[1])
    except OSError:
        client = None
    try:
        while True:
            with trio.move_on_after(KEEP_ALIVE_SEC) as idle:
                event = await _next_event(conn, stream)
            if idle.cancelled_caught or event is None:
                return
            if isinstance(event, h11.Request):
                await _request(app, conn, stream, event, client, server)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
            elif conn.our_state is not h11.IDLE:
                return  # (an answer we could not finish)
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            body = b'{"error_code":400,"message":"Bad request: %s"}' % str(exc).encode(
                "ascii", "replace").replace(b'"', b"'")
            await _send_simple(conn, stream, exc.error_status_hint, body)
    except (_Disconnected, trio.BrokenResourceError, trio.ClosedResourceError,
            ConnectionError):
        pass
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            await stream.aclose()


async def _next_event(conn: h11.Connection, stream):
    """The next h11 event, reading as needed; None when the client has gone."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(_READ))  # (b"": EOF, which h11
            continue  # turns into ConnectionClosed, or an error mid-request)
        if isinstance(event, h11.ConnectionClosed):
            return None
        return event


async def _send(conn: h11.Connection, stream, event) -> None:
    data = conn.send(event)
    if data:
        await stream.send_all(data)


async def _send_simple(conn, stream, status: int, body: bytes) -> None:
    try:
        await _send(conn, stream, h11.Response(status_code=status, reason=_reason(status), headers=[
            *_SERVER, (b"content-type", b"application/vnd.schemaregistry.v1+json"),
            (b"content-length", b"%d" % len(body)), (b"connection", b"close")]))
        await _send(conn, stream, h11.Data(data=body))
        await _send(conn, stream, h11.EndOfMessage())
    except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError,
            ConnectionError):
        pass


async def _request(app, conn: h11.Connection, stream, request: h11.Request, client,
                   server: tuple) -> None:
    target = bytes(request.target)
    path, _, query = target.partition(b"?")
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(), "method": request.method.decode(),
        "scheme": "http", "path": unquote(path.decode("latin-1")), "raw_path": path,
        "query_string": query, "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.headers],
        "client": client, "server": server[:2],
    }
    state = {"started": False, "done": False, "body_done": False}

    async def receive():
        if state["body_done"] or state["done"]:
            await trio.sleep_forever()  # (no disconnect notice: the apps here never wait)
        if conn.client_is_waiting_for_100_continue:
            await _send(conn, stream, h11.InformationalResponse(status_code=100,
                                                                headers=_SERVER))
        event = await _next_event(conn, stream)
        if event is None:
            raise _Disconnected
        if isinstance(event, h11.Data):
            return {"type": "http.request", "body": bytes(event.data), "more_body": True}
        state["body_done"] = True  # EndOfMessage
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            state["started"] = True
            headers = [*_SERVER, *[(bytes(k), bytes(v)) for k, v in message.get("headers", ())]]
            await _send(conn, stream, h11.Response(status_code=message["status"],
                                                   reason=_reason(message["status"]),
                                                   headers=headers))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                await _send(conn, stream, h11.Data(data=message["body"]))
            if not message.get("more_body", False):
                await _send(conn, stream, h11.EndOfMessage())
                state["done"] = True

    try:
        await app(scope, receive, send)
    except (_Disconnected, trio.BrokenResourceError, trio.ClosedResourceError,
            ConnectionError):
        raise
    except Exception:  # noqa: BLE001 - the app failed: a 500 if it had not answered yet
        log.exception("schema registry: %s %s failed", scope["method"], scope["path"])
        if not state["started"]:
            await _send_simple(conn, stream, 500, b'{"error_code":50001,"message":'
                               b'"Error in the backend data store"}')
        return
    if not state["done"]:
        if not state["started"]:
            await _send_simple(conn, stream, 500, b'{"error_code":50001,"message":'
                               b'"no answer"}')
        return
    # the app answered without reading the whole body (a 413, say): read the rest away so
    # the connection can serve the next request, up to a limit, else close it
    drained = 0
    while conn.their_state is h11.SEND_BODY and drained <= _DRAIN_LIMIT:
        event = await _next_event(conn, stream)
        if event is None:
            return
        if isinstance(event, h11.Data):
            drained += len(event.data)
