"""The broker's side of KIP-714 per client instance: which subscription each client gets,
when it may push, and what a push becomes (Kafka's ClientMetricsManager rules).

GetTelemetrySubscriptions: a client sending the zero UUID gets a new instance id.  Its
subscription is the union of the prefixes of every subscription matching its identity
(client id, software name and version from its ApiVersions, source address and port), at
the shortest interval; none matching: no metrics, asked again after the default 5 minutes.
The subscription id is a CRC-32C of (prefixes, interval, instance id), so it changes when
the set does (a push with the old id gets UNKNOWN_SUBSCRIPTION_ID and the client asks
again), and is the same after a broker restart (pushes go on without a new Get).

PushTelemetry errors, as Kafka answers them: INVALID_REQUEST (zero instance id, or a second
terminating push), UNKNOWN_SUBSCRIPTION_ID, THROTTLING_QUOTA_EXCEEDED (a push less than an
interval after the previous one, unless a Get came in between: the client jitters its first
push), TELEMETRY_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD (not OTLP).  A
refused push changes nothing but that client's timestamps.

Cumulative temporality is asked for (``delta_temporality`` false, where Kafka asks for
deltas): a Prometheus counter is a running total, so a lost push loses nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import crc32c

from databus.protocol.errors import ErrorCode

from . import otlp
from .series import SeriesStore
from .subscriptions import ALL_METRICS, DEFAULT_INTERVAL_MS, SubscriptionStore

TELEMETRY_MAX_BYTES = 1024 * 1024
ZERO_UUID = uuid.UUID(int=0)
# An instance nobody hears from is forgotten after this many intervals (at least a minute).
INSTANCE_EXPIRY_INTERVALS = 3
MIN_INSTANCE_EXPIRY_S = 60.0
SWEEP_EVERY_S = 1.0
# Kafka's cache of client instances is an LRU of this size: clients beyond it are forgotten,
# least recently heard from first (they get a subscription again when they ask, with the same id)
MAX_INSTANCES = 16384


@dataclass
class Instance:
    instance_id: uuid.UUID
    identity: dict[str, str]
    store_version: int
    metrics: tuple[str, ...]   # as sent to the client: () none, ("",) all
    interval_ms: int
    subscription_id: int
    last_get: float | None = None
    last_push: float | None = None
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.none
    seen: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def interval_s(self) -> float:
        return self.interval_ms / 1000.0


@dataclass(frozen=True)
class SubscriptionAnswer:
    error: ErrorCode
    instance_id: uuid.UUID
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    accepted_compression: tuple[int, ...] = otlp.ACCEPTED_COMPRESSION
    max_bytes: int = TELEMETRY_MAX_BYTES
    delta_temporality: bool = False


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance: uuid.UUID) -> int:
    digest = crc32c.crc32c(f"{','.join(metrics)}|{interval_ms}|{instance}".encode())
    return digest - (1 << 32) if digest >= 1 << 31 else digest  # an int32 on the wire


class ClientMetricsManager:
    def __init__(self, store: SubscriptionStore, series: SeriesStore | None = None,
                 max_bytes: int = TELEMETRY_MAX_BYTES) -> None:
        self.store = store
        self.series = series or SeriesStore()
        self.max_bytes = max_bytes
        self.instances: dict[uuid.UUID, Instance] = {}
        self.pushes: dict[str, int] = {}  # outcome name -> count, for the broker's metrics
        self._next_sweep = float("-inf")

    def _subscribe(self, instance_id: uuid.UUID, identity: Mapping[str, str]) -> Instance:
        ident = dict(identity, client_instance_id=str(instance_id))
        matched = self.store.matching(ident)
        prefixes = sorted({p for sub in matched for p in sub.metrics})
        if ALL_METRICS in prefixes:
            metrics: tuple[str, ...] = ("",)
        else:
            metrics = tuple(prefixes)
        interval = min((sub.interval_ms for sub in matched), default=DEFAULT_INTERVAL_MS)
        if not metrics:
            interval = DEFAULT_INTERVAL_MS
        return Instance(instance_id, ident, self.store.version, metrics, interval,
                        subscription_id(metrics, interval, instance_id))

    def _instance(self, instance_id: uuid.UUID, identity: Mapping[str, str]) -> Instance:
        """The known instance, refreshed if the subscriptions changed since."""
        known = self.instances.pop(instance_id, None)  # re-inserted last: an LRU order
        if known is not None and known.store_version == self.store.version:
            self.instances[instance_id] = known
            return known
        fresh = self._subscribe(instance_id, identity)
        if known is not None:  # keep its timing across a subscription change
            fresh.last_get, fresh.last_push = known.last_get, known.last_push
            fresh.terminating, fresh.last_error = known.terminating, known.last_error
        if known is None and len(self.instances) >= MAX_INSTANCES:
            oldest = next(iter(self.instances))
            del self.instances[oldest]
            self.series.drop(str(oldest))
        self.instances[instance_id] = fresh
        return fresh

    def get_subscriptions(self, instance_id: uuid.UUID | None, identity: Mapping[str, str],
                          now: float) -> SubscriptionAnswer:
        self.expire(now)
        if instance_id is None or instance_id == ZERO_UUID:
            instance_id = uuid.uuid4()
        inst = self._instance(instance_id, identity)
        inst.seen = now
        error = ErrorCode.none
        last = max((t for t in (inst.last_get, inst.last_push) if t is not None), default=None)
        if (last is not None and now - last < inst.interval_s
                and inst.last_error not in (ErrorCode.unknown_subscription_id,
                                            ErrorCode.unsupported_compression_type)):
            error = ErrorCode.throttling_quota_exceeded
        else:
            inst.last_get = now
        inst.last_error = error
        return SubscriptionAnswer(error, instance_id, inst.subscription_id, inst.metrics,
                                  inst.interval_ms)

    def push(self, instance_id: uuid.UUID | None, sub_id: int, terminating: bool,
             compression: int, payload: bytes, identity: Mapping[str, str],
             now: float) -> tuple[ErrorCode, str | None]:
        error, message = self._push(instance_id, sub_id, terminating, compression, payload,
                                    identity, now)
        self.pushes[error.name] = self.pushes.get(error.name, 0) + 1
        return error, message

    def _push(self, instance_id, sub_id, terminating, compression, payload, identity, now):
        self.expire(now)
        if instance_id is None or instance_id == ZERO_UUID:
            return ErrorCode.invalid_request, "the client instance id is zero"
        inst = self._instance(instance_id, identity)
        inst.seen = now

        def refuse(code: ErrorCode, message: str):
            inst.last_error = code
            return code, message

        if inst.subscription_id != sub_id:
            return refuse(ErrorCode.unknown_subscription_id,
                          f"subscription {sub_id} is not this client's current one "
                          f"({inst.subscription_id}): ask GetTelemetrySubscriptions again")
        if terminating and inst.terminating:
            return refuse(ErrorCode.invalid_request, "the client already said it terminates")
        previous = max((t for t in (inst.last_push, inst.last_get) if t is not None),
                       default=None)
        early = (previous is not None and now - previous < inst.interval_s
                 and not (inst.last_get is not None
                          and (inst.last_push is None or inst.last_get > inst.last_push)))
        if early and not terminating:
            return refuse(ErrorCode.throttling_quota_exceeded,
                          f"a push {now - previous:.3f}s after the last, before the "
                          f"{inst.interval_ms} ms interval")
        inst.last_push = now
        inst.terminating = terminating
        if len(payload) > self.max_bytes:
            return refuse(ErrorCode.telemetry_too_large,
                          f"{len(payload)} bytes, over {self.max_bytes}")
        try:
            data = otlp.decompress(payload, compression, 16 * self.max_bytes)
            points = otlp.decode(data, inst.metrics)
        except otlp.UnsupportedCompression as exc:
            return refuse(ErrorCode.unsupported_compression_type, str(exc))
        except otlp.MalformedMetrics as exc:
            return refuse(ErrorCode.invalid_record, str(exc))
        inst.last_error = ErrorCode.none
        key = str(instance_id)
        if terminating:
            self.series.drop(key)  # gone with the client, not a few intervals later
        elif inst.metrics:
            self.series.update(key, inst.identity.get("client_id", ""), points, now,
                               inst.interval_s)
        return ErrorCode.none, None

    def expire(self, now: float) -> None:
        """Forget idle instances and their series: swept at most once a second, not at
        every request (a sweep walks every instance)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_S
        self.series.expire(now)
        stale = [i for i, inst in self.instances.items()
                 if now - inst.seen > max(INSTANCE_EXPIRY_INTERVALS * inst.interval_s,
                                          MIN_INSTANCE_EXPIRY_S)]
        for instance_id in stale:
            del self.instances[instance_id]
            self.series.drop(str(instance_id))
