"""The ``databus`` sink: ``df.write.format("databus")`` and ``writeStream.format("databus")``.

Spark's commit protocol for a Python data source (docs/spark.md, "Writing"): each task's
``write(batches)`` runs in an executor and returns a commit message; when every task has
succeeded the driver calls ``commit(messages)`` (a batch job) or ``commit(messages,
batchId)`` (a micro-batch), else ``abort``.  A batch writer is pickled from the driver into
the tasks and into the commit; a stream writer is made afresh for each commit, so nothing
but the options and the messages carries state between them.

Plain (the default): at least once, as Kafka's sink.  ``exactlyOnce=true``: each task writes
in a Kafka transaction of its own, which the driver's commit commits (two-phase; the
micro-batch's decision record, commit.py, makes a replayed micro-batch write nothing
twice).  The I/O is produce.py's.
"""

from __future__ import annotations

import logging
import uuid

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from . import commit, produce
from .cluster import producer_config
from .options import OptionError, parse_sink_options

log = logging.getLogger("databus_spark")

_COLUMN_TYPES = {
    "key": (BinaryType, StringType),
    "value": (BinaryType, StringType),
    "topic": (StringType,),
    "partition": (IntegerType,),
}
# What Spark sets on every task of a micro-batch (StreamExecution's local properties):
# the batch id and the query's id, which the checkpoint keeps across restarts.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """The Kafka sink's rules for the DataFrame being written (other columns are ignored)."""
    fields = {f.name.lower(): f for f in schema.fields}
    if "value" not in fields:
        raise OptionError("the DataFrame to write needs a 'value' column (binary or string)")
    if topic_option is None and "topic" not in fields:
        raise OptionError("the DataFrame to write needs a 'topic' column, or set the option 'topic'")
    for name, types in _COLUMN_TYPES.items():
        f = fields.get(name)
        if f is not None and not isinstance(f.dataType, types):
            allowed = " or ".join(t.typeName() for t in (ty() for ty in types))
            raise OptionError(
                f"column '{name}' must be {allowed}, got {f.dataType.simpleString()}"
            )
    headers = fields.get("headers")
    if headers is not None and headers.dataType.simpleString() != "array<struct<key:string,value:binary>>":
        raise OptionError("column 'headers' must be array<struct<key:string,value:binary>>, got "
                          + headers.dataType.simpleString())


class WrittenMessage(WriterCommitMessage):
    """A task's commit message: how many records, and its open transaction if any."""

    def __init__(self, result: produce.TaskResult, marker_group: str | None = None) -> None:
        self.result = result
        self.marker_group = marker_group

    @property
    def records(self) -> int:
        return self.result.records


def _results(messages) -> list[produce.TaskResult]:
    return [m.result for m in messages if m is not None]


class _Writer:
    def __init__(self, options, schema: StructType) -> None:
        self.opts = parse_sink_options(options)
        producer_config(self.opts.kafka)  # a bad kafka.* option fails here, not in a task
        check_sink_schema(schema, self.opts.topic)

    def _task(self):
        from pyspark import TaskContext

        return TaskContext.get()

    def _abort(self, messages, group: str | None) -> None:
        """Abort the transactions of the tasks that reported one, and fence the ids of those
        that did not (Spark gives one message per task, None for a failed one)."""
        if not self.opts.exactly_once:
            return
        produce.abort(self.opts.bootstrap_servers, self.opts.kafka, _results(messages))
        if group is not None:
            produce.fence(self.opts.bootstrap_servers, self.opts.kafka, [
                commit.transactional_id(group, task)
                for task, m in enumerate(messages) if m is None])


class DatabusWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("databus")``.  With exactlyOnce, the job's tasks write in
    transactions (ids ``{prefix}-{job}-{task}``, a job id drawn here, on the driver, and
    pickled into every task) that the job commit commits: a failed job leaves nothing
    visible to read_committed readers; a retried task fences the failed attempt's."""

    def __init__(self, options, schema: StructType) -> None:
        super().__init__(options, schema)
        self.job = uuid.uuid4().hex[:16]

    @property
    def _group(self) -> str:
        return f"{self.opts.transactional_id_prefix}-{self.job}"

    def write(self, iterator):
        opts = self.opts
        tid = None
        if opts.exactly_once:
            tid = commit.transactional_id(self._group, self._task().partitionId())
        return WrittenMessage(produce.write_task(
            opts.bootstrap_servers, opts.kafka, iterator, opts.topic, transactional_id=tid))

    def commit(self, messages) -> None:
        results = _results(messages)
        if self.opts.exactly_once:
            produce.commit_job(self.opts.bootstrap_servers, self.opts.kafka, results)
        log.info("wrote %d records", sum(r.records for r in results))

    def abort(self, messages) -> None:
        self._abort(messages, self._group)
        if not self.opts.exactly_once:
            log.warning("write aborted: records already delivered stay in the topics")


class DatabusStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("databus")``.  With exactlyOnce, each micro-batch's tasks
    write in transactions (ids ``{prefix}-{queryId}-{task}``, the same in every run of the
    query) that ``commit(messages, batchId)`` commits after recording the decision in the
    marker group ``{prefix}-{queryId}`` (commit.py): a replayed micro-batch is written once."""

    def write(self, iterator):
        opts = self.opts
        if not opts.exactly_once:
            return WrittenMessage(produce.write_task(
                opts.bootstrap_servers, opts.kafka, iterator, opts.topic))
        task = self._task()
        batch_id, query_id = (task.getLocalProperty(BATCH_ID_PROPERTY),
                              task.getLocalProperty(QUERY_ID_PROPERTY))
        if batch_id is None or query_id is None:
            raise RuntimeError("exactlyOnce: Spark did not say which micro-batch this task "
                               f"writes (task properties {BATCH_ID_PROPERTY}, "
                               f"{QUERY_ID_PROPERTY})")
        group = f"{opts.transactional_id_prefix}-{query_id}"
        result = produce.write_task(
            opts.bootstrap_servers, opts.kafka, iterator, opts.topic,
            transactional_id=commit.transactional_id(group, task.partitionId()),
            marker_group=group, batch_id=int(batch_id))
        return WrittenMessage(result, group)

    def commit(self, messages, batchId: int) -> None:
        if not self.opts.exactly_once:
            return
        groups = {m.marker_group for m in messages if m is not None}
        for group in groups:  # one: the query's
            produce.commit_micro_batch(self.opts.bootstrap_servers, self.opts.kafka, group,
                                       batchId, _results(messages))

    def abort(self, messages, batchId: int) -> None:
        # the query's group is in the messages of the tasks that succeeded; with none, the
        # restarted query's tasks fence the failed ones' ids
        groups = {m.marker_group for m in messages if m is not None}
        self._abort(messages, next(iter(groups), None))
        if not self.opts.exactly_once:
            log.warning("micro-batch %s aborted: records already delivered stay in the "
                        "topics", batchId)
