"""The ``sinks:`` section of sidecar.yaml: one SinkConfig per sink (the sinks runtime,
databus/sinks/runtime.py, runs them).  databus/config.py assembles it into DatabusConfig."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from databus.config_base import TopicSelection, resolve_references

# Consumer keys the sinks runtime sets itself (the group and offset handling are what make
# its exactly-once commits work).
RESERVED_SINK_CONSUMER_KEYS = ("group.id", "enable.auto.commit", "bootstrap.servers")
# A sink consumer's defaults where they differ from Kafka's consumer defaults: like Kafka
# Connect's sink consumers, start at the beginning of a topic the group has never read; hand
# plugins larger batches (they decode and write in batches); and long-poll for 100 ms, not
# 500: while a Fetch for a partition at its log end waits, the consumer sends no Fetch for
# the partitions it is draining (one Fetch in flight per broker), and a 500 ms wait cut
# `databus bench parquet`'s export rate by two thirds.
SINK_CONSUMER_DEFAULTS = {
    "auto.offset.reset": "earliest", "max.poll.records": 5000, "fetch.max.wait.ms": 100,
}


class SinkConfig(TopicSelection):
    """A sink: a consumer-side plugin fed from topics by a consumer group of its own."""

    plugin: str = Field(
        description="Name of the sink plugin (`parquet`, or a third-party plugin's name; "
        "`databus plugins` lists them)."
    )
    cluster: str | None = Field(
        None, description="Cluster to consume from, by the rules of a stream's `cluster`."
    )
    group_id: str | None = Field(
        None,
        alias="group.id",
        description="Consumer group; default `databus-sink-NAME`. Sidecars running the same "
        "sink share its partitions through this group.",
    )
    dead_letter_topic: str | None = Field(
        None,
        alias="errors.deadletterqueue.topic.name",
        description="Topic for records the plugin rejects (each with the reason in the "
        "header `__connect.errors.exception.message`, as Kafka Connect does); default "
        "`NAME.dlq`.",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka consumer keys for this sink's consumer (`max.poll.records`, "
        "`session.timeout.ms`, ...). Defaults as Kafka's, except `auto.offset.reset: "
        "earliest`, `max.poll.records: 5000` and `fetch.max.wait.ms: 100`; `group.id`, `enable.auto.commit` and "
        "`bootstrap.servers` are set by the runtime.",
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="The plugin's own options (see its documentation)."
    )
    lanes: str = Field(
        "main",
        description="Which swimlanes the sink reads (docs/lanes.md), as a `LaneConsumer` "
        "would: `main` (the main lane: the topics themselves; a `topics.regex` never matches "
        "a lane topic such as `orders.lane.x`), a lane name (only that lane's topics of the "
        "sink's topics), or `all` (the topics and every lane topic of them, existing or made "
        "later). Lane topics are named by `lanes.topic` of this file. A lane called `main` "
        "or `all` cannot be chosen here.",
    )

    @field_validator("lanes")
    @classmethod
    def _lanes(cls, v: str) -> str:
        from databus.lanes.model import check_reader_lanes

        return check_reader_lanes(v)

    def selection(self, lane_template: str) -> tuple[list[str], str | None]:
        """(topics, None) or ([], regex): what this sink's consumer subscribes to."""
        from databus.lanes.model import reader_selection

        return reader_selection(self.topics, self.topics_regex, self.lanes, lane_template)

    @model_validator(mode="after")
    def _one_source(self) -> SinkConfig:
        self._require_topics(exactly_one=True)
        reserved = [k for k in self.consumer if k in RESERVED_SINK_CONSUMER_KEYS]
        if reserved:
            raise ValueError(
                f"consumer: {', '.join(reserved)} cannot be set here (the sinks runtime sets "
                "them; the sink's group is its `group.id`)"
            )
        self.consumer_config("sink")
        return self

    def consumer_config(self, name: str, security: Mapping[str, Any] | None = None):
        """The client's ConsumerConfig of this sink's consumer (named ``name``); ``security``:
        its cluster's TLS/SASL settings (ClusterConfig.connection_settings)."""
        from databus.client import ConsumerConfig, errors

        settings = {
            **SINK_CONSUMER_DEFAULTS,
            "client.id": f"databus-sink-{name}",
            **(security or {}),
            **resolve_references(self.consumer),
            "group.id": self.group(name),
            "enable.auto.commit": False,
        }
        try:
            return ConsumerConfig.from_kafka(settings)
        except errors.ConfigError as exc:
            raise ValueError(f"consumer: {exc}") from None

    def group(self, name: str) -> str:
        return self.group_id or f"databus-sink-{name}"

    def dead_letters(self, name: str) -> str:
        return self.dead_letter_topic or f"{name}.dlq"
