"""The admin client: topics, partitions, configs, consumer groups, SCRAM users and ACLs.

::

    async with Admin("localhost:9092") as admin:
        await admin.create_topics({"events": 6}, configs={"retention.ms": "86400000"})
        print(await admin.describe_topics(["events"]))

Topic changes go to the controller named in metadata (any broker when the cluster names
none).  Group operations go to each group's coordinator (FindCoordinator).  Per-topic and
per-group failures come back as values (``{name: KafkaError | None}``) so one bad name does
not hide what happened to the others; whole-request failures raise.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol.api_keys import ApiKey
from ..protocol.consumer_protocol import decode_assignment
from ..protocol.sasl import MECHANISM_CODES, MECHANISM_NAMES, salted_password
from ..protocol.types import TopicPartition
from . import errors
from .cluster import Cluster, PartitionMetadata
from .config import AdminConfig
from .connection import OpenStream
from .offsets import EARLIEST, LATEST, list_offsets

log = logging.getLogger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionMetadata, ...]
    is_internal: bool = False
    topic_id: Any = None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...] = field(default_factory=tuple)
    error: errors.KafkaError | None = None


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    is_default: bool
    is_sensitive: bool


class Admin:
    """Trio-native admin client; use as ``async with Admin(bootstrap) as admin``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        config: Mapping[str, Any] | AdminConfig | None = None,
        *,
        open_stream: OpenStream | None = None,
    ) -> None:
        self.config = (
            config if isinstance(config, AdminConfig) else AdminConfig.from_kafka(config or {})
        )
        self._cluster = Cluster(
            bootstrap_servers, self.config, allow_auto_create=False, open_stream=open_stream
        )
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    async def __aenter__(self) -> Admin:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self._running())
        return self

    async def __aexit__(self, *exc) -> bool:
        await self.close()
        return False

    def _running(self):
        return self._cluster.running()

    async def close(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()

    @property
    def _timeout_ms(self) -> int:
        return self.config.request_timeout_ms

    async def _controller(self) -> int | None:
        await self._cluster.refresh_metadata(all_topics=False)
        controller = self._cluster.controller_id
        return controller if controller in self._cluster.brokers else None

    # -- topics --------------------------------------------------------------------------

    async def list_topics(self, include_internal: bool = False) -> list[str]:
        await self._cluster.refresh_metadata(all_topics=True, allow_auto_create=False)
        return sorted(
            name for name, t in self._cluster.topics.items()
            if not t.error_code and (include_internal or not t.is_internal)
        )

    async def describe_topics(self, topics: Iterable[str] | None = None) -> dict[str, TopicDescription | errors.KafkaError]:
        """Partitions (leader, replicas, ISR) of ``topics`` (all topics when None)."""
        if topics is None:
            await self._cluster.refresh_metadata(all_topics=True, allow_auto_create=False)
            names = sorted(self._cluster.topics)
        else:
            names = list(topics)
            await self._cluster.refresh_metadata(names, allow_auto_create=False)
        out: dict[str, TopicDescription | errors.KafkaError] = {}
        for name in names:
            meta = self._cluster.topics.get(name)
            if meta is None:
                out[name] = errors.UnknownTopicOrPartitionError(f"topic {name!r} not found")
            elif meta.error_code:
                out[name] = errors.from_code(meta.error_code, f"topic {name!r}")
            else:
                out[name] = TopicDescription(
                    name, tuple(meta.partitions[p] for p in sorted(meta.partitions)),
                    meta.is_internal, meta.topic_id,
                )
        return out

    async def create_topics(
        self,
        topics: Mapping[str, int] | Iterable[str],
        *,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        validate_only: bool = False,
    ) -> dict[str, errors.KafkaError | None]:
        """Create ``{name: partitions}`` (or names with the broker's num.partitions: -1).
        ``replication_factor`` -1 means the broker's default."""
        wanted = dict(topics) if isinstance(topics, Mapping) else {t: -1 for t in topics}
        fields = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": count,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()],
                }
                for name, count in wanted.items()
            ],
            "timeout": self._timeout_ms,
            "validate_only": validate_only,
        }
        controller = await self._controller()
        response = await self._cluster.request(controller, ApiKey.CREATE_TOPICS, fields)
        out = {
            t.name: (errors.from_code(t.error_code, getattr(t, "error_message", None) or t.name)
                     if int(t.error_code) else None)
            for t in response.topics
        }
        await self._cluster.refresh_metadata([n for n, e in out.items() if e is None] or (), allow_auto_create=False)
        return out

    async def ensure_topics(self, topics: Mapping[str, int], *,
                            configs: Mapping[str, str] | None = None,
                            or_auto_create: bool = False) -> bool:
        """Create those of ``{name: partitions}`` that do not exist yet (an existing one is
        left as it is); any other per-topic error is raised.  With ``or_auto_create``, a
        cluster that cannot create topics through the admin API (no CreateTopics, or no
        controller named, as in librdkafka's mock cluster: REQUEST_TIMED_OUT,
        UNSUPPORTED_VERSION) is logged and left to create them on first use
        (auto.create.topics.enable); False then, else True."""
        try:
            created = await self.create_topics(topics, configs=configs)
        except (errors.RequestTimedOutError, errors.UnsupportedVersionError) as exc:
            if not or_auto_create:
                raise
            log.warning("could not create %s (%s); relying on auto-creation",
                        ", ".join(topics), exc)
            return False
        for error in created.values():
            if error is not None and not isinstance(error, errors.TopicAlreadyExistsError):
                raise error
        return True

    async def delete_topics(self, topics: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        names = list(topics)
        response = await self._cluster.request(
            await self._controller(),
            ApiKey.DELETE_TOPICS,
            {"topic_names": names, "topics": [{"name": n} for n in names], "timeout": self._timeout_ms},
        )
        for name in names:
            self._cluster.forget_topic(name)
            self._cluster.wanted_topics.discard(name)
        return {
            r.name: (errors.from_code(r.error_code, getattr(r, "error_message", None) or r.name)
                     if int(r.error_code) else None)
            for r in response.responses
        }

    async def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False
    ) -> dict[str, errors.KafkaError | None]:
        """Grow each topic to ``new_totals[topic]`` partitions."""
        response = await self._cluster.request(
            await self._controller(),
            ApiKey.CREATE_PARTITIONS,
            {
                "topics": [{"name": t, "count": n, "assignments": None} for t, n in new_totals.items()],
                "timeout": self._timeout_ms,
                "validate_only": validate_only,
            },
        )
        await self._cluster.refresh_metadata(list(new_totals), allow_auto_create=False)
        return {
            r.name: (errors.from_code(r.error_code, getattr(r, "error_message", None) or r.name)
                     if int(r.error_code) else None)
            for r in response.results
        }

    async def describe_configs(
        self, topics: Iterable[str] = (), brokers: Iterable[int] = ()
    ) -> dict[str, dict[str, ConfigEntry] | errors.KafkaError]:
        """Effective configs of topics (keyed by name) and brokers (keyed by ``broker:ID``)."""
        resources = [
            {"resource_type": RESOURCE_TOPIC, "resource_name": t, "configuration_keys": None}
            for t in topics
        ] + [
            {"resource_type": RESOURCE_BROKER, "resource_name": str(b), "configuration_keys": None}
            for b in brokers
        ]
        response = await self._cluster.request(
            None, ApiKey.DESCRIBE_CONFIGS,
            {"resources": resources, "include_synonyms": False, "include_documentation": False},
        )
        out: dict[str, dict[str, ConfigEntry] | errors.KafkaError] = {}
        for r in response.results:
            key = r.resource_name if int(r.resource_type) == RESOURCE_TOPIC else f"broker:{r.resource_name}"
            if int(r.error_code):
                out[key] = errors.from_code(r.error_code, getattr(r, "error_message", None) or key)
                continue
            entries = {}
            for c in r.configs:
                source = int(getattr(c, "config_source", -1))
                is_default = bool(getattr(c, "is_default", False)) or source == 5
                entries[c.name] = ConfigEntry(c.name, c.value, bool(c.read_only), is_default, bool(c.is_sensitive))
            out[key] = entries
        return out

    async def incremental_alter_configs(
        self, topic: str, set_configs: Mapping[str, str] = (), delete: Iterable[str] = (),
        *, validate_only: bool = False,
    ) -> errors.KafkaError | None:
        """Set and delete (back to the default) overrides of one topic's configs, leaving the
        others as they are (IncrementalAlterConfigs; operation 0 SET, 1 DELETE)."""
        configs = [{"name": k, "config_operation": 0, "value": str(v)}
                   for k, v in dict(set_configs).items()]
        configs += [{"name": k, "config_operation": 1, "value": None} for k in delete]
        response = await self._cluster.request(None, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic,
                           "configs": configs}],
            "validate_only": validate_only,
        })
        (result,) = response.responses
        if int(result.error_code):
            return errors.from_code(result.error_code, result.error_message or topic)
        return None

    async def describe_log_dirs(
        self, topics: Iterable[str] | None = None
    ) -> dict[TopicPartition, int]:
        """Bytes on disk of each partition of ``topics`` (None: every topic), asked of every
        broker (DescribeLogDirs).  A partition with several replicas reports the largest
        copy: the size of the partition, not of all its replicas together."""
        names = None if topics is None else list(topics)
        await self._cluster.refresh_metadata(names or (), allow_auto_create=False)
        fields = {"topics": None if names is None else [
            {"topic": t, "partitions": self._cluster.partitions_for(t) or []} for t in names]}
        sizes: dict[TopicPartition, int] = {}
        for node in sorted(self._cluster.brokers):
            response = await self._cluster.request(node, ApiKey.DESCRIBE_LOG_DIRS, fields)
            errors.raise_for_code(getattr(response, "error_code", 0),
                                  f"DescribeLogDirs on broker {node}")
            for result in response.results:
                if int(result.error_code):
                    continue  # an offline directory: its replicas are counted elsewhere
                for t in result.topics:
                    for p in t.partitions:
                        tp = (t.name, int(p.partition_index))
                        sizes[tp] = max(sizes.get(tp, 0), int(p.partition_size))
        return sizes

    async def delete_records(
        self, before: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | errors.KafkaError]:
        """Delete the records of each partition below ``before[tp]`` (-1: every record up to
        the high watermark), as kafka-delete-records.sh: DeleteRecords to each partition's
        leader.  Each partition's answer is its new log start offset (the low watermark) or
        the error the broker gave (OFFSET_OUT_OF_RANGE past the high watermark, ...)."""
        wanted = dict(before)
        await self._cluster.refresh_metadata({t for t, _ in wanted}, allow_auto_create=False)
        out: dict[TopicPartition, int | errors.KafkaError] = {}
        by_leader: dict[int, dict[str, list[dict]]] = {}
        for (topic, partition), offset in wanted.items():
            leader = self._cluster.leader_for(topic, partition)
            if leader < 0:
                out[(topic, partition)] = errors.UnknownTopicOrPartitionError(
                    f"{topic}-{partition}: no such partition (or no leader)")
                continue
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                {"partition_index": partition, "offset": offset})
        for leader, topics in sorted(by_leader.items()):
            response = await self._cluster.request(leader, ApiKey.DELETE_RECORDS, {
                "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()],
                "timeout": self._timeout_ms,
            })
            for t in response.topics:
                for p in t.partitions:
                    tp = (t.name, int(p.partition_index))
                    out[tp] = (errors.from_code(p.error_code, f"DeleteRecords {tp[0]}-{tp[1]}")
                               if int(p.error_code) else int(p.low_watermark))
        return out

    # -- groups --------------------------------------------------------------------------

    async def list_groups(self) -> list[tuple[str, str]]:
        """(group id, protocol type) of every group on every broker."""
        await self._cluster.refresh_metadata(allow_auto_create=False)
        found: dict[str, str] = {}
        for node in sorted(self._cluster.brokers):
            response = await self._cluster.request(node, ApiKey.LIST_GROUPS, {"states_filter": []})
            errors.raise_for_code(response.error_code, f"ListGroups on broker {node}")
            for g in response.groups:
                found[g.group_id] = g.protocol_type
        return sorted(found.items())

    async def _coordinator(self, group_id: str) -> int:
        response = await self._cluster.request(
            None, ApiKey.FIND_COORDINATOR, {"key": group_id, "key_type": 0}
        )
        errors.raise_for_code(response.error_code, f"FindCoordinator for group {group_id!r}")
        node = int(response.node_id)
        if node not in self._cluster.brokers:
            self._cluster.register_address(node, response.host, int(response.port))
        return node

    async def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        out = {}
        for group_id in group_ids:
            node = await self._coordinator(group_id)
            response = await self._cluster.request(
                node, ApiKey.DESCRIBE_GROUPS,
                {"groups": [group_id], "include_authorized_operations": False},
            )
            for g in response.groups:
                members = []
                for m in g.members:
                    try:
                        assignment = decode_assignment(m.member_assignment).partitions if g.protocol_type == "consumer" else ()
                    except ValueError:
                        assignment = ()
                    members.append(MemberDescription(
                        m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                        m.client_host, tuple(assignment),
                    ))
                out[g.group_id] = GroupDescription(
                    g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members),
                    errors.from_code(g.error_code, g.group_id) if int(g.error_code) else None,
                )
        return out

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, errors.KafkaError | None]:
        out = {}
        for group_id in group_ids:
            node = await self._coordinator(group_id)
            response = await self._cluster.request(
                node, ApiKey.DELETE_GROUPS, {"groups_names": [group_id]}
            )
            for r in response.results:
                out[r.group_id] = errors.from_code(r.error_code, r.group_id) if int(r.error_code) else None
        return out

    async def list_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Committed offsets of every partition the group has committed (OffsetFetch)."""
        node = await self._coordinator(group_id)
        response = await self._cluster.request(
            node, ApiKey.OFFSET_FETCH,
            {"group_id": group_id, "topics": None, "require_stable": False},
        )
        errors.raise_for_code(getattr(response, "error_code", 0), f"OffsetFetch {group_id!r}")
        return {
            (t.name, int(p.partition_index)): int(p.committed_offset)
            for t in response.topics for p in t.partitions if int(p.committed_offset) >= 0
        }

    async def list_group_offsets_and_metadata(
        self, group_id: str
    ) -> dict[TopicPartition, tuple[int, str]]:
        """As ``list_group_offsets``, with each offset's metadata string (Kafka's
        OffsetAndMetadata)."""
        node = await self._coordinator(group_id)
        response = await self._cluster.request(
            node, ApiKey.OFFSET_FETCH,
            {"group_id": group_id, "topics": None, "require_stable": False},
        )
        errors.raise_for_code(getattr(response, "error_code", 0), f"OffsetFetch {group_id!r}")
        return {
            (t.name, int(p.partition_index)): (int(p.committed_offset), p.metadata or "")
            for t in response.topics for p in t.partitions if int(p.committed_offset) >= 0
        }

    async def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]]
    ) -> None:
        """Commit ``{(topic, partition): (offset, metadata)}`` for a group with no active
        members (Kafka's alterConsumerGroupOffsets), in one OffsetCommit: the coordinator
        appends them as one batch.  Raises the first partition's error."""
        by_topic: dict[str, list] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": metadata})
        node = await self._coordinator(group_id)
        response = await self._cluster.request(node, ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        })
        for t in response.topics:
            for p in t.partitions:
                errors.raise_for_code(p.error_code, f"committing {t.name}-{p.partition_index} "
                                                    f"for group {group_id!r}")

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: str | int = "latest"
    ) -> dict[TopicPartition, int]:
        """Offsets of ``partitions``: ``"earliest"``, ``"latest"`` or a timestamp (ms)."""
        target = {"earliest": EARLIEST, "latest": LATEST}.get(spec, spec)
        got = await list_offsets(
            self._cluster, {tp: int(target) for tp in partitions}, timeout=self._timeout_ms / 1000
        )
        return {tp: off for tp, (off, _ts) in got.items()}

    # -- users (SCRAM credentials) and ACLs ---------------------------------------------

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[tuple[str, int]] | errors.KafkaError]:
        """user -> [(mechanism, iterations), ...] (all users when ``users`` is None)."""
        fields = {"users": None if users is None else [{"name": u} for u in users]}
        response = await self._cluster.request(
            None, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, fields)
        errors.raise_for_code(response.error_code, response.error_message or "")
        return {
            r.user: (errors.from_code(r.error_code, r.error_message or r.user)
                     if int(r.error_code) else
                     [(MECHANISM_NAMES.get(int(c.mechanism), str(c.mechanism)),
                       int(c.iterations)) for c in r.credential_infos])
            for r in response.results
        }

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[tuple[str, str, str, int]] = (),
        deletions: Iterable[tuple[str, str]] = (),
    ) -> dict[str, errors.KafkaError | None]:
        """Set (user, mechanism, password, iterations) and remove (user, mechanism)
        credentials.  Only the salted password goes on the wire (KIP-554)."""
        import os

        upserts = []
        for user, mechanism, password, iterations in upsertions:
            salt = os.urandom(32)
            upserts.append({
                "name": user, "mechanism": MECHANISM_CODES[mechanism],
                "iterations": iterations, "salt": salt,
                "salted_password": salted_password(mechanism, password, salt, iterations)})
        fields = {"upsertions": upserts, "deletions": [
            {"name": user, "mechanism": MECHANISM_CODES[mechanism]}
            for user, mechanism in deletions]}
        response = await self._cluster.request(
            None, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, fields)
        return {r.user: (errors.from_code(r.error_code, r.error_message or r.user)
                         if int(r.error_code) else None) for r in response.results}

    async def describe_acls(self, acl_filter: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The ACLs matching ``acl_filter`` (kio's DescribeAcls field names:
        resource_type_filter, resource_name_filter, pattern_type_filter, principal_filter,
        host_filter, operation, permission_type), as dicts of CreateAcls' field names."""
        response = await self._cluster.request(None, ApiKey.DESCRIBE_ACLS, acl_filter)
        errors.raise_for_code(response.error_code, response.error_message or "DescribeAcls")
        return [
            {"resource_type": int(r.resource_type), "resource_name": r.resource_name,
             "resource_pattern_type": int(r.pattern_type), "principal": a.principal,
             "host": a.host, "operation": int(a.operation),
             "permission_type": int(a.permission_type)}
            for r in response.resources for a in r.acls
        ]

    async def create_acls(self, bindings: Iterable[Mapping[str, Any]]) -> list[errors.KafkaError | None]:
        """Create ACLs (dicts of CreateAcls' field names); one result per binding."""
        response = await self._cluster.request(
            None, ApiKey.CREATE_ACLS, {"creations": list(bindings)})
        return [errors.from_code(r.error_code, r.error_message or "CreateAcls")
                if int(r.error_code) else None for r in response.results]

    async def delete_acls(
        self, filters: Iterable[Mapping[str, Any]]
    ) -> list[list[dict[str, Any]] | errors.KafkaError]:
        """Delete the ACLs matching each filter; per filter the deleted ACLs or the error."""
        response = await self._cluster.request(
            None, ApiKey.DELETE_ACLS, {"filters": list(filters)})
        out: list[list[dict[str, Any]] | errors.KafkaError] = []
        for r in response.filter_results:
            if int(r.error_code):
                out.append(errors.from_code(r.error_code, r.error_message or "DeleteAcls"))
                continue
            out.append([{"resource_type": int(a.resource_type),
                         "resource_name": a.resource_name,
                         "resource_pattern_type": int(a.pattern_type),
                         "principal": a.principal, "host": a.host,
                         "operation": int(a.operation),
                         "permission_type": int(a.permission_type)}
                        for a in r.matching_acls])
        return out
