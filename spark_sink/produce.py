"""The databus sink's I/O: what a write task and the driver's commit ask the cluster.

Executor side: ``write_task`` sends one Spark task's rows with databus's producer, either
plainly (at least once, as Kafka's sink) or in a transaction of the task's own that it
flushes and leaves open (``Producer.prepare_transaction``).  Driver side:
``commit_job`` / ``commit_micro_batch`` commit the tasks' transactions when Spark commits
the write; ``abort`` aborts them.  The decision record that makes a replayed micro-batch
idempotent is commit.py's (the format) and this module's (reading and writing it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from databus.client import (
    Admin,
    Cluster,
    PreparedTransaction,
    Producer,
    ProducerConfig,
    complete_transactions,
)

from . import commit
from .cluster import _run, admin_config, producer_config

log = logging.getLogger("databus_spark")


@dataclass(frozen=True)
class TaskResult:
    records: int
    topics: tuple[str, ...] = ()
    prepared: PreparedTransaction | None = None
    skipped: bool = False  # a replayed micro-batch already committed: nothing written


async def _send_all(producer: Producer, batches, topic: str | None) -> tuple[int, set[str]]:
    """Send the rows of Arrow ``batches`` (the Kafka sink's columns: value, and optionally
    key, topic, partition, headers; ``topic`` overrides the column) and wait until all are
    delivered; the first delivery error is raised.

    The sender runs at every ``await`` of ``send``, so the blocking pull of the next batch
    from Spark only pauses it between batches."""
    failures: list[BaseException] = []
    sent = 0
    topics: set[str] = set()

    def done(future) -> None:
        exc = future.exception()
        if exc is not None and not failures:
            failures.append(exc)

    for batch in batches:
        n = batch.num_rows
        values, keys = _column(batch, "value", True), _column(batch, "key", True)
        partitions = _column(batch, "partition")
        names = [topic] * n if topic else _column(batch, "topic")
        headers = _column(batch, "headers")
        for i in range(n):
            if names[i] is None:
                raise ValueError("a row to write has a null 'topic' (set the option "
                                 "'topic' or fill the column)")
            hs = headers[i]
            future = await producer.send(
                names[i], values[i], keys[i],
                [(h["key"], h["value"]) for h in hs] if hs else None, partitions[i],
            )
            future.add_done_callback(done)
        topics.update(names if not topic else (topic,))
        sent += n
        if failures:
            raise failures[0]
    await producer.flush()
    if failures:
        raise failures[0]
    return sent, topics


def _column(batch, name: str, payload: bool = False) -> list:
    """Column ``name`` (any case) of an Arrow batch as a list, Nones when absent; string
    payloads are sent as their UTF-8 bytes, as Kafka's sink does."""
    for i, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            values = batch.column(i).to_pylist()
            if payload and batch.schema.types[i] == "string":
                values = [None if v is None else v.encode() for v in values]
            return values
    return [None] * batch.num_rows


def write_task(bootstrap: str, kafka: dict[str, str], batches, topic: str | None, *,
               transactional_id: str | None = None, marker_group: str | None = None,
               batch_id: int | None = None) -> TaskResult:
    """Write one task's rows: plainly without ``transactional_id``; else in a transaction
    left open for the driver's commit.  With ``marker_group`` (a micro-batch), a task whose
    batch the group records as decided writes nothing: the replay of a batch whose commit
    had begun."""
    config = producer_config(kafka)

    async def run() -> TaskResult:
        if marker_group is not None and batch_id is not None:
            async with Admin(bootstrap, admin_config(kafka)) as admin:
                decision = commit.decode(
                    marker_group, await admin.list_group_offsets_and_metadata(marker_group))
            if decision is not None and decision.batch_id >= batch_id:
                for _ in batches:  # Spark hands the rows over all the same
                    pass
                return TaskResult(0, skipped=True)
        if transactional_id is None:
            async with Producer(bootstrap, config) as producer:
                sent, topics = await _send_all(producer, batches, topic)
            return TaskResult(sent, tuple(sorted(topics)))
        txn_config = producer_config({**kafka, "transactional.id": transactional_id})
        async with Producer(bootstrap, txn_config) as producer:
            await producer.init_transactions()  # fences and aborts an earlier attempt's
            producer.begin_transaction()
            try:
                sent, topics = await _send_all(producer, batches, topic)
                prepared = await producer.prepare_transaction()
            except Exception:
                # not left open until transaction.timeout.ms, holding readers back
                with contextlib.suppress(Exception):
                    await producer.abort_transaction()
                raise
        return TaskResult(sent, tuple(sorted(topics)), prepared)

    return _run(run)


