"""One TCP connection to one broker: pipelined requests, responses matched in order.

Kafka answers the requests of one connection in the order they were sent, so the connection
keeps a FIFO of pending requests; a single reader task splits the byte stream into frames
(protocol.framing.FrameBuffer), checks each frame's correlation id against the head of the
FIFO, decodes it with the api key/version that request used, and wakes the caller.  Writers
register and write under one lock, so FIFO order is wire order.

On connect the client sends ApiVersions and, for each api key, uses the highest version that
the broker, kio and this client (CLIENT_VERSIONS) all support.

With ``security`` (security.py) the stream is wrapped in TLS before anything is sent, and
a SASL login (SaslHandshake, SaslAuthenticate) follows the version negotiation; the
connection is usable only once both succeeded.  If the broker gives the login a lifetime
(KIP-368, ``connections.max.reauth.ms``), the connection logs in again before it ends, ahead
of the next request due then.

The socket comes from ``open_stream(host, port)`` (default ``trio.open_tcp_stream``): any
``trio.abc.Stream`` will do, which is the seam the timer tests use to put the client on one
end of a ``trio.testing`` memory stream with a scripted broker on the other.

Failure rules: a request not answered within ``request.timeout.ms`` closes the connection
and its socket at once (as Kafka's clients do: the stream position is unknowable after
that) and raises RequestTimedOutError, as do the other requests in flight on it; a closed or broken socket fails every pending request with
KafkaConnectionError; so does a caller cancelled while its frame was being written (the
stream is out of frame then), while one cancelled waiting for its answer leaves the
connection as it was.  Nothing waits forever.
"""

from __future__ import annotations

import collections
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from .. import __version__
from ..protocol.api_keys import ApiKey
from ..protocol.defaults import REQUEST_TIMEOUT_MS
from ..protocol.entities import build_request
from ..protocol.errors import ErrorCode
from ..protocol.framing import FrameBuffer, FramingError, decode_response, encode_request
from . import errors
from .security import Security

log = logging.getLogger(__name__)

# (min, max) versions this client speaks, per api key.  Floors: record format v2 (Produce 3,
# Fetch 4).  Ceilings stop before versions that address topics by id only.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (1, 12),
    # Group APIs stop at their last non-flexible version: librdkafka's mock cluster misreads
    # flexible JoinGroup (v6+) and SyncGroup (v4+) requests, and the older versions carry
    # everything the classic protocol needs.
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 2),  # the mock never answers v3 (its members array); v2 suffices
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # transactions (KIP-98/447): the versions Kafka's clients send before KIP-890
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    # Share groups (KIP-932): v1 is what Kafka 4.1+ serves (v0 was 4.0's early access);
    # v2 of ShareFetch/ShareAcknowledge adds RENEW (KIP-1222) and acquire modes (KIP-1206).
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DELETE_RECORDS: (0, 2),
}

# Opens the byte stream to a broker: ``await open_stream(host, port)``.
OpenStream = Callable[[str, int], Awaitable[trio.abc.Stream]]

MAX_RESPONSE_BYTES = 512 * 1024 * 1024
_RECV_CHUNK = 256 * 1024


@dataclass(eq=False)
class _Pending:
    correlation_id: int
    api_key: int
    version: int
    done: trio.Event = field(default_factory=trio.Event)
    response: Any = None
    error: BaseException | None = None


