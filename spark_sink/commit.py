"""The exactly-once writer's commit decision, as it is kept on the cluster: pure Python.

A streaming micro-batch is committed in two phases.  Each task writes its rows in a
transaction of its own and leaves it open (prepared); when every task has succeeded, Spark
calls the writer's ``commit(messages, batchId)`` on the driver, which first records the
*decision* (batch id and each task's transaction: producer id and epoch) and then commits
the transactions one by one.  If the driver dies in between, Spark replays the micro-batch
after the restart: its tasks find the decision for their batch id and write nothing, and
the replay's ``commit`` finishes the recorded transactions (EndTxn again is harmless for
those already committed).  Without a decision, nothing of the batch was committed: the
replay's tasks take the same transactional ids, which fences and aborts what the crashed run
left open, and write the rows afresh.

The decision lives in the committed offsets of a marker group (``{prefix}-{queryId}``), as
offset ``batchId + 1`` with the transactions in the offset's metadata string, on partitions
of a topic the batch wrote: the only place every Kafka cluster lets a client keep a small
durable record without creating a topic.  Kafka caps metadata at offset.metadata.max.bytes
(4096 by default), so a decision of many tasks is split into chunks over partitions
0..n-1 of that topic, all committed in one OffsetCommit (one append on the coordinator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from databus.client import PreparedTransaction, TopicPartition

# Kafka's default offset.metadata.max.bytes; a chunk stays below it.
METADATA_MAX_BYTES = 4096


class DecisionError(ValueError):
    """A recorded decision is unreadable or incomplete, or does not fit the topic."""


@dataclass(frozen=True)
class Decision:
    batch_id: int
    transactions: tuple[PreparedTransaction, ...]


def transactional_id(group: str, task: int) -> str:
    """Task ``task``'s transactional id: the same in every run of the query, so a replayed
    or retried task fences what an earlier attempt left open."""
    return f"{group}-{task}"


def _task_of(group: str, txn: PreparedTransaction) -> int:
    head, _, task = txn.transactional_id.rpartition("-")
    if head != group or not task.isdigit():
        raise DecisionError(f"transactional id {txn.transactional_id!r} is not one of "
                            f"group {group!r}'s tasks")
    return int(task)


def encode(group: str, decision: Decision, topic: str, partitions: int,
           max_bytes: int = METADATA_MAX_BYTES) -> dict[TopicPartition, tuple[int, str]]:
    """The offsets to commit for ``decision``: ``{(topic, i): (batch + 1, metadata)}``.

    Metadata: ``"{batch}|{i}/{n}|{task}:{producer id}:{epoch},..."``."""
    entries = [f"{_task_of(group, t)}:{t.producer_id}:{t.producer_epoch}"
               for t in decision.transactions]
    chunks: list[list[str]] = [[]]
    room = max_bytes - 40  # the header's "batch|i/n|" part
    size = 0
    for entry in entries:
        if chunks[-1] and size + len(entry) + 1 > room:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += len(entry) + 1
    if len(chunks) > partitions:
        raise DecisionError(
            f"the commit record of {len(entries)} tasks needs {len(chunks)} partitions of "
            f"{topic!r}, which has {partitions}: write with fewer tasks (coalesce)")
    n = len(chunks)
    offset = decision.batch_id + 1
    return {(topic, i): (offset, f"{decision.batch_id}|{i}/{n}|{','.join(chunk)}")
            for i, chunk in enumerate(chunks)}


def decode(group: str, committed: Mapping[TopicPartition, tuple[int, str]]) -> Decision | None:
    """The latest decision among a marker group's committed offsets, or None."""
    if not committed:
        return None
    latest = max(offset for offset, _ in committed.values())
    parts: dict[int, str] = {}
    count = None
    for (topic, partition), (offset, metadata) in committed.items():
        if offset != latest:
            continue  # an older decision (another topic, or more chunks then)
        try:
            batch, index, body = metadata.split("|", 2)
            i, n = (int(x) for x in index.split("/"))
            if int(batch) + 1 != offset:
                raise ValueError(f"batch {batch} at offset {offset}")
        except ValueError as exc:
            raise DecisionError(f"marker group {group!r}: unreadable commit record at "
                                f"{topic}-{partition}: {metadata!r} ({exc})") from None
        if count is not None and n != count:
            raise DecisionError(f"marker group {group!r}: chunks of batch {batch} disagree")
        count = n
        parts[i] = body
    if count is None or sorted(parts) != list(range(count)):
        raise DecisionError(f"marker group {group!r}: the commit record of batch "
                            f"{latest - 1} is incomplete ({len(parts)} of {count} chunks)")
    txns = []
    for i in range(count):
        for entry in filter(None, parts[i].split(",")):
            task, pid, epoch = (int(x) for x in entry.split(":"))
            txns.append(PreparedTransaction(transactional_id(group, task), pid, epoch))
    return Decision(latest - 1, tuple(txns))
