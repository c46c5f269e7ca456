"""The Broker: everything one running broker consists of, assembled in its constructor.

``Broker(config)`` builds, without touching the disk:

* ``log_manager``: the data directory's partition logs (storage/; opened by ``run``,
  closed last), and ``cluster_id`` from ``meta.properties`` (read or created on open);
* ``notifier``: the wake-ups of Fetch long polls;
* ``group_commit``: the one flusher behind acks=all;
* ``producer_ids``: the producer-id allocator of InitProducerId;
* ``groups``: the group coordinator (``__consumer_offsets``, consumer groups);
* ``shares``: the share-group service (``__share_group_state``, share groups, KIP-932);
* ``transactions``: the transaction coordinator (``__transaction_state``, KIP-98);
* ``retention``: the periodic retention and compaction runs (off the trio thread);
* ``credentials``: the SASL users (SCRAM credentials, credentials.py) and ``acls`` with the
  ``authorizer`` deciding every request (acl.py), both kept in the data directory.

The Kafka protocol is served by a ``Server`` (server.py) over a running Broker: the server
owns the handler table (api key -> handler and version range) that it dispatches through
and ApiVersions advertises, so the handlers, which know the Broker, sit above it.

Nothing is attached later and nothing is module-global, so two brokers in one process share
nothing.  ``await nursery.start(broker.run)`` opens storage and starts the services
explicitly (group commit, retention, checkpoints, the group coordinator, share groups).

``append`` / ``append_durably`` are THE way records enter a partition: Produce uses them and
so does the group coordinator for ``__consumer_offsets``, so acks, fetch wake-ups and
durability behave the same for both.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import trio

from databus.internal_topics import is_kafka_internal
from databus.storage.acls import AclStore
from databus.storage.config import INERT_TOPIC_CONFIGS, LogConfig
from databus.storage.credentials import CredentialStore
from databus.storage.errors import KafkaStorageError, UnknownTopicError
from databus.storage.health import StorageHealth
from databus.storage.log_manager import LogManager
from databus.storage.meta_properties import load_or_create_cluster_id

from .authorizer import Authorizer, parse_super_users
from .client_metrics.manager import ClientMetricsManager
from .client_metrics.subscriptions import SubscriptionStore
from .config import BrokerConfig
from .coordinator.consumer_group import ConsumerGroupConfig
from .coordinator.group_state import CoordinatorConfig
from .coordinator.service import GroupService
from .durability import GroupCommit
from .dynamic_config import DynamicBrokerConfigs
from .fetch_sessions import FetchSessionCache
from .notify import AppendNotifier
from .producer_ids import ProducerIdAllocator
from .retention import RetentionService
from .share.service import ShareConfig, ShareService
from .txn.service import TransactionService

log = logging.getLogger(__name__)


def is_internal_topic(name: str) -> bool:
    """Kafka's internal topics (databus.internal_topics is the one home of the rule)."""
    return is_kafka_internal(name)


