"""Error codes a request's version predates, mapped down as Kafka's broker does: the one table.

A client that asked with an old version does not know error codes added after it (it reports
"Unknown error code 90" and gives up), so Kafka answers those versions with the older code
that made the client act the same way: PRODUCER_FENCED (90, KIP-588) reaches an EndTxn v1
client as INVALID_PRODUCER_EPOCH (47).  Kafka spreads these over its request handlers
(KafkaApis, the coordinators, AddPartitionsToTxnManager); here they are one table,
``DOWNGRADES``, applied by the broker's server to every answer (``downgrade_response``) and
by the encoders that write a response's bytes themselves (``downgrade``).  docs/protocol.md
has the table, checked against this one by tests/broker/test_error_downgrades.py.

The handlers keep producing the current codes; only what goes on the wire changes.
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import Any, NamedTuple

from .api_keys import ApiKey
from .errors import ErrorCode


class Downgrade(NamedTuple):
    """Answers of ``api`` below version ``since`` carry ``older`` where the broker would send
    ``newer`` (``since`` None: every version — Kafka never sends ``newer`` for that API)."""

    api: int
    newer: ErrorCode
    older: ErrorCode
    since: int | None
    why: str

    def applies(self, version: int) -> bool:
        return self.since is None or version < self.since


_FENCED, _EPOCH = ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch
_KIP588 = "KIP-588: versions before it predate PRODUCER_FENCED"

DOWNGRADES: tuple[Downgrade, ...] = (
    Downgrade(ApiKey.PRODUCE, ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state, 11,
              "KIP-890: Produce v11 is the first to know TRANSACTION_ABORTABLE"),
    Downgrade(ApiKey.FETCH, ErrorCode.kafka_storage_error, ErrorCode.not_leader_or_follower, 6,
              "Fetch v0-5 clients treat KAFKA_STORAGE_ERROR as fatal; NOT_LEADER_OR_FOLLOWER "
              "makes them refresh metadata and retry"),
    Downgrade(ApiKey.OFFSET_COMMIT, ErrorCode.group_id_not_found, ErrorCode.illegal_generation,
              9, "KIP-848: OffsetCommit v9 is the first to return GROUP_ID_NOT_FOUND"),
    Downgrade(ApiKey.SYNC_GROUP, ErrorCode.coordinator_load_in_progress,
              ErrorCode.rebalance_in_progress, None,
              "a loading coordinator lost the rebalance: the member rejoins without looking "
              "the coordinator up again (older clients do not expect the loading error here)"),
    Downgrade(ApiKey.DELETE_TOPICS, ErrorCode.topic_deletion_disabled, ErrorCode.invalid_request,
              3, "DeleteTopics v3 is the first to know TOPIC_DELETION_DISABLED"),
    Downgrade(ApiKey.INIT_PRODUCER_ID, _FENCED, _EPOCH, 4, _KIP588),
    Downgrade(ApiKey.ADD_PARTITIONS_TO_TXN, _FENCED, _EPOCH, 2, _KIP588),
    Downgrade(ApiKey.ADD_OFFSETS_TO_TXN, _FENCED, _EPOCH, 2, _KIP588),
    Downgrade(ApiKey.END_TXN, _FENCED, _EPOCH, 2, _KIP588),
    Downgrade(ApiKey.TXN_OFFSET_COMMIT, _FENCED, _EPOCH, None,
              "KIP-588 left TxnOffsetCommit on INVALID_PRODUCER_EPOCH (the producer's "
              "transaction manager expects it there)"),
    Downgrade(ApiKey.TXN_OFFSET_COMMIT, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available, 2,
              "KAFKA-7296: 0.11-2.0 producers crash on the loading error"),
    Downgrade(ApiKey.TXN_OFFSET_COMMIT, ErrorCode.transaction_abortable,
              ErrorCode.invalid_txn_state, 4,
              "KIP-890: TxnOffsetCommit v4 is the first to know TRANSACTION_ABORTABLE"),
    Downgrade(ApiKey.TXN_OFFSET_COMMIT, ErrorCode.group_id_not_found,
              ErrorCode.illegal_generation, 6,
              "KIP-1319: TxnOffsetCommit v6 is the first to return GROUP_ID_NOT_FOUND"),
    Downgrade(ApiKey.TXN_OFFSET_COMMIT, ErrorCode.stale_member_epoch,
              ErrorCode.illegal_generation, 6,
              "KIP-1319: TxnOffsetCommit v6 is the first to return STALE_MEMBER_EPOCH"),
)

_BY_API: dict[int, tuple[Downgrade, ...]] = {}
for _rule in DOWNGRADES:
    _BY_API[_rule.api] = (*_BY_API.get(_rule.api, ()), _rule)


@cache
def _mapping(api_key: int, version: int) -> dict[int, ErrorCode]:
    return {rule.newer: rule.older for rule in _BY_API.get(api_key, ())
            if rule.applies(version)}


def downgrade(api_key: int, version: int, code: int) -> int:
    """The code to send for ``code`` in an answer to ``api_key`` v``version``."""
    return _mapping(api_key, version).get(code, code)


@cache
def _error_paths(cls: Any) -> tuple[tuple[str, type | None, bool], ...]:
    """(field, nested entity class or None for an error code, is a tuple) of each field of
    ``cls`` that is an error code or holds one."""
    hints = typing.get_type_hints(cls)
    paths: list[tuple[str, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            paths.append((f.name, None, False))
            continue
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            nested, many = args[0], True
        elif dataclasses.is_dataclass(hint):
            nested, many = hint, False
        elif len(args) == 1 and dataclasses.is_dataclass(args[0]):  # an optional struct
            nested, many = args[0], False
        else:
            continue
        entity_class: Any = nested
        if _error_paths(entity_class):
            paths.append((f.name, entity_class, many))
    return tuple(paths)


def _holds(entity: Any, mapping: dict[int, ErrorCode]) -> bool:
    """Whether ``entity`` holds any code of ``mapping`` (mostly not: the only cost most
    answers pay)."""
    for name, nested, many in _error_paths(entity.__class__):
        value = getattr(entity, name)
        if nested is None:
            if value and value in mapping:
                return True
        elif many:
            for item in value:
                if _holds(item, mapping):
                    return True
        elif value is not None and _holds(value, mapping):
            return True
    return False


def _rewrite(entity: Any, mapping: dict[int, ErrorCode]) -> Any:
    changes: dict[str, Any] = {}
    for name, nested, many in _error_paths(entity.__class__):
        value = getattr(entity, name)
        if nested is None:
            if value in mapping:
                changes[name] = mapping[value]
        elif many:
            changes[name] = tuple(_rewrite(item, mapping) for item in value)
        elif value is not None:
            changes[name] = _rewrite(value, mapping)
    return dataclasses.replace(entity, **changes)


def downgrade_response(api_key: int, version: int, response: Any) -> Any:
    """``response`` (a kio response of ``api_key`` v``version``) with every error code the
    version predates mapped down; the same object when nothing changes."""
    mapping = _mapping(api_key, version)
    if not mapping or not dataclasses.is_dataclass(response):
        return response
    if not _holds(response, mapping):
        return response
    return _rewrite(response, mapping)
