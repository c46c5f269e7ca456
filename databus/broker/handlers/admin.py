"""Admin APIs: CreateTopics (19), DeleteTopics (20), CreatePartitions (37),
DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44), DescribeCluster (60),
DescribeLogDirs (35).

Resources: topics, the broker, and groups (type 32): a share group's ``share.*`` configs
(share/service.py's ``check_group_configs`` bounds them by the broker's ``group.share.*``),
stored durably in ``__share_group_state``; a group's overrides are DYNAMIC_GROUP_CONFIG.
Client-metrics subscriptions (type 16, KIP-714: ``metrics``, ``interval.ms``, ``match``;
client_metrics/subscriptions.py) are CLIENT_METRICS_CONFIG; ListConfigResources (74) lists
them.

One node: a replication factor other than 1 (or -1, "broker default") is
INVALID_REPLICATION_FACTOR, manual replica assignments may only name this node.  Topic
configs use Kafka's topic config names (validated by storage's LogConfig; the ones that have
no effect here are accepted and say so in their documentation).  DescribeConfigs reports
each value's source and, with ``include_synonyms``, every place a value for it is set, in
Kafka's precedence order (config_sources.py: one model for topic, broker and group
configs).  Internal topics (``__``) cannot be created, deleted or grown by clients.

AlterConfigs replaces a topic's overrides with the given set; IncrementalAlterConfigs applies
SET/DELETE/APPEND/SUBTRACT to them (storage's ``apply_config_ops``).  Either way the result
is validated as a whole (``INVALID_CONFIG`` naming the key and value), then persisted and
applied to the live logs (``validate_only`` stops after the validation).  Broker configs:
Kafka's dynamic ones, per broker (resource name = the node id) or cluster-wide (name ""),
are stored and applied where the broker uses them (dynamic_config.py); any other is refused
with ``INVALID_REQUEST`` ("Cannot update these configs dynamically"), as Kafka does.
"""

from __future__ import annotations

import datetime
import logging
import shutil
from collections import Counter

from pydantic import SecretStr

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.storage.acls import CLUSTER_NAME, Operation, ResourceType

from ..api import RequestContext, handles
from ..broker import is_internal_topic
from ..config import BrokerConfig
from ..config_sources import (
    KAFKA_BROKER_DEFAULTS,
    TOPIC_CONFIG_SYNONYMS,
    Layers,
    Source,
    Synonym,
    broker_config_synonyms,
    source_of,
)
from ..dynamic_config import DynamicConfigError, is_dynamic
from ..errors import error_code_for
from ..operations import authorized_operations

log = logging.getLogger(__name__)


# DescribeConfigs resource types (Kafka's ConfigResource); sources: config_sources.Source
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
NO_THROTTLE = datetime.timedelta(0)
SENSITIVE = frozenset(info.alias for info in BrokerConfig.model_fields.values()
                      if info.annotation == SecretStr | None)


def _failure(exc: Exception, what: str) -> tuple[ErrorCode, str]:
    code = error_code_for(exc)
    if code is ErrorCode.unknown_server_error:
        log.exception("%s failed", what)
    return code, str(exc)