class BrokerConnection:
    """A connection to ``host:port``; open it with ``await conn.connect(nursery)``.

    ``node_id`` is the broker's id from metadata (-1, -2, ... for bootstrap addresses);
    ``open_stream`` opens the byte stream (default: a TCP connection).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str = "databus",
        request_timeout_ms: int = REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = 10000,
        open_stream: OpenStream | None = None,
        security: Security | None = None,
    ) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.security = security or Security()
        self._open_stream = open_stream or trio.open_tcp_stream
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self._stream: trio.abc.Stream | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._send_lock = trio.Lock()
        self._next_correlation_id = 0
        self._closed = False
        self._close_reason: BaseException | None = None
        self.closed_event = trio.Event()
        # KIP-368: when to log in again (None: the login does not expire), and while that
        # runs, its task (whose requests go through) and the event the others wait for.
        self._reauth_at: float | None = None
        self._reauth_task = None
        self._reauth_done: trio.Event | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self, nursery: trio.Nursery) -> None:
        """Open the socket, start the reader in ``nursery`` and negotiate api versions."""
        stream = None
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await self._open_stream(self.host, self.port)
                self._stream = await self.security.wrap(stream, self.host)
        except errors.KafkaConnectionError:
            self._closed = True
            self.closed_event.set()
            raise
        except (OSError, trio.TooSlowError) as exc:
            if stream is not None:  # connected, but the TLS handshake did not finish
                await trio.aclose_forcefully(stream)
            self._closed = True
            self.closed_event.set()
            raise errors.KafkaConnectionError(
                f"cannot connect to broker {self.node_id} at {self.host}:{self.port}: {exc}"
            ) from None
        nursery.start_soon(self._reader)
        try:
            await self._negotiate_versions()
            if self.security.sasl:
                await self._login()
        except BaseException:
            await self.aclose()
            raise

    async def _login(self) -> None:
        lifetime_ms = await self.security.login(self)
        # As Kafka's clients: again at 85-95% of the lifetime (spread, so connections made
        # together do not all log in again together).
        self._reauth_at = (trio.current_time() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)
                           if lifetime_ms > 0 else None)

    async def _reauthenticate_if_due(self) -> None:
        """KIP-368: before a request, log in again if the login is due to expire; requests
        of other tasks wait until that is done (Kafka's brokers take nothing else in between).
        A failure closes the connection (the broker has closed it too)."""
        task = trio.lowlevel.current_task()
        if self._reauth_task is task:
            return  # the re-authentication's own requests
        if self._reauth_done is not None:
            await self._reauth_done.wait()
            return
        if self._reauth_at is None or trio.current_time() < self._reauth_at:
            return
        self._reauth_task, self._reauth_done = task, trio.Event()
        try:
            await self._login()
            log.debug("%s: logged in again (KIP-368)", self)
        except BaseException as exc:
            # half an exchange leaves the connection unusable, whatever interrupted it
            self._fail(exc if isinstance(exc, errors.KafkaError) else
                       errors.KafkaConnectionError(f"{self}: re-authentication interrupted"))
            raise
        finally:
            done, self._reauth_task, self._reauth_done = self._reauth_done, None, None
            done.set()

    async def _negotiate_versions(self) -> None:
        fields = {"client_software_name": "databus", "client_software_version": __version__}
        try:
            response = await self._request_version(ApiKey.API_VERSIONS, 3, fields)
        except errors.RequestTimedOutError as exc:
            # The first request of a connection: a peer that stays silent is most likely
            # not a Kafka broker (or is hung); say so, naming the address.
            raise errors.RequestTimedOutError(
                f"{self.host}:{self.port} accepted the connection but did not answer the "
                f"Kafka handshake (ApiVersions) within {self.request_timeout:g}s: is it a "
                f"Kafka broker? ({exc})") from None
        except errors.KafkaConnectionError:
            raise
        except (FramingError, errors.UnsupportedVersionError):
            response = None
        if response is None or response.error_code == ErrorCode.unsupported_version:
            # An old broker answers an unknown ApiVersions version with UNSUPPORTED_VERSION
            # in the v0 body; v0 is understood by every broker.
            response = await self._request_version(ApiKey.API_VERSIONS, 0, {})
        errors.raise_for_code(response.error_code, f"ApiVersions from {self}")
        self.broker_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        for key, (lo, hi) in CLIENT_VERSIONS.items():
            if key not in self.broker_versions:
                continue
            blo, bhi = self.broker_versions[key]
            best = min(hi, bhi)
            if best >= max(lo, blo):
                self.versions[key] = best

    def version(self, api_key: int) -> int:
        """The negotiated version for ``api_key``; UnsupportedVersionError if none."""
        try:
            return self.versions[api_key]
        except KeyError:
            raise errors.UnsupportedVersionError(
                f"broker {self.node_id} ({self.host}:{self.port}) supports no version of api key "
                f"{api_key} that this client speaks (broker: {self.broker_versions.get(api_key)}, "
                f"client: {CLIENT_VERSIONS.get(api_key)})"
            ) from None

    async def request(
        self,
        api_key: int,
        fields: Mapping[str, Any],
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Any:
        """Send one request built from ``fields`` at the negotiated version; return the response.

        ``timeout`` (seconds) defaults to request.timeout.ms; it should cover any broker-side
        wait the request asks for (e.g. a Fetch's max wait).
        """
        return await self._request_version(
            api_key, self.version(api_key), fields, expect_response=expect_response,
            timeout=timeout,
        )

    async def _request_version(
        self,
        api_key: int,
        version: int,
        fields: Mapping[str, Any],
        *,
        expect_response: bool = True,
        timeout: float | None = None,
    ) -> Any:
        body = build_request(api_key, version, fields)
        return await self.send_body(body, expect_response=expect_response, timeout=timeout)

    async def send_body(
        self, body: Any, *, expect_response: bool = True, timeout: float | None = None
    ) -> Any:
        """Send an already-built kio request; see request()."""
        pending = await self.write(body, expect_response=expect_response)
        if pending is None:
            return None
        return await self.wait(pending, timeout)

    async def write(self, body: Any, *, expect_response: bool = True) -> _Pending | None:
        """Put a request on the wire; returns the handle to wait() on (None when no response
        is expected).  Requests written one after the other are answered in that order, so
        a caller that must keep an order (the producer) writes in order, then waits."""
        if self._closed or self._stream is None:
            raise self._closed_error()
        await self._reauthenticate_if_due()
        if self._closed:
            raise self._closed_error()
        async with self._send_lock:
            if self._closed:
                raise self._closed_error()
            # A cancellation that came while this task waited for the lock (or was being
            # rescheduled with it) is honoured here, before the request is registered and
            # while none of it is on the wire: the connection stays in frame and usable.
            await trio.lowlevel.checkpoint_if_cancelled()
            correlation_id = self._next_correlation_id
            self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
            frame = encode_request(body, correlation_id, self.client_id)
            pending = None
            if expect_response:
                pending = _Pending(correlation_id, body.__api_key__, body.__version__)
                self._pending.append(pending)
            stream = self._stream
            try:
                if stream is None:
                    raise trio.ClosedResourceError("stream closed")
                await stream.send_all(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._fail(errors.KafkaConnectionError(f"{self}: send failed: {exc}"))
                raise self._closed_error() from None
            except BaseException:
                # Interrupted inside send_all (a cancelled caller): an unknown part of the
                # frame is on the wire, so the broker would read the next request as the rest
                # of this one, and this request sits in the FIFO where the next answer would
                # be matched to it.  The stream is out of frame for good: close it (trio's
                # rule for a cancelled send_all, and what Kafka's clients do).
                self._fail(errors.KafkaConnectionError(
                    f"{self}: closed: a request (api key {body.__api_key__}) was interrupted "
                    "while being written"))
                with trio.CancelScope(shield=True):
                    await self.aclose()
                raise
        return pending

    async def wait(self, pending: _Pending, timeout: float | None = None) -> Any:
        """The response to a written request, within ``timeout`` (default request.timeout.ms)."""
        limit = self.request_timeout if timeout is None else timeout
        with trio.move_on_after(limit if limit is not None else math.inf):
            await pending.done.wait()
        if not pending.done.is_set():
            err = errors.RequestTimedOutError(
                f"{self}: no response to api key {pending.api_key} within {limit:.3f}s"
            )
            # As Kafka's NetworkClient (a request timeout disconnects the node): the socket
            # is closed now, not when the broker next writes or hangs up, so a late answer
            # cannot arrive, the broker sees the client go, and the next request opens a
            # new connection.  The other requests in flight fail with this error (retriable).
            self._fail(err)
            await self._close_stream()
            raise err
        if pending.error is not None:
            raise pending.error
        return pending.response

    def _closed_error(self) -> errors.KafkaError:
        reason = self._close_reason
        if isinstance(reason, errors.KafkaError):
            return type(reason)(str(reason))
        return errors.KafkaConnectionError(f"{self} is closed")

    async def _reader(self) -> None:
        frames = FrameBuffer(MAX_RESPONSE_BYTES)
        stream = self._stream
        head = b""  # the first bytes the peer sent, to name a peer that is not Kafka
        delivered = False
        try:
            while True:
                data = await stream.receive_some(_RECV_CHUNK)
                if not data:
                    raise errors.KafkaConnectionError(f"{self}: broker closed the connection")
                if len(head) < 80:
                    head += data[:80 - len(head)]
                frames.feed(data)
                for frame in frames.frames():
                    self._deliver(frame)
                    delivered = True
        except errors.KafkaError as exc:
            self._fail(exc)
        except FramingError as exc:
            if not delivered:
                # Nothing Kafka-shaped ever came back (an HTTP server answers "HTTP/1.1 400",
                # whose first four bytes read as a 1.2 GB frame): name the peer, not the frame.
                first_line = head.split(b"\n")[0].rstrip(b"\r").decode("latin-1")
                self._fail(errors.KafkaConnectionError(
                    f"{self.host}:{self.port} is not a Kafka broker: it answered "
                    f"{first_line!r}"))
            else:
                self._fail(errors.KafkaConnectionError(f"{self}: undecodable response: {exc}"))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(errors.KafkaConnectionError(f"{self}: connection lost: {exc!r}"))
        finally:
            with trio.CancelScope(shield=True):
                await self.aclose()

    def _deliver(self, frame: bytes) -> None:
        if not self._pending:
            raise errors.KafkaConnectionError(f"{self}: response without a request")
        pending = self._pending.popleft()
        # The correlation id first: an answer to another request would not decode with this
        # request's schema, and the mismatch is the thing to report.
        if len(frame) >= 4 and (got := int.from_bytes(frame[:4], "big", signed=True)) != (
                pending.correlation_id):
            raise errors.KafkaConnectionError(
                f"{self}: correlation id {got} does not match the oldest pending "
                f"request ({pending.correlation_id})"
            )
        _, body = decode_response(frame, pending.api_key, pending.version)
        pending.response = body
        pending.done.set()

    def _fail(self, exc: BaseException) -> None:
        if not self._closed:
            self._closed = True
            self._close_reason = exc
            log.debug("%s closed: %s", self, exc)
        while self._pending:
            pending = self._pending.popleft()
            pending.error = exc
            pending.done.set()
        self.closed_event.set()

    async def aclose(self) -> None:
        self._fail(errors.KafkaConnectionError(f"{self} was closed"))
        await self._close_stream()

    async def _close_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()
