"""``databus spark export``: topics -> Parquet, partitioned by topic and event date.

    databus spark export --bootstrap-server HOST:PORT --topic-pattern 'region-a\\..*' \\
        --path /data/orders --checkpoint /data/orders.checkpoint [--available-now]

A Structured Streaming query: the ``databus`` source reads the topics (a list or a pattern:
mirrored topics keep their region prefix, so ``region-a\\..*`` takes all of one region's),
values are decoded (json, msgpack, or Confluent's wire format with ``--format registry``)
into the columns of a declared schema (``--schema``, a Spark DDL string), of a schema
registry subject's latest version (``--subject``, or with ``--format registry`` the topic's
``TOPIC-value``) or of one inferred from a sample of the records, and Spark's file sink
writes Parquet under ``PATH/topic=T/date=D/``.  The checkpoint holds the offsets and the
sink's log of committed files, so a restart (after a crash too) neither loses nor duplicates
rows; read the output with Spark (``spark.read.parquet(PATH)`` honours that log).

Columns: the decoded fields, then ``_partition``, ``_offset``, ``_timestamp`` (the record's
place and Kafka timestamp), ``topic`` and ``date`` (the partition columns).  ``date`` is the
UTC day of ``--event-time FIELD`` (a timestamp, a date, epoch milliseconds or an ISO string),
or of the Kafka timestamp without it.  A value that does not decode (or does not fit the
schema) gives a row of nulls with its place, so nothing is lost silently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

META = ("_partition", "_offset", "_timestamp", "topic", "date")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                        help="the cluster to read (kafka.bootstrap.servers)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", action="append", help="a topic to export (repeatable)")
    what.add_argument("--topic-pattern", metavar="REGEX",
                      help="export every topic matching REGEX (whole name), e.g. 'region-a\\..*'")
    parser.add_argument("--path", required=True, help="output directory (Parquet)")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory: keep it to resume where the last run ended")
    parser.add_argument("--format", choices=("json", "msgpack", "registry"), default="json",
                        help="how values are encoded (default: json); registry: Confluent's "
                        "wire format (AvroSerializer, JSONSerializer, typed streams), each "
                        "value decoded with the schema its id names")
    schema = parser.add_mutually_exclusive_group()
    schema.add_argument("--schema", metavar="DDL",
                        help="the values' columns as Spark DDL, e.g. 'id long, amount double, "
                        "at timestamp' (default: from --subject, else inferred from a sample)")
    schema.add_argument("--subject", metavar="SUBJECT",
                        help="the values' columns from this schema registry subject's latest "
                        "version (Avro or JSON Schema); with --format registry the default is "
                        "TOPIC-value of the one --topic (TopicNameStrategy)")
    parser.add_argument("--schema-registry", metavar="URL", default="http://127.0.0.1:8081",
                        help="the schema registry of --subject / --format registry "
                        "(default: http://127.0.0.1:8081)")
    parser.add_argument("--sample", type=int, default=1000, metavar="N",
                        help="records sampled to infer the schema (default: 1000)")
    parser.add_argument("--event-time", metavar="FIELD",
                        help="value field giving the event time for the date partition "
                        "(default: the Kafka timestamp)")
    parser.add_argument("--starting-offsets", default="earliest",
                        help="where a new export starts: earliest (default), latest or Kafka's "
                        "JSON; a restart resumes from the checkpoint")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="at most N records per micro-batch")
    parser.add_argument("--available-now", action="store_true",
                        help="export what is there now (in micro-batches) and stop")
    parser.add_argument("--trigger-interval", default="10 seconds",
                        help="continuous mode: how often a micro-batch starts (default: 10 seconds)")
    parser.add_argument("--master", default="local[*]",
                        help="Spark master (default: local[*]); e.g. spark://host:7077")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable)")
    parser.add_argument("-X", dest="kafka", action="append", default=[], metavar="KEY=VALUE",
                        help="a client setting, as kafka.KEY for the source (repeatable)")
    parser.add_argument("--fail-on-data-loss", choices=("true", "false"), default="true",
                        help="fail when records are gone before they were exported (default: true)")


def run(args: argparse.Namespace) -> int:
    from databus.client import parse_overrides

    try:
        kafka = parse_overrides(args.kafka)
        confs = parse_overrides(args.conf)
    except ValueError as exc:
        print(f"databus spark export: {exc}", file=sys.stderr)
        return 2
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        print(f"databus spark export needs the spark extra ({exc}): "
              "pip install 'databus[spark]'", file=sys.stderr)
        return 2
    spark, owned = _session(args.master, confs)
    try:
        return Export(spark, args, kafka).run()
    except (ValueError, RuntimeError) as exc:
        print(f"databus spark export: {exc}", file=sys.stderr)
        return 1
    finally:
        if owned:
            spark.stop()


def _session(master: str, confs: dict[str, str]):
    """(session, whether we made it): inside a running Spark application (a notebook, a
    test), its session is used and left running."""
    # Spark's Python workers must run this interpreter (the one with databus installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    builder = (SparkSession.builder.master(master).appName("databus-export")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in confs.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True


class Export:
    def __init__(self, spark, args: argparse.Namespace, kafka: dict[str, str]) -> None:
        import databus_spark

        databus_spark.register(spark)
        self.spark = spark
        self.args = args
        self.options = {"kafka.bootstrap.servers": args.bootstrap_server,
                        "failOnDataLoss": args.fail_on_data_loss}
        self.options.update({f"kafka.{k}": v for k, v in kafka.items()})
        if args.topic:
            self.options["subscribe"] = ",".join(args.topic)
        else:
            self.options["subscribePattern"] = args.topic_pattern
        self.subject = args.subject
        if args.format == "registry" and self.subject is None:
            if not args.topic or len(args.topic) != 1:
                raise ValueError("--format registry needs --subject unless one --topic names "
                                 "the topic (whose subject is TOPIC-value)")
            self.subject = f"{args.topic[0]}-value"
        if args.format == "registry" and args.schema:
            raise ValueError("--format registry takes the columns from the subject: no --schema")

    # -- the schema of the values -------------------------------------------------------

    def schema(self):
        from pyspark.sql.types import StructType

        if self.args.schema:
            schema = StructType.fromDDL(self.args.schema)
        elif self.subject is not None:
            schema = self.subject_schema()
        else:
            schema = self.infer_schema()
        clash = [f.name for f in schema.fields if f.name in META]
        if clash:
            raise ValueError(f"value field(s) {', '.join(clash)} clash with the export's own "
                             f"columns {', '.join(META)}: rename them in --schema")
        return schema

    def subject_schema(self):
        """The columns of the subject's latest version (registry.py), no sampling."""
        from pyspark.sql.types import StructType

        from . import registry

        found = registry.latest(self.args.schema_registry, self.subject)
        schema_type = found.get("schemaType") or "AVRO"
        schema = registry.spark_type(schema_type, found["schema"])
        if not isinstance(schema, StructType):
            raise ValueError(f"subject {self.subject!r} is not a record/object schema")
        if self.args.format == "registry":
            self.options.update({"valueFormat": schema_type.lower(),
                                 "valueSubject": self.subject,
                                 "schema.registry.url": self.args.schema_registry})
        print(f"columns from subject {self.subject} version {found.get('version')} "
              f"(id {found.get('id')}, {schema_type})", flush=True)
        return schema

    def infer_schema(self):
        """The columns of up to --sample values, spread over the partitions, as Arrow infers
        them (fields missing from some records are nullable)."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_type

        from . import cluster, planning
        from .options import parse_source_options

        opts = parse_source_options(self.options, streaming=False)
        snap = cluster.snapshot(opts)
        per = max(1, self.args.sample // max(1, len(snap.partitions)))
        end = {tp: min(snap.latest[tp], snap.earliest[tp] + per) for tp in snap.partitions}
        if not any(end[tp] > snap.earliest[tp] for tp in snap.partitions):
            raise ValueError("no records to infer the values' schema from: pass --schema")
        sample = (self.spark.read.format("databus").options(**self.options)
                  .option("startingOffsets", json.dumps(planning.to_json(snap.earliest)))
                  .option("endingOffsets", json.dumps(planning.to_json(end)))
                  .load().select("value").collect())
        decode = DECODERS[self.args.format]
        values = []
        for row in sample:
            try:
                value = decode(row["value"])
            except Exception:  # noqa: BLE001 - a bad sample record just does not count
                value = None
            if isinstance(value, dict):
                values.append(value)
        if not values:
            raise ValueError(f"none of {len(sample)} sampled values is a {self.args.format} "
                             "object: pass --schema, or check --format")
        arrow_type = pa.array(values).type
        return from_arrow_type(arrow_type)

    # -- the query ----------------------------------------------------------------------

    def frame(self, schema):
        from pyspark.sql import functions as F

        raw = (self.spark.readStream.format("databus").options(**self.options)
               .option("startingOffsets", self.args.starting_offsets))
        if self.args.max_offsets_per_trigger:
            raw = raw.option("maxOffsetsPerTrigger", str(self.args.max_offsets_per_trigger))
        raw = raw.load()
        meta = [F.col("partition").alias("_partition"), F.col("offset").alias("_offset"),
                F.col("timestamp").alias("_timestamp"), F.col("topic")]
        if self.args.format == "registry":  # the source decodes: value is a struct
            decoded = raw.select(F.col("value").alias("v"), *meta).select("v.*", *META[:4])
        elif self.args.format == "json":
            decoded = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("v"),
                                 *meta).select("v.*", *META[:4])
        else:
            decoded = _decode_msgpack(raw.select("value", *meta), schema)
        return decoded.withColumn("date", self.event_date(schema))

    def event_date(self, schema):
        from pyspark.sql import functions as F
        from pyspark.sql.types import DateType, NumericType, TimestampType

        field = self.args.event_time
        if field is None:
            return F.to_date(F.col("_timestamp"))
        types = {f.name: f.dataType for f in schema.fields}
        if field not in types:
            raise ValueError(f"--event-time {field!r} is not a field of the values "
                             f"({', '.join(types) or 'none'})")
        kind = types[field]
        if isinstance(kind, (TimestampType, DateType)):
            return F.to_date(F.col(field))
        if isinstance(kind, NumericType):  # epoch milliseconds
            return F.to_date(F.timestamp_millis(F.col(field).cast("long")))
        return F.to_date(F.to_timestamp(F.col(field).cast("string")))

    def run(self) -> int:
        args = self.args
        frame = self.frame(self.schema())
        writer = (frame.writeStream.format("parquet").option("path", args.path)
                  .option("checkpointLocation", args.checkpoint).partitionBy("topic", "date"))
        writer = (writer.trigger(availableNow=True) if args.available_now
                  else writer.trigger(processingTime=args.trigger_interval))
        query = writer.start()
        print(f"export {query.id}: {self._what()} -> {args.path} "
              f"({'available now' if args.available_now else 'continuous'})", flush=True)
        shown = -1
        try:
            while query.isActive:
                query.awaitTermination(0.5)
                shown = self._progress(query, shown)
        except KeyboardInterrupt:
            print("stopping (the checkpoint keeps the position)", flush=True)
            query.stop()
        shown = self._progress(query, shown)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        return 0

    def _what(self) -> str:
        return (f"topics {self.options['subscribe']}" if "subscribe" in self.options
                else f"topics matching {self.options['subscribePattern']}")

    @staticmethod
    def _progress(query, shown: int) -> int:
        for p in query.recentProgress:
            if p["batchId"] <= shown:
                continue
            shown = p["batchId"]
            print(progress_line(p), flush=True)
        return shown


def progress_line(progress) -> str:
    """``batch 3: 1200 rows, 2400 rows/s, lag 15`` from a StreamingQueryProgress."""
    rows = progress["numInputRows"]
    ms = progress["durationMs"].get("triggerExecution") or 0
    rate = rows / (ms / 1000) if ms else 0.0
    lag = "?"
    sources = progress["sources"]
    if sources:
        from .planning import from_json
        from .planning import lag as offsets_lag

        latest, end = sources[0]["latestOffset"], sources[0]["endOffset"]
        if latest and end:
            lag = str(offsets_lag(from_json(end), from_json(latest)))
    return f"batch {progress['batchId']}: {rows} rows, {rate:.0f} rows/s, lag {lag}"


# -- decoding ---------------------------------------------------------------------------------

def _json(value: bytes | None):
    return None if value is None else json.loads(value)


def _msgpack(value: bytes | None):
    import msgpack

    return None if value is None else msgpack.unpackb(value, raw=False, timestamp=3)


DECODERS = {"json": _json, "msgpack": _msgpack}


def _decode_msgpack(frame, schema):
    """msgpack values -> the schema's columns, by a Python UDF (mapInArrow and Arrow UDFs
    would need pandas on every worker)."""
    from pyspark.sql import functions as F

    decode = F.udf(_decode_or_none, schema, useArrow=False)
    meta = [c for c in frame.columns if c != "value"]
    return frame.select(decode("value").alias("v"), *meta).select("v.*", *meta)


def _decode_or_none(value):
    try:
        decoded = _msgpack(value)
    except Exception:  # noqa: BLE001 - an undecodable value becomes a row of nulls
        return None
    return decoded if isinstance(decoded, dict) else None
