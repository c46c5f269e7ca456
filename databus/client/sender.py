"""The producer's sender: the trio I/O loop that turns accumulated batches into Produce requests.

Each turn of the loop: expire batches past ``delivery.timeout.ms``; make sure the idempotent
producer has an id; ask the accumulator which brokers have sendable batches; drain one
request per broker that is below ``max.in.flight.requests.per.connection``; start a task per
request; sleep until something changes (a new or full batch, a response, a metadata update,
or the next linger/backoff deadline).  Responses complete the batches' futures, or put them
back for a retry after ``retry.backoff.ms`` (retriable errors, within ``retries`` and
``delivery.timeout.ms``), refreshing metadata when a leader moved or a broker went away.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.entities import build_request, ms
from ..service import latency_trace
from . import errors
from .accumulator import ProducerBatch, RecordAccumulator
from .cluster import Cluster
from .config import ProducerConfig
from .idempotence import IdempotenceState

log = logging.getLogger(__name__)

TXN_V2_PRODUCE_VERSION = 12  # KIP-890: the transaction's partitions join implicitly
_trace = latency_trace.recorder("producer")

# Errors after which the partition's leader may have moved: refresh metadata before retrying.
_METADATA_ERRORS = (
    errors.NotLeaderOrFollowerError,
    errors.UnknownTopicOrPartitionError,
    errors.LeaderNotAvailableError,
    errors.KafkaConnectionError,
    errors.NetworkExceptionError,
    errors.RequestTimedOutError,
)
_PRODUCER_ID_ERRORS = (
    errors.OutOfOrderSequenceNumberError,
    errors.UnknownProducerIdError,
    errors.InvalidProducerEpochError,
)


class Sender:
    """Runs as ``await nursery.start(sender.run)``; ``wakeup()`` whenever readiness may change.

    ``on_batch_done(batch, base_offset, log_append_ms, error)`` completes a batch's futures;
    the sender then returns the batch's memory to the accumulator.
    """

    def __init__(
        self,
        cluster: Cluster,
        accumulator: RecordAccumulator,
        config: ProducerConfig,
        on_batch_done: Callable[[ProducerBatch, int, int, BaseException | None], None],
    ) -> None:
        self.cluster = cluster
        self.acc = accumulator
        self.config = config
        self.on_batch_done = on_batch_done
        self.idempotence = IdempotenceState() if config.enable_idempotence else None
        self.txn_v2 = False  # set by transactions.py when the coordinator takes KIP-890
        # a transactional producer gets its id from init_transactions (transactions.py)
        self.transactional = config.transactional_id is not None
        self.in_flight: dict[int, int] = {}
        self.in_flight_batches: set[ProducerBatch] = set()
        self._wakeup = trio.Event()
        self._metadata_refreshing = False
        self.fatal: BaseException | None = None  # set when no record can ever be sent
        self._generation_of: dict[int, int] = {}  # id(batch) -> idempotence generation
        self.retries = 0  # batches sent again after a retriable failure
        # Delivered batches, for batch-size and compression-rate figures (as Kafka's
        # batch-size-avg / compression-rate-avg, but since start rather than windowed).
        self.batches_delivered = 0
        self.batch_bytes = 0  # as sent: header + (compressed) records
        self.batch_bytes_uncompressed = 0
        self.batch_bytes_max = 0
        # Requests to one broker are written in the order they were drained (trio starts
        # tasks in no particular order): each takes a ticket and writes on its turn.
        self._next_ticket: dict[int, int] = {}
        self._turn: dict[int, int] = {}
        self._turn_events: dict[tuple[int, int], trio.Event] = {}
        cluster.auth_listeners.append(self.wakeup)  # a refused login fails queued records

    def wakeup(self) -> None:
        self._wakeup.set()

    @staticmethod
    def now_ms() -> float:
        return trio.current_time() * 1000.0

    def _leader_of(self, topic: str, partition: int) -> int:
        return self.cluster.leader_for(topic, partition)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await self._run_once(nursery)
        finally:
            self._fail_everything(errors.ProducerClosedError("producer closed before delivery"))

    async def _run_once(self, nursery: trio.Nursery) -> None:
        now = self.now_ms()
        for batch in self.acc.expire(now):
            cause = batch.last_error
            if cause is None and self.cluster.leader_for(batch.topic, batch.partition) < 0:
                cause = "the partition has no leader in the cluster's metadata"
            self._give_up(batch, self._timeout_error(batch, cause))
        auth = self.cluster.authentication_error()
        if auth is not None:
            # A refused login: queued records fail with it now rather than at
            # delivery.timeout.ms (what Kafka's producer reports); the cluster keeps
            # reconnecting, so records sent after the credentials are fixed go out.
            for batch in self.acc.expire(math.inf):
                self._give_up(batch, auth)
        if self.fatal is not None:
            for batch in self.acc.abort_all():
                self._finish(batch, -1, -1, self.fatal)
        idempotence = self.idempotence
        if (idempotence is not None and not idempotence.has_producer_id and self.acc.batches
                and not self.transactional):
            await self._init_producer_id()
            return
        nodes, next_ms, unknown = self.acc.ready(now, self._leader_of)
        if unknown:
            self.request_metadata_refresh()
        limit = self.config.max_in_flight_requests_per_connection
        for node in nodes:
            # Fill the connection's window: each request takes the next batch of each
            # partition, so a busy partition pipelines over several requests.
            while self.in_flight.get(node, 0) < limit:
                batches = self.acc.drain(now, node, self._leader_of, self.config.max_request_size)
                if not batches:
                    break
                self.in_flight[node] = self.in_flight.get(node, 0) + 1
                self.in_flight_batches.update(batches)
                for batch in batches:
                    self._prepare(batch)  # sequences are taken in drain order
                ticket = self._next_ticket.get(node, 0)
                self._next_ticket[node] = ticket + 1
                nursery.start_soon(self._send, node, batches, ticket)
        expiry = self.acc.next_expiry_ms()
        waits = [w for w in (next_ms, None if expiry is None else max(expiry - now, 0)) if w is not None]
        timeout = min(waits) / 1000.0 if waits else self.config.metadata_max_age_ms / 1000.0
        if unknown:
            timeout = min(timeout, self.config.retry_backoff_ms / 1000.0)
        with trio.move_on_after(timeout):
            await self._wakeup.wait()
        self._wakeup = trio.Event()

    # -- idempotence ---------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        try:
            response = await self.cluster.request(
                None,
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            errors.raise_for_code(response.error_code, "InitProducerId")
        except errors.UnsupportedVersionError as exc:
            if self.config.explicitly_set("enable.idempotence"):
                # Asked for explicitly: every record fails rather than going out unprotected.
                self.fatal = errors.UnsupportedVersionError(
                    f"enable.idempotence=true but the cluster cannot give a producer id: {exc}"
                )
                for batch in self.acc.abort_all():
                    self._finish(batch, -1, -1, self.fatal)
                return
            # Idempotence by default only: go on unsequenced, as a non-idempotent producer,
            # rather than turn every record into a timeout.
            log.warning("the cluster has no InitProducerId (%s): idempotence off", exc)
            self.idempotence = None
            return
        except errors.KafkaError as exc:
            # (a refused login is logged by the cluster, and fails the queued records above)
            log.log(logging.DEBUG if isinstance(exc, errors.AuthenticationError)
                    else logging.WARNING, "InitProducerId failed (%s); retrying after backoff",
                    exc)
            await trio.sleep(self.config.retry_backoff_ms / 1000)
            return
        self.idempotence.set_producer_id(int(response.producer_id), int(response.producer_epoch))
        self.acc.reset_sequences()
        log.debug("producer id %s epoch %s", response.producer_id, response.producer_epoch)

    def _prepare(self, batch: ProducerBatch) -> bytes:
        state = self.idempotence
        if state is None:
            if batch.payload is None:
                batch.build(-1, -1, -1)
            return batch.payload
        if batch.payload is not None and self._generation_of.get(id(batch)) != state.generation:
            batch.reset_payload()  # built under an older producer id
        if batch.payload is None:
            seq = state.take_sequence(batch.tp, batch.record_count)
            batch.build(state.producer_id, state.producer_epoch, seq, self.transactional)
            self._generation_of[id(batch)] = state.generation
        return batch.payload

    # -- sending -------------------------------------------------------------------------

    async def _send(self, node: int, batches: list[ProducerBatch], ticket: int) -> None:
        try:
            await self._send_request(node, batches, ticket)
        finally:
            self._end_turn(node, ticket)  # no-op if the write already ended it
            self.in_flight[node] -= 1
            self.wakeup()

    async def _wait_turn(self, node: int, ticket: int) -> None:
        while self._turn.get(node, 0) != ticket:
            event = self._turn_events.setdefault((node, ticket), trio.Event())
            await event.wait()

    def _end_turn(self, node: int, ticket: int) -> None:
        if self._turn.get(node, 0) == ticket:
            self._turn[node] = ticket + 1
            self._turn_events.pop((node, ticket), None)
            event = self._turn_events.pop((node, ticket + 1), None)
            if event is not None:
                event.set()

    async def _send_request(self, node: int, batches: list[ProducerBatch], ticket: int) -> None:
        acks = self.config.acks
        try:
            await self._wait_turn(node, ticket)
            try:
                # An earlier request of a partition here may have failed while this one
                # waited for its turn: its batch is queued again, ahead.  Writing this one
                # now would put the partition's records out of order (and the broker takes
                # any first sequence from a producer it does not know on a partition), so
                # such a batch goes back behind it.
                held = [b for b in batches if self.acc.behind_retry(b)]
                for batch in held:
                    self._retry_or_fail(batch, errors.KafkaConnectionError(
                        f"{batch.topic}-{batch.partition}: an earlier batch is being retried"))
                batches = [b for b in batches if b not in held]
                if not batches:
                    return
                topics: dict[str, list[dict]] = {}
                for batch in batches:
                    topics.setdefault(batch.topic, []).append(
                        {"index": batch.partition, "records": batch.payload})
                fields = {
                    "transactional_id": self.config.transactional_id,
                    "acks": acks,
                    "timeout": self.config.request_timeout_ms,
                    "topic_data": [
                        {"name": t, "partition_data": parts} for t, parts in topics.items()
                    ],
                }
                conn = await self.cluster.connection(node)
                # transactions v2 (KIP-890): Produce v12 joins the partition to the
                # transaction (transactions.py decides, from the coordinator's features)
                version = (TXN_V2_PRODUCE_VERSION if self.txn_v2 and conn.supports(
                    ApiKey.PRODUCE, TXN_V2_PRODUCE_VERSION) else conn.version(ApiKey.PRODUCE))
                body = build_request(ApiKey.PRODUCE, version, fields)
                sent = time.perf_counter() if _trace is not None else 0.0
                pending = await conn.write(body, expect_response=acks != 0)
            finally:
                self._end_turn(node, ticket)
            response = None if pending is None else await conn.wait(pending)
        except errors.KafkaError as exc:
            for batch in batches:
                self._retry_or_fail(batch, exc)
            return
        if acks == 0:
            for batch in batches:
                self._finish(batch, -1, -1, None)
            return
        by_tp = {}
        for topic in response.responses:
            for p in topic.partition_responses:
                by_tp[(topic.name, int(p.index))] = p
        if _trace is not None:
            self._write_trace(batches, by_tp, sent)
        for batch in batches:
            p = by_tp.get(batch.tp)
            if p is None:
                self._retry_or_fail(
                    batch, errors.UnknownServerError(f"no response for {batch.tp} from broker {node}")
                )
                continue
            code = int(p.error_code)
            append_ms = -1 if p.log_append_time is None else ms(p.log_append_time)
            if code == 0:
                self._finish(batch, int(p.base_offset), append_ms, None)
            elif code == errors.DuplicateSequenceNumberError.code:
                # Already written by an earlier attempt whose answer was lost: delivered.
                self._finish(batch, int(p.base_offset), append_ms, None)
            else:
                detail = getattr(p, "error_message", None) or f"{batch.topic}-{batch.partition}"
                self._retry_or_fail(batch, errors.from_code(code, detail))

    def _write_trace(self, batches: list[ProducerBatch], by_tp: dict, sent: float) -> None:
        """One latency-trace line per delivered batch (databus/service/latency_trace.py);
        the batch was opened at trio's clock ``created_ms`` (and its bulk appends stamped on
        it), which is perf_counter plus an offset of trio's choosing."""
        answered = time.perf_counter()
        offset = answered - trio.current_time()
        for batch in batches:
            p = by_tp.get(batch.tp)
            if p is not None and int(p.error_code) == 0:
                appends = ",".join(f"{count}@{ms / 1000.0 + offset!r}"
                                   for count, ms in batch.trace_appends or ())
                _trace.write(batch.topic, batch.partition, int(p.base_offset),
                             batch.record_count, batch.created_ms / 1000.0 + offset, sent,
                             answered, appends)

    def _timeout_error(self, batch: ProducerBatch, cause: BaseException | str | None = None):
        detail = f" (last error: {cause})" if cause else ""
        return errors.DeliveryTimeoutError(
            f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} not delivered "
            f"within delivery.timeout.ms={self.config.delivery_timeout_ms}{detail}"
        )

    def _retry_or_fail(self, batch: ProducerBatch, exc: errors.KafkaError) -> None:
        self.in_flight_batches.discard(batch)
        batch.last_error = exc
        now = self.now_ms()
        if isinstance(exc, _METADATA_ERRORS):
            self.request_metadata_refresh()
        if isinstance(exc, _PRODUCER_ID_ERRORS) and self.transactional:
            # a transactional producer's id is fenced or its transaction aborted: the
            # batch fails, and so does the commit (transactions.py); no new id here
            self._finish(batch, -1, -1, exc)
            return
        if isinstance(exc, _PRODUCER_ID_ERRORS) and self.idempotence is not None:
            if isinstance(exc, errors.OutOfOrderSequenceNumberError) and batch.tp in self.acc.recovering:
                pass  # an earlier batch of this partition failed first: just resend in order
            else:
                log.warning("%s: resetting the idempotent producer id", exc)
                self.idempotence.reset()
                batch.reset_payload()
        retriable = exc.retriable or isinstance(exc, _PRODUCER_ID_ERRORS)
        if not retriable:
            self._finish(batch, -1, -1, exc)
        elif now >= batch.deadline_ms:
            self._finish(batch, -1, -1, self._timeout_error(batch, exc))
        elif batch.attempts > self.config.retries:
            self._finish(batch, -1, -1, exc)
        else:
            log.debug("retrying %s-%s after %s", batch.topic, batch.partition, exc)
            self.retries += 1
            self.acc.reenqueue(batch, now)

    def _finish(
        self, batch: ProducerBatch, base_offset: int, append_ms: int, error: BaseException | None
    ) -> None:
        self.in_flight_batches.discard(batch)
        self._generation_of.pop(id(batch), None)
        if error is None and batch.payload is not None:
            size = len(batch.payload)
            self.batches_delivered += 1
            self.batch_bytes += size
            self.batch_bytes_uncompressed += batch.size
            if size > self.batch_bytes_max:
                self.batch_bytes_max = size
        self.acc.complete(batch)
        self.on_batch_done(batch, base_offset, append_ms, error)

    def _give_up(self, batch: ProducerBatch, error: BaseException) -> None:
        """Fail a queued batch that was never acknowledged."""
        if batch.base_sequence >= 0 and self.idempotence is not None:
            # A sequenced batch is given up: later batches would leave a gap the broker
            # refuses, so the producer starts over with a new id.
            self.idempotence.reset()
        self._finish(batch, -1, -1, error)

    def _fail_everything(self, exc: BaseException) -> None:
        for batch in list(self.in_flight_batches) + self.acc.abort_all():
            if not batch.done:
                self._finish(batch, -1, -1, exc)

    # -- metadata ------------------------------------------------------------------------

    def request_metadata_refresh(self) -> None:
        if not self._metadata_refreshing:
            self._metadata_refreshing = True
            self._nursery.start_soon(self._refresh_metadata)

    async def _refresh_metadata(self) -> None:
        try:
            await self.cluster.refresh_metadata()
        except errors.KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)
            await trio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._metadata_refreshing = False
            self.wakeup()
