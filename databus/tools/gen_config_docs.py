"""Render docs/configuration.md from the pydantic models (the one source of truth).

    python -m databus.tools.gen_config_docs            # rewrite docs/configuration.md
    python -m databus.tools.gen_config_docs --check    # exit 1 if the file is stale

Sections: sidecar.yaml (databus.config), the producer keys (the client's ProducerConfig) and
the built-in broker's options (the broker's BrokerConfig).  A field's meaning is its
``description``; ProducerConfig fields carry none, so their meanings are written here, in
PRODUCER_MEANINGS (Kafka's own documentation, shortened) — a key missing from both is an
error, so a new producer setting cannot go undocumented.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

PRODUCER_MEANINGS = {
    "transactional.id": "Our client's transactional producer (docs/transactions.md); not "
    "for streams (the sidecar's producers are shared: apps use `client.transaction()`).",
    "transaction.timeout.ms": "How long the coordinator lets a transaction stay open before "
    "aborting it; not for streams, as `transactional.id`.",
    "bootstrap.servers": "Set by the sidecar from the stream's cluster; not allowed per stream.",
    "client.id": "Name sent to the brokers with every request (the sidecar's default: "
    "`databus-sidecar`).",
    "request.timeout.ms": "How long to wait for a broker's answer before retrying.",
    "retry.backoff.ms": "First wait before retrying a failed request (a produce batch, a "
    "metadata lookup).",
    "retry.backoff.max.ms": "Longest wait between retries (the backoff doubles, ±20% jitter, "
    "up to it).",
    "metadata.max.age.ms": "Refresh topic metadata at least this often.",
    "socket.connection.setup.timeout.ms": "How long a broker connection may take to open.",
    "reconnect.backoff.ms": "Wait before reconnecting to a broker after a failed connect.",
    "reconnect.backoff.max.ms": "Longest wait between connects to a broker that keeps failing "
    "(the backoff doubles, ±20% jitter, up to it).",
    "acks": "Acknowledgement required before a message is reported delivered: `all` (-1), "
    "`1` (the leader) or `0` (none; offset -1).",
    "linger.ms": "How long a batch may wait for more messages before it is sent.",
    "batch.size": "Bytes at which a partition's batch is sent without waiting for linger.ms "
                  "(librdkafka's 1,000,000, not Java's 16384: docs/client.md).",
    "buffer.memory": "Set by the sidecar from `sidecar.buffer.memory`; not allowed per stream.",
    "max.block.ms": "How long a message may wait for buffer room (and topic metadata) before "
    "it is answered with BUFFER_EXHAUSTED.",
    "compression.type": "Batch compression: none, gzip, snappy, lz4 or zstd.",
    "retries": "How many times a failed batch is retried (within delivery.timeout.ms).",
    "delivery.timeout.ms": "Upper bound on the time from accepting a message to its report; "
    "then it fails with REQUEST_TIMED_OUT.",
    "enable.idempotence": "Producer ids and sequence numbers, so retries never duplicate or "
    "reorder (needs acks=all).",
    "max.in.flight.requests.per.connection": "Unanswered produce requests per broker.",
    "max.request.size": "Largest message (and request) the producer sends; larger messages are "
    "answered with MESSAGE_TOO_LARGE.",
    "partitioner": "In sidecar.yaml: the name of a partitioner plugin (`default`: Java's murmur2 "
    "for keys and sticky for null keys; `murmur2`, `round_robin`, `random`, `field`, or a "
    "third-party plugin's name; see docs/plugins.md).",
}

EXTRA_PRODUCER_KEYS = [
    ("partitioner.config", "{}", "Options for the stream's partitioner plugin, e.g. "
     "`{field: customer_id}` for `field` (options: `field`, a dotted path into the value; "
     "`format`: auto, json or msgpack)."),
]


def _default(info) -> str:
    if info.default_factory is not None:
        value: Any = info.default_factory()
        if isinstance(value, BaseModel):
            return "(section)"
    else:
        value = info.default
    if value is None:
        return "null"
    if value is ... or repr(value) == "PydanticUndefined":
        return "required"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _name(name: str, info) -> str:
    return info.alias or info.serialization_alias or name


def _model_table(model: type[BaseModel], prefix: str = "") -> list[str]:
    lines = ["| setting | default | meaning |", "|---|---|---|"]
    for name, info in model.model_fields.items():
        key = prefix + _name(name, info)
        lines.append(f"| `{key}` | {_default(info)} | {_cell(info.description or '')} |")
    return lines


def _producer_table() -> list[str]:
    from databus.client import ProducerConfig

    lines = ["| key | default | meaning |", "|---|---|---|"]
    missing = []
    for name, info in ProducerConfig.model_fields.items():
        key = _name(name, info)
        meaning = info.description or PRODUCER_MEANINGS.get(key)
        if meaning is None:
            missing.append(key)
            continue
        default = _default(info)
        if key == "acks" and info.default == -1:
            default = "`all` (-1)"
        lines.append(f"| `{key}` | {default} | {_cell(meaning)} |")
    if missing:
        raise SystemExit(
            f"gen_config_docs: no meaning for producer key(s) {', '.join(missing)}: add a "
            "description to ProducerConfig or an entry to PRODUCER_MEANINGS"
        )
    for key, default, meaning in EXTRA_PRODUCER_KEYS:
        lines.append(f"| `{key}` | `{default}` | {_cell(meaning)} |")
    return lines


def render() -> str:
    from databus.broker.config import BrokerConfig
    from databus.config import (
        ClusterConfig,
        ConsoleSettings,
        DatabusConfig,
        DefaultRoute,
        EmbeddedBrokerConfig,
        IndexConfig,
        SidecarSettings,
    )
    from databus.lanes.config import LanesConfig
    from databus.mirror.config import MirrorConfig
    from databus.sidecar.config import (
        ConsumeSettings,
        DelayConfig,
        StreamConfig,
        StreamSchema,
        TransactionsConfig,
    )
    from databus.sinks.config import SinkConfig

    out = [
        "# Configuration",
        "",
        "<!-- Generated by `python -m databus.tools.gen_config_docs` from the pydantic models",
        "     (databus/config.py, databus/client/config.py, databus/broker/config.py).",
        "     Do not edit by hand: tests/sidecar/test_config.py checks it is current. -->",
        "",
        "`databus up` and `databus sidecar` read **sidecar.yaml** (`-c FILE`; the repository's "
        "own sidecar.yaml is a commented example).  The whole file is validated before it is "
        "used; on hot reload (SIGHUP, or the file changing) an invalid file is rejected with "
        "the reason logged and the running configuration is kept.  Relative paths are "
        "relative to the file.  Flags (`--socket`, `--tcp-listen`, `--metrics-listen`, "
        "`--data-dir`, `--kafka-listen`) override the file.  With no `-c` they read "
        "./sidecar.yaml if there is one; with no file at all they use the defaults below "
        "plus `default_route: {topic: \"{stream}\"}`, so that every stream goes to the topic "
        "of the same name (a file that has no `default_route` refuses unlisted streams "
        "with UNKNOWN_STREAM).",
        "",
        "Every HOST:PORT (listeners, `bootstrap.servers`, `--bootstrap`) follows Kafka's "
        "listener syntax: `host:port` or `[ipv6]:port` (an IPv6 address needs its brackets), "
        "optionally after a listener name such as `PLAINTEXT://`, which is ignored; ports are "
        "1..65535, and 0 (a free port) where something listens.  An empty host (`:9092`) "
        "means every interface in the broker option `listeners` and this host in "
        "`bootstrap.servers`; the listen addresses of sidecar.yaml (`tcp_listen`, "
        "`metrics_listen`, `broker.listen`) need a host.",
        "",
        "## Top level",
        "",
        *_model_table(DatabusConfig),
        "",
        "## `sidecar:`",
        "",
        "Changes to `socket`, `socket_mode`, `tcp_listen`, `metrics_listen`, `buffer.memory`, "
        "`max_frame_bytes`, `queued_max_frame_bytes`, `max_connections` and "
        "`connections_max_idle_ms` take effect at the next restart (a reload logs a warning).",
        "",
        *_model_table(SidecarSettings, "sidecar."),
        "",
        "## `clusters:`",
        "",
        "A map from cluster name to its settings.  Besides `bootstrap.servers`, a cluster may "
        "set any producer key (below) for every stream sent to it.",
        "",
        *_model_table(ClusterConfig, "clusters.NAME."),
        "",
        "## `streams:`",
        "",
        "A map from stream name (what apps pass to `Client.send`) to its route.  Besides "
        "`cluster` and `topic`, a stream may set any producer key (below); precedence: "
        "stream > `producer:` > cluster.  Streams with identical settings share one upstream "
        "producer.",
        "",
        *_model_table(StreamConfig, "streams.NAME."),
        "",
        "### A typed stream's `schema:`",
        "",
        "Values are checked against a schema registry subject and sent in Confluent's wire "
        "format (docs/schemas.md, \"Typed streams\").",
        "",
        *_model_table(StreamSchema, "streams.NAME.schema."),
        "",
        "## Consuming (`consumer:`, or a stream's `consumer:`)",
        "",
        "How the sidecar consumes a stream for apps that subscribe to it (docs/consuming.md). "
        "Besides the keys below, any Kafka consumer key of the client's `ConsumerConfig` "
        "(`fetch.max.wait.ms`, `max.poll.records`, `session.timeout.ms`, ...); the sidecar "
        "defaults `auto.offset.reset` to `earliest` and `auto.commit.interval.ms` to 1000, and "
        "sets `group.id` (the app's group) and `enable.auto.commit` itself.  Precedence: "
        "stream > top-level `consumer:`.",
        "",
        *_model_table(ConsumeSettings, "consumer."),
        "",
        "## `default_route:`",
        "",
        *_model_table(DefaultRoute, "default_route."),
        "",
        "## `mirrors:`",
        "",
        ("A list of cross-region mirrors (docs/mirror.md), run by `databus up` (hot reload "
         "adds, removes and changes them) and by `databus mirror -c FILE` (a file with only "
         "`clusters:` and `mirrors:` is valid).  `source` and `target` name clusters of "
         "`clusters:`; `consumer:` and `producer:` take Kafka's keys (the producer keys "
         "below, the client's `ConsumerConfig` keys for the consumer)."),
        "",
        *_model_table(MirrorConfig, "mirrors[]."),
        "",
        "## `sinks:`",
        "",
        "A map from sink name to a consumer-side plugin (docs/plugins.md; the built-in "
        "`parquet` export is in docs/parquet.md) fed by a consumer group of its own.  Offsets "
        "are committed only once the plugin reports the records durable.  A reload adds, "
        "removes and restarts (when changed) sinks; unchanged ones keep running.",
        "",
        *_model_table(SinkConfig, "sinks.NAME."),
        "",
        "## `indexes:`",
        "",
        "A map from index name to the topics whose records it finds by business fields "
        "(docs/index.md).  Each index is built by a sink of the `index` plugin named "
        "`index.NAME` (group `databus-index-NAME`) into `PATH/NAME.db`; a reload that adds an "
        "index builds it from the beginning of its topics.  Query with `databus index query`.",
        "",
        *_model_table(IndexConfig, "indexes.NAME."),
        "",
        "## `console:`",
        "",
        "The web console (docs/console.md): `databus up` serves it when `listen` is set; "
        "`databus console -c FILE` reads these settings too (its flags override them).  "
        "Changes take effect at the next restart.",
        "",
        *_model_table(ConsoleSettings, "console."),
        "",
        "## `lanes:`",
        "",
        "Swimlanes (docs/lanes.md): present, the built-in `lanes` route plugin sends a "
        "message whose lane header names a live lane to that lane's topic; lanes are made "
        "with `databus lanes create` and shared by every sidecar through the registry topic.",
        "",
        *_model_table(LanesConfig, "lanes."),
        "",
        "## `delay:`",
        "",
        "The delay service (docs/delayed.md): sidecars with `enabled: true` deliver the "
        "delayed messages of their clusters (`Client.send(..., delay=...)`).  Changes take "
        "effect at the next restart.",
        "",
        *_model_table(DelayConfig, "delay."),
        "",
        "## `transactions:`",
        "",
        "The half-message service (docs/transactions.md): sidecars with `enabled: true` "
        "settle apps' transactions (`client.transaction(...)`) and pass check-backs to their "
        "apps.  Changes take effect at the next restart.",
        "",
        *_model_table(TransactionsConfig, "transactions."),
        "",
        "## Producer keys (`producer:`, a cluster, or a stream)",
        "",
        "Kafka's producer settings, with Kafka's names and defaults (validated by the client's "
        "`ProducerConfig`).",
        "",
        *_producer_table(),
        "",
        "## `broker:` (the built-in broker of `databus up`)",
        "",
        *_model_table(EmbeddedBrokerConfig, "broker."),
        "",
        "### Broker options (`broker.options`, or `databus broker -o KEY=VALUE`)",
        "",
        *_model_table(BrokerConfig),
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is stale: run python -m databus.tools.gen_config_docs", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
