"""Broker settings: one pydantic model whose aliases are Kafka's broker config names.

``databus broker -o key=value`` fills it (values are strings, pydantic converts them); the
sidecar helper renders docs/configuration.md from the field descriptions.  Topic-level
defaults (segment size, retention, ...) are derived from the ``log.*`` settings exactly as
Kafka derives a topic's config from its broker (``topic_defaults``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from databus.protocol import defaults
from databus.protocol.addresses import parse_host_port
from databus.protocol.sasl import MECHANISMS

from .listeners import DEFAULT_PROTOCOL_MAP, Listener, parse_listeners, parse_protocol_map


class BrokerConfigError(ValueError):
    """A broker option is unknown or has a bad value; the message is one line for the user."""


def first_listener(value: str, *, advertised: bool = False) -> tuple[str, int]:
    """(host, port) of the first entry of a Kafka listener list (``PLAINTEXT://:9092,...``).

    The first listener is the broker's main address (the ready file, ``--listen``).  An
    empty host listens on every interface (Kafka's meaning) and port 0 on a free port; an
    advertised listener is where clients connect, so it needs both a host and a real port.
    """
    return parse_host_port(
        value.split(",", 1)[0],
        allow_port_zero=not advertised,
        require_host=advertised,
        what="advertised.listeners" if advertised else "listeners",
    )


class _FieldError(ValueError):
    """A check across fields failed on one of them: ``alias='value': reason``."""

    def __init__(self, alias: str, value: str, exc: Exception) -> None:
        super().__init__(f"{alias}={value!r}: Value error, {exc}")


def parse_super_users_checked(text: str):
    from databus.storage.acls import AclError

    from .authorizer import parse_super_users

    try:
        return parse_super_users(text)
    except AclError as exc:
        raise _FieldError("super.users", text, exc) from None


class BrokerConfig(BaseModel):
    """Settings of the built-in broker (Kafka's names and defaults)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    node_id: int = Field(
        1, alias="node.id", ge=0,
        description="The id of this broker, reported in Metadata as the only node and the "
        "controller.",
    )
    log_dir: str | None = Field(
        None, validation_alias=AliasChoices("log.dirs", "log.dir", "log_dir"),
        serialization_alias="log.dirs",
        description="Directory holding the topic-partition logs (`--data-dir` sets it).",
    )
    listeners: str = Field(
        "127.0.0.1:9092", alias="listeners",
        description="Comma-separated `NAME://HOST:PORT` listeners (a bare HOST:PORT is "
        "PLAINTEXT; `--listen` sets it); each NAME's security protocol comes from "
        "`listener.security.protocol.map`. Port 0 picks a free port, logged as `listening "
        "on HOST:PORT` and written to `--ready-file`.",
    )
    advertised_listeners: str | None = Field(
        None, alias="advertised.listeners",
        description="`NAME://HOST:PORT` given in Metadata to clients of listener NAME "
        "(`--advertised-listener`); a listener not named here advertises its bound address.",
    )
    listener_security_protocol_map: str = Field(
        DEFAULT_PROTOCOL_MAP, alias="listener.security.protocol.map",
        description="`NAME:PROTOCOL` pairs: the security protocol (PLAINTEXT, SSL, "
        "SASL_PLAINTEXT, SASL_SSL) of each listener name.",
    )
    sasl_enabled_mechanisms: str = Field(
        ",".join(MECHANISMS), alias="sasl.enabled.mechanisms",
        description="SASL mechanisms offered on SASL listeners: PLAIN, SCRAM-SHA-256, "
        "SCRAM-SHA-512 (users: `databus users`; PLAIN checks the password against the "
        "user's SCRAM credentials).",
    )
    sasl_server_max_receive_size: int = Field(
        524288, alias="sasl.server.max.receive.size", ge=1024,
        description="Largest request frame accepted on a SASL listener before the login; a "
        "bigger size prefix closes the connection.",
    )
    connection_failed_authentication_delay_ms: int = Field(
        100, alias="connection.failed.authentication.delay.ms", ge=0,
        description="After a refused SASL login the broker answers at once and closes the "
        "connection this long after (Kafka's KIP-306): slows down password guessing, and "
        "lets a client read the refusal before the close (a client that reads the answer "
        "and the close together may drop the answer).  0: close right after the answer.",
    )
    connections_max_reauth_ms: int = Field(
        0, alias="connections.max.reauth.ms", ge=0,
        description="KIP-368: the lifetime of a SASL login; a client that does not log in "
        "again on the same connection (SaslHandshake + SaslAuthenticate v1+, as Kafka's "
        "clients and databus's do) before it ends has the connection closed at its next "
        "request.  0: no expiry.",
    )
    ssl_keystore_location: str | None = Field(
        None, alias="ssl.keystore.location",
        description="PEM file with the broker's private key and certificate chain (SSL and "
        "SASL_SSL listeners).",
    )
    ssl_keystore_type: str = Field(
        "PEM", alias="ssl.keystore.type", description="Only PEM is supported.",
    )
    ssl_key_password: SecretStr | None = Field(
        None, alias="ssl.key.password",
        description="Password of an encrypted private key in ssl.keystore.location.",
    )
    ssl_truststore_location: str | None = Field(
        None, alias="ssl.truststore.location",
        description="PEM file of the CA certificates client certificates must chain to.",
    )
    ssl_truststore_type: str = Field(
        "PEM", alias="ssl.truststore.type", description="Only PEM is supported.",
    )
    ssl_client_auth: Literal["none", "requested", "required"] = Field(
        "none", alias="ssl.client.auth",
        description="Ask TLS clients for a certificate: none, requested or required. A "
        "verified certificate's subject is the principal (`User:CN=...`) on SSL listeners.",
    )
    authorizer_class_name: str = Field(
        "", alias="authorizer.class.name",
        description="Empty: no authorization. Any other value (Kafka's "
        "`org.apache.kafka.metadata.authorizer.StandardAuthorizer`) turns ACLs on "
        "(`databus acls`).",
    )
    super_users: str = Field(
        "", alias="super.users",
        description="`User:NAME;User:OTHER`: principals allowed everything whatever the ACLs.",
    )
    allow_everyone_if_no_acl_found: bool = Field(
        False, alias="allow.everyone.if.no.acl.found",
        description="With ACLs on, allow a request on a resource no ACL matches.",
    )
    num_partitions: int = Field(
        1, alias="num.partitions", ge=1,
        description="Partitions of an auto-created topic, and of a created topic that does "
        "not say.",
    )
    auto_create_topics_enable: bool = Field(
        True, alias="auto.create.topics.enable",
        description="Create a topic when a client asks Metadata for it (never for internal "
        "`__` topics).",
    )
    message_max_bytes: int = Field(
        defaults.MESSAGE_MAX_BYTES, alias="message.max.bytes", ge=0,
        description="Largest record batch the broker accepts (topic override: "
        "`max.message.bytes`).",
    )
    socket_request_max_bytes: int = Field(
        104857600, alias="socket.request.max.bytes", ge=1024,
        description="Largest request frame; a bigger size prefix closes the connection "
        "before anything is buffered.",
    )
    queued_max_request_bytes: int = Field(
        256 * 1024 * 1024, alias="queued.max.request.bytes", ge=1024,
        description="Bytes reserved for requests being received, across all connections: "
        "a request's size is reserved once its size prefix arrives, and while the total is "
        "over this, connections are not read from (not dropped).  Kafka's default is "
        "unbounded; ours is finite so that slow partial requests cannot take the memory.",
    )
    connections_max_idle_ms: int = Field(
        600000, alias="connections.max.idle.ms", ge=1,
        description="Close a connection that has sent nothing for this long.",
    )
    max_connections: int = Field(
        2**31 - 1, alias="max.connections", ge=1,
        description="Most client connections at once; one more is closed at once.",
    )
    max_connections_per_ip: int = Field(
        2**31 - 1, alias="max.connections.per.ip", ge=1,
        description="Most connections from one IP address; one more is closed at once.",
    )
    fetch_max_bytes: int = Field(
        57671680, alias="fetch.max.bytes", ge=1024,
        description="Most record bytes one Fetch response carries, whatever the client asks "
        "(the first batch is always sent whole, even if larger).",
    )
    max_incremental_fetch_session_cache_slots: int = Field(
        1000, alias="max.incremental.fetch.session.cache.slots", ge=0,
        description="Fetch sessions (KIP-227) the broker keeps; the least recently used one "
        "is evicted to make room; 0 turns sessions off (every fetch is a full one).",
    )
    log_segment_bytes: int = Field(
        defaults.LOG_SEGMENT_BYTES, alias="log.segment.bytes", ge=14,
        description="Roll a new segment when the active one reaches this size (topic: "
        "`segment.bytes`).",
    )
    log_roll_ms: int = Field(
        defaults.LOG_ROLL_MS, alias="log.roll.ms", ge=1,
        description="Roll a new segment when the active one is this old (topic: `segment.ms`).",
    )
    log_retention_ms: int = Field(
        defaults.LOG_RETENTION_MS, alias="log.retention.ms", ge=-1,
        description="Delete segments whose newest record is older than this; -1 keeps "
        "forever (topic: `retention.ms`).",
    )
    log_retention_bytes: int = Field(
        defaults.LOG_RETENTION_BYTES, alias="log.retention.bytes", ge=-1,
        description="Delete the oldest segments while a partition is larger than this; -1 "
        "= no limit (topic: `retention.bytes`).",
    )
    log_retention_check_interval_ms: int = Field(
        300000, alias="log.retention.check.interval.ms", ge=1,
        description="How often retention (and compaction of compacted topics) runs.",
    )
    log_cleanup_policy: str = Field(
        defaults.LOG_CLEANUP_POLICY, alias="log.cleanup.policy",
        description="`delete` or `compact` (or `compact,delete`) for topics that do not say "
        "(topic: `cleanup.policy`).",
    )
    log_flush_interval_messages: int = Field(
        defaults.LOG_FLUSH_INTERVAL_MESSAGES, alias="log.flush.interval.messages", ge=1,
        description="fsync a partition after this many unflushed messages (topic: "
        "`flush.messages`). acks=all produces are fsynced regardless (group commit).",
    )
    log_flush_interval_ms: int | None = Field(
        None, alias="log.flush.interval.ms", ge=0,
        description="fsync a partition whose oldest unflushed data is this old (topic: "
        "`flush.ms`); unset = only on acks=all, on flush.messages and at shutdown.",
    )
    log_flush_scheduler_interval_ms: int = Field(
        1000, alias="log.flush.scheduler.interval.ms", ge=1,
        description="How often the flusher checks partitions against flush.messages/flush.ms.",
    )
    log_flush_offset_checkpoint_interval_ms: int = Field(
        defaults.LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL_MS,
        alias="log.flush.offset.checkpoint.interval.ms", ge=1,
        description="How often the recovery points and log start offsets are checkpointed "
        "(a shorter interval means less to re-validate after a crash).",
    )
    group_initial_rebalance_delay_ms: int = Field(
        defaults.GROUP_INITIAL_REBALANCE_DELAY_MS, alias="group.initial.rebalance.delay.ms",
        ge=0,
        description="How long a new consumer group waits for more members before its first "
        "rebalance completes.",
    )
    offsets_topic_num_partitions: int = Field(
        defaults.OFFSETS_TOPIC_NUM_PARTITIONS, alias="offsets.topic.num.partitions", ge=1,
        description="Partitions of the internal `__consumer_offsets` topic (fixed once "
        "created).",
    )
    offsets_retention_minutes: int = Field(
        defaults.OFFSETS_RETENTION_MINUTES, alias="offsets.retention.minutes", ge=1,
        description="Committed offsets of a group are dropped this long after the group "
        "became empty (KIP-211).",
    )
    offsets_retention_check_interval_ms: int = Field(
        defaults.OFFSETS_RETENTION_CHECK_INTERVAL_MS,
        alias="offsets.retention.check.interval.ms", ge=1,
        description="How often expired committed offsets and empty groups are looked for.",
    )
    group_min_session_timeout_ms: int = Field(
        defaults.GROUP_MIN_SESSION_TIMEOUT_MS, alias="group.min.session.timeout.ms", ge=1,
        description="Smallest session timeout a consumer may ask for in JoinGroup; a smaller "
        "one gets INVALID_SESSION_TIMEOUT.",
    )
    group_max_session_timeout_ms: int = Field(
        defaults.GROUP_MAX_SESSION_TIMEOUT_MS, alias="group.max.session.timeout.ms", ge=1,
        description="Largest session timeout a consumer may ask for in JoinGroup; a larger "
        "one gets INVALID_SESSION_TIMEOUT.",
    )

    group_share_record_lock_duration_ms: int = Field(
        30_000, alias="group.share.record.lock.duration.ms", ge=1,
        description="How long a share consumer holds the records it acquired before they "
        "are offered to others again (a share group may override it within the bounds "
        "below: `share.record.lock.duration.ms`).",
    )
    group_share_min_record_lock_duration_ms: int = Field(
        15_000, alias="group.share.min.record.lock.duration.ms", ge=1,
        description="Smallest acquisition lock a share group may configure.",
    )
    group_share_max_record_lock_duration_ms: int = Field(
        60_000, alias="group.share.max.record.lock.duration.ms", ge=1,
        description="Largest acquisition lock a share group may configure.",
    )
    group_share_delivery_count_limit: int = Field(
        5, alias="group.share.delivery.count.limit", ge=2, le=10,
        description="Deliveries of a record to share consumers before it is archived "
        "(never delivered again).",
    )
    group_share_partition_max_record_locks: int = Field(
        2000, alias="group.share.partition.max.record.locks", ge=100, le=10_000,
        description="Records of one partition a share group may have in flight (delivered, "
        "not yet accepted, released or rejected).",
    )
    group_share_session_timeout_ms: int = Field(
        45_000, alias="group.share.session.timeout.ms", ge=1,
        description="A share consumer not heard from for this long leaves its group and "
        "its records go to others.",
    )
    group_share_heartbeat_interval_ms: int = Field(
        5_000, alias="group.share.heartbeat.interval.ms", ge=1,
        description="How often share consumers are told to heartbeat.",
    )
    group_share_max_size: int = Field(
        200, alias="group.share.max.size", ge=1,
        description="Most members of one share group (GROUP_MAX_SIZE_REACHED past it).",
    )
    group_share_max_share_sessions: int = Field(
        2000, alias="group.share.max.share.sessions", ge=1,
        description="Most share sessions open at once (SHARE_SESSION_LIMIT_REACHED past it).",
    )
    share_version: int = Field(
        2, alias="share.version", ge=1, le=2,
        description="The finalized level of Kafka's `share.version` feature that ApiVersions "
        "advertises (Kafka sets it with kafka-features.sh): 2 is share groups with "
        "dead-letter topics (KIP-1191), which clients such as the sidecar's queue mode then "
        "use; 1 is share groups without them (the DLQ group configs are refused).",
    )
    errors_deadletterqueue_topic_name_prefix: str = Field(
        "dlq.", alias="errors.deadletterqueue.topic.name.prefix",
        description="The prefix a share group's dead-letter topic "
        "(`errors.deadletterqueue.topic.name`, KIP-1191) must have; empty for none.",
    )
    errors_deadletterqueue_auto_create_topics_enable: bool = Field(
        True, alias="errors.deadletterqueue.auto.create.topics.enable",
        description="Whether a share group's dead-letter topic is created on first use "
        "(with `errors.deadletterqueue.group.enable=true`). Kafka's default is false; "
        "databus creates it, as it auto-creates topics.",
    )
    group_consumer_session_timeout_ms: int = Field(
        45_000, alias="group.consumer.session.timeout.ms", ge=1,
        description="A member of a consumer group (`group.protocol=consumer`, KIP-848) not "
        "heard from for this long is removed and its partitions go to others.",
    )
    group_consumer_heartbeat_interval_ms: int = Field(
        5_000, alias="group.consumer.heartbeat.interval.ms", ge=1,
        description="How often members of consumer groups (KIP-848) are told to heartbeat; "
        "a partition moving between members waits for their heartbeats.",
    )
    group_consumer_assignors: str = Field(
        "uniform,range", alias="group.consumer.assignors",
        description="Server-side assignors of consumer groups (KIP-848), `uniform` and/or "
        "`range` (Kafka's class names are accepted too); the first is used unless the members "
        "choose another with `group.remote.assignor`.",
    )
    group_consumer_max_size: int = Field(
        2**31 - 1, alias="group.consumer.max.size", ge=1,
        description="Most members of one consumer group (KIP-848; GROUP_MAX_SIZE_REACHED past "
        "it).",
    )
    share_coordinator_state_topic_num_partitions: int = Field(
        50, alias="share.coordinator.state.topic.num.partitions", ge=1,
        description="Partitions of the internal `__share_group_state` topic (fixed once "
        "created).",
    )

    transaction_state_log_num_partitions: int = Field(
        50, alias="transaction.state.log.num.partitions", ge=1,
        description="Partitions of the internal `__transaction_state` topic (fixed once "
        "created).",
    )
    transaction_version: int = Field(
        2, alias="transaction.version", ge=1, le=2,
        description="The finalized level of Kafka's `transaction.version` feature that "
        "ApiVersions advertises (Kafka sets it with kafka-features.sh): 2 lets clients that "
        "know it use transactions v2 (KIP-890: implicit partition join with Produce v12, "
        "the epoch bumped at every EndTxn v5); 1 keeps every client on v1.  The broker "
        "serves both either way (librdkafka speaks v1).",
    )
    transaction_max_timeout_ms: int = Field(
        900_000, alias="transaction.max.timeout.ms", ge=1,
        description="Largest `transaction.timeout.ms` a transactional producer may ask for; "
        "InitProducerId with a larger one gets INVALID_TRANSACTION_TIMEOUT.",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        10_000, alias="transaction.abort.timed.out.transaction.cleanup.interval.ms", ge=1,
        description="How often transactions open longer than their timeout are looked for "
        "and aborted (their producer is fenced).",
    )

    schema_registry_listen: str | None = Field(
        None, alias="schema.registry.listen",
        description="HOST:PORT where the broker serves Confluent's Schema Registry REST API "
        "(schemas kept in the compacted `_schemas` topic; port 0 picks a free port; "
        "docs/schemas.md). Unset: no registry.",
    )

    @field_validator("schema_registry_listen")
    @classmethod
    def _registry_listen(cls, value: str | None) -> str | None:
        if value:
            from databus.protocol.addresses import parse_host_port

            parse_host_port(value, allow_port_zero=True)
        return value or None

    @field_validator("log_cleanup_policy")
    @classmethod
    def _cleanup_policy(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not parts or any(p not in ("delete", "compact") for p in parts):
            raise ValueError("must be delete, compact or compact,delete")
        return ",".join(parts)

    @field_validator("group_consumer_assignors")
    @classmethod
    def _assignors(cls, value: str) -> str:
        from .coordinator.assignors import parse_assignors

        return ",".join(parse_assignors(value))

    @field_validator("listener_security_protocol_map")
    @classmethod
    def _protocol_map(cls, value: str) -> str:
        parse_protocol_map(value)
        return value

    @field_validator("sasl_enabled_mechanisms")
    @classmethod
    def _mechanisms(cls, value: str) -> str:
        names = [m.strip().upper() for m in value.split(",") if m.strip()]
        unknown = [m for m in names if m not in MECHANISMS]
        if unknown or not names:
            raise ValueError(f"supported mechanisms are {', '.join(MECHANISMS)}")
        return ",".join(names)

    @model_validator(mode="after")
    def _listener_names(self) -> BrokerConfig:
        mapping = self.listener_security_protocol_map
        try:
            first_listener(self.listeners)
            parse_listeners(self.listeners, mapping)
        except ValueError as exc:
            raise _FieldError("listeners", self.listeners, exc) from None
        if self.advertised_listeners is not None:
            try:
                first_listener(self.advertised_listeners, advertised=True)
                parse_listeners(self.advertised_listeners, mapping, advertised=True,
                                default_name=self.listener_list()[0].name)
            except ValueError as exc:
                raise _FieldError("advertised.listeners", self.advertised_listeners,
                                  exc) from None
        parse_super_users_checked(self.super_users)
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            # Kafka's GroupCoordinatorConfig refuses it too: members would expire between beats
            raise _FieldError(
                "group.consumer.heartbeat.interval.ms", self.group_consumer_heartbeat_interval_ms,
                ValueError("must be lower than group.consumer.session.timeout.ms "
                           f"({self.group_consumer_session_timeout_ms})")) from None
        return self

    def listener_list(self) -> list[Listener]:
        """Every listener, in the order of ``listeners`` (the first is the main one)."""
        return parse_listeners(self.listeners, self.listener_security_protocol_map)

    def advertised_for(self, name: str) -> tuple[str, int] | None:
        """The advertised (host, port) of listener ``name``, or None (use the bound one)."""
        if not self.advertised_listeners:
            return None
        for listener in parse_listeners(self.advertised_listeners,
                                        self.listener_security_protocol_map, advertised=True,
                                        default_name=self.listener_list()[0].name):
            if listener.name == name:
                return listener.host, listener.port
        return None

    @classmethod
    def from_options(cls, options: Iterable[str], **fields) -> BrokerConfig:
        """Build from ``key=value`` strings (Kafka names) plus keyword fields (flags).

        Raises BrokerConfigError with a one-line message naming the bad key or value.
        """
        values: dict[str, object] = {}
        known = cls.option_names()
        for option in options:
            key, sep, value = option.partition("=")
            key = key.strip()
            if not sep or not key:
                raise BrokerConfigError(f"option {option!r} is not key=value")
            if key not in known:
                raise BrokerConfigError(
                    f"unknown broker option {key!r} (known: {', '.join(sorted(known))})"
                )
            values[known[key]] = value.strip()
        for name, value in fields.items():
            if value is not None:
                values[name] = value
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                if not error["loc"]:  # a check across fields (_FieldError) names its field
                    problems.append(str(error["msg"]).removeprefix("Value error, "))
                    continue
                loc = error["loc"][0]
                alias = cls._alias_of(str(loc))
                problems.append(f"{alias}={error.get('input')!r}: {error['msg']}")
            raise BrokerConfigError("bad broker option " + "; ".join(problems)) from None

    @classmethod
    def option_names(cls) -> dict[str, str]:
        """Kafka name -> field name, for every option ``-o`` accepts."""
        names: dict[str, str] = {}
        for name, info in cls.model_fields.items():
            if info.alias:
                names[info.alias] = name
            choices = getattr(info.validation_alias, "choices", None) or ()
            for choice in choices:
                if "." in choice:
                    names[choice] = name
        return names

    @classmethod
    def _alias_of(cls, name: str) -> str:
        info = cls.model_fields.get(name)
        if info is None:  # the error was reported under an alias already
            return name
        return info.alias or info.serialization_alias or name

    @property
    def listen_address(self) -> tuple[str, int]:
        return first_listener(self.listeners)

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config derived from the broker's ``log.*`` settings (Kafka's mapping)."""
        defaults = {
            "segment.bytes": str(self.log_segment_bytes),
            "segment.ms": str(self.log_roll_ms),
            "retention.ms": str(self.log_retention_ms),
            "retention.bytes": str(self.log_retention_bytes),
            "max.message.bytes": str(self.message_max_bytes),
            "cleanup.policy": self.log_cleanup_policy,
            "flush.messages": str(self.log_flush_interval_messages),
        }
        if self.log_flush_interval_ms is not None:
            defaults["flush.ms"] = str(self.log_flush_interval_ms)
        return defaults
