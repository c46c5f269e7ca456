"""Handlers and the handler table: which Kafka API (key, version range) is answered by which
coroutine.

A handler declares what it answers with ``@handles(api_key, min_version, max_version)``;
the declaration only labels the function (nothing global is registered).  The table of a
broker is built explicitly by ``databus.broker.handlers.handler_table()`` from the list of
handlers there, and each ``Server`` owns its own table: it dispatches through it,
ApiVersions answers from it, and docs/protocol.md is checked against it by a test, so what
the broker advertises is exactly what it handles.

A handler is ``async def handler(ctx: RequestContext, request) -> response | None``: it takes
a decoded kio request and returns a kio response of the same API and version (see
``response_class``), or None to send nothing (Produce with acks=0).  Handlers never touch
sockets; only the server loop does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from databus.protocol.framing import RequestHeader, response_schema
from databus.storage.acls import ANONYMOUS, CLUSTER_NAME, Operation, ResourceType

from .listeners import Listener

if TYPE_CHECKING:  # pragma: no cover
    from .broker import Broker

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass
class Session:
    """Who is on the other end of one connection, and how far its SASL exchange has got.

    On a PLAINTEXT or SSL listener a connection is authenticated from the start (as
    ``User:ANONYMOUS``, or the subject of a verified client certificate); on a SASL one only
    once SaslAuthenticate succeeds, and until then the server answers nothing but
    ApiVersions, SaslHandshake and SaslAuthenticate (handlers/sasl.py owns the exchange).
    With ``connections.max.reauth.ms`` a login lasts that long (KIP-368): the client logs in
    again on the same connection before then, or the connection is closed.
    """

    listener: Listener | None = None
    principal: str = ANONYMOUS
    authenticated: bool = True
    mechanism: str | None = None  # chosen by SaslHandshake
    exchange: Any = None  # the ScramServer of a SCRAM exchange in progress
    in_exchange: bool = False  # a SaslHandshake awaits its SaslAuthenticate(s)
    close_after_response: bool = False  # a failed login: answer, then hang up
    # KIP-368: when the login ends (trio.current_time(); None: never).  After it, any
    # request but SaslHandshake / SaslAuthenticate (a re-authentication) closes.
    expires_at: float | None = None
    # What the client said it is in ApiVersions v3+ (KIP-511): client-metrics match on it.
    client_software_name: str | None = None
    client_software_version: str | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @classmethod
    def for_listener(cls, listener: Listener | None, principal: str | None = None) -> Session:
        sasl = listener is not None and listener.sasl
        return cls(listener, principal or ANONYMOUS, authenticated=not sasl)


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    broker: Broker
    header: RequestHeader
    client_host: str = ""
    client_port: int = 0
    # The whole request frame (header included): for handlers that parse versions kio lacks.
    frame: bytes = b""
    # The serving Server's handler table (what ApiVersions advertises).
    handlers: HandlerTable = field(default_factory=dict)
    # The connection's listener and principal (PLAINTEXT and anonymous by default).
    session: Session = field(default_factory=Session)

    @property
    def listener_name(self) -> str | None:
        return self.session.listener.name if self.session.listener else None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether this connection's principal may do ``operation`` on the resource."""
        return self.broker.authorizer.authorize(
            self.session.principal, self.client_host, operation, resource_type, name)

    def cluster_allowed(self, operation: Operation) -> bool:
        return self.allowed(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    def response_class(self) -> type:
        """The kio response schema matching this request's API key and version."""
        return response_schema(self.header.api_key, self.header.api_version)

    def response_module(self):
        """The kio module holding the response schema and its nested entity classes."""
        import sys

        return sys.modules[self.response_class().__module__]


@dataclass(frozen=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


HandlerTable = dict[int, Registration]


class RegistryError(RuntimeError):
    """Two handlers claimed the same API key, a version range is invalid, or a handler in a
    table was not declared with ``@handles``."""


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Declare the decorated coroutine as the handler of ``api_key`` versions min..max (it is
    answered only once a handler table lists it, see ``build_table``).

    Versions in the range that kio has no schema for must be answered by the handler without
    a decoded body (only Produce v0-2 do that, see handlers/produce.py).
    """
    if not 0 <= min_version <= max_version:
        raise RegistryError(f"invalid version range {min_version}..{max_version}")

    def declare(handler: Handler) -> Handler:
        handler.registration = Registration(api_key, min_version, max_version, handler)
        return handler

    return declare


def build_table(handlers: Iterable[Handler]) -> HandlerTable:
    """api key -> Registration of each of ``handlers``, sorted by key (the order ApiVersions
    lists them in); a key claimed twice raises RegistryError naming both handlers."""
    table: HandlerTable = {}
    for handler in handlers:
        registration = getattr(handler, "registration", None)
        if not isinstance(registration, Registration):
            raise RegistryError(f"{_name(handler)} is not declared with @handles")
        existing = table.get(registration.api_key)
        if existing is not None:
            raise RegistryError(f"api key {registration.api_key} is already handled by "
                                f"{_name(existing.handler)}, not also by {_name(handler)}")
        table[registration.api_key] = registration
    return dict(sorted(table.items()))


def _name(handler: Handler) -> str:
    return f"{handler.__module__}.{handler.__qualname__}"


@dataclass
class RawResponse:
    """A response body already encoded by the handler (everything after the response header).

    ``parts`` are sent in order without being joined, so a handler can put stored record
    bytes on the wire without copying them into an encoder buffer (Fetch does).
    """

    parts: list


class Deferred:
    """A response that is ready later: the server keeps reading and handling the next
    requests on the connection, and awaits this one (in order) only when it is its turn to be
    written.  Produce with acks=all returns one after appending, so that pipelined requests
    share one fsync (group commit) while appends and responses both stay in request order.
    """

    __slots__ = ("_wait",)

    def __init__(self, wait: Callable[[], Awaitable[Any]]) -> None:
        self._wait = wait

    async def result(self) -> Any:
        return await self._wait()
