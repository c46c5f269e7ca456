"""A query: the index's entries for ``FIELD=VALUE`` (newest first), then the messages
themselves, fetched by offset from the cluster (``databus.client.RecordReader``: just the
wanted records, nearby offsets of a partition in one Fetch).

Repeated queries should reuse one cluster connection: ``Index`` (blocking) and
``IndexQueries`` (trio, the HTTP route's) keep a reader per cluster and the index databases
open; ``query()`` is a one-shot ``Index``.

::

    import databus.index
    with databus.index.Index("sidecar.yaml") as index:
        for message in index.query("orders", "user_id", "42", limit=10):
            print(message.offset, message.value)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import trio

from databus.client import ConsumerRecord, RecordReader, SyncRecordReader
from databus.config import (
    ConfigError,
    DatabusConfig,
    IndexConfig,
    load_config,
    part_bootstrap,
    part_security,
)

from .store import IndexStore, Location

READER_CONFIG = {"client.id": "databus-index-query"}


class IndexQueryError(ValueError):
    """An unknown index or field (the message lists the known ones)."""


def find_index(config: DatabusConfig, name: str) -> IndexConfig:
    index = config.indexes.get(name)
    if index is None:
        known = ", ".join(sorted(config.indexes)) or "none"
        raise IndexQueryError(f"no index named {name!r} (indexes: {known})")
    return index


class _Stores:
    """Read-only connections to the index databases, opened once (a reader sees every
    commit: each query is its own read transaction)."""

    def __init__(self) -> None:
        self.open: dict[str, IndexStore] = {}
        self._lock = threading.Lock()  # the HTTP route's lookups run in worker threads

    def lookup(self, config: DatabusConfig, name: str, field: str, value: str, *,
               since: int | None = None, until: int | None = None,
               limit: int | None = None) -> list[Location]:
        """The entries of ``field = value`` in index ``name``, newest first."""
        index = find_index(config, name)
        if field not in index.fields:
            raise IndexQueryError(f"index {name!r} has no field {field!r} "
                                  f"(fields: {', '.join(index.fields)})")
        path = index.db_path(name)
        with self._lock:
            store = self.open.get(path)
            if store is None:
                store = self.open[path] = IndexStore(path, readonly=True)
            try:
                return store.lookup(field, value, since, until, limit)
            except Exception:
                self.open.pop(path).close()  # open it afresh next time
                raise

    def close(self) -> None:
        with self._lock:
            for store in self.open.values():
                store.close()
            self.open.clear()


def lookup(config: DatabusConfig, name: str, field: str, value: str, **kwargs
           ) -> list[Location]:
    """The entries of ``field = value`` in index ``name``, newest first (one-shot)."""
    stores = _Stores()
    try:
        return stores.lookup(config, name, field, value, **kwargs)
    finally:
        stores.close()


def in_order(locations: list[Location], found: dict) -> list[ConsumerRecord | None]:
    """The records of ``locations`` in their order; None where the cluster no longer has
    one (retention or compaction removed it since it was indexed)."""
    return [found.get(loc[1:]) for loc in locations]


async def fetch(bootstrap: str, locations: list[Location],
                settings: dict | None = None) -> list[ConsumerRecord | None]:
    """The records at ``locations`` (one-shot: a connection of its own); None where the
    cluster no longer has one.  ``settings``: the cluster's TLS/SASL ones (``security_for``)."""
    if not locations:
        return []
    async with RecordReader(bootstrap, {**READER_CONFIG, **(settings or {})}) as reader:
        return in_order(locations, await reader.read(loc[1:] for loc in locations))


async def query_async(config: DatabusConfig, bootstrap: str, name: str, field: str,
                      value: str, *, settings: dict | None = None,
                      **kwargs) -> list[ConsumerRecord]:
    """One query from trio, one-shot (a connection of its own; IndexQueries keeps one).
    ``settings``: the client settings to read the messages with (the web console's, e.g. a
    logged-in user's) instead of the index's cluster's."""
    locations = await trio.to_thread.run_sync(
        lambda: lookup(config, name, field, value, **kwargs))
    if settings is None:
        settings = security_for(config, name, None)
    return [r for r in await fetch(bootstrap, locations, settings) if r is not None]


