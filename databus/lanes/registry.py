"""The lane registry's I/O shell: the compacted topic read and written with databus.client's
public surface only (Admin, Producer, Consumer), so it works against any Kafka cluster.

``RegistryFollower`` tails the topic in a task and folds every record into a
``model.Registry``; ``loaded`` is set once it has read what the topic held when it started.
``RegistryWriter`` writes records (acks=all) and returns their offsets, so that a writer can
wait for the follower to have read its own record (``follower.wait_for(offset)``): that is how
a claim learns whether it won (model.py).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

import trio

from databus.client import Admin, Consumer, Producer, TopicPartition, errors

from . import model

log = logging.getLogger("databus.lanes")

DEFAULT_REGISTRY_TOPIC = "databus-lanes"
# How long a poll of the registry waits for new records: how late another sidecar's lane
# reaches this one, at most (plus a round trip).
FOLLOW_WAIT_MS = 100


def now_ms() -> int:
    return int(time.time() * 1000)


def default_owner() -> str:
    return f"{os.environ.get('USER', 'unknown')}@{socket.gethostname()}"


async def ensure_registry_topic(admin: Admin, topic: str) -> None:
    """Create the registry topic (compacted, one partition) unless it exists; a cluster
    without CreateTopics (librdkafka's mock) creates it on first use."""
    await admin.ensure_topics({topic: 1}, configs={"cleanup.policy": "compact"},
                              or_auto_create=True)


async def ensure_lane_topics(admin: Admin, topics: list[str], lane: model.Lane) -> bool:
    """Create ``topics`` of ``lane`` (its partitions, its retention) unless they exist.
    False: the cluster cannot create topics, it will make them on first use (with its own
    partition count and retention)."""
    return await admin.ensure_topics({t: lane.partitions for t in topics},
                                     configs={"retention.ms": str(lane.retention_ms)},
                                     or_auto_create=True)


async def lane_topics(admin: Admin, template: str, lane: str) -> list[str]:
    """The existing topics of ``lane`` (by the template's shape)."""
    pattern = model.lane_topic_pattern(template, lane)
    return [t for t in await admin.list_topics() if pattern.fullmatch(t)]


class RegistryFollower:
    """Tails the registry topic into ``state``; run with ``await nursery.start(f.run)``
    (started once the records present at start are read)."""

    def __init__(self, bootstrap: str, topic: str = DEFAULT_REGISTRY_TOPIC,
                 settings: Mapping[str, Any] | None = None, *, create: bool = True) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.settings = dict(settings or {})
        self.create = create
        self.state = model.Registry()
        self.position = 0
        self.loaded = trio.Event()
        self._moved = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED, forever: bool = True) -> None:
        """Read the registry to its current end (then ``started``), and with ``forever``
        go on following it.  Raises UnknownTopicOrPartitionError if the topic is missing
        and the follower does not create it."""
        tp = TopicPartition(self.topic, 0)
        config = {**self.settings, "fetch.max.wait.ms": FOLLOW_WAIT_MS,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "client.id": "databus-lanes-registry"}
        config.pop("group.id", None)
        async with Admin(self.bootstrap, self.settings) as admin:
            if self.create:
                await ensure_registry_topic(admin, self.topic)
            else:
                found = (await admin.describe_topics([self.topic]))[self.topic]
                if isinstance(found, Exception):
                    raise found
            end = (await admin.list_offsets([tp], "latest"))[tp]
        async with Consumer(self.bootstrap, config) as consumer:
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            while self.position < end:
                await self._read(consumer)
            self.loaded.set()
            task_status.started(self)
            while forever:
                await self._read(consumer)

    async def _read(self, consumer: Consumer) -> None:
        batches = await consumer.getmany(timeout=1.0)
        for records in batches.values():
            for r in records:
                self.state.apply(r.key, r.value, r.offset)
                self.position = r.offset + 1
        if batches:
            self._moved.set()
            self._moved = trio.Event()

    async def wait_for(self, offset: int) -> None:
        """Return once the record at ``offset`` has been applied."""
        while self.position <= offset:
            await self._moved.wait()


