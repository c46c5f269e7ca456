"""sidecar.yaml: the pydantic models that validate it, and loading it from a file.

These models are the one source of truth for the sidecar's settings: the sidecar reads them,
``databus.tools.gen_config_docs`` renders docs/configuration.md from their fields, and the SDK
takes its default socket path from here.  Producer settings are not redefined: every key
under ``producer:``, a cluster, or a stream is a Kafka producer key validated by the client's
``ProducerConfig`` (Kafka's names and defaults).  The only producer keys the sidecar reads
itself are ``partitioner`` (the name of a partitioner plugin, built-in or third-party) and
``partitioner.config`` (that plugin's options).

A config is validated whole before it is applied; nothing half-valid ever runs.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# What every part's model shares; re-exported here, the name most commands import them by.
from databus.config_base import (  # noqa: F401
    CONNECTION_KEY_PREFIXES,
    ConfigError,
    TopicSelection,
    check_label,
    check_listen,
    check_regexes,
    describe_security,
    is_secret_key,
    listen_address,
    parse_duration_ms,
    resolve_references,
)
from databus.config_base import LABEL as _LABEL
from databus.config_base import Model as _Model
from databus.lanes.config import LanesConfig
from databus.mirror.config import MirrorConfig
from databus.protocol import defaults
from databus.protocol.addresses import format_host_port, parse_host_port, parse_host_port_list

# The app-facing defaults live with the wire format (the SDK must not import pydantic);
# re-exported here, where the sidecar's own settings are.
from databus.protocol.sidecar_wire import (  # noqa: F401
    DEFAULT_SOCKET,
    SOCKET_ENV,
    default_socket_path,
)
from databus.sidecar.config import (
    CONSUME_SETTINGS_KEYS,
    RESERVED_STREAM_CONSUMER_KEYS,
    STREAM_CONSUMER_DEFAULTS,
    ConsumeSettings,
    DelayConfig,
    StreamConfig,
    TransactionsConfig,
)
from databus.sinks.config import SinkConfig

EMBEDDED_CLUSTER = "local"
# Keys of the producer mappings that the sidecar owns rather than the Kafka client.
SIDECAR_PRODUCER_KEYS = ("partitioner", "partitioner.config")
# Set per producer by the sidecar itself (the sidecar-wide buffer and the cluster address).
RESERVED_PRODUCER_KEYS = ("buffer.memory", "bootstrap.servers")




def group_id(group: str | int) -> int:
    """The numeric id of a group given by name or number; ValueError naming it if unknown."""
    import grp

    text = str(group).strip()
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise ValueError(f"socket_group {text!r} is not a group on this host") from None


class AppToken(_Model):
    """One app's token and the streams it may send to (sidecar/produce/access.py)."""

    token: str = Field(description="The token the app presents in its hello; write "
                       "`${env:NAME}` or `${file:/path}` rather than the token itself.")
    streams: list[str] = Field(
        default_factory=lambda: [".*"],
        description="Regexes (whole stream name) of the streams this app may send to.")

    @field_validator("streams")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        check_regexes(v, "stream pattern")
        return v