class IndexQueries:
    """Queries from trio, with a ``RecordReader`` per cluster kept open: ``await
    nursery.start(queries.serve)`` first (it holds the readers until cancelled).
    ``current_config()`` is the configuration in force (reloads change it)."""

    def __init__(self, current_config: Callable[[], DatabusConfig],
                 bootstrap: str | None) -> None:
        self.current_config = current_config
        self.bootstrap = bootstrap
        self.stores = _Stores()
        self._readers: dict[str, RecordReader] = {}
        self._nursery: trio.Nursery | None = None
        self._starting = trio.Lock()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.stores.close()

    async def _reader(self, bootstrap: str, settings: dict) -> RecordReader:
        async with self._starting:
            reader = self._readers.get(bootstrap)
            if reader is None:
                if self._nursery is None:
                    raise RuntimeError("IndexQueries.serve is not running")
                reader = await self._nursery.start(self._hold, bootstrap, settings)
            return reader

    async def _hold(self, bootstrap: str, settings: dict, *, task_status) -> None:
        async with RecordReader(bootstrap, {**READER_CONFIG, **settings}) as reader:
            self._readers[bootstrap] = reader
            task_status.started(reader)
            try:
                await trio.sleep_forever()
            finally:
                self._readers.pop(bootstrap, None)

    async def query(self, name: str, field: str, value: str, **kwargs
                    ) -> list[ConsumerRecord]:
        config = self.current_config()
        locations = await trio.to_thread.run_sync(
            lambda: self.stores.lookup(config, name, field, value, **kwargs))
        if not locations:
            return []
        reader = await self._reader(bootstrap_for(config, name, self.bootstrap),
                                    security_for(config, name, self.bootstrap))
        found = await reader.read(loc[1:] for loc in locations)
        return [r for r in in_order(locations, found) if r is not None]


class Index:
    """Queries from blocking code, reusing one cluster connection (a reader thread) and
    the open databases across calls: ``with Index("sidecar.yaml") as index: ...``.

    ``config`` is a sidecar.yaml path or a loaded configuration; ``bootstrap`` is needed
    when it names no clusters (the built-in broker's HOST:PORT)."""

    def __init__(self, config: str | DatabusConfig, *, bootstrap: str | None = None) -> None:
        self.config = config if isinstance(config, DatabusConfig) else load_config(config)
        self.bootstrap = bootstrap
        self.stores = _Stores()
        self._readers: dict[str, SyncRecordReader] = {}

    def query(self, name: str, field: str, value: str, *, since: int | None = None,
              until: int | None = None, limit: int | None = 100) -> list[ConsumerRecord]:
        """The messages of index ``name`` whose ``field`` is ``value``, newest first."""
        locations = self.stores.lookup(self.config, name, field, value, since=since,
                                       until=until, limit=limit)
        if not locations:
            return []
        bootstrap = bootstrap_for(self.config, name, self.bootstrap)
        reader = self._readers.get(bootstrap)
        if reader is None:
            settings = {**READER_CONFIG, **security_for(self.config, name, self.bootstrap)}
            reader = self._readers[bootstrap] = SyncRecordReader(bootstrap, settings)
        found = reader.read([loc[1:] for loc in locations])
        return [r for r in in_order(locations, found) if r is not None]

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        self.stores.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def query(config: str | DatabusConfig, name: str, field: str, value: str, *,
          bootstrap: str | None = None, since: int | None = None, until: int | None = None,
          limit: int | None = 100) -> list[ConsumerRecord]:
    """The messages of index ``name`` whose ``field`` is ``value``, newest first (blocking,
    one-shot; use ``Index`` for many queries)."""
    with Index(config, bootstrap=bootstrap) as index:
        return index.query(name, field, value, since=since, until=until, limit=limit)


def security_for(config: DatabusConfig, name: str, bootstrap: str | None) -> dict:
    """The TLS/SASL settings of the index's cluster (docs/security.md); none when
    ``bootstrap`` names the broker to ask or the index is on the built-in broker."""
    if bootstrap is not None:
        return {}
    return part_security(config, find_index(config, name).cluster, f"index {name!r}")


def bootstrap_for(config: DatabusConfig, name: str, bootstrap: str | None) -> str:
    """``bootstrap`` if given, else the index's cluster's (databus.config.part_bootstrap:
    the built-in broker's ``broker.listen`` when the file names no clusters)."""
    index = find_index(config, name)
    if bootstrap is not None:
        return bootstrap
    try:
        return part_bootstrap(config, index.cluster, f"index {name!r}")
    except ConfigError as exc:
        raise IndexQueryError(str(exc)) from None