class RegistryWriter:
    """Writes registry records; ``async with RegistryWriter(bootstrap, topic) as w``."""

    def __init__(self, bootstrap: str, topic: str = DEFAULT_REGISTRY_TOPIC,
                 settings: Mapping[str, Any] | None = None) -> None:
        config = {**(settings or {}), "acks": "all", "linger.ms": 0,
                  "client.id": "databus-lanes-registry"}
        self.topic = topic
        self._producer = Producer(bootstrap, config)

    async def __aenter__(self) -> RegistryWriter:
        await self._producer.__aenter__()
        return self

    async def __aexit__(self, *exc) -> bool:
        return await self._producer.__aexit__(*exc)

    async def put(self, key: bytes, record) -> int:
        """Write ``record`` (a model record, or None for the tombstone) under ``key``;
        returns its offset once the cluster has it."""
        value = None if record is None else model.encode(record)
        future = await self._producer.send(self.topic, value, key=key, partition=0)
        return (await future.wait()).offset


async def read_registry(bootstrap: str, topic: str = DEFAULT_REGISTRY_TOPIC,
                        settings: Mapping[str, Any] | None = None) -> model.Registry:
    """The registry as it is now (read to its end once; for commands).  Empty if the
    topic does not exist yet."""
    follower = RegistryFollower(bootstrap, topic, settings, create=False)
    try:
        await follower.run(forever=False)
    except errors.UnknownTopicOrPartitionError:
        return model.Registry()
    return follower.state


async def delete_lane(admin: Admin, writer: RegistryWriter, template: str, lane: str, *,
                      state: model.Registry | None = None,
                      merge_bootstrap: str | None = None) -> list[str]:
    """Delete ``lane``: its topics (copied into their main topics first when
    ``merge_bootstrap`` names the cluster), then its registry record and the heartbeat
    records ``state`` knows for it (a consumer that died leaves one).  Returns the topics."""
    topics = await lane_topics(admin, template, lane)
    if merge_bootstrap is not None and topics:
        await merge_topics(merge_bootstrap, template, topics)
    if topics:
        for error in (await admin.delete_topics(topics)).values():
            if error is not None and not isinstance(error, errors.UnknownTopicOrPartitionError):
                raise error
    for name, id_ in list(state.consumers if state is not None else ()):
        if name == lane:
            await writer.put(model.consumer_key(name, id_), None)
    await writer.put(model.lane_key(lane), None)
    return topics


async def merge_topics(bootstrap: str, template: str, topics: list[str]) -> int:
    """Copy every record of the lane ``topics`` into its main topic (key, value, headers and
    timestamp kept, the lane header too: the record says where it came from).  Returns the
    number of records copied."""
    copied = 0
    async with Admin(bootstrap) as admin, \
            Producer(bootstrap, {"acks": "all", "client.id": "databus-lanes-merge"}) as producer:
        for topic in topics:
            parsed = model.parse_lane_topic(template, topic)
            if parsed is None:
                raise ValueError(f"{topic!r} is not a lane topic of {template!r}")
            main = parsed[0]
            described = (await admin.describe_topics([topic]))[topic]
            if isinstance(described, Exception):
                raise described
            tps = [TopicPartition(topic, p.partition) for p in described.partitions]
            ends = {tp: end for tp, end in (await admin.list_offsets(tps, "latest")).items()
                    if end > 0}
            if not ends:
                continue
            config = {"enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "client.id": "databus-lanes-merge"}
            async with Consumer(bootstrap, config) as consumer:
                consumer.assign(list(ends))
                consumer.seek_to_beginning(*ends)
                futures = []
                while ends:
                    for tp, batch in (await consumer.getmany(timeout=1.0)).items():
                        for r in batch:
                            if r.offset < ends.get(tp, 0):
                                futures.append(await producer.send(
                                    main, r.value, key=r.key, headers=r.headers,
                                    timestamp_ms=r.timestamp))
                        if batch and batch[-1].offset + 1 >= ends.get(tp, 0):
                            ends.pop(tp, None)
                for future in futures:
                    await future.wait()
                copied += len(futures)
    return copied
