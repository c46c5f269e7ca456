"""LogManager: every partition log of one data directory, the topics they belong to, and the
directory-wide files (checkpoints, clean-shutdown marker, topic metadata).

Lifecycle: ``LogManager(data_dir, default_config)`` -> ``open()`` (loads every topic, runs
recovery, returns the recovery actions) -> appends/reads through ``get_log`` -> ``close()``
(flush, producer snapshots, checkpoints, then the ``.kafka_cleanshutdown`` marker).  The
marker is removed by ``open``, so any stop other than ``close`` is an unclean one and the
next ``open`` re-validates everything after each log's recovery point.

Threading: ``flush_all`` (and ``PartitionLog.flush``) may run on a worker thread while the
owner thread appends; so may the steps yielded by ``retention_steps`` / ``compaction_steps``
(the generators themselves run on the owner thread, see steps.py); every other method
belongs to the owner thread.  Checkpoints written
by ``flush_all`` are rate-limited by ``checkpoint_interval_ms`` (Kafka's
``log.flush.offset.checkpoint.interval.ms``, 60 s); ``write_checkpoints`` forces one.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from databus.protocol.defaults import LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL_MS

from .checkpoints import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from .compaction import compaction_steps
from .config import LogConfig
from .durable import atomic_write, fsync_dir
from .errors import InvalidPartitionsError, TopicExistsError, UnknownTopicError
from .partition_log import PartitionLog
from .retention import retention_steps
from .steps import Steps, run_steps
from .topic_metadata import (
    PARTITION_METADATA_FILE,
    TopicInfo,
    load_topics,
    parse_partition_dir,
    partition_dir_name,
    read_partition_metadata,
    save_topics,
    validate_topic_name,
    write_partition_metadata,
)

log = logging.getLogger(__name__)

_DELETE_SUFFIX = "-delete"


class LogManager:
    def __init__(self, data_dir: str | os.PathLike, default_config: LogConfig | None = None, *,
                 clock=time.time,
                 checkpoint_interval_ms: int = LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL_MS) -> None:
        self.data_dir = str(Path(data_dir))
        self.default_config = default_config if default_config is not None else LogConfig()
        self._clock = clock
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._topics: dict[str, TopicInfo] = {}
        self._configs: dict[str, LogConfig] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._checkpoint_lock = threading.Lock()
        self._last_checkpoint_ms = 0
        self._opened = False

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _path(self, *parts: str) -> str:
        return os.path.join(self.data_dir, *parts)

    # -- opening ----------------------------------------------------------------------------

    def open(self) -> list[str]:
        if self._opened:
            raise RuntimeError("LogManager.open() called twice")
        os.makedirs(self.data_dir, exist_ok=True)
        started = time.perf_counter()
        actions: list[str] = []

        def act(line: str, level: int = logging.INFO) -> None:
            actions.append(line)
            log.log(level, "recovery: %s", line)

        marker = self._path(CLEAN_SHUTDOWN_MARKER)
        clean = os.path.exists(marker)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT, act)
        start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT, act)
        for entry in sorted(os.listdir(self.data_dir)):
            if entry.endswith(_DELETE_SUFFIX) and os.path.isdir(self._path(entry)):
                shutil.rmtree(self._path(entry))
                act(f"removed {entry}, a topic deletion that had not finished")
        partition_dirs = {}
        for entry in os.listdir(self.data_dir):
            parsed = parse_partition_dir(entry)
            if parsed and _is_partition_dir(self._path(entry)):
                partition_dirs[parsed] = entry
        if not clean and partition_dirs:
            act(f"{self.data_dir}: no clean-shutdown marker; re-validating every log after "
                "its recovery point", logging.WARNING)
        topics = load_topics(self.data_dir)
        if topics is None:
            topics = self._topics_from_dirs(partition_dirs, act)
            if topics:
                save_topics(self.data_dir, topics)
        self._topics = topics
        for (topic, partition), entry in sorted(partition_dirs.items()):
            info = topics.get(topic)
            if info is None or partition >= info.partitions:
                self._remove_dir(entry)
                act(f"removed {entry}: no such topic partition in the topic metadata "
                    "(an interrupted create or delete)", logging.WARNING)
        for name, info in sorted(topics.items()):
            self._configs[name] = LogConfig.from_topic_config(info.config, base=self.default_config)
            for partition in range(info.partitions):
                key = (name, partition)
                if key not in partition_dirs:
                    act(f"{name}-{partition}: partition directory missing; created empty",
                        logging.WARNING)
                actions += self._open_log(info, partition, clean=clean,
                                          recovery_point=recovery_points.get(key, 0),
                                          log_start_offset=start_offsets.get(key, 0))
        if clean:
            os.unlink(marker)
            fsync_dir(self.data_dir)
        # One line per data dir (each repair, if any, was logged where it was made).
        partitions = sum(info.partitions for info in topics.values())
        log.info("%s: loaded %d partition(s) of %d topic(s) in %.0f ms (%s)", self.data_dir,
                 partitions, len(topics), (time.perf_counter() - started) * 1000,
                 "clean shutdown" if clean or not partition_dirs
                 else f"after an unclean shutdown: {len(actions)} recovery action(s)")
        self._opened = True
        self._last_checkpoint_ms = self._now_ms()
        return actions

    def _read_checkpoint(self, name: str, act) -> dict[tuple[str, int], int]:
        try:
            return read_checkpoint(self._path(name))
        except (CheckpointError, UnicodeDecodeError) as exc:
            act(f"ignored damaged checkpoint ({exc}); recovering from the log start",
                logging.WARNING)
            return {}

    def _topics_from_dirs(self, partition_dirs, act) -> dict[str, TopicInfo]:
        topics: dict[str, TopicInfo] = {}
        for (topic, partition), entry in sorted(partition_dirs.items()):
            topic_id = read_partition_metadata(self._path(entry))
            info = topics.get(topic)
            if info is None:
                info = topics[topic] = TopicInfo(topic, topic_id or uuid.uuid4(), 0, {})
            info.partitions = max(info.partitions, partition + 1)
        for info in topics.values():
            act(f"{TOPIC_METADATA_NAME} missing: rebuilt topic {info.name} "
                f"({info.partitions} partitions) from its directories; config overrides "
                "are lost", logging.WARNING)
        return topics

    def _open_log(self, info: TopicInfo, partition: int, *, clean: bool, recovery_point: int = 0,
                  log_start_offset: int = 0) -> list[str]:
        directory = self._path(partition_dir_name(info.name, partition))
        os.makedirs(directory, exist_ok=True)
        if read_partition_metadata(directory) != info.topic_id:
            write_partition_metadata(directory, info.topic_id)
        plog, actions = PartitionLog.open(
            directory, info.name, partition, self._configs[info.name],
            recovery_point=recovery_point, log_start_offset=log_start_offset, clean=clean,
            clock=self._clock)
        self._logs[(info.name, partition)] = plog
        return actions

    def _remove_dir(self, entry: str) -> None:
        doomed = self._path(f"{entry}.{uuid.uuid4().hex}{_DELETE_SUFFIX}")
        os.rename(self._path(entry), doomed)
        fsync_dir(self.data_dir)
        shutil.rmtree(doomed)

    # -- topics -----------------------------------------------------------------------------

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def topic_config(self, name: str) -> LogConfig:
        try:
            return self._configs[name]
        except KeyError:
            raise UnknownTopicError(f"unknown topic {name!r}") from None

    def _normalize_overrides(self, config) -> tuple[dict[str, str], LogConfig]:
        if isinstance(config, LogConfig):
            return config.overrides_against(self.default_config), config
        effective = LogConfig.from_topic_config(config, base=self.default_config)
        rendered = effective.to_topic_config()
        # configs with no effect here (storage.config.INERT_TOPIC_CONFIGS) keep their text
        return {key: rendered.get(key, str(config[key]).strip()) for key in config}, effective

    def create_topic(self, name: str, partitions: int,
                     config: Mapping[str, str] | LogConfig | None = None) -> TopicInfo:
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, not {partitions}")
        overrides, effective = self._normalize_overrides(config or {})
        info = TopicInfo(name, uuid.uuid4(), partitions, overrides)
        self._configs[name] = effective
        # Directories first, metadata last: a crash in between leaves orphan directories
        # that open() removes, never a listed topic without its directories.
        for partition in range(partitions):
            self._open_log(info, partition, clean=True)
        self._topics[name] = info
        save_topics(self.data_dir, self._topics)
        return info

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if not isinstance(total, int) or total <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.partitions} partitions; the new count must be "
                f"larger, not {total}"
            )
        for partition in range(info.partitions, total):
            self._open_log(info, partition, clean=True)
        info.partitions = total
        save_topics(self.data_dir, self._topics)
        return info

    def alter_topic_config(self, name: str, config: Mapping[str, str | None], *,
                           incremental: bool = False) -> TopicInfo:
        """Replace the topic's overrides with ``config`` (Kafka's AlterConfigs), or with
        ``incremental`` set, apply them on top (a None value removes an override)."""
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        overrides = dict(info.config) if incremental else {}
        for key, value in config.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = value
        overrides, effective = self._normalize_overrides(overrides)
        # Durable first, live second: if the metadata cannot be written, nothing changes.
        previous, info.config = info.config, overrides
        try:
            save_topics(self.data_dir, self._topics)
        except BaseException:
            info.config = previous
            raise
        self._configs[name] = effective
        # The live logs read their config on every append, retention and compaction run,
        # so retention.ms, segment.bytes, cleanup.policy, ... apply from the next one on.
        for (topic, _), plog in self._logs.items():
            if topic == name:
                plog.config = effective
        return info

    def set_default_config(self, default: LogConfig) -> None:
        """New broker-level defaults (a dynamic broker config changed a ``log.*`` setting):
        every topic's effective config is recomputed over them and applied to its live
        logs, as alter_topic_config does (the topics' overrides still win)."""
        self.default_config = default
        for name, info in self._topics.items():
            self._configs[name] = LogConfig.from_topic_config(info.config, base=default)
        for (topic, _), plog in self._logs.items():
            plog.config = self._configs[topic]

    def delete_topic(self, name: str) -> None:
        info = self._topics.pop(name, None)
        if info is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        self._configs.pop(name, None)
        save_topics(self.data_dir, self._topics)
        for partition in range(info.partitions):
            plog = self._logs.pop((name, partition), None)
            if plog is not None:
                plog.delete()
            entry = partition_dir_name(name, partition)
            if os.path.isdir(self._path(entry)):
                self._remove_dir(entry)

    # -- logs -------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def dirty_logs(self) -> list[PartitionLog]:
        return [plog for plog in list(self._logs.values()) if plog.is_dirty()]

    def flush_all(self) -> None:
        """fsync every dirty log (safe on a worker thread); checkpoints when due."""
        for plog in self.dirty_logs():
            plog.flush()
        if self._now_ms() - self._last_checkpoint_ms >= self.checkpoint_interval_ms:
            self.write_checkpoints()

    def write_checkpoints(self) -> None:
        with self._checkpoint_lock:
            logs = list(self._logs.items())
            write_checkpoint(self._path(RECOVERY_POINT_CHECKPOINT),
                             {key: plog.recovery_point for key, plog in logs})
            write_checkpoint(self._path(LOG_START_OFFSET_CHECKPOINT),
                             {key: plog.log_start_offset for key, plog in logs})
            self._last_checkpoint_ms = self._now_ms()

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords on one partition: its new log start offset (see
        ``PartitionLog.delete_records_before``).  Not durable until ``write_checkpoints``
        has run, which the caller does before answering (one checkpoint write covers every
        partition of a request)."""
        plog = self._logs.get((topic, partition))
        if plog is None:
            raise UnknownTopicError(f"{topic}-{partition} does not exist")
        return plog.delete_records_before(offset)

    def retention_steps(self, now_ms: int | None = None) -> Steps:
        """Retention of every log, as steps (see steps.py); the actions taken."""
        return self._every_log(retention_steps, "retention", now_ms)

    def compaction_steps(self, now_ms: int | None = None) -> Steps:
        """Compaction of every log that is due, as steps (see steps.py); the actions taken."""
        return self._every_log(compaction_steps, "compaction", now_ms)

    def run_retention(self, now_ms: int | None = None) -> list[str]:
        """``retention_steps`` run inline on the calling (owner) thread."""
        return run_steps(self.retention_steps(now_ms))

    def run_compaction(self, now_ms: int | None = None) -> list[str]:
        """``compaction_steps`` run inline on the calling (owner) thread."""
        return run_steps(self.compaction_steps(now_ms))

    def _every_log(self, steps_of, what: str, now_ms: int | None) -> Steps:
        now_ms = self._now_ms() if now_ms is None else now_ms
        actions: list[str] = []
        for plog in self.logs():
            if plog.closed:  # deleted while an earlier log was being worked on
                continue
            try:
                done = yield from steps_of(plog, now_ms)
            except Exception:
                if not plog.closed:
                    raise
                log.info("%s of %s stopped: the log was deleted or closed", what, plog.name)
                continue
            for line in done:
                log.info("%s: %s", what, line)
            actions += done
        return actions

    def close(self) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker."""
        if not self._opened:
            return
        self._opened = False
        errors = []
        for plog in self.logs():
            try:
                plog.close()
            except Exception as exc:  # noqa: BLE001  (close the others; no clean marker then)
                log.error("closing %s failed: %s", plog.name, exc)
                errors.append(exc)
        self.write_checkpoints()
        self._logs.clear()
        if errors:
            raise errors[0]
        atomic_write(self._path(CLEAN_SHUTDOWN_MARKER), b"")


TOPIC_METADATA_NAME = "topic-metadata.json"


def _is_partition_dir(path: str) -> bool:
    """A directory we created: it holds partition.metadata or segments (other directories in
    the data dir, whatever their name, are left alone)."""
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return PARTITION_METADATA_FILE in names or any(n.endswith(".log") for n in names)