def _validate_create(broker, topic) -> tuple[int, dict[str, str]]:
    """(partitions, configs) of a CreatableTopic; ValueError-like errors carry codes."""
    from databus.storage.config import LogConfig

    if topic.replication_factor not in (-1, 1):
        raise _Refused(ErrorCode.invalid_replication_factor,
                       f"replication factor {topic.replication_factor}: this broker is a "
                       "single node, only 1 is possible")
    partitions = topic.num_partitions
    if topic.assignments:
        if partitions != -1:
            raise _Refused(ErrorCode.invalid_request,
                           "give either num_partitions or assignments, not both")
        for assignment in topic.assignments:
            if tuple(assignment.broker_ids) not in ((), (broker.node_id,)):
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"only node {broker.node_id} exists")
        partitions = len(topic.assignments)
    if partitions == -1:
        partitions = broker.config.num_partitions
    if partitions <= 0:
        raise _Refused(ErrorCode.invalid_partitions, f"number of partitions {partitions} < 1")
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    LogConfig.from_topic_config(configs, base=broker.default_log_config)  # validates
    return partitions, configs


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _config_entries(module_cls, broker, name: str) -> tuple:
    return tuple(
        build(module_cls, name=key, value=value, read_only=False,
              config_source=Source.DYNAMIC_TOPIC_CONFIG if overridden else Source.DEFAULT_CONFIG,
              is_sensitive=False)
        for key, (value, overridden) in sorted(broker.topic_configs(name).items())
    )


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    results = []
    for topic in request.topics:
        code, message, info = ErrorCode.none, None, None
        try:
            if not (ctx.cluster_allowed(Operation.CREATE)
                    or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, topic.name)):
                raise _Refused(ErrorCode.topic_authorization_failed,
                               f"not authorized to create topic {topic.name!r}")
            if is_internal_topic(topic.name):
                raise _Refused(ErrorCode.invalid_request,
                               f"{topic.name!r}: names starting with '__' are internal")
            partitions, configs = _validate_create(broker, topic)
            if broker.topic(topic.name) is not None:
                raise _Refused(ErrorCode.topic_already_exists,
                               f"topic {topic.name!r} already exists")
            if not request.validate_only:
                info = broker.create_topic(topic.name, partitions, configs)
        except _Refused as exc:
            code, message = exc.code, str(exc)
        except Exception as exc:
            code, message = _failure(exc, f"creating topic {topic.name!r}")
        fields = dict(name=topic.name, error_code=code, error_message=message,
                      topic_id=info.topic_id if info is not None else None,
                      num_partitions=-1, replication_factor=-1, configs=())  # [] as Kafka
        if info is not None and hasattr(module, "CreatableTopicConfigs"):  # v5+
            fields.update(num_partitions=info.partitions, replication_factor=1,
                          configs=_config_entries(module.CreatableTopicConfigs, broker, topic.name))
        if fields["topic_id"] is None:
            import uuid

            fields["topic_id"] = uuid.UUID(int=0)
        results.append(build(module.CreatableTopicResult, **fields))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, topics=tuple(results))


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, request) -> object:
    import uuid

    broker = ctx.broker
    module = ctx.response_module()
    wanted: list[tuple[str | None, uuid.UUID | None]] = []
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        code, message = ErrorCode.none, None
        if name is None and topic_id is not None:
            name = next((n for n, i in broker.log_manager.topics().items()
                         if i.topic_id == topic_id), None)
            if name is None:
                code, message = ErrorCode.unknown_topic_id, f"no topic with id {topic_id}"
        info = broker.topic(name) if name is not None else None
        if code is ErrorCode.none and not ctx.allowed(Operation.DELETE, ResourceType.TOPIC,
                                                      name):
            code, message, info = ErrorCode.topic_authorization_failed, None, None
        if code is ErrorCode.none:
            if name is not None and is_internal_topic(name):
                code, message = ErrorCode.invalid_request, f"{name} is internal: not deleted"
            elif info is None:
                code, message = ErrorCode.unknown_topic_or_partition, f"no topic {name!r}"
            else:
                try:
                    broker.delete_topic(name)
                except Exception as exc:
                    code, message = _failure(exc, f"deleting topic {name!r}")
        results.append(build(
            module.DeletableTopicResult, name=name, error_code=code, error_message=message,
            topic_id=info.topic_id if info is not None else (topic_id or uuid.UUID(int=0)),
        ))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, responses=tuple(results))


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    results = []
    for topic in request.topics:
        code, message = ErrorCode.none, None
        info = broker.topic(topic.name)
        if not ctx.allowed(Operation.ALTER, ResourceType.TOPIC, topic.name):
            code = ErrorCode.topic_authorization_failed
        elif info is None:
            code, message = ErrorCode.unknown_topic_or_partition, f"no topic {topic.name!r}"
        elif is_internal_topic(topic.name):
            code, message = ErrorCode.invalid_request, f"{topic.name} is internal: fixed size"
        elif topic.count <= info.partitions:
            code = ErrorCode.invalid_partitions
            message = (f"topic {topic.name!r} has {info.partitions} partitions; the new count "
                       f"must be larger, got {topic.count}")
        elif topic.assignments and any(
            tuple(a.broker_ids) not in ((), (broker.node_id,)) for a in topic.assignments
        ):
            code = ErrorCode.invalid_replica_assignment
            message = f"only node {broker.node_id} exists"
        elif not request.validate_only:
            try:
                broker.add_partitions(topic.name, topic.count)
            except Exception as exc:
                code, message = _failure(exc, f"adding partitions to {topic.name!r}")
        results.append(build(module.CreatePartitionsTopicResult, name=topic.name,
                             error_code=code, error_message=message))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, results=tuple(results))


