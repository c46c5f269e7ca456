"""What the sidecar's group services (delay.py, halfmsg.py) share: started with
``await nursery.start(service.run)``, stopped with ``await service.stop()``.

Each runs on every sidecar that enables it as one consumer group per cluster: a group
consumer of the service's topics, an idempotent producer for what it hands on, and a side
task following a topic of its own (cancels, checks).  The subclass says what those are and
writes the loop; the clients' lifetime and the orderly stop are written here once."""

from __future__ import annotations

import logging

import trio

from databus.client import Admin, Consumer, KafkaError, Producer

log = logging.getLogger(__name__)


class BackgroundService:
    """Subclasses set ``name``, ``topics`` and ``linger_ms``, write ``_loop`` (return once
    ``self._stop`` is set), ``_commit``, ``_follow`` and the rebalance callbacks, and may
    override ``_make_topics``."""

    name = "service"
    topics: tuple[str, ...] = ()
    linger_ms = 5

    def __init__(self, cluster: str, bootstrap: str, *, group_id: str,
                 consumer: dict | None = None, producer: dict | None = None) -> None:
        self.cluster = cluster
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.consumer_settings = dict(consumer or {})
        self.producer_settings = dict(producer or {})
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._closing = False
        self._stop = trio.Event()
        self._done = trio.Event()

    async def stop(self) -> None:
        self._stop.set()
        await self._done.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        # Started at once: clients and their nurseries are opened inside this task only
        # after it has moved to its final nursery (as the sinks runtime does).
        task_status.started(self)
        try:
            await self._run()
        finally:
            self._done.set()

    async def _run(self) -> None:
        await self._create_topics()
        consumer_config = {
            "group.id": self.group_id, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100,
            **self.consumer_settings,
        }
        producer_config = {"acks": "all", "enable.idempotence": True,
                           "linger.ms": self.linger_ms, **self.producer_settings}
        async with Producer(self.bootstrap, producer_config) as producer, \
                Consumer(self.bootstrap, consumer_config, on_assigned=self._assigned,
                         on_revoked=self._revoked) as consumer:
            self._producer, self._consumer = producer, consumer
            consumer.subscribe(list(self.topics))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._follow)
                log.info("%s for cluster %s running (group %s)", self.name, self.cluster,
                         self.group_id)
                try:
                    await self._loop(consumer, producer)  # until stop()
                    # the last commit here, not in the revocation of a closing consumer
                    await self._commit(consumer, producer)
                finally:
                    self._closing = True
                    nursery.cancel_scope.cancel()

    async def _create_topics(self) -> None:
        """The service's topics, where a cluster does not create topics on first use (an
        existing topic is fine)."""
        try:
            async with Admin(self.bootstrap) as admin:
                await self._make_topics(admin)
        except (KafkaError, OSError, trio.TooSlowError) as exc:
            log.warning("cluster %s: could not create the %s topics (%s); relying on topic "
                        "auto-creation", self.cluster, self.name, exc)

    async def _make_topics(self, admin: Admin) -> None:
        await admin.create_topics(list(self.topics))

    async def _loop(self, consumer: Consumer, producer: Producer) -> None:
        raise NotImplementedError

    async def _commit(self, consumer: Consumer, producer: Producer) -> None:
        raise NotImplementedError

    async def _follow(self) -> None:
        raise NotImplementedError

    async def _assigned(self, partitions) -> None:
        raise NotImplementedError

    async def _revoked(self, partitions) -> None:
        raise NotImplementedError
