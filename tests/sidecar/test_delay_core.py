"""Delayed messages, the pure part (databus/sidecar/delay/core.py): which level a message
goes to, the stored headers, when records become ready, what may be committed."""

from __future__ import annotations

from collections import namedtuple

import pytest

from databus.sidecar.delay.core import (
    BASE_MS,
    LEAD_MS,
    LEVEL_TOPICS,
    LEVELS,
    Delayed,
    DelayHeaderError,
    Scheduler,
    level_for,
    parse_due,
    parse_stored,
    span_ms,
)

Rec = namedtuple("Rec", "offset timestamp key value headers")


def test_levels_are_time_buckets_of_doubling_spans():
    assert LEVEL_TOPICS[:4] == ("databus-delay-250ms", "databus-delay-500ms",
                                "databus-delay-1s", "databus-delay-2s")
    assert level_for(LEAD_MS + BASE_MS - 1) is None  # waits in memory
    assert level_for(LEAD_MS + BASE_MS) == 0
    for ahead in (250, 499, 500, 999, 1000, 59_999, 3_600_000):
        level = level_for(LEAD_MS + ahead)
        # a level's records are ready one span after they are written, with less than one
        # span (and at least LEAD_MS) to go: each message passes each level at most once
        assert span_ms(level) <= ahead < 2 * span_ms(level)
    assert level_for(10**12) == LEVELS - 1  # beyond the top span: the top level, again


def test_stored_headers_round_trip_and_keep_the_apps_headers():
    delayed = Delayed("orders", 1_700_000_000_123, "id-1", 3, b"k", b"v", (("h", b"x"),))
    headers = delayed.stored_headers()
    assert headers[:4] == [("databus-deliver-at", b"1700000000123"),
                           ("databus-delay-id", b"id-1"), ("databus-delay-target", b"orders"),
                           ("databus-delay-partition", b"3")]
    assert parse_stored(b"k", b"v", headers) == delayed
    assert delayed.delivered_headers() == [("databus-deliver-at", b"1700000000123"),
                                           ("h", b"x")]
    with pytest.raises(DelayHeaderError, match="databus-delay-target"):
        parse_stored(None, b"v", [("h", b"x")])
    with pytest.raises(DelayHeaderError, match="ms since the epoch"):
        parse_due(b"tomorrow")


def stored(offset, written_ms, due_ms, delay_id="", target="t"):
    headers = Delayed(target, due_ms, delay_id, None, None, b"v%d" % offset, ()).stored_headers()
    return Rec(offset, written_ms, None, b"v%d" % offset, headers)


def test_records_become_ready_one_span_after_they_were_written():
    level = 3  # 2 s
    topic = LEVEL_TOPICS[level]
    scheduler = Scheduler()
    scheduler.assign([(topic, 0)])
    t0 = 1_000_000
    scheduler.add((topic, 0), [stored(10, t0, t0 + 5_500), stored(11, t0 + 100, t0 + 3_150)])
    assert scheduler.next_deadline() == t0 + 2_000
    assert scheduler.take_ready(t0 + 1_999, {}) == []
    (forward,) = scheduler.take_ready(t0 + 2_000, {})
    # 3.5 s to go: forwarded to the 2 s level
    assert (forward.offset, forward.level, forward.delayed.due_ms) == (10, 3, t0 + 5_500)
    # offset 11 has 1.05 s to go when ready (under 2 s): it waits in memory and is
    # delivered on time
    assert scheduler.take_ready(t0 + 2_100, {}) == []
    assert scheduler.next_deadline() == t0 + 3_150
    assert scheduler.safe_offsets({}) == {(topic, 0): 11}  # 11 is still held
    assert scheduler.take_ready(t0 + 3_149, {}) == []  # never early
    (deliver,) = scheduler.take_ready(t0 + 3_150, {})
    assert (deliver.offset, deliver.level) == (11, None)
    assert scheduler.safe_offsets({}) == {(topic, 0): 12}
    # a handed-on record whose write is not yet acknowledged holds the commit back
    assert scheduler.safe_offsets({(topic, 0): 10}) == {(topic, 0): 10}


def test_a_step_hands_out_its_deliveries_before_its_forwards():
    # a member taking over a dead one's partitions reads its uncommitted records again, all
    # ready at once: the messages due now must not wait behind a thousand forwards (which
    # have at least LEAD_MS to spare)
    scheduler = Scheduler()
    low, high = (LEVEL_TOPICS[2], 0), (LEVEL_TOPICS[5], 0)
    scheduler.assign([low, high])
    t0 = 1_000_000
    scheduler.add(high, [stored(i, t0, t0 + 60_000 + i) for i in range(3)])
    scheduler.add(low, [stored(7, t0, t0 + 8_000)])
    now = t0 + 9_000  # both partitions ready; offset 7 overdue
    actions = scheduler.take_ready(now, {})
    assert [(a.tp, a.offset, a.level) for a in actions] == [
        (low, 7, None), (high, 0, 7), (high, 1, 7), (high, 2, 7)]


