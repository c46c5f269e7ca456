"""Typed streams (docs/schemas.md, "Typed streams"): a stream with ``schema:`` has each
message's value checked against its subject's latest version and sent in Confluent's wire
format; a value the schema does not take is refused to the app with INVALID_RECORD, the
field and the rule (``databus/schemas/serde.py``, the pure part), and the other messages of
its frame go on.

The registry is asked in a worker thread (blocking HTTP): once when the config is applied
(registering ``file:`` if given — a schema the subject refuses rejects the config), then for
the subject's latest version again when ``latest.cache.ttl.sec`` has passed.  A schema id
never changes, so a refresh that names an id already seen reuses its codec; a refresh that
fails keeps the version in use (logged) and tries again a TTL later, so a registry outage
does not stop a stream that has its schema.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import msgpack
import trio

from databus.config_base import ConfigError
from databus.hookspecs import Rejected
from databus.protocol.sidecar_wire import ErrorCode
from databus.schemas.client import (
    RegistryClient,
    RegistryRefused,
    RegistryUnavailable,
    guess_type,
)
from databus.schemas.serde import Codec, RecordError, header, parse_input

from .config import StreamSchema

log = logging.getLogger("databus.sidecar.typed")

DEFAULT_REGISTRY = "http://127.0.0.1:8081"


class TypedStream:
    """One typed stream's schema: the codec of the subject's latest version, kept fresh."""

    def __init__(self, stream: str, topic: str, settings: StreamSchema,
                 default_registry: str | None) -> None:
        self.stream = stream
        self.settings = settings
        self.subject = settings.subject or f"{topic}-value"
        self.client = RegistryClient(settings.registry_url or default_registry
                                     or DEFAULT_REGISTRY, settings.basic_auth)
        self.codec: Codec | None = None
        self.version: int | None = None
        self._codecs: dict[int, Codec] = {}
        self._checked = -math.inf  # trio clock of the last answer about "latest"
        self._refreshing = False
        self._problem: str | None = None  # why there is no codec yet

    async def start(self) -> None:
        """Register ``file:`` if given, then look the latest version up.  Raises ConfigError
        if the registry refuses the file or the subject cannot be typed; an unreachable
        registry is only logged (the stream refuses messages until it answers)."""
        try:
            if self.settings.file:
                await trio.to_thread.run_sync(self._register)
            await self._refresh()
        except RegistryRefused as exc:
            raise ConfigError(f"stream {self.stream!r}: schema registry refused subject "
                              f"{self.subject!r}: {exc}") from None
        except RegistryUnavailable as exc:
            self._problem = str(exc)
            log.warning("stream %r: %s; its messages are refused until it answers",
                        self.stream, exc)

    def _register(self) -> None:
        path = Path(self.settings.file or "")
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"stream {self.stream!r}: schema file {str(path)!r}: "
                              f"{exc.strerror or exc}") from None
        schema_type = self.settings.type or guess_type(text, path.name)
        schema_id = self.client.register(self.subject, schema_type, text)
        log.info("stream %r: %s registered under %r as id %d", self.stream, path,
                 self.subject, schema_id)

    async def _refresh(self) -> None:
        latest = await trio.to_thread.run_sync(self.client.latest, self.subject)
        schema_id = int(latest["id"])
        codec = self._codecs.get(schema_id)
        if codec is None:
            schema_type = latest.get("schemaType") or "AVRO"
            if latest.get("references"):
                raise ConfigError(f"stream {self.stream!r}: subject {self.subject!r} uses "
                                  "schema references, which typed streams do not resolve yet")
            try:
                codec = Codec(schema_id, schema_type, latest["schema"])
            except ValueError as exc:
                raise ConfigError(f"stream {self.stream!r}: subject {self.subject!r}: "
                                  f"{exc}") from None
            self._codecs[schema_id] = codec
            if self.codec is not None:
                log.info("stream %r: subject %r is now version %s (id %d)", self.stream,
                         self.subject, latest.get("version"), schema_id)
        self.codec, self.version = codec, latest.get("version")
        self._checked = trio.current_time()
        self._problem = None

    async def current(self) -> Codec:
        """The codec to encode with now, looking "latest" up again once its TTL is over.
        Raises Rejected when there is none (the registry has not answered yet)."""
        stale = trio.current_time() - self._checked > self.settings.latest_cache_ttl_sec
        if stale and not self._refreshing:
            self._refreshing = True
            try:
                await self._refresh()
            except (RegistryRefused, RegistryUnavailable, ConfigError) as exc:
                self._checked = trio.current_time()  # again a TTL later, not per message
                if self.codec is None:
                    self._problem = str(exc)
                else:
                    log.warning("stream %r: keeping subject %r version %s: %s", self.stream,
                                self.subject, self.version, exc)
            finally:
                self._refreshing = False
        if self.codec is None:
            raise Rejected(ErrorCode.UNKNOWN_SERVER_ERROR,
                           f"typed stream {self.stream!r}: no schema for subject "
                           f"{self.subject!r} yet: {self._problem}")
        return self.codec

    def fresh(self) -> bool:
        """Whether the codec in hand may be used without asking the registry first."""
        return self.codec is not None and (trio.current_time() - self._checked
                                           <= self.settings.latest_cache_ttl_sec)

    def encode(self, value: bytes | None) -> bytes:
        """``value`` (msgpack or JSON) in the wire format, with the codec in hand (when
        ``fresh()``); Rejected(INVALID_RECORD) naming the field and the rule when the
        schema does not take it."""
        codec = self.codec
        assert codec is not None
        try:
            return codec.encode(parse_input(value, self.settings.input))
        except RecordError as exc:
            raise Rejected(ErrorCode.INVALID_RECORD,
                           f"subject {self.subject!r} version {self.version} (id {codec.id}) "
                           f"refuses the value: {exc}") from None

    async def encode_later(self, value: bytes | None) -> bytes:
        """``encode`` after looking "latest" up again (its TTL passed, or no codec yet)."""
        await self.current()
        return self.encode(value)


class TypedReader:
    """A typed stream's values for subscribers: each record's schema (by the id in its
    wire-format header, fetched once: ids never change) decodes it, and the app gets the
    value as it would send it — msgpack (a dict for the SDK), or JSON text for a stream
    whose ``input`` is ``json``.  A value not in the wire format, or whose id the registry
    does not know, is handed over as stored (logged once per stream)."""

    def __init__(self, stream: str, settings: StreamSchema, default_registry: str | None
                 ) -> None:
        self.stream = stream
        self.json = settings.input == "json"
        self.client = RegistryClient(settings.registry_url or default_registry
                                     or DEFAULT_REGISTRY, settings.basic_auth)
        self._codecs: dict[int, Codec | None] = {}  # None: the registry has no such id
        self._warned = False

    async def prepare(self, records) -> None:
        """Fetch the schemas of the ids among ``records`` not seen yet."""
        wanted = set()
        for record in records:
            value = record.value
            if value and len(value) >= 5 and value[0] == 0:
                schema_id = header(value)
                if schema_id not in self._codecs:
                    wanted.add(schema_id)
        for schema_id in wanted:
            try:
                answer = await trio.to_thread.run_sync(self.client.schema, schema_id)
                self._codecs[schema_id] = Codec(schema_id, answer.get("schemaType") or "AVRO",
                                                answer["schema"])
            except RegistryRefused as exc:
                self._codecs[schema_id] = None
                self._warn(f"schema id {schema_id}: {exc}")
            except (RegistryUnavailable, ValueError) as exc:
                self._warn(f"schema id {schema_id}: {exc}")  # asked again next time

    def decode(self, value: bytes | None) -> bytes | None:
        if not value or len(value) < 5 or value[0] != 0:
            if value:
                self._warn("a value not in Confluent's wire format is handed over as stored")
            return value
        codec = self._codecs.get(header(value))
        if codec is None:
            return value
        try:
            decoded = codec.decode(value)
        except (ValueError, EOFError, IndexError, TypeError) as exc:
            self._warn(f"a value schema id {codec.id} does not decode: {exc}")
            return value
        if self.json:
            return json.dumps(decoded, separators=(",", ":"), default=_json_default).encode()
        return msgpack.packb(decoded, use_bin_type=True, default=_msgpack_default)

    def _warn(self, problem: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("stream %r: %s (logged once)", self.stream, problem)


def _json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    return str(value)  # datetimes, decimals, uuids of Avro's logical types


def _msgpack_default(value):
    return str(value)