def _config_refusal(ctx: RequestContext, resource, operation: Operation) -> ErrorCode | None:
    """Kafka's check of Describe/AlterConfigs: the operation on the topic, the group, or
    the cluster (for the broker resource)."""
    kind = {RESOURCE_TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
            RESOURCE_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed)}
    if resource.resource_type in kind:
        rtype, code = kind[resource.resource_type]
        return None if ctx.allowed(operation, rtype, resource.resource_name) else code
    return None if ctx.cluster_allowed(operation) else ErrorCode.cluster_authorization_failed


def _text(value) -> str | None:
    if isinstance(value, SecretStr):
        return None  # a password: sensitive, never sent (Kafka sends null too)
    if isinstance(value, bool):
        return str(value).lower()
    return None if value is None else str(value)


def _layers(broker) -> Layers:
    """The broker-level values by source: dynamic (this node, cluster-wide), the static
    config as started (-o, the file) and the defaults (BrokerConfig's, then Kafka's for the
    topic-config synonyms it does not model)."""
    static, default = {}, {}
    config = broker.static_config
    for name, info in BrokerConfig.model_fields.items():
        alias = info.alias or info.serialization_alias or name
        (static if name in config.model_fields_set else default)[alias] = _text(
            getattr(config, name))
    for name, value in KAFKA_BROKER_DEFAULTS.items():
        default.setdefault(name, value)
    dynamic = broker.dynamic_configs
    return Layers(dynamic.per_broker, dynamic.cluster, static, default)


def _is_sensitive(name: str) -> bool:
    return name in SENSITIVE or "password" in name or name.endswith("sasl.jaas.config")


class _Entry:
    """One DescribeConfigs entry: its value in force and where values for it are set."""

    __slots__ = ("name", "value", "synonyms", "read_only", "documentation")

    def __init__(self, name: str, value: str | None, synonyms: tuple[Synonym, ...],
                 read_only: bool = False, documentation: str | None = None) -> None:
        self.name, self.value, self.synonyms = name, value, synonyms
        self.read_only, self.documentation = read_only, documentation


def _topic_entries(broker, topic: str) -> list[_Entry]:
    from databus.storage.config import INERT_TOPIC_CONFIGS

    layers = _layers(broker)
    entries = []
    for key, (value, overridden) in broker.topic_configs(topic).items():
        own = Synonym(key, value, Source.DYNAMIC_TOPIC_CONFIG) if overridden else None
        inert = INERT_TOPIC_CONFIGS.get(key)
        entries.append(_Entry(key, value,
                              layers.synonyms(TOPIC_CONFIG_SYNONYMS.get(key, ()), own),
                              documentation=inert.note if inert else None))
    return entries


