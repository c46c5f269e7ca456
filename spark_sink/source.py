"""The ``databus`` PySpark data source: batch and streaming reads and writes.

Spark runs these classes in three kinds of Python process (see docs/spark.md): a planner
that builds the DataSource from the options and asks for the schema; a driver-side process
that plans (``partitions``, and for a stream ``initialOffset`` / ``latestOffset``, kept alive
for the whole query); executor workers that get a pickled reader or writer and run
``read(partition)`` / ``write(batches)``.  Nothing crosses between them but the options and
the InputPartitions, so every connection is opened where it is used, from the options.

The decisions (which offsets, how many per trigger, what counts as data loss) are in
planning.py; the cluster calls in cluster.py; the Arrow layout in arrow.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import arrow, cluster, planning
from .options import OptionError, SourceOptions, parse_source_options
from .writer import DatabusStreamWriter, DatabusWriter

log = logging.getLogger("databus_spark")


class RangePartition(InputPartition):
    """One Spark task: an OffsetRange (its ``value``)."""


class DatabusDataSource(DataSource):
    """``spark.read.format("databus")``, ``readStream``, ``write`` and ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "databus"

    def schema(self):
        # load() calls this before Spark says batch or stream: check what is wrong either way
        # here, the rest in reader() / streamReader().
        opts = parse_source_options(self.options, streaming=None)
        if opts.value_format is None:
            return arrow.schema_ddl(opts.include_headers)
        return _typed_schema(opts)

    def reader(self, schema: StructType) -> DataSourceReader:
        return DatabusReader(parse_source_options(self.options, streaming=False),
                             _value_type(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DatabusStreamReader(parse_source_options(self.options, streaming=True),
                                   _value_type(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DatabusWriter:
        return DatabusWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DatabusStreamWriter:
        return DatabusStreamWriter(self.options, schema)


def _typed_schema(opts: SourceOptions) -> StructType:
    """Kafka's columns with ``value`` a struct of the subject's latest version."""
    from . import registry

    found = registry.latest(opts.registry_url, opts.value_subject or "")
    schema_type = found.get("schemaType") or "AVRO"
    if schema_type != registry.VALUE_FORMATS[opts.value_format or ""]:
        raise OptionError(f"option 'valueFormat' is {opts.value_format} but subject "
                          f"{opts.value_subject!r} holds a {schema_type} schema")
    value = registry.spark_type(schema_type, found["schema"])
    if not isinstance(value, StructType):
        raise OptionError(f"subject {opts.value_subject!r} is not a record/object schema")
    # (built by hand: the planner process has no Spark session to parse DDL with)
    fields = [StructField("key", BinaryType()), StructField("value", value),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if opts.include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _value_type(schema: StructType) -> StructType | None:
    """The struct of a typed ``value`` column (valueFormat), None for Kafka's binary."""
    value = schema["value"].dataType if "value" in schema.fieldNames() else None
    return value if isinstance(value, StructType) else None


# -- reading --------------------------------------------------------------------------------

def _read(opts: SourceOptions, partition: InputPartition,
          value_type: StructType | None = None) -> Iterator:
    rng = partition.value
    if rng is None:  # Spark's stand-in partition for an empty plan
        return
    decoder = None
    if value_type is not None:
        from .registry import ValueDecoder

        decoder = ValueDecoder(opts.registry_url, value_type)
    config = cluster.consumer_config(opts.kafka)
    for columns, types in cluster.fetch_range(
        opts.bootstrap_servers, config, rng,
        fail_on_data_loss=opts.fail_on_data_loss, poll_timeout_ms=opts.poll_timeout_ms,
    ):
        if types:
            if isinstance(columns, cluster.Buffered):
                batch = arrow.from_buffers(rng.topic, rng.partition, columns.buffers, types,
                                           opts.include_headers)
            else:
                with cluster.no_cyclic_gc():
                    batch = arrow.record_batch(rng.topic, rng.partition, columns, types,
                                               opts.include_headers)
            del columns, types  # freed by reference counting, before Spark asks for more
            if decoder is not None:
                batch = arrow.with_value_column(batch, decoder.column(
                    batch.column("value").to_pylist()))
            yield batch


def _warn(warnings: list[str]) -> None:
    for message in warnings:
        log.warning("%s (failOnDataLoss=false: continuing)", message)


class DatabusReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, value_type: StructType | None = None) -> None:
        self.opts = opts
        self.value_type = value_type
        cluster.consumer_config(opts.kafka)  # a bad kafka.* option fails here, not in a task

    def partitions(self):
        opts = self.opts
        snap = cluster.snapshot(opts, lambda parts: [
            planning.start_requests(opts.starting, parts, "startingOffsets"),
            planning.start_requests(opts.ending, parts, "endingOffsets"),
        ])
        start = planning.resolve_offsets(
            opts.starting, snap.partitions, snap.looked_up[0], snap.latest,
            strict=opts.starting_timestamp_strict, display="startingOffsets",
        )
        # an ending timestamp with no record at or after it ends at latest (Kafka's rule)
        end = planning.resolve_offsets(
            opts.ending, snap.partitions, snap.looked_up[1], snap.latest,
            strict=False, display="endingOffsets",
        )
        for tp in snap.partitions:
            if end[tp] < start[tp] and opts.starting.kind == "offsets" == opts.ending.kind:
                raise OptionError(
                    f"starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending "
                    f"offset {end[tp]}"
                )
        ranges, warnings = planning.plan_ranges(
            start, end, snap.earliest, fail_on_data_loss=opts.fail_on_data_loss
        )
        _warn(warnings)
        ranges = planning.split_for_min_partitions(ranges, opts.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition):
        return _read(self.opts, partition, self.value_type)


class DatabusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Kafka's JSON (``{"topic": {"0": 42}}``), kept only in Spark's checkpoint:
    nothing is committed to the cluster, so a restart resumes exactly where the checkpoint
    says.  Partitions that appear while the query runs are read from their earliest offset."""

    def __init__(self, opts: SourceOptions, value_type: StructType | None = None) -> None:
        self.opts = opts
        self.value_type = value_type
        cluster.consumer_config(opts.kafka)
        self._available_now_target: dict | None = None
        self._latest: dict | None = None

    def initialOffset(self) -> dict:
        opts = self.opts
        snap = cluster.snapshot(
            opts, lambda parts: [planning.start_requests(opts.starting, parts, "startingOffsets")]
        )
        start = planning.resolve_offsets(
            opts.starting, snap.partitions, snap.looked_up[0], snap.latest,
            strict=opts.starting_timestamp_strict, display="startingOffsets",
        )
        return planning.to_json(start)

    def getDefaultReadLimit(self):
        limit = self.opts.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # AvailableNow reads what is there now, in as many micro-batches as the limit makes,
        # and nothing that arrives meanwhile.
        self._available_now_target = cluster.snapshot(self.opts).latest

    def latestOffset(self, start: dict, limit) -> dict:
        snap = cluster.snapshot(self.opts)
        self._latest = snap.latest
        begin = planning.from_json(start)
        latest = snap.latest
        if self._available_now_target is not None:
            latest = planning.cap(latest, self._available_now_target)
        new = {tp: snap.earliest[tp] for tp in latest if tp not in begin}
        if isinstance(limit, ReadMaxRows):
            end = planning.rate_limit(begin, latest, limit.max_rows, new)
        else:
            end = dict(latest)
        return planning.to_json(end)

    def reportLatestOffset(self):
        return None if self._latest is None else planning.to_json(self._latest)

    def partitions(self, start: dict, end: dict):
        begin, until = planning.from_json(start), planning.from_json(end)
        if begin == until:
            return []
        earliest = cluster.earliest_offsets(self.opts, sorted(until))
        ranges, warnings = planning.plan_ranges(
            begin, until, earliest, fail_on_data_loss=self.opts.fail_on_data_loss,
            new_partitions_from_zero=True,
        )
        _warn(warnings)
        ranges = planning.split_for_min_partitions(ranges, self.opts.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition):
        return _read(self.opts, partition, self.value_type)

    def commit(self, end: dict) -> None:
        pass  # the checkpoint is the source of truth; nothing goes to the cluster

    def __getstate__(self):
        # what the driver-side process learned is of no use to an executor
        return {"opts": self.opts, "value_type": self.value_type,
                "_available_now_target": None, "_latest": None}

