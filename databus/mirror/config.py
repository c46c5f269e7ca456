"""The ``mirrors:`` section of sidecar.yaml: one MirrorConfig per mirror (docs/mirror.md).
databus/config.py assembles it into DatabusConfig."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from databus.config_base import TopicSelection, check_label, check_regexes, compile_regex

RENAME_FIELDS = ("source", "region", "topic")


class MirrorConfig(TopicSelection):
    """A mirror: copy the matched topics of cluster ``source`` to cluster ``target``."""

    name: str = Field(
        description="Unique name (letters, digits, `.`, `_`, `-`): it keys the mirror's "
        "progress on the target, its metrics and `databus mirror` commands.",
    )
    source: str = Field(description="Cluster name (from `clusters:`) to read from.")
    target: str = Field(description="Cluster name (from `clusters:`) to write to.")
    topics_exclude: list[str] = Field(
        default_factory=list,
        alias="topics.exclude",
        description="Regexes (whole name); a matching topic is never mirrored. Topics whose "
        "name starts with `__` and the progress topic are always excluded.",
    )
    rename: str = Field(
        "{source}.{topic}",
        description="Target topic name template: `{source}` (the source cluster's name), "
        "`{region}` (its region) and `{topic}`. `{topic}` keeps names (active-active).",
    )
    start: Literal["earliest", "latest"] = Field(
        "earliest",
        description="Where a source partition with no progress on the target starts.",
    )
    sync_group_offsets: bool = Field(
        False,
        alias="sync.group.offsets",
        description="Commit translated offsets on the target for source groups (matching "
        "`groups.regex`) that have no active members there, so consumers can fail over.",
    )
    sync_group_offsets_interval_ms: int = Field(
        60000,
        alias="sync.group.offsets.interval.ms",
        gt=0,
        description="How often group offsets are translated and committed on the target.",
    )
    groups_regex: str = Field(
        ".*",
        alias="groups.regex",
        description="Groups (whole name) whose offsets `sync.group.offsets` translates.",
    )
    offset_syncs_topic: str = Field(
        "databus-mirror-offset-syncs",
        alias="offset.syncs.topic",
        description="Compacted topic on the target holding each source partition's progress "
        "(last source offset written, and the target offset it landed at).",
    )
    exactly_once: bool | None = Field(
        None,
        alias="exactly.once",
        description="Copy in transactions on the target (each transaction holds the copied "
        "records and the progress that covers them; read_committed consumers of the target "
        "see every source record once). Unset: on when the target supports transactions, "
        "else at-least-once (logged). `true`: refuse to run without them. `false`: "
        "at-least-once (a crash copies what was in flight again).",
    )
    transaction_boundary_interval_ms: int = Field(
        100,
        alias="transaction.boundary.interval.ms",
        gt=0,
        description="Exactly-once: how long a transaction gathers copied records before it "
        "commits (read_committed consumers of the target see them at the commit).",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka consumer keys for reading the source (e.g. `fetch.max.bytes`, "
        "`metadata.max.age.ms`); not `bootstrap.servers`, `group.id`, `enable.auto.commit`.",
    )
    producer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka producer keys for writing the target (e.g. `linger.ms`, "
        "`batch.size`, `compression.type`); `acks` is always all and idempotence always on; "
        "`transactional.id` is the mirror's own (exactly-once).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_label(v, "mirror name")

    @field_validator("groups_regex")
    @classmethod
    def _regex(cls, v: str) -> str:
        compile_regex(v)
        return v

    @field_validator("topics_exclude")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        check_regexes(v)
        return v

    @field_validator("rename")
    @classmethod
    def _rename(cls, v: str) -> str:
        import string

        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(v) if f is not None]
        except ValueError as exc:
            raise ValueError(f"rename {v!r}: {exc}") from None
        unknown = [f for f in fields if f not in RENAME_FIELDS]
        if unknown:
            raise ValueError(
                f"rename {v!r}: unknown field(s) {', '.join(map(repr, unknown))} (known: "
                + ", ".join("{" + f + "}" for f in RENAME_FIELDS) + ")"
            )
        if "topic" not in fields:
            raise ValueError(f"rename {v!r} must contain {{topic}}")
        return v

    @model_validator(mode="after")
    def _check(self) -> MirrorConfig:
        try:
            self._require_topics(exactly_one=False)
        except ValueError as exc:
            raise ValueError(f"mirror {self.name!r}: {exc}") from None
        if self.source == self.target:
            raise ValueError(f"mirror {self.name!r}: source and target are the same cluster")
        problems = []
        for key in ("bootstrap.servers", "group.id", "enable.auto.commit"):
            if key in self.consumer:
                problems.append(f"consumer: {key} is set by the mirror")
        for key in ("bootstrap.servers", "transactional.id"):
            if key in self.producer:
                problems.append(f"producer: {key} is set by the mirror")
        if str(self.producer.get("acks", "all")).lower() not in ("all", "-1"):
            problems.append("producer: acks must be all (a mirror never loses an acked write)")
        if self.producer.get("enable.idempotence", True) is not True:
            problems.append("producer: enable.idempotence must stay true")
        if not problems:
            from databus.client.config import ConsumerConfig, ProducerConfig
            from databus.client.errors import ConfigError as ClientConfigError

            for what, model, settings in (("consumer", ConsumerConfig, self.consumer),
                                          ("producer", ProducerConfig, self.producer)):
                try:
                    model.from_kafka(settings)
                except ClientConfigError as exc:
                    problems.append(f"{what}: {exc}")
        if problems:
            raise ValueError(f"mirror {self.name!r}: " + "; ".join(problems))
        return self