def _broker_entries(broker) -> list[_Entry]:
    layers = _layers(broker)
    names = {*layers.default, *layers.static, *layers.cluster, *layers.per_broker}
    entries = []
    for name in names:
        own = layers.synonyms((name,))
        value = own[0].value if own else None
        entries.append(_Entry(name, value, layers.synonyms(broker_config_synonyms(name)),
                              read_only=not is_dynamic(name)))
    return entries


def _group_entries(broker, group: str) -> list[_Entry]:
    layers = _layers(broker)
    overrides = broker.shares.group_configs.get(group, {})
    entries = []
    for key, value in broker.shares.group_config(group).items():
        own = Synonym(key, value, Source.DYNAMIC_GROUP_CONFIG) if key in overrides else None
        entries.append(_Entry(key, value, layers.synonyms((f"group.{key}",), own)))
    return entries


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        code, message, entries = ErrorCode.none, None, []
        refused = _config_refusal(ctx, resource, Operation.DESCRIBE_CONFIGS)
        if refused is not None:
            code = refused
        elif resource.resource_type == RESOURCE_TOPIC:
            info = broker.topic(resource.resource_name)
            if info is None:
                code = ErrorCode.unknown_topic_or_partition
                message = f"no topic {resource.resource_name!r}"
            else:
                entries = _topic_entries(broker, info.name)
        elif resource.resource_type == RESOURCE_BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                code = ErrorCode.invalid_request
                message = f"no broker {resource.resource_name!r}; this is node {broker.node_id}"
            else:
                entries = _broker_entries(broker)
        elif resource.resource_type == RESOURCE_GROUP:
            entries = _group_entries(broker, resource.resource_name)
        elif resource.resource_type == RESOURCE_CLIENT_METRICS:
            # Kafka answers a name with no subscription with no entries, not an error.
            entries = [_Entry(key, value, (Synonym(key, value, Source.CLIENT_METRICS_CONFIG),))
                       for key, value in
                       broker.client_metrics.store.configs(resource.resource_name).items()]
        else:
            code = ErrorCode.invalid_request
            message = f"resource type {resource.resource_type} is not supported"
        synonyms = getattr(request, "include_synonyms", False)
        documentation = getattr(request, "include_documentation", False)
        configs = tuple(
            build(module.DescribeConfigsResourceResult, name=entry.name,
                  value=None if _is_sensitive(entry.name) else entry.value,
                  read_only=entry.read_only, config_source=source_of(entry.synonyms),
                  is_default=source_of(entry.synonyms) == Source.DEFAULT_CONFIG,
                  is_sensitive=_is_sensitive(entry.name),
                  synonyms=tuple(
                      build(module.DescribeConfigsSynonym, name=syn.name,
                            value=None if _is_sensitive(syn.name) else syn.value,
                            source=syn.source)
                      for syn in entry.synonyms) if synonyms else (),
                  config_type=0,
                  documentation=entry.documentation if documentation else None)
            for entry in sorted(entries, key=lambda e: e.name)
            if keys is None or entry.name in keys
        )
        results.append(build(
            module.DescribeConfigsResult, error_code=code, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            configs=configs,
        ))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, results=tuple(results))


def _no_duplicate_keys(configs) -> None:
    counts = Counter(c.name for c in configs)
    repeated = sorted(name for name, n in counts.items() if n > 1)
    if repeated:
        raise _Refused(ErrorCode.invalid_request,
                       f"duplicate config keys in one resource: {', '.join(repeated)}")


def _replacement(broker, info, configs) -> dict[str, str]:
    """AlterConfigs: the given configs become the topic's whole set of overrides (a null
    value, like an absent key, leaves the default)."""
    _no_duplicate_keys(configs)
    return {c.name: c.value for c in configs if c.value is not None}