class SidecarSettings(_Model):
    """The sidecar process: where apps connect, how much it buffers, how it reloads."""

    socket: str = Field(
        DEFAULT_SOCKET,
        description="Unix socket apps connect to (created with `socket_mode`; its directory "
        "is created if missing). Relative paths are relative to the config file.",
    )
    socket_mode: str = Field(
        "0660", description="File mode of the Unix socket, octal: with the default, only the "
        "sidecar's user and `socket_group` may connect."
    )
    socket_group: str | None = Field(
        None, description="Group (name or number) that owns the Unix socket, so that apps "
        "running as other users in that group may connect; default: the sidecar's own group."
    )
    tokens: dict[str, AppToken] = Field(
        default_factory=dict,
        description="Per-app tokens: `{app: {token, streams}}`. When set, every app must "
        "present one (`databus.Client(token=...)` or $DATABUS_TOKEN) and may send only to "
        "its streams (docs/security.md).",
    )
    tcp_listen: str | None = Field(
        None,
        description="Optional loopback TCP ingress, HOST:PORT (port 0 picks a free port). "
        "Only loopback addresses are accepted: the protocol has no authentication.",
    )
    metrics_listen: str | None = Field(
        "127.0.0.1:9464",
        description="HOST:PORT serving /metrics (Prometheus text format) and /healthz; "
        "null disables it.",
    )
    buffer_memory: int = Field(
        defaults.BUFFER_MEMORY,
        alias="buffer.memory",
        gt=0,
        description="Bytes of message data (key + value + headers) the sidecar holds before "
        "upstream acknowledges them, across all streams. When full, a message waits up to its "
        "stream's max.block.ms, then is answered with BUFFER_EXHAUSTED.",
    )
    max_frame_bytes: int = Field(
        16 * 1024 * 1024,
        gt=1024,
        description="Largest frame an app may send; a bigger one gets FRAME_TOO_LARGE and its "
        "connection is closed.",
    )
    queued_max_frame_bytes: int = Field(
        256 * 1024 * 1024,
        gt=1024,
        description="Bytes reserved for frames being received, across all app connections "
        "(the broker's queued.max.request.bytes): a frame's size is reserved when its length "
        "prefix arrives and the rest is read only once that fits; while the total is over "
        "this, connections are not read from (not dropped).",
    )
    max_connections: int = Field(
        2**31 - 1,
        ge=1,
        description="Most app connections at once; one more is closed at once.",
    )
    connections_max_idle_ms: int = Field(
        0,
        ge=0,
        description="Close an app connection that has sent nothing for this long (0: never, "
        "the default: an idle app's next send would fail while its SDK reconnects).",
    )
    reload_poll_ms: int = Field(
        1000,
        ge=0,
        description="How often the config file's mtime is checked for hot reload (0: only "
        "SIGHUP reloads).",
    )
    shutdown_timeout_ms: int = Field(
        30000,
        ge=0,
        description="On shutdown, how long queued messages may take to reach upstream before "
        "the rest are answered with SHUTTING_DOWN.",
    )

    @field_validator("socket_mode")
    @classmethod
    def _mode(cls, v: str) -> str:
        try:
            mode = int(str(v), 8)
        except ValueError:
            raise ValueError(
                f"socket_mode must be an octal string like '0660', got {v!r}"
            ) from None
        if not 0 <= mode <= 0o777:
            raise ValueError(f"socket_mode {v!r} is out of range")
        return str(v)

    @field_validator("tcp_listen")
    @classmethod
    def _loopback(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, _ = listen_address(v, "tcp_listen")
        if host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(f"tcp_listen must be a loopback address, got {host!r}")
        return v

    @field_validator("metrics_listen")
    @classmethod
    def _metrics(cls, v: str | None) -> str | None:
        return check_listen(v, "metrics_listen")

    def resolved_tokens(self) -> dict[str, tuple[str, list[str]]]:
        """app -> (token with ${env:...}/${file:...} resolved, stream patterns)."""
        return {app: (resolve_references({"token": t.token}, f"sidecar.tokens.{app}.")["token"],
                      list(t.streams)) for app, t in self.tokens.items()}

    @field_validator("socket_group")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        if v is not None:
            group_id(v)  # an unknown group is an error at load, not at start
        return v

    @property
    def socket_mode_int(self) -> int:
        return int(self.socket_mode, 8)


class ConsoleSettings(_Model):
    """The web console (docs/console.md), served by `databus up` when `listen` is set."""

    listen: str | None = Field(
        None,
        description="HOST:PORT of the web console (port 0 picks a free port); null: `databus "
        "up` serves no console (`databus console` defaults to 127.0.0.1:8080). Without "
        "`auth: sasl` it has no login: bind it to loopback or put it behind one.",
    )
    auth: Literal["none", "sasl"] = Field(
        "none",
        description="`sasl`: a login page; the user's name and password are checked by a SASL "
        "login to the cluster (its `security.protocol` must be SASL_PLAINTEXT or SASL_SSL, "
        "with its `sasl.mechanism`), and the console then acts as that user, so the "
        "cluster's ACLs decide what each user sees and may do. `none`: the console acts "
        "with the cluster's own settings.",
    )
    session_idle_timeout_ms: int = Field(
        1_800_000,
        gt=0,
        description="With `auth: sasl`: a login session unused this long is closed (its "
        "connections too) and the next page asks for the password again.",
    )
    read_only: bool = Field(
        False,
        description="Refuse every action (create/delete topic, produce, reset offsets); the "
        "pages show no forms.",
    )
    cluster: str | None = Field(
        None,
        description="The cluster (a name under `clusters:`) the console shows; null: the only "
        "one, or the built-in broker.",
    )
    broker_metrics: str | None = Field(
        None,
        description="The broker /metrics the Clients page reads (the client metrics clients "
        "push, KIP-714, beside the broker's own): HOST:PORT (a broker's `--metrics-listen`) "
        "or a URL; null: the built-in broker's `broker.metrics_listen`, if set.",
    )
    sample_interval_ms: int = Field(
        5000,
        gt=0,
        description="How often the console samples consumer lag and topic end offsets for its "
        "charts and messages/s (it keeps the last 360 samples, in memory).",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return check_listen(v, "console.listen")


class ClusterConfig(BaseModel):
    """An upstream Kafka cluster: ``bootstrap.servers`` plus any producer keys that apply to
    every stream sent there (``client.id``, ``request.timeout.ms``, ...)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    bootstrap_servers: str = Field(
        alias="bootstrap.servers",
        description="Comma-separated HOST:PORT list of the cluster's brokers.",
    )
    region: str | None = Field(
        None,
        description="Region label (letters, digits, `.`, `_`, `-`): written into the "
        "provenance header of every record a mirror copies from this cluster, and shown by "
        "`databus mirror status`.",
    )

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        return v if v is None else check_label(v, "region")

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap(cls, v: str) -> str:
        parse_host_port_list(v, what="bootstrap.servers")
        return v

    @property
    def producer_settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def connection_settings(self) -> dict[str, Any]:
        """The cluster's TLS and SASL settings (``security.protocol``, ``sasl.*``,
        ``ssl.*``) with ``${env:...}`` / ``${file:...}`` resolved: what every client of this
        cluster needs besides the bootstrap address."""
        keys = {k: v for k, v in self.producer_settings.items()
                if k.startswith(CONNECTION_KEY_PREFIXES)}
        return resolve_references(keys, "clusters: ")


class DefaultRoute(_Model):
    """Where messages for a stream that is not listed under ``streams:`` go."""

    cluster: str | None = Field(None, description="Cluster name (as for a stream).")
    topic: str = Field(
        "{stream}", description="Topic template; `{stream}` is replaced by the stream's name."
    )


class EmbeddedBrokerConfig(_Model):
    """The built-in broker that `databus up` starts when no cluster is configured."""

    data_dir: str = Field(
        "./data", description="Broker data directory (relative to the config file)."
    )
    listen: str = Field(
        "127.0.0.1:9092",
        description="The broker's first Kafka listener, PLAINTEXT, HOST:PORT (port 0 picks a "
        "free port): the sidecar's way in.  More listeners (SSL, SASL_PLAINTEXT, SASL_SSL) go "
        "in `options` as `listeners`, after this one (docs/security.md).",
    )
    metrics_listen: str | None = Field(
        None,
        description="HOST:PORT of the broker's own /metrics and /healthz "
        "(`databus broker --metrics-listen`; docs/operations.md).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Broker settings (Kafka names, see the broker section below), passed as "
        "`-o key=value`; `listeners` adds listeners to `listen`, and the security settings "
        "(`listener.security.protocol.map`, `ssl.*`, `sasl.enabled.mechanisms`, "
        "`authorizer.class.name`, `super.users`, ...) are taken as `databus broker` takes them.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        listen_address(v, "broker.listen")
        return v

    @field_validator("metrics_listen")
    @classmethod
    def _metrics_listen(cls, v: str | None) -> str | None:
        return check_listen(v, "broker.metrics_listen")

    def command_args(self, listen: str | None = None) -> list[str]:
        """``databus broker`` arguments for these settings (``listen``: --kafka-listen):
        ``--listen`` with every listener, the sidecar's first, then ``-o`` per option."""
        options = dict(self.options)
        listeners = ",".join(v for v in (listen or self.listen, options.pop("listeners", None))
                             if v)
        args = ["--data-dir", self.data_dir, "--listen", listeners]
        if self.metrics_listen:
            args += ["--metrics-listen", self.metrics_listen]
        for option in broker_option_args(options):
            args += ["-o", option]
        return args


# An index field's source: ``key``, ``header.NAME``, or ``value.PATH`` (a dotted path into a
# JSON object or msgpack map; a bare name means ``value.NAME``).
INDEX_PLUGIN = "index"
INDEX_SINK_PREFIX = "index."


class IndexConfig(TopicSelection):
    """An index: a topic's records found by business fields (run as a sink of the `index`
    plugin; docs/index.md)."""

    cluster: str | None = Field(
        None, description="Cluster to index, by the rules of a stream's `cluster`."
    )
    fields: dict[str, str] = Field(
        description="Field name -> where it is in a record: `value.PATH` (a dotted path into "
        "the JSON object or msgpack map of the value; a bare `PATH` means the same), "
        "`header.NAME` (a header, as UTF-8) or `key` (the key, as UTF-8). A list of names "
        "means `{name: value.name}`.",
    )
    format: Literal["json", "msgpack", "registry"] = Field(
        "json", description="How values are encoded: `json`, `msgpack`, or `registry`: "
        "Confluent's wire format (what AvroSerializer / JSONSerializer and typed streams "
        "write), each value decoded with the Avro or JSON schema its id names; value paths "
        "are checked against each topic's subject `TOPIC-value` (docs/schemas.md)."
    )
    schema_registry_url: str | None = Field(
        None, alias="schema.registry.url",
        description="With `format: registry`: the registry; default the broker section's "
        "`schema.registry.listen`, else http://127.0.0.1:8081.",
    )
    path: str = Field(
        "indexes",
        description="Directory of the index databases (`NAME.db`, SQLite in WAL mode); "
        "relative to the config file.",
    )
    group_id: str | None = Field(
        None, alias="group.id",
        description="Consumer group of the builder; default `databus-index-NAME`.",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="Kafka consumer keys for the builder's consumer (as a sink's `consumer`).",
    )
    recent_entries: int = Field(
        1_000_000, alias="recent.entries", ge=1,
        description="Entries the index's `recent` table takes before they move to a sorted "
        "run (docs/index.md): more means fewer merges and more memory (~50 B each).",
    )

    @field_validator("fields", mode="before")
    @classmethod
    def _fields(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return {str(name): f"value.{name}" for name in v}
        return v

    @field_validator("fields")
    @classmethod
    def _field_sources(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("fields: name at least one field to index")
        for name, source in v.items():
            if not name or "=" in name:
                raise ValueError(f"fields: {name!r} is not a field name (no '=')")
            head, _, rest = source.partition(".")
            if source != "key" and head in ("header", "value") and not rest:
                raise ValueError(f"fields: {name}: {source!r} needs a name after {head!r}.")
        return v

    @model_validator(mode="after")
    def _as_sink(self) -> IndexConfig:
        self.sink("index")  # the topics, the regex and the consumer keys as a sink's
        return self

    def db_path(self, name: str) -> str:
        return str(Path(self.path) / f"{name}.db")

    def sink(self, name: str) -> SinkConfig:
        """This index as the sink the runtime runs (plugin ``index``)."""
        return SinkConfig.model_validate({
            "plugin": INDEX_PLUGIN, "cluster": self.cluster, "topics": self.topics,
            "topics.regex": self.topics_regex,
            "group.id": self.group_id or f"databus-index-{name}", "consumer": self.consumer,
            "config": {"index": name, "path": self.db_path(name), "fields": dict(self.fields),
                       "format": self.format, "recent.entries": self.recent_entries,
                       **({"schema.registry.url": self.schema_registry_url}
                          if self.schema_registry_url else {})},
        })


class DatabusConfig(_Model):
    """The whole sidecar.yaml."""

    sidecar: SidecarSettings = Field(
        default_factory=SidecarSettings,
        description="The sidecar process: app socket, metrics, buffer, reload (below).",
    )
    clusters: dict[str, ClusterConfig] = Field(
        default_factory=dict,
        description="Named upstream Kafka clusters. Empty: `databus up` runs the built-in "
        f"broker and names it `{EMBEDDED_CLUSTER}`.",
    )
    producer: dict[str, Any] = Field(
        default_factory=dict,
        description="Producer defaults for every stream (Kafka keys, see the producer "
        "section), plus `partitioner` (a partitioner plugin's name) and `partitioner.config`.",
    )
    consumer: dict[str, Any] = Field(
        default_factory=dict,
        description="Defaults for consuming any stream through the sidecar: Kafka consumer "
        "keys (default `auto.offset.reset: earliest`, `auto.commit.interval.ms: 1000`) and "
        "`max.attempts`, `ack.timeout.ms`, `retry.levels` (below).",
    )
    streams: dict[str, StreamConfig] = Field(
        default_factory=dict, description="Stream name -> cluster, topic and overrides."
    )
    default_route: DefaultRoute | None = Field(
        None,
        description="Route for unlisted streams; null: sending to one is an UNKNOWN_STREAM "
        "error.",
    )
    console: ConsoleSettings = Field(
        default_factory=ConsoleSettings,
        description="The web console (below; docs/console.md).",
    )
    broker: EmbeddedBrokerConfig = Field(
        default_factory=EmbeddedBrokerConfig,
        description="The built-in broker `databus up` runs when `clusters` is empty (below).",
    )
    sinks: dict[str, SinkConfig] = Field(
        default_factory=dict,
        description="Sink name -> consumer-side plugin fed from topics (below; run by "
        "`databus up`, `databus sidecar` and `databus sinks`).",
    )
    indexes: dict[str, IndexConfig] = Field(
        default_factory=dict,
        description="Index name -> topics whose records are found by business fields (below; "
        "docs/index.md); each is built by a sink of the `index` plugin, so it runs where "
        "`sinks:` run.",
    )
    mirrors: list[MirrorConfig] = Field(
        default_factory=list,
        description="Cross-region mirrors between `clusters:` (below; docs/mirror.md), run by "
        "`databus up` and `databus mirror`.",
    )
    lanes: LanesConfig | None = Field(
        None,
        description="Swimlanes (below; docs/lanes.md): routing by the lane header to "
        "`{topic}.lane.{lane}`; null: off.",
    )
    delay: DelayConfig = Field(
        default_factory=DelayConfig,
        description="The delay service for delayed messages (below; docs/delayed.md).",
    )
    transactions: TransactionsConfig = Field(
        default_factory=TransactionsConfig,
        description="The half-message service for apps' transactions with check-back "
        "(below; docs/transactions.md).",
    )

    @model_validator(mode="after")
    def _check(self) -> DatabusConfig:
        problems = []
        for what, cluster in self._cluster_refs():
            try:
                self.resolve_cluster(cluster, what)
            except ConfigError as exc:
                problems.append(str(exc))
        try:
            self.producer_config(self.producer)
        except ConfigError as exc:
            problems.append(f"producer: {exc}")
        if not problems:
            for name in self.streams:
                try:
                    self.stream_producer_settings(name)
                except ConfigError as exc:
                    problems.append(str(exc))
            for stream in [None, *self.streams]:
                try:
                    self.stream_consumer_settings(stream)
                except ConfigError as exc:
                    problems.append(str(exc))
        if self.broker.options:
            problems.extend(_broker_option_problems(self.broker))
        try:
            self.sidecar.resolved_tokens()
        except ConfigError as exc:
            problems.append(str(exc))
        for name, cluster in self.clusters.items():  # an unset ${env:...}: said at load
            try:
                resolve_references(cluster.producer_settings, f"clusters: {name}: ")
            except ConfigError as exc:
                problems.append(str(exc))
        problems.extend(self._mirror_problems())
        problems.extend(
            f"sinks: {name!r} is the name of index {name.removeprefix(INDEX_SINK_PREFIX)!r}'s "
            "builder; rename the sink"
            for name in self.sinks if name.removeprefix(INDEX_SINK_PREFIX) in self.indexes
            and name.startswith(INDEX_SINK_PREFIX)
        )
        if problems:
            raise ValueError("; ".join(dict.fromkeys(problems)))
        return self

    def _mirror_problems(self) -> list[str]:
        problems = []
        seen: set[str] = set()
        for m in self.mirrors:
            if m.name in seen:
                problems.append(f"mirrors: two mirrors are named {m.name!r}")
            seen.add(m.name)
            for role in ("source", "target"):
                cluster = getattr(m, role)
                if cluster not in self.clusters:
                    defined = ", ".join(self.clusters) or "none"
                    problems.append(
                        f"mirror {m.name!r}: {role} cluster {cluster!r} is not defined in "
                        f"`clusters:` (defined: {defined})"
                    )
                elif not _LABEL.match(cluster):
                    problems.append(
                        f"mirror {m.name!r}: cluster name {cluster!r} may only contain "
                        "letters, digits, '.', '_', '-' (it goes into headers and topic names)"
                    )
        return problems

    def mirror(self, name: str) -> MirrorConfig:
        for m in self.mirrors:
            if m.name == name:
                return m
        known = ", ".join(m.name for m in self.mirrors) or "none"
        raise ConfigError(f"no mirror named {name!r} (configured: {known})")

    def _cluster_refs(self):
        for name, stream in self.streams.items():
            yield f"stream {name!r}", stream.cluster
        if self.default_route is not None:
            yield "default_route", self.default_route.cluster
        if self.lanes is not None:
            yield "lanes", self.lanes.cluster
        for name, sink in self.sinks.items():
            yield f"sink {name!r}", sink.cluster
        for name, index in self.indexes.items():
            yield f"index {name!r}", index.cluster
        if self.console.cluster is not None:
            yield "console", self.console.cluster
        for cluster in self.delay.clusters or ():
            yield "delay", cluster
        for cluster in self.transactions.clusters or ():
            yield "transactions", cluster

    def delay_clusters(self) -> list[str]:
        """The clusters this sidecar's delay service serves (none when it is off)."""
        return self._service_clusters(self.delay, "delay")

    def transaction_clusters(self) -> list[str]:
        """The clusters this sidecar's half-message service serves (none when it is off)."""
        return self._service_clusters(self.transactions, "transactions")

    def _service_clusters(self, section, what: str) -> list[str]:
        if not section.enabled:
            return []
        if section.clusters:
            return [self.resolve_cluster(c, what) for c in section.clusters]
        return list(self.clusters) or [EMBEDDED_CLUSTER]

    def all_sinks(self) -> dict[str, SinkConfig]:
        """``sinks:`` plus one sink per index (named ``index.NAME``), as the runtime runs them."""
        out = dict(self.sinks)
        for name, index in self.indexes.items():
            out[INDEX_SINK_PREFIX + name] = index.sink(name)
        return out

    # --- resolution helpers used by the sidecar ---------------------------------------------

    @property
    def uses_embedded_broker(self) -> bool:
        return not self.clusters

    def resolve_cluster(self, name: str | None, what: str = "stream") -> str:
        """The cluster a stream goes to, by the rules in StreamConfig.cluster's description."""
        if not self.clusters:
            if name not in (None, EMBEDDED_CLUSTER):
                raise ConfigError(
                    f"{what}: cluster {name!r} is not defined (no clusters are configured, "
                    f"so the only cluster is the built-in broker {EMBEDDED_CLUSTER!r})"
                )
            return EMBEDDED_CLUSTER
        if name is None:
            if len(self.clusters) == 1:
                return next(iter(self.clusters))
            raise ConfigError(
                f"{what}: 'cluster' is required when several clusters are configured "
                f"({', '.join(self.clusters)})"
            )
        if name not in self.clusters:
            raise ConfigError(
                f"{what}: cluster {name!r} is not defined (defined: {', '.join(self.clusters)})"
            )
        return name

    def stream_cluster(self, stream: str | None) -> str:
        """The cluster name a stream (None: the default route) sends to."""
        if stream is not None and stream in self.streams:
            return self.resolve_cluster(self.streams[stream].cluster, f"stream {stream!r}")
        route = self.default_route
        return self.resolve_cluster(route.cluster if route else None, "default_route")

    def stream_producer_settings(self, stream: str | None) -> dict[str, Any]:
        """Merged producer keys for a stream (cluster < producer defaults < stream); None is
        the default route."""
        if stream is None or stream not in self.streams:
            cluster_name = self.resolve_cluster(
                self.default_route.cluster if self.default_route else None, "default_route"
            )
            overrides: dict[str, Any] = {}
        else:
            cfg = self.streams[stream]
            cluster_name = self.resolve_cluster(cfg.cluster, f"stream {stream!r}")
            overrides = cfg.producer_settings
        cluster = self.clusters.get(cluster_name)
        merged = dict(cluster.producer_settings if cluster else {})
        merged.update(self.producer)
        merged.update(overrides)
        try:
            self.producer_config(merged)
        except ConfigError as exc:
            where = f"stream {stream!r}" if stream else "default_route"
            raise ConfigError(f"{where}: {exc}") from None
        return merged

    def stream_consumer_settings(self, stream: str | None):
        """(ConsumeSettings, the client's ConsumerConfig without group.id) for subscribers
        of ``stream`` (None: the top-level defaults alone); top-level < stream keys."""
        from databus.client import ConsumerConfig
        from databus.client import errors as client_errors

        merged = {**STREAM_CONSUMER_DEFAULTS, **self.consumer}
        if stream is not None and stream in self.streams:
            merged.update(self.streams[stream].consumer)
        where = f"stream {stream!r}: consumer" if stream in self.streams else "consumer"
        reserved = [k for k in merged if k in RESERVED_STREAM_CONSUMER_KEYS]
        if reserved:
            raise ConfigError(
                f"{where}: {', '.join(reserved)} cannot be set (the group is the one an app "
                "names in subscribe(); the sidecar commits and knows the cluster)"
            )
        ours = {k: v for k, v in merged.items() if k in CONSUME_SETTINGS_KEYS}
        kafka = {k: v for k, v in merged.items() if k not in CONSUME_SETTINGS_KEYS}
        try:
            settings = ConsumeSettings.model_validate(ours)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {_format_validation(exc)}") from None
        try:
            ConsumerConfig.from_kafka(kafka)  # validated here, built by the member
        except client_errors.ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return settings, kafka

    def stream_ordering(self, stream: str) -> str:
        return self.streams[stream].ordering if stream in self.streams else "partition"

    @staticmethod
    def producer_config(settings: Mapping[str, Any]):
        """Validate the Kafka part of merged producer settings with the client's model."""
        from databus.client.config import ProducerConfig
        from databus.client.errors import ConfigError as ClientConfigError

        kafka = {k: v for k, v in settings.items() if k not in SIDECAR_PRODUCER_KEYS}
        reserved = [k for k in kafka if k in RESERVED_PRODUCER_KEYS]
        if reserved:
            raise ConfigError(
                f"{', '.join(reserved)} cannot be set per stream (the sidecar sets "
                "buffer.memory from sidecar.buffer.memory and bootstrap.servers from the "
                "cluster)"
            )
        transactional = [k for k in kafka if k in ("transactional.id", "transaction.timeout.ms")]
        if transactional:
            raise ConfigError(
                f"{', '.join(transactional)} cannot be set for a stream: the sidecar's "
                "producers are shared; apps use client.transaction() (docs/transactions.md)")
        pconf = settings.get("partitioner.config", {})
        if not isinstance(pconf, dict):
            raise ConfigError("partitioner.config must be a mapping")
        if not isinstance(settings.get("partitioner", "default"), str):
            raise ConfigError("partitioner must be a partitioner plugin's name")
        try:
            return ProducerConfig.from_kafka(kafka)
        except ClientConfigError as exc:
            raise ConfigError(str(exc)) from None

    def route_topic(self, stream: str) -> str:
        if stream in self.streams:
            return self.streams[stream].topic or stream
        assert self.default_route is not None
        return self.default_route.topic.replace("{stream}", stream)


def _broker_option_problems(broker: EmbeddedBrokerConfig) -> list[str]:
    """Check the built-in broker's settings with the broker's own model (as `databus broker`
    would read them) when it is importable."""
    try:
        from databus.broker.config import BrokerConfig
        from databus.broker.listeners import listener_name
    except ImportError:
        return []
    extra = str(broker.options.get("listeners", ""))
    names = [listener_name(entry, "PLAINTEXT") for entry in extra.split(",") if entry.strip()]
    if "PLAINTEXT" in names:
        return ["broker.options: listeners: PLAINTEXT is broker.listen (the sidecar's way in); "
                "give another listener its own name (e.g. EXTERNAL://0.0.0.0:9094 with "
                "EXTERNAL:PLAINTEXT in listener.security.protocol.map)"]
    options = dict(broker.options)
    options["listeners"] = ",".join(v for v in (broker.listen, extra) if v)
    try:
        BrokerConfig.from_options(broker_option_args(options))
    except ValueError as exc:  # BrokerConfigError: its message names the key
        return [f"broker.options: {exc}"]
    return []


def broker_option_args(options: Mapping[str, Any]) -> list[str]:
    """``key=value`` strings for ``databus broker -o`` (booleans as Kafka writes them)."""
    def text(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    return [f"{key}={text(value)}" for key, value in options.items()]


def _format_validation(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            problems.append(f"{loc}: unknown setting")
        elif err["type"] == "missing":
            problems.append(f"{loc}: required")
        else:
            problems.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(problems)


def parse_config(data: Any, base_dir: Path | None = None) -> DatabusConfig:
    """Validate a decoded sidecar.yaml; relative paths are made absolute from ``base_dir``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping, got {type(data).__name__}")
    try:
        config = DatabusConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc)) from None
    if base_dir is not None:
        config = _absolute_paths(config, base_dir)
    return config


def _absolute_paths(config: DatabusConfig, base_dir: Path) -> DatabusConfig:
    def absolute(path: str) -> str:
        p = Path(path).expanduser()
        return str(p if p.is_absolute() else (base_dir / p).resolve())

    sidecar = config.sidecar.model_copy(update={"socket": absolute(config.sidecar.socket)})
    broker = config.broker.model_copy(update={"data_dir": absolute(config.broker.data_dir)})
    indexes = {name: index.model_copy(update={"path": absolute(index.path)})
               for name, index in config.indexes.items()}
    streams = {name: stream.model_copy(update={"schema_": stream.schema_.model_copy(
                   update={"file": absolute(stream.schema_.file)})})
               if stream.schema_ is not None and stream.schema_.file else stream
               for name, stream in config.streams.items()}
    return config.model_copy(update={"sidecar": sidecar, "broker": broker, "indexes": indexes,
                                     "streams": streams})


# The configuration used when there is no file at all (no -c, no ./sidecar.yaml): every
# stream goes to the topic of the same name, so `databus up` alone is a working bus.  A file
# keeps the rule of the models' defaults: unlisted streams are refused unless it says
# `default_route:`.
NO_FILE_CONFIG: dict[str, Any] = {"default_route": {"topic": "{stream}"}}


def load_config(path: str | os.PathLike | None) -> DatabusConfig:
    """Read and validate a sidecar.yaml (None: ``NO_FILE_CONFIG``).  Raises ConfigError."""
    if path is None:
        return parse_config(NO_FILE_CONFIG)
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML{_yaml_problem(exc)}") from None
    try:
        return parse_config(data, path.resolve().parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


DEFAULT_CONFIG_FILE = "sidecar.yaml"


def find_config(path: str | os.PathLike | None) -> str | None:
    """The file a command reads: ``-c FILE`` if given, else ./sidecar.yaml if it exists,
    else None (the built-in defaults).  Every command taking ``-c`` asks here."""
    if path is not None:
        return os.fspath(path)
    return DEFAULT_CONFIG_FILE if os.path.exists(DEFAULT_CONFIG_FILE) else None


def part_bootstrap(config: DatabusConfig, cluster: str | None, what: str,
                   embedded: str | None = None) -> str:
    """The bootstrap servers of a part's cluster (``cluster`` as the part names it, None:
    the only one): a named cluster's ``bootstrap.servers``, else the built-in broker's —
    ``embedded`` when the caller knows where it listens (``databus up``), else
    ``broker.listen`` of the file.  Every command and part answers "which cluster" here."""
    name = config.resolve_cluster(cluster, what)
    if name != EMBEDDED_CLUSTER:
        return config.clusters[name].bootstrap_servers
    if embedded:
        return embedded
    host, port = parse_host_port(config.broker.listen, allow_port_zero=True,
                                 what="broker.listen")
    if port == 0:
        raise ConfigError(f"{what}: the built-in broker listens on port 0 (a free port chosen "
                          "at start): pass its address with --bootstrap-server")
    return format_host_port(host, port)


def broker_registry_url(config: DatabusConfig) -> str | None:
    """The schema registry the file's broker section serves (``schema.registry.listen``),
    as a URL clients use (a wildcard host is reached on 127.0.0.1); None without one or
    when it listens on port 0 (known only once started)."""
    listen = (config.broker.options or {}).get("schema.registry.listen")
    if not listen:
        return None
    host, _, port = str(listen).rpartition(":")
    if port in ("", "0"):
        return None
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def part_security(config: DatabusConfig, cluster: str | None, what: str) -> dict[str, Any]:
    """The TLS/SASL settings (secrets resolved) of a part's cluster; none for the built-in
    broker (PLAINTEXT)."""
    name = config.resolve_cluster(cluster, what)
    if name == EMBEDDED_CLUSTER:
        return {}
    return config.clusters[name].connection_settings()


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``at line 3, column 1: while parsing ..., expected ...``: one line (PyYAML's own
    message spans several and names "<unicode string>" instead of the file)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    words = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    what = ", ".join(w for w in words if w) or " ".join(str(exc).split())
    return f"{where}: {what}"


def with_overrides(config: DatabusConfig, **sidecar_fields: Any) -> DatabusConfig:
    """Apply command-line flags (non-None values) on top of a loaded config, re-validated."""
    data = config.model_dump(by_alias=True, exclude_unset=False)
    broker_keys = {"data_dir", "listen"}
    for key, value in sidecar_fields.items():
        if value is None:
            continue
        if key in broker_keys:
            data["broker"][key] = value
        else:
            data["sidecar"][key] = value
    return parse_config(data, Path.cwd())