class Broker:
    """One broker.  Create, then ``await nursery.start(broker.run)``."""

    def __init__(self, config: BrokerConfig, data_dir: str | os.PathLike | None = None) -> None:
        directory = data_dir or config.log_dir
        if not directory:
            raise ValueError("the broker needs a data directory (--data-dir or log.dirs)")
        self.data_dir = Path(directory)
        # The config as started (-o, the file), and the dynamic broker configs set since by
        # (Incremental)AlterConfigs (persisted): ``config`` is the one in force.
        self.static_config = config
        self.dynamic_configs = DynamicBrokerConfigs.load(self.data_dir)
        config = self.dynamic_configs.applied_to(config)
        self.config = config
        # called with the new BrokerConfig when a dynamic broker config changes it
        self.config_listeners: list = []
        # Set by the schema registry when this broker serves one (schema.registry.listen):
        # Produce asks it about topics with confluent.*.schema.validation on.
        self.schema_validator = None
        self.node_id = config.node_id
        self.cluster_id: str = ""  # from meta.properties, once storage is open
        self.host, self.port = config.listen_address
        self.listeners = config.listener_list()
        # listener name -> bound (host, port), filled in by the Server as it binds
        self.bound: dict[str, tuple[str, int]] = {}
        self.credentials = CredentialStore(self.data_dir)
        self.acls = AclStore(self.data_dir)
        self.authorizer = Authorizer(
            self.acls, enabled=bool(config.authorizer_class_name.strip()),
            super_users=parse_super_users(config.super_users),
            allow_if_no_acl=config.allow_everyone_if_no_acl_found,
        )

        self.default_log_config = LogConfig.from_topic_config(
            self.dynamic_configs.topic_defaults(config))
        self.log_manager = LogManager(
            self.data_dir, self.default_log_config,
            checkpoint_interval_ms=config.log_flush_offset_checkpoint_interval_ms,
        )
        self.notifier = AppendNotifier()
        self.storage_health = StorageHealth(self.data_dir)
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.group_commit = GroupCommit(
            due_logs=self._logs_due_for_flush,
            check_interval_s=config.log_flush_scheduler_interval_ms / 1000,
            health=self.storage_health,
        )
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.groups = GroupService(
            self,
            CoordinatorConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
            ),
            num_partitions=config.offsets_topic_num_partitions,
            retention_ms=config.offsets_retention_minutes * 60_000,
            retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            consumer_config=ConsumerGroupConfig(
                session_timeout_ms=config.group_consumer_session_timeout_ms,
                heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
                assignors=tuple(config.group_consumer_assignors.split(",")),
                max_size=config.group_consumer_max_size,
            ),
        )
        self.shares = ShareService(self, ShareConfig(
            record_lock_duration_ms=config.group_share_record_lock_duration_ms,
            min_record_lock_duration_ms=config.group_share_min_record_lock_duration_ms,
            max_record_lock_duration_ms=config.group_share_max_record_lock_duration_ms,
            delivery_count_limit=config.group_share_delivery_count_limit,
            partition_max_record_locks=config.group_share_partition_max_record_locks,
            session_timeout_ms=config.group_share_session_timeout_ms,
            heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
            max_size=config.group_share_max_size,
            max_share_sessions=config.group_share_max_share_sessions,
            share_version=config.share_version,
            dlq_topic_prefix=config.errors_deadletterqueue_topic_name_prefix,
            dlq_auto_create=config.errors_deadletterqueue_auto_create_topics_enable,
            state_topic_num_partitions=config.share_coordinator_state_topic_num_partitions,
        ))
        self.transactions = TransactionService(
            self,
            num_partitions=config.transaction_state_log_num_partitions,
            max_timeout_ms=config.transaction_max_timeout_ms,
            abort_check_interval_ms=config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        )
        self.retention = RetentionService(
            self.log_manager, config.log_retention_check_interval_ms / 1000,
            on_change=self.fetch_sessions.touch_all,
        )
        # KIP-714: client-metrics subscriptions and the series pushed under them
        self.client_metrics = ClientMetricsManager(SubscriptionStore(self.data_dir))

    # -- identity -------------------------------------------------------------------------

    def advertised_address(self, listener: str | None = None) -> tuple[str, int]:
        """Where clients of ``listener`` (default: the first) are told to connect: its
        ``advertised.listeners`` entry, else the address it is bound to (Kafka's rule: a
        client is always sent back to the listener it came in on)."""
        name = listener or self.listeners[0].name
        advertised = self.config.advertised_for(name)
        if advertised is not None:
            return advertised
        host, port = self.bound.get(name, (self.host, self.port))
        return (host if host not in ("", "0.0.0.0", "::") else "127.0.0.1"), port

    @property
    def advertised_host(self) -> str:
        return self.advertised_address()[0]

    @property
    def advertised_port(self) -> int:
        return self.advertised_address()[1]

    # -- storage lifecycle ----------------------------------------------------------------

    def open_storage(self) -> list[str]:
        """Create the data directory if needed, read (or create) meta.properties, open every
        log (recovering after an unclean stop); the recovery actions taken."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_cluster_id(self.data_dir, self.node_id)
        self.credentials.load()
        self.acls.load()
        # The LogManager logs each recovery action where it takes it, and one summary line.
        return self.log_manager.open()

    def close_storage(self) -> None:
        self.log_manager.close()

    # -- topics ---------------------------------------------------------------------------

    def topic(self, name: str):
        """The TopicInfo of ``name`` or None."""
        return self.log_manager.topics().get(name)

    def topic_configs(self, name: str) -> dict[str, tuple[str, bool]]:
        """Every topic config key -> (effective value, whether the topic overrides it)."""
        overrides = self.log_manager.topics()[name].config
        effective = self.log_manager.topic_config(name).to_topic_config()
        for key, inert in INERT_TOPIC_CONFIGS.items():  # accepted, no effect: as stored
            effective[key] = overrides.get(key, inert.default)
        return {key: (value, key in overrides) for key, value in effective.items()}

    def set_dynamic_configs(self, configs: dict[str, str], *, per_broker: bool,
                            validate_only: bool = False) -> None:
        """Replace this node's (``per_broker``) or the cluster-wide dynamic broker configs
        with ``configs``: checked as Kafka does (DynamicConfigError, InvalidConfigError),
        persisted, then applied (see dynamic_config.py)."""
        dynamic = self.dynamic_configs
        config = dynamic.check(self.static_config, configs, per_broker=per_broker)
        trial = DynamicBrokerConfigs(dynamic.data_dir,
                                     configs if per_broker else dynamic.per_broker,
                                     dynamic.cluster if per_broker else configs)
        defaults = LogConfig.from_topic_config(trial.topic_defaults(config))  # validates
        if validate_only:
            return
        trial.save()
        self.dynamic_configs = trial
        self.config = config
        self.default_log_config = defaults
        self.log_manager.set_default_config(defaults)
        for listener in self.config_listeners:
            listener(config)
        log.info("dynamic broker configs (%s) are now %s",
                 f"node {self.node_id}" if per_broker else "cluster-wide",
                 dict(sorted(configs.items())) or "none")

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
        self.fetch_sessions.touch_all()
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

    def append(self, topic: str, partition: int, records: bytes, now_ms: int | None = None,
               *, allow_control: bool = False):
        """Append record batches to a partition: the AppendInfo, storage errors raise.

        Wakes fetches waiting on the partition.  Not durable yet: see ``wait_durable``.
        ``allow_control``: the transaction coordinator's markers (clients may not write them).
        """
        partition_log = self.log_manager.get_log(topic, partition)
        if partition_log is None:
            raise UnknownTopicError(f"{topic}-{partition} does not exist")
        try:
            info = partition_log.append(
                records, now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
                allow_control=allow_control,
            )
        except KafkaStorageError as exc:
            self.storage_health.failed(exc)  # one ERROR per episode, not per request
            raise
        if self.storage_health.failing_errno is not None:
            self.storage_health.succeeded()
        self.notifier.notify((topic, partition))
        self.fetch_sessions.touch((topic, partition))
        if partition_log.needs_flush(int(time.time() * 1000)):
            self.group_commit.kick()
        return info

    def durable_waiter(self, topic: str, partition: int, last_offset: int):
        """Ask for ``last_offset`` of the partition to be fsynced now (group commit); ``await
        waiter.wait()`` returns once it is (None: it already is).  A request appending to
        several partitions registers them all before awaiting, so one round covers them."""
        partition_log = self.log_manager.get_log(topic, partition)
        if partition_log is None:
            raise UnknownTopicError(f"{topic}-{partition} was deleted before it was flushed")
        return self.group_commit.register(partition_log, last_offset)

    async def wait_durable(self, topic: str, partition: int, last_offset: int) -> None:
        """Return once ``last_offset`` of the partition is fsynced (group commit)."""
        waiter = self.durable_waiter(topic, partition, last_offset)
        if waiter is not None:
            await waiter.wait()

    async def append_durably(self, topic: str, partition: int, records: bytes):
        """``append`` then ``wait_durable``: what acks=all means on a single node."""
        info = self.append(topic, partition, records)
        await self.wait_durable(topic, partition, info.last_offset)
        return info

    def _logs_due_for_flush(self, now_ms: int):
        return [plog for plog in self.log_manager.dirty_logs() if plog.needs_flush(now_ms)]

    # -- background work ------------------------------------------------------------------

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
        """Open storage, start the services (group commit, retention, checkpoints, the group
        coordinator) and hand ``self`` to ``task_status``; on cancellation stop them, flush
        and close."""
        self.open_storage()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.group_commit.serve)
                await nursery.start(self.retention.serve)
                await nursery.start(self._checkpoint_loop)
                # creates/replays __consumer_offsets: after the LogManager is open
                await nursery.start(self.groups.run)
                await nursery.start(self.shares.run)  # creates/replays __share_group_state
                # after the groups: its recovery may settle transactional offset commits
                await nursery.start(self.transactions.run)  # creates/replays __transaction_state
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            self.notifier.notify_all()
            self.close_storage()