async def _complete(bootstrap: str, config: ProducerConfig,
                    prepared: Iterable[PreparedTransaction], ok: bool) -> None:
    cluster = Cluster(bootstrap, config, allow_auto_create=False)
    async with cluster.running():
        await complete_transactions(cluster, config, prepared, ok)


def commit_job(bootstrap: str, kafka: dict[str, str], results: list[TaskResult]) -> None:
    """A batch write's job commit: commit every task's transaction."""
    prepared = [r.prepared for r in results if r.prepared is not None]
    if prepared:
        _run(_complete, bootstrap, producer_config(kafka), prepared, True)


def abort(bootstrap: str, kafka: dict[str, str], results: list[TaskResult]) -> None:
    """Abort the tasks' open transactions (best effort: what is not aborted here is aborted
    by the coordinator after transaction.timeout.ms, or fenced by the next attempt)."""
    prepared = [r.prepared for r in results if r.prepared is not None]
    if prepared:
        try:
            _run(_complete, bootstrap, producer_config(kafka), prepared, False)
        except Exception as exc:  # noqa: BLE001 - the abort's own failure must not hide why
            log.warning("aborting %d transaction(s) failed: %s", len(prepared), exc)


def fence(bootstrap: str, kafka: dict[str, str], transactional_ids: list[str]) -> None:
    """Take each transactional id with a new producer epoch: the coordinator aborts what a
    failed task (one with no commit message: it died, or Spark killed it) left open under it,
    so read_committed readers are not held back until its transaction.timeout.ms."""

    async def run() -> None:
        for tid in transactional_ids:
            async with Producer(bootstrap, producer_config(
                    {**kafka, "transactional.id": tid})) as producer:
                await producer.init_transactions()

    if transactional_ids:
        try:
            _run(run)
        except Exception as exc:  # noqa: BLE001 - the abort's own failure must not hide why
            log.warning("fencing %d failed task(s) failed: %s", len(transactional_ids), exc)


def commit_micro_batch(bootstrap: str, kafka: dict[str, str], marker_group: str, batch_id: int,
                       results: list[TaskResult]) -> int:
    """Commit micro-batch ``batch_id``: record the decision in ``marker_group``, then commit
    the transactions.  In the replay of a batch whose decision was recorded, commit the
    recorded transactions instead (the crashed run may have committed only some).  Returns
    how many transactions were committed."""
    config = producer_config(kafka)
    prepared = [r.prepared for r in results if r.prepared is not None]
    topics = sorted({t for r in results for t in r.topics})

    async def run() -> int:
        async with Admin(bootstrap, admin_config(kafka)) as admin:
            decided = commit.decode(
                marker_group, await admin.list_group_offsets_and_metadata(marker_group))
            if decided is not None and decided.batch_id == batch_id:
                txns = list(decided.transactions)
            elif prepared:
                txns = prepared
                topic = topics[0]
                described = (await admin.describe_topics([topic]))[topic]
                partitions = len(getattr(described, "partitions", ()) or ()) or 1
                await admin.alter_group_offsets(marker_group, commit.encode(
                    marker_group, commit.Decision(batch_id, tuple(txns)), topic, partitions))
            else:
                return 0
        await _complete(bootstrap, config, txns, True)
        return len(txns)

    return _run(run)