def test_cancelled_and_foreign_records_are_dropped_and_committed_past():
    topic = LEVEL_TOPICS[0]
    scheduler = Scheduler()
    scheduler.assign([(topic, 0)])
    scheduler.add((topic, 0), [stored(0, 0, 300, delay_id="gone"),
                               Rec(1, 0, None, b"x", ()), stored(2, 0, 260, delay_id="kept")])
    actions = scheduler.take_ready(300, {"gone": 1})
    assert [(a.offset, a.delayed is None, a.error is not None) for a in actions] == [
        (2, False, False), (0, True, False), (1, True, True)]  # the delivery first
    assert scheduler.safe_offsets({}) == {(topic, 0): 3}


def test_a_full_partition_asks_to_pause_and_revoked_partitions_are_forgotten():
    topic = LEVEL_TOPICS[1]
    scheduler = Scheduler(max_held_per_partition=2)
    scheduler.assign([(topic, 0), ("not-a-delay-topic", 0)])
    assert list(scheduler.partitions) == [(topic, 0)]
    scheduler.add((topic, 0), [stored(0, 0, 900), stored(1, 0, 900)])
    assert scheduler.full((topic, 0))
    scheduler.revoke([(topic, 0)])
    assert scheduler.partitions == {} and scheduler.next_deadline() is None


def test_every_step_leaves_the_lead_for_the_services_lag():
    """Each message, stepped down the wheel by a service that acts on every ready record
    up to LEAD_MS - 1 late (a burst, a busy machine), reaches memory before its due time,
    visits each level at most once and is delivered at its time, never before: the lag is
    spent from the lead, not from the message's time (before the lead, a record was ready
    with 0 to D to go, so any lag at the last step made the message late)."""
    lag = LEAD_MS - 1
    t0 = 10_000_000
    for remaining in range(LEAD_MS + BASE_MS, 70_000, 37):
        due = t0 + remaining
        scheduler = Scheduler()
        scheduler.assign([(topic, 0) for topic in LEVEL_TOPICS])
        level, written, offset = level_for(remaining), t0, 0
        levels = [level]
        while True:
            tp = (LEVEL_TOPICS[level], 0)
            scheduler.add(tp, [stored(offset, written, due)])
            now = written + span_ms(level) + lag
            assert scheduler.next_deadline() == now - lag
            actions = scheduler.take_ready(now, {})
            if not actions:  # in memory: held under the commit, delivered at its time
                assert now < due, (remaining, levels)
                assert scheduler.next_deadline() == due
                assert scheduler.safe_offsets({})[tp] == offset
                assert scheduler.take_ready(due - 1, {}) == []
                (deliver,) = scheduler.take_ready(due, {})
                assert (deliver.level, deliver.delayed.due_ms) == (None, due)
                break
            (forward,) = actions
            assert forward.level is not None, ("delivered late", remaining, levels)
            assert forward.level < level, (remaining, levels)  # down, never the same level
            level, written, offset = forward.level, now, offset + 1
            levels.append(level)


def test_the_group_consumer_defaults_give_way_to_the_configuration():
    from databus.sidecar.background import CONSUMER_DEFAULTS, group_consumer_config
    from databus.sidecar.config import DelayConfig, TransactionsConfig

    # one set of defaults for the delay and the half-message services, as documented
    for service in (DelayConfig, TransactionsConfig):
        described = service.model_fields["consumer"].description
        assert all(f"`{key}: {value}`" in described for key, value in CONSUMER_DEFAULTS.items())

    assert group_consumer_config(CONSUMER_DEFAULTS, {}) == CONSUMER_DEFAULTS
    # a session lowered below the default heartbeat takes the heartbeat down with it (the
    # consumer refuses a heartbeat not below the session) ...
    assert group_consumer_config(CONSUMER_DEFAULTS, {"session.timeout.ms": 450})[
        "heartbeat.interval.ms"] == 150
    # ... but a heartbeat the configuration names is its own, and so is its error
    assert group_consumer_config(CONSUMER_DEFAULTS, {"session.timeout.ms": 450,
                                                     "heartbeat.interval.ms": 600})[
        "heartbeat.interval.ms"] == 600
    assert group_consumer_config(CONSUMER_DEFAULTS, {"session.timeout.ms": "soon"})[
        "heartbeat.interval.ms"] == 500  # left to the consumer's validation to name
