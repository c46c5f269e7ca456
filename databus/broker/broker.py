"""The Broker object: the state every handler shares, and the one append path.

It owns the LogManager (opened in ``run``, closed last), the cluster identity
(``meta.properties`` in the data dir, as Kafka keeps it), the fetch wake-ups and the group
commit.  ``append`` / ``append_durably`` are THE way records enter a partition: Produce uses
them and so does the group coordinator for ``__consumer_offsets``, so acks, fetch wake-ups
and durability behave the same for both.

Other parts may attach attributes to a Broker (the groups coordinator sets ``broker.groups``).
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

import trio

from databus.storage.errors import UnknownTopicError

from .config import BrokerConfig, first_listener
from .durability import GroupCommit
from .notify import AppendNotifier

log = logging.getLogger(__name__)

META_PROPERTIES = "meta.properties"


def _new_cluster_id() -> str:
    """Kafka's format: a random UUID, URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def load_or_create_cluster_id(data_dir: Path, node_id: int) -> str:
    """Read ``cluster.id`` from meta.properties, writing a new one (atomically) if absent."""
    path = data_dir / META_PROPERTIES
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "cluster.id" and value.strip():
                return value.strip()
    cluster_id = _new_cluster_id()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as out:
        out.write(f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return cluster_id


def is_internal_topic(name: str) -> bool:
    return name.startswith("__")


class Broker:
    """Shared state of one running broker.  Create, then ``await nursery.start(broker.run)``."""

    def __init__(self, config: BrokerConfig, data_dir: str | os.PathLike | None = None) -> None:
        self.config = config
        directory = data_dir or config.log_dir
        if not directory:
            raise ValueError("the broker needs a data directory (--data-dir or log.dirs)")
        self.data_dir = Path(directory)
        self.node_id = config.node_id
        self.cluster_id: str = ""
        self.log_manager: Any = None
        self.notifier = AppendNotifier()
        self.group_commit = GroupCommit(
            due_logs=self._logs_due_for_flush,
            check_interval_s=config.log_flush_scheduler_interval_ms / 1000,
        )
        self.host, self.port = config.listen_address
        self._advertised = config.advertised_listeners

    # -- identity -------------------------------------------------------------------------

    @property
    def advertised_host(self) -> str:
        if self._advertised:
            return first_listener(self._advertised, advertised=True)[0]
        return self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"

    @property
    def advertised_port(self) -> int:
        if self._advertised:
            return first_listener(self._advertised, advertised=True)[1]
        return self.port

    # -- storage lifecycle ----------------------------------------------------------------

    def open_storage(self) -> list[str]:
        from databus.storage.config import LogConfig
        from databus.storage.log_manager import LogManager

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_cluster_id(self.data_dir, self.node_id)
        self.default_log_config = LogConfig.from_topic_config(self.config.topic_defaults())
        self.log_manager = LogManager(
            self.data_dir, self.default_log_config,
            checkpoint_interval_ms=self.config.log_flush_offset_checkpoint_interval_ms,
        )
        actions = self.log_manager.open()
        for action in actions:
            log.info("recovery: %s", action)
        return actions

    def close_storage(self) -> None:
        if self.log_manager is not None:
            self.log_manager.close()
            self.log_manager = None

    # -- topics ---------------------------------------------------------------------------

    def topic(self, name: str):
        """The TopicInfo of ``name`` or None."""
        return self.log_manager.topics().get(name)

    def topic_configs(self, name: str) -> dict[str, tuple[str, bool]]:
        """Every topic config key -> (effective value, whether the topic overrides it)."""
        overrides = self.log_manager.topics()[name].config
        effective = self.log_manager.topic_config(name).to_topic_config()
        return {key: (value, key in overrides) for key, value in effective.items()}

    def create_topic(self, name: str, partitions: int | None = None,
                     configs: dict[str, str] | None = None):
        """Create a topic with broker defaults for what is not given (storage errors raise)."""
        info = self.log_manager.create_topic(
            name, partitions or self.config.num_partitions, dict(configs or {})
        )
        log.info("created topic %s with %d partitions", name, info.partitions)
        return info

    def alter_topic_config(self, name: str, overrides: dict[str, str]):
        """Replace the topic's config overrides (persisted, then applied to its live logs)."""
        info = self.log_manager.alter_topic_config(name, overrides)
        log.info("topic %s config overrides are now %s", name, info.config or "none")
        return info

    def delete_topic(self, name: str) -> None:
        self.log_manager.delete_topic(name)
        self.notifier.notify_all()  # fetches waiting on it re-read and see it gone
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, total: int):
        info = self.log_manager.add_partitions(name, total)
        log.info("topic %s now has %d partitions", name, total)
        return info

    def auto_create(self, name: str):
        """Metadata's auto-creation: the TopicInfo, or None when not allowed (internal/off)."""
        if not self.config.auto_create_topics_enable or is_internal_topic(name):
            return None
        return self.create_topic(name)

    # -- the append path ------------------------------------------------------------------

    def get_log(self, topic: str, partition: int):
        return self.log_manager.get_log(topic, partition)

    def append(self, topic: str, partition: int, records: bytes, now_ms: int | None = None):
        """Append record batches to a partition: the AppendInfo, storage errors raise.

        Wakes fetches waiting on the partition.  Not durable yet: see ``wait_durable``.
        """
        partition_log = self.log_manager.get_log(topic, partition)
        if partition_log is None:
            raise UnknownTopicError(f"{topic}-{partition} does not exist")
        info = partition_log.append(
            records, now_ms=int(time.time() * 1000) if now_ms is None else now_ms
        )
        self.notifier.notify((topic, partition))
        if partition_log.needs_flush(int(time.time() * 1000)):
            self.group_commit.kick()
        return info

    async def wait_durable(self, topic: str, partition: int, last_offset: int) -> None:
        """Return once ``last_offset`` of the partition is fsynced (group commit)."""
        partition_log = self.log_manager.get_log(topic, partition)
        if partition_log is None:
            raise UnknownTopicError(f"{topic}-{partition} was deleted before it was flushed")
        await self.group_commit.wait_durable(partition_log, last_offset)

    async def append_durably(self, topic: str, partition: int, records: bytes):
        """``append`` then ``wait_durable``: what acks=all means on a single node."""
        info = self.append(topic, partition, records)
        await self.wait_durable(topic, partition, info.last_offset)
        return info

    def _logs_due_for_flush(self, now_ms: int):
        if self.log_manager is None:
            return ()
        return [plog for plog in self.log_manager.dirty_logs() if plog.needs_flush(now_ms)]

    # -- background work ------------------------------------------------------------------

    async def _retention_loop(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            try:
                for action in self.log_manager.run_retention() or ():
                    log.info("retention: %s", action)
                for action in self.log_manager.run_compaction() or ():
                    log.info("compaction: %s", action)
            except Exception:
                log.exception("retention/compaction failed; will retry next interval")

    async def _checkpoint_loop(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Recovery points and log start offsets to disk now and then (Kafka's
        log.flush.offset.checkpoint.interval.ms), so a crash re-validates little."""
        task_status.started()
        interval = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            try:
                await trio.to_thread.run_sync(self.log_manager.write_checkpoints)
            except OSError:
                log.exception("writing checkpoints failed; will retry next interval")

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open storage, start the services (group commit, retention, handler services)
        and hand ``self`` to ``task_status``; on cancellation stop them, flush and close."""
        from .api import load_handlers

        modules = load_handlers()
        self.open_storage()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.group_commit.serve)
                await nursery.start(self._retention_loop)
                await nursery.start(self._checkpoint_loop)
                for module in modules:
                    service = getattr(module, "serve", None)
                    if service is not None:
                        await nursery.start(service, self)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self.notifier.notify_all()
            self.close_storage()
