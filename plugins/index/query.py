"""A query: the index's entries for ``FIELD=VALUE`` (newest first), then the messages
themselves, fetched by offset from the cluster with the client's public API.

::

    from databus.index import query
    for message in query("sidecar.yaml", "orders", "user_id", "42", limit=10):
        print(message.offset, message.value)
"""

from __future__ import annotations

from collections import deque

import trio

from databus.client import Consumer, ConsumerRecord
from databus.config import DatabusConfig, IndexConfig, load_config

from .store import IndexStore, Location

FETCH_TIMEOUT_S = 30.0


class IndexQueryError(ValueError):
    """An unknown index or field (the message lists the known ones)."""


def find_index(config: DatabusConfig, name: str) -> IndexConfig:
    index = config.indexes.get(name)
    if index is None:
        known = ", ".join(sorted(config.indexes)) or "none"
        raise IndexQueryError(f"no index named {name!r} (indexes: {known})")
    return index


def lookup(config: DatabusConfig, name: str, field: str, value: str, *,
           since: int | None = None, until: int | None = None,
           limit: int | None = None) -> list[Location]:
    """The entries of ``field = value`` in index ``name``, newest first."""
    index = find_index(config, name)
    if field not in index.fields:
        raise IndexQueryError(f"index {name!r} has no field {field!r} "
                              f"(fields: {', '.join(index.fields)})")
    store = IndexStore(index.db_path(name), readonly=True)
    try:
        return store.lookup(field, value, since, until, limit)
    finally:
        store.close()


async def fetch(bootstrap: str, locations: list[Location],
                settings: dict | None = None) -> list[ConsumerRecord | None]:
    """The records at ``locations`` in their order; None where the cluster no longer has
    one (retention or compaction removed it).  ``settings``: the cluster's TLS/SASL ones
    (``security_for``)."""
    wanted: dict[tuple[str, int], deque[int]] = {}
    for _ts, topic, partition, offset in sorted(locations, key=lambda loc: loc[1:]):
        wanted.setdefault((topic, partition), deque()).append(offset)
    found: dict[tuple[str, int, int], ConsumerRecord] = {}
    if wanted:
        config = {"enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "client.id": "databus-index-query", **(settings or {})}
        async with Consumer(bootstrap, config) as consumer:
            consumer.assign(list(wanted))
            for tp, offsets in wanted.items():
                consumer.seek(tp, offsets[0])
            with trio.move_on_after(FETCH_TIMEOUT_S):
                while wanted:
                    batches = await consumer.getmany(*wanted, timeout=1.0)
                    for tp, records in batches.items():
                        _take(tp, records, wanted, found, consumer)
    return [found.get(loc[1:]) for loc in locations]


# Past this many records before the next wanted offset, seek rather than read on.
_SEEK_GAP = 1000


def _take(tp, records, wanted, found, consumer) -> None:
    offsets = wanted.get(tp)
    if offsets is None:
        return
    for record in records:
        while offsets and offsets[0] < record.offset:
            offsets.popleft()  # gone from the log
        if offsets and offsets[0] == record.offset:
            found[tp[0], tp[1], record.offset] = record
            offsets.popleft()
        if not offsets:
            break
    if not offsets:
        del wanted[tp]
        consumer.pause(tp)
    elif records and offsets[0] > records[-1].offset + _SEEK_GAP:
        consumer.seek(tp, offsets[0])


async def query_async(config: DatabusConfig, bootstrap: str, name: str, field: str,
                      value: str, **kwargs) -> list[ConsumerRecord]:
    locations = lookup(config, name, field, value, **kwargs)
    return [r for r in await fetch(bootstrap, locations, security_for(config, name, None))
            if r is not None]


def query(config: str | DatabusConfig, name: str, field: str, value: str, *,
          bootstrap: str | None = None, since: int | None = None, until: int | None = None,
          limit: int | None = 100) -> list[ConsumerRecord]:
    """The messages of index ``name`` whose ``field`` is ``value``, newest first (blocking).

    ``config`` is a sidecar.yaml path or a loaded configuration; ``bootstrap`` is needed
    when it names no clusters (the built-in broker's HOST:PORT)."""
    if not isinstance(config, DatabusConfig):
        config = load_config(config)
    bootstrap = bootstrap_for(config, name, bootstrap)
    return trio.run(lambda: query_async(config, bootstrap, name, field, value,
                                        since=since, until=until, limit=limit))


def security_for(config: DatabusConfig, name: str, bootstrap: str | None) -> dict:
    """The TLS/SASL settings of the index's cluster (docs/security.md); none when
    ``bootstrap`` names the broker to ask (the built-in one) or no cluster is configured."""
    if bootstrap is not None or not config.clusters:
        return {}
    index = find_index(config, name)
    cluster = config.resolve_cluster(index.cluster, f"index {name!r}")
    return config.clusters[cluster].connection_settings()


def bootstrap_for(config: DatabusConfig, name: str, bootstrap: str | None) -> str:
    """``bootstrap`` if given, else the index's cluster's ``bootstrap.servers``."""
    index = find_index(config, name)
    if bootstrap is not None:
        return bootstrap
    if not config.clusters:
        raise IndexQueryError("no cluster: the configuration names none, pass the built-in "
                              "broker's HOST:PORT (--bootstrap-server)")
    cluster = config.resolve_cluster(index.cluster, f"index {name!r}")
    return config.clusters[cluster].bootstrap_servers
