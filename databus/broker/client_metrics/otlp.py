"""The metrics a client pushes (KIP-714): an OpenTelemetry ``MetricsData`` message
(OTLP protobuf), compressed with one of the codecs the broker offered.

Decoded with the OpenTelemetry project's own generated classes (``opentelemetry-proto``,
on protobuf's C parser), and flattened into ``Point``s: gauges and non-monotonic sums as
gauges, monotonic sums as counters (delta or cumulative as the client sent them), a
histogram as its ``_count`` and ``_sum`` counters (the buckets would multiply the series a
client costs; KIP-714's standard metrics are gauges and sums).  Only the names under the
prefixes the client was asked for are kept: the subscription is the operator's budget.
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf.message import DecodeError
from opentelemetry.proto.metrics.v1 import metrics_pb2

from databus.protocol import codecs

# What PushTelemetry accepts, in Kafka's order of preference (the client takes the first it
# supports): zstd, lz4, gzip, snappy.
ACCEPTED_COMPRESSION = (codecs.CODEC_ZSTD, codecs.CODEC_LZ4, codecs.CODEC_GZIP,
                        codecs.CODEC_SNAPPY)
DELTA, CUMULATIVE = 1, 2  # OTLP AggregationTemporality


class MalformedMetrics(ValueError):
    """The payload is not a (compressed) OTLP MetricsData: INVALID_RECORD."""


class UnsupportedCompression(ValueError):
    """A compression type the broker did not offer: UNSUPPORTED_COMPRESSION_TYPE."""


class Point(NamedTuple):
    name: str                             # the OTLP metric name, e.g. org.apache.kafka...
    counter: bool                         # a monotonic sum (else a gauge)
    delta: bool                           # a counter's increment since the last push
    attributes: tuple[tuple[str, str], ...]
    value: float
    help: str


def decompress(payload: bytes, compression: int, max_bytes: int) -> bytes:
    if compression == codecs.CODEC_NONE:
        return payload
    if compression not in ACCEPTED_COMPRESSION:
        raise UnsupportedCompression(f"compression type {compression} is not accepted "
                                     f"(accepted: {list(ACCEPTED_COMPRESSION)})")
    try:
        data = codecs.decompress(compression, payload)
    except Exception as exc:  # noqa: BLE001  (any codec failure is a malformed payload)
        raise MalformedMetrics(f"cannot decompress the {codecs.CODEC_NAMES[compression]} "
                               f"payload: {exc}") from None
    if len(data) > max_bytes:
        raise MalformedMetrics(f"the payload decompresses to {len(data)} bytes, over "
                               f"{max_bytes}")
    return data


def _value(point) -> float:
    kind = point.WhichOneof("value")
    return float(point.as_double if kind == "as_double" else point.as_int)


def _attributes(point) -> tuple[tuple[str, str], ...]:
    out = []
    for kv in point.attributes:
        kind = kv.value.WhichOneof("value")
        if kind in ("string_value", "int_value", "double_value", "bool_value"):
            out.append((kv.key, str(getattr(kv.value, kind))))
    return tuple(sorted(out))


def decode(data: bytes, prefixes: tuple[str, ...]) -> list[Point]:
    """The points of an (uncompressed) MetricsData under ``prefixes`` ("" = all)."""
    message = metrics_pb2.MetricsData()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise MalformedMetrics(f"not an OTLP MetricsData message: {exc}") from None
    points: list[Point] = []
    for resource in message.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                name = metric.name
                if not name.startswith(prefixes):
                    continue
                kind = metric.WhichOneof("data")
                if kind == "gauge":
                    for p in metric.gauge.data_points:
                        points.append(Point(name, False, False, _attributes(p), _value(p),
                                            metric.description))
                elif kind == "sum":
                    data_sum = metric.sum
                    counter = data_sum.is_monotonic
                    delta = counter and data_sum.aggregation_temporality == DELTA
                    for p in data_sum.data_points:
                        points.append(Point(name, counter, delta, _attributes(p), _value(p),
                                            metric.description))
                elif kind == "histogram":
                    delta = metric.histogram.aggregation_temporality == DELTA
                    for p in metric.histogram.data_points:
                        attrs = _attributes(p)
                        points.append(Point(name + ".count", True, delta, attrs,
                                            float(p.count), metric.description))
                        points.append(Point(name + ".sum", True, delta, attrs, p.sum,
                                            metric.description))
    return points
