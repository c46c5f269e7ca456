"""The pool of upstream producers, one per distinct (cluster, producer settings, partitioner).

Streams with identical settings share a producer (and so its batches and connections).  A
producer lives in its own task in the sidecar's nursery; a reload that no longer needs one
*retires* it: it is flushed (every message it holds is sent and answered) and then closed,
so reloading never drops a queued message.  The partitioner is made here, by the plugin
factory, once per producer, and handed to the producer as a plain callable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from databus.config import SIDECAR_PRODUCER_KEYS, DatabusConfig, resolve_references
from databus.plugins import PluginManager, make_partitioner
from databus.protocol.sidecar_wire import ErrorCode

log = logging.getLogger("databus.sidecar.produce.upstream")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def error_code_of(exc: BaseException) -> int:
    """The wire code for a producer exception: Kafka's code, or the sidecar's own."""
    name = getattr(exc, "name", None)
    if name == "BUFFER_EXHAUSTED":
        return ErrorCode.BUFFER_EXHAUSTED
    if name == "PRODUCER_CLOSED":  # shutdown gave up waiting for upstream
        return ErrorCode.SHUTTING_DOWN
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code != 0:
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def is_kafka_error(exc: BaseException) -> bool:
    from databus.client.errors import KafkaError

    return isinstance(exc, KafkaError)


def default_producer_factory(bootstrap: str, config: dict[str, Any], partitioner: Callable):
    from databus.client.producer import Producer

    return Producer(bootstrap, config, partitioner=partitioner)


class ProducerHandle:
    """One upstream producer and what the router needs to know about it."""

    def __init__(
        self,
        key: tuple,
        cluster: str,
        bootstrap: str,
        settings: dict[str, Any],
        producer: Any,
        partitioner_plugin: str,
        max_block_ms: int,
    ) -> None:
        self.key = key
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.settings = settings
        self.producer = producer
        self.partitioner_plugin = partitioner_plugin
        self.max_block_ms = max_block_ms
        self.stop = trio.Event()
        self.closed = trio.Event()

    @property
    def label(self) -> str:
        s = self.settings
        return (
            f"{self.cluster}/acks={s.get('acks', 'all')},linger.ms={s.get('linger.ms', 5)},"
            f"partitioner={s.get('partitioner', 'default')}"
        )


class ProducerPool:
    def __init__(
        self,
        nursery: trio.Nursery,
        pm: PluginManager,
        buffer_memory: int,
        factory: Callable[..., Any] = default_producer_factory,
    ) -> None:
        self._nursery = nursery
        self._pm = pm
        # The sidecar's own budget bounds the data; each producer gets room for all of it
        # plus batch overhead so that the sidecar's budget, not the producer, is what waits.
        self._producer_buffer = 2 * buffer_memory + (1 << 20)
        self._factory = factory
        self.handles: dict[tuple, ProducerHandle] = {}

    async def get(
        self, config: DatabusConfig, stream: str | None, bootstrap: dict[str, str]
    ) -> ProducerHandle:
        settings = config.stream_producer_settings(stream)
        cluster = config.stream_cluster(stream)
        kafka = {k: v for k, v in settings.items() if k not in SIDECAR_PRODUCER_KEYS}
        partitioner = settings.get("partitioner", "default")
        partitioner_config = settings.get("partitioner.config") or {}
        address = bootstrap[cluster]
        key = (cluster, address, _freeze(kafka), partitioner, _freeze(partitioner_config))
        handle = self.handles.get(key)
        if handle is not None:
            return handle
        plugin, fn = make_partitioner(self._pm, partitioner, partitioner_config)
        pconfig = config.producer_config(settings)
        kafka = {"client.id": "databus-sidecar", **resolve_references(kafka),
                 "buffer.memory": self._producer_buffer}
        producer = self._factory(address, kafka, partitioner=fn)
        handle = ProducerHandle(
            key, cluster, address, settings, producer, plugin, pconfig.max_block_ms
        )
        await self._nursery.start(self._run, handle)
        self.handles[key] = handle
        log.debug("producer started: %s", handle.label)
        return handle

    async def _run(self, handle: ProducerHandle, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with handle.producer:
                task_status.started()
                await handle.stop.wait()
        finally:
            handle.closed.set()

    async def retire(self, handles: set[ProducerHandle], timeout: float) -> None:
        """Flush then close ``handles`` (concurrently), giving up on flushing after
        ``timeout`` seconds; closing still answers every message it holds."""
        for handle in handles:
            self.handles.pop(handle.key, None)

        async def retire_one(handle: ProducerHandle) -> None:
            with trio.move_on_after(timeout) as scope:
                await handle.producer.flush()
            if scope.cancelled_caught:
                log.warning("producer %s did not flush within %.1fs", handle.label, timeout)
            handle.stop.set()
            await handle.closed.wait()

        async with trio.open_nursery() as nursery:
            for handle in handles:
                nursery.start_soon(retire_one, handle)

    async def close_all(self, timeout: float) -> None:
        await self.retire(set(self.handles.values()), timeout)

    def statistics(self):
        for handle in list(self.handles.values()):
            stats = getattr(handle.producer, "statistics", None)
            if stats is not None:
                yield {"producer": handle.label}, stats()