def _incremental(broker, info, configs) -> dict[str, str]:
    """IncrementalAlterConfigs: the operations applied to the topic's current overrides."""
    from databus.storage.config import CONFIG_OPS, OP_DELETE, apply_config_ops

    _no_duplicate_keys(configs)
    for c in configs:
        if c.config_operation not in CONFIG_OPS:
            raise _Refused(ErrorCode.invalid_request,
                           f"unknown config operation {c.config_operation} for {c.name} "
                           "(0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT)")
        if c.value is None and c.config_operation != OP_DELETE:
            raise _Refused(ErrorCode.invalid_request,
                           f"null value for {c.name}: only DELETE takes no value")
    effective = {key: value for key, (value, _) in broker.topic_configs(info.name).items()}
    return apply_config_ops(info.config, effective,
                            [(c.name, c.config_operation, c.value) for c in configs])


def _broker_configs(broker, configs, per_broker: bool, new_overrides) -> dict[str, str]:
    """The node's (``per_broker``) or the cluster-wide dynamic broker configs after the
    change: AlterConfigs gives the whole set, IncrementalAlterConfigs operations on the
    current one (APPEND/SUBTRACT on the value in force, a comma-separated list)."""
    from databus.storage.config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT

    if new_overrides is _replacement:
        return _replacement(broker, None, configs)
    _no_duplicate_keys(configs)
    result = dict(broker.dynamic_configs.layer(per_broker))
    in_force = {entry.name: entry.value for entry in _broker_entries(broker)}
    for c in configs:
        if c.config_operation == OP_SET and c.value is not None:
            result[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            result.pop(c.name, None)
        elif c.config_operation in (OP_APPEND, OP_SUBTRACT) and c.value is not None:
            current = [v.strip() for v in (result.get(c.name) or in_force.get(c.name) or
                                           "").split(",") if v.strip()]
            given = [v.strip() for v in c.value.split(",") if v.strip()]
            merged = (list(dict.fromkeys(current + given)) if c.config_operation == OP_APPEND
                      else [v for v in current if v not in given])
            result[c.name] = ",".join(merged)
        else:
            raise _Refused(ErrorCode.invalid_request,
                           f"config operation {c.config_operation} with value {c.value!r} "
                           f"for {c.name} (0 SET and 2 APPEND / 3 SUBTRACT take a value, "
                           "1 DELETE none)")
    return result


def _group_overrides(broker, resource, new_overrides) -> dict[str, str]:
    """A share group's config overrides after the change (SET and DELETE: no group config is
    a list), validated against the broker's bounds."""
    from databus.storage.config import OP_DELETE, OP_SET

    from ..share.service import GroupConfigError, check_group_configs

    configs = resource.configs
    _no_duplicate_keys(configs)
    if new_overrides is _replacement:
        result = _replacement(broker, None, configs)
    else:
        result = dict(broker.shares.group_configs.get(resource.resource_name, {}))
        for c in configs:
            if c.config_operation == OP_SET and c.value is not None:
                result[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                result.pop(c.name, None)
            else:
                raise _Refused(ErrorCode.invalid_config,
                               f"operation {c.config_operation} on {c.name}: group configs "
                               "take only SET (0) and DELETE (1)")
    try:
        check_group_configs(broker.shares.config, result)
    except GroupConfigError as exc:
        raise _Refused(ErrorCode.invalid_config, str(exc)) from exc
    return result


async def _alter_resource(broker, resource, new_overrides, validate_only: bool) -> None:
    """Validate and (unless ``validate_only``) apply one resource's change; raise on refusal."""
    from databus.storage.config import LogConfig

    name = resource.resource_name
    if resource.resource_type == RESOURCE_TOPIC:
        info = broker.topic(name)
        if info is None:
            raise _Refused(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        overrides = new_overrides(broker, info, resource.configs)
        LogConfig.from_topic_config(overrides, base=broker.default_log_config)  # validates
        if not validate_only:
            broker.alter_topic_config(name, overrides)
    elif resource.resource_type == RESOURCE_BROKER:
        if name not in ("", str(broker.node_id)):
            raise _Refused(ErrorCode.invalid_request,
                           f"no broker {name!r}; this is node {broker.node_id}")
        per_broker = name != ""  # "" is the cluster-wide default, as in Kafka
        configs = _broker_configs(broker, resource.configs, per_broker, new_overrides)
        try:
            broker.set_dynamic_configs(configs, per_broker=per_broker,
                                       validate_only=validate_only)
        except DynamicConfigError as exc:
            raise _Refused(ErrorCode.invalid_config if exc.invalid_config
                           else ErrorCode.invalid_request, str(exc)) from exc
    elif resource.resource_type == RESOURCE_GROUP:
        if not name:
            raise _Refused(ErrorCode.invalid_group_id, "the group id is empty")
        overrides = _group_overrides(broker, resource, new_overrides)
        if not validate_only:
            await broker.shares.set_group_configs(name, overrides)
    elif resource.resource_type == RESOURCE_CLIENT_METRICS:
        configs = _client_metrics_configs(broker, resource, new_overrides)
        if not validate_only:
            broker.client_metrics.store.set(name, configs)
    else:
        raise _Refused(ErrorCode.invalid_request,
                       f"resource type {resource.resource_type} is not supported "
                       f"(only topics ({RESOURCE_TOPIC}), brokers ({RESOURCE_BROKER}), "
                       f"client metrics ({RESOURCE_CLIENT_METRICS}) and "
                       f"groups ({RESOURCE_GROUP}))")


def _client_metrics_configs(broker, resource, new_overrides) -> dict[str, str]:
    """A client-metrics subscription's configs after the change, validated: SET, DELETE,
    and APPEND/SUBTRACT on its two lists (``metrics``, ``match``)."""
    from databus.storage.config import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT

    from ..client_metrics.subscriptions import (
        LIST_CONFIGS,
        ClientMetricsConfigError,
        split_list,
    )

    _no_duplicate_keys(resource.configs)
    if new_overrides is _replacement:
        result = _replacement(broker, None, resource.configs)
    else:
        result = broker.client_metrics.store.configs(resource.resource_name)
        for c in resource.configs:
            if c.config_operation == OP_SET and c.value is not None:
                result[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                result.pop(c.name, None)
            elif (c.config_operation in (OP_APPEND, OP_SUBTRACT) and c.value is not None
                  and c.name in LIST_CONFIGS):
                current, given = split_list(result.get(c.name)), split_list(c.value)
                merged = (list(dict.fromkeys(current + given)) if c.config_operation == OP_APPEND
                          else [v for v in current if v not in given])
                result[c.name] = ",".join(merged)
            else:
                raise _Refused(ErrorCode.invalid_config,
                               f"operation {c.config_operation} on {c.name}: 0 SET and "
                               "1 DELETE, 2 APPEND / 3 SUBTRACT on metrics and match only")
    try:
        broker.client_metrics.store.check(resource.resource_name, result)
    except ClientMetricsConfigError as exc:
        raise _Refused(ErrorCode.invalid_config, str(exc)) from exc
    return result


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_config_resources(ctx: RequestContext, request) -> object:
    """The client-metrics subscriptions (v0 was ListClientMetricsResources), and from v1
    the topics and this broker when asked for (KIP-1142)."""
    module = ctx.response_module()
    wanted = set(getattr(request, "resource_types", ()) or (RESOURCE_CLIENT_METRICS,))
    if ctx.api_version == 0:
        wanted = {RESOURCE_CLIENT_METRICS}
    unknown = wanted - {RESOURCE_CLIENT_METRICS, RESOURCE_TOPIC, RESOURCE_BROKER}
    if unknown:
        return build(ctx.response_class(), throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.invalid_request, config_resources=())
    if not ctx.cluster_allowed(Operation.DESCRIBE_CONFIGS):
        return build(ctx.response_class(), throttle_time=NO_THROTTLE,
                     error_code=ErrorCode.cluster_authorization_failed, config_resources=())
    found: list[tuple[str, int]] = []
    if RESOURCE_CLIENT_METRICS in wanted:
        found += [(n, RESOURCE_CLIENT_METRICS) for n in ctx.broker.client_metrics.store.names()]
    if RESOURCE_TOPIC in wanted:
        found += [(n, RESOURCE_TOPIC) for n in sorted(ctx.broker.log_manager.topics())
                  if ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, n)]
    if RESOURCE_BROKER in wanted:
        found.append((str(ctx.broker.node_id), RESOURCE_BROKER))
    resources = tuple(
        build(module.ConfigResource, resource_name=name, resource_type=rtype)
        if ctx.api_version >= 1 else build(module.ConfigResource, resource_name=name)
        for name, rtype in found)
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 config_resources=resources)


async def _alter_configs(ctx: RequestContext, request, new_overrides) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        code, message = ErrorCode.none, None
        try:
            refused = _config_refusal(ctx, resource, Operation.ALTER_CONFIGS)
            if refused is not None:
                raise _Refused(refused, "not authorized")
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise _Refused(ErrorCode.invalid_request,
                               f"resource {resource.resource_name!r} appears more than once")
            await _alter_resource(broker, resource, new_overrides, request.validate_only)
        except _Refused as exc:
            code, message = exc.code, str(exc)
        except Exception as exc:  # noqa: BLE001  (a storage error answers this resource only)
            code, message = _failure(exc, f"altering configs of {resource.resource_name!r}")
        results.append(build(
            module.AlterConfigsResourceResponse, error_code=code, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, responses=tuple(results))


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, request) -> object:
    return await _alter_configs(ctx, request, _replacement)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, request) -> object:
    return await _alter_configs(ctx, request, _incremental)


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 1)
async def describe_cluster(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    host, port = broker.advertised_address(ctx.listener_name)
    node = build(module.DescribeClusterBroker, broker_id=broker.node_id, host=host, port=port,
                 rack=None)
    return build(
        ctx.response_class(), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
        error_message=None, endpoint_type=1, cluster_id=broker.cluster_id,
        controller_id=broker.node_id, brokers=(node,),
        cluster_authorized_operations=authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME,
            getattr(request, "include_cluster_authorized_operations", False)),
    )


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
async def describe_log_dirs(ctx: RequestContext, request) -> object:
    """The one log directory (the data directory) with the size on disk of each partition
    asked for (null topics: every partition), as Kafka reports it: the bytes of its segments'
    ``.log`` files.  Offset lag is 0 (no future replicas); v4 adds the directory's file
    system total and usable bytes.  A topic that does not exist is left out, as Kafka does."""
    broker = ctx.broker
    module = ctx.response_module()
    manager = broker.log_manager
    topics = manager.topics()
    if request.topics is None:
        wanted = {name: range(info.partitions) for name, info in topics.items()}
    else:
        wanted = {t.topic: [p for p in t.partitions if p < topics[t.topic].partitions]
                  for t in request.topics if t.topic in topics}
    described = []
    for name, partitions in sorted(wanted.items()):
        sizes = []
        for p in partitions:
            log = manager.get_log(name, p)
            if log is not None:
                sizes.append(build(module.DescribeLogDirsPartition, partition_index=p,
                                   partition_size=log.size_in_bytes, offset_lag=0,
                                   is_future_key=False))
        described.append(build(module.DescribeLogDirsTopic, name=name, partitions=tuple(sizes)))
    disk = shutil.disk_usage(manager.data_dir)
    result = build(module.DescribeLogDirsResult, error_code=ErrorCode.none,
                   log_dir=manager.data_dir, topics=tuple(described),
                   total_bytes=disk.total, usable_bytes=disk.free)
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 results=(result,))
