"""consume/core.py's MemberCore as pure data: records in, long polls answered, acks, nacks, the
clock; no sockets, no trio."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from databus.config_base import parse_duration_ms
from databus.protocol import sidecar_wire as wire
from databus.sidecar.consume.core import (
    ACCEPT,
    H_ATTEMPT,
    H_DUE,
    H_OFFSET,
    H_PARTITION,
    H_REASON,
    H_TOPIC,
    REJECT,
    RELEASE,
    MemberCore,
    Progress,
    retry_delay_ms,
)


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int = 1000
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: tuple = ()


def records(partition: int, offsets, topic="t", **kw):
    return [Rec(topic, partition, o, **kw) for o in offsets]


def core(**kw) -> MemberCore:
    kw.setdefault("retry_levels_ms", (1000, 5000))
    kw.setdefault("max_attempts", 3)
    return MemberCore("t", "g.retry", **kw)


def served(c: MemberCore, now=0.0, wall=0):
    return {key: [(e.partition, e.origin_offset) for e in entries]
            for key, entries in c.serve(now, wall)}


def test_committable_is_the_lowest_unacked_offset_of_each_partition():
    c = core(ordering="none")
    c.subscribe("a", 100)
    c.add(records(0, range(5)), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, entries)] = c.serve(0.0, 0)
    ids = {e.origin_offset: e.delivery_id for e in entries}
    assert c.committable() == {("t", 0): 0}
    c.ack("a", [ids[1], ids[2]])
    assert c.committable() == {("t", 0): 0}  # offset 0 is still out: a crash redelivers it
    c.ack("a", [ids[0]])
    assert c.committable() == {("t", 0): 3}
    c.mark_committed({("t", 0): 3})
    assert c.committable() == {}
    c.ack("a", [ids[3], ids[4], ids[4], 999])  # twice, or unknown: ignored
    assert c.committable() == {("t", 0): 5}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_progress_matches_a_simple_model(data):
    offsets = sorted(data.draw(st.sets(st.integers(0, 200), min_size=1, max_size=40)))
    progress = Progress()
    for offset in offsets:
        progress.add(offset)
    done: set[int] = set()
    for offset in data.draw(st.permutations(offsets)):
        progress.finish(offset)
        done.add(offset)
        left = [o for o in offsets if o not in done]
        assert progress.committable() == (left[0] if left else offsets[-1] + 1)


def test_ordering_partition_gives_each_partition_to_one_subscriber_in_order():
    c = core()
    c.subscribe("a", 100)
    c.subscribe("b", 100)
    c.add(records(0, range(3)) + records(1, range(3)), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    c.fetch("b", 100, 1, 500, 0.0)
    got = served(c)
    assert sorted(got) == ["a", "b"]
    assert {p for p, _ in got["a"]}.isdisjoint({p for p, _ in got["b"]})
    for entries in got.values():
        assert [o for _, o in entries] == [0, 1, 2]


def test_a_partition_stays_with_its_owner_while_it_holds_messages_of_it():
    c = core()
    c.subscribe("a", 100)
    c.add(records(0, [0]), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    assert served(c) == {"a": [(0, 0)]}
    c.subscribe("b", 100)
    c.add(records(0, [1]), 0)
    c.fetch("b", 100, 1, 500, 0.0)
    assert served(c) == {}  # partition 0 is a's while a holds offset 0
    c.fetch("a", 100, 1, 500, 0.0)
    assert served(c) == {"a": [(0, 1)]}


def test_ordering_none_shares_one_partition_among_subscribers():
    c = core(ordering="none")
    c.subscribe("a", 2)
    c.subscribe("b", 2)
    c.add(records(0, range(4)), 0)
    c.fetch("a", 10, 1, 500, 0.0)
    c.fetch("b", 10, 1, 500, 0.0)
    assert served(c) == {"a": [(0, 0), (0, 1)], "b": [(0, 2), (0, 3)]}  # windows of 2


def test_the_window_bounds_what_a_subscriber_holds():
    c = core(ordering="none")
    c.subscribe("a", 3)
    c.add(records(0, range(10)), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, entries)] = c.serve(0.0, 0)
    assert len(entries) == 3 and c.pending == 7
    c.fetch("a", 100, 1, 500, 0.0)
    assert c.serve(0.1, 0) == []  # full window: the poll waits
    c.ack("a", [entries[0].delivery_id])
    assert served(c, 0.2) == {"a": [(0, 3)]}


def test_a_long_poll_waits_for_min_bytes_or_its_deadline():
    c = core(ordering="none")
    c.subscribe("a", 100)
    c.fetch("a", 100, 1, 500, 0.0)
    assert c.serve(0.0, 0) == []
    assert c.next_wakeup(0.0, 0) == 0.5
    assert served(c, 0.5) == {"a": []}  # the wait is over: an empty answer
    c.fetch("a", 100, 5, 500, 1.0)  # min_bytes 5: one 1-byte value is not enough
    c.add(records(0, [0]), 0)
    assert c.serve(1.1, 0) == []
    c.add(records(0, [1, 2, 3, 4]), 0)
    assert len(served(c, 1.2)["a"]) == 5


def test_an_unsubscribed_apps_messages_go_to_another_first():
    c = core()
    c.subscribe("a", 100)
    c.subscribe("b", 100)
    c.add(records(0, range(3)), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    assert served(c) == {"a": [(0, 0), (0, 1), (0, 2)]}
    c.add(records(0, [3]), 0)
    assert c.unsubscribe("a") == 3
    c.fetch("b", 100, 1, 500, 0.0)
    assert served(c) == {"b": [(0, 0), (0, 1), (0, 2), (0, 3)]}  # in order, front first


def test_nack_becomes_a_retry_copy_due_at_the_level_then_a_dead_letter():
    c = core(ordering="none")
    c.subscribe("a", 100)
    c.add(records(2, [7]), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, [entry])] = c.serve(0.0, 0)
    [copy] = c.nack("a", [(entry.delivery_id, None, "db down")], 10_000)
    assert not copy.dead and copy.due_ms == 11_000 and copy.reason == "db down"
    headers = dict(copy.headers("t", "g"))
    assert headers[H_ATTEMPT] == b"2" and headers[H_DUE] == b"11000"
    assert (headers[H_TOPIC], headers[H_PARTITION], headers[H_OFFSET]) == (b"t", b"2", b"7")
    assert c.committable() == {("t", 2): 7}  # not done until the copy is written
    c.copied(copy.entry)
    assert c.committable() == {("t", 2): 8}

    # The copy, read back from the retry topic, waits for its due time.
    retry = Rec("g.retry", 0, 0, headers=tuple(copy.headers("t", "g")))
    c.add([retry], 10_500)
    c.fetch("a", 100, 1, 5000, 1.0)
    assert c.serve(1.0, 10_999) == []
    assert c.next_wakeup(1.0, 10_999) == 0.001
    [(_, [again])] = c.serve(1.0, 11_000)
    assert (again.partition, again.origin_offset, again.attempt) == (2, 7, 2)
    assert again.headers == ()  # the app sees its own headers only
    [copy2] = c.nack("a", [(again.delivery_id, 250, None)], 20_000)
    assert copy2.due_ms == 20_250 and not copy2.dead  # an explicit delay wins
    c.copied(copy2.entry)
    retry2 = Rec("g.retry", 0, 1, headers=tuple(copy2.headers("t", "g")))
    c.add([retry2], 30_000)
    c.fetch("a", 100, 1, 500, 2.0)
    [(_, [third])] = c.serve(2.0, 30_000)
    assert third.attempt == 3
    [dead] = c.nack("a", [(third.delivery_id, None, "still down")], 40_000)
    assert dead.dead  # max.attempts=3 reached
    headers = dict(dead.headers("t", "g"))
    assert headers[H_REASON] == b"still down" and H_DUE not in headers
    assert headers[H_ATTEMPT] == b"3"


def test_an_ack_timeout_counts_as_a_nack():
    c = core(ordering="none", ack_timeout_ms=2000)
    c.subscribe("a", 100)
    c.add(records(0, [0, 1]), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, entries)] = c.serve(0.0, 0)
    c.ack("a", [entries[0].delivery_id])
    assert c.tick(1.9, 0) == []
    [copy] = c.tick(2.0, 5000)
    assert copy.entry.origin_offset == 1 and "ack timeout" in copy.reason
    assert copy.due_ms == 6000


def test_tags_filter_before_anything_is_handed_out():
    c = core(ordering="none", tags=("paid", "refund"))
    c.subscribe("a", 100)
    c.add([
        Rec("t", 0, 0, headers=(("databus-tag", b"paid"),)),
        Rec("t", 0, 1, headers=(("databus-tag", b"free"),)),
        Rec("t", 0, 2),
        Rec("t", 0, 3, headers=(("databus-tag", b"refund"),)),
    ], 0)
    c.fetch("a", 100, 1, 500, 0.0)
    assert served(c) == {"a": [(0, 0), (0, 3)]}
    assert c.filtered == 2


def test_revoked_partitions_are_forgotten_and_late_acks_ignored():
    c = core()
    c.subscribe("a", 100)
    c.add(records(0, [0, 1]) + records(1, [0]), 0)
    c.fetch("a", 1, 1, 500, 0.0)
    [(_, [entry])] = c.serve(0.0, 0)
    c.revoke([("t", entry.partition)])
    assert c.ack("a", [entry.delivery_id]) == 0
    assert set(c.committable()) == {("t", 1 - entry.partition)}
    c.fetch("a", 100, 1, 500, 0.0)
    assert [p for p, _ in served(c)["a"]] == [1 - entry.partition]
    assert c.pending == 0


def test_retry_levels_and_durations():
    levels = tuple(map(parse_duration_ms, ["1s", "5s", "2m", "250ms", 40]))
    assert levels == (1000, 5000, 120_000, 250, 40)
    assert [retry_delay_ms(n, levels) for n in (1, 2, 3, 9)] == [1000, 5000, 120_000, 40]


class ShareRec(NamedTuple):
    topic: str
    partition: int
    offset: int
    delivery_count: int
    timestamp: int = 1000
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: tuple = ()


def test_share_mode_settles_with_accept_release_reject_and_copies_the_last_attempt():
    c = core(ordering="none", share=True, tags=("paid",))
    c.subscribe("a", 100)
    c.subscribe("b", 100)
    paid = (("databus-tag", b"paid"),)
    c.add([ShareRec("t", 0, 0, 1, headers=paid), ShareRec("t", 0, 1, 3, headers=paid),
           ShareRec("t", 0, 2, 1, headers=paid), ShareRec("t", 0, 3, 1)], 0)
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(3, ACCEPT)]  # filtered
    c.fetch("a", 1, 1, 500, 0.0)
    c.fetch("b", 2, 1, 500, 0.0)
    got = dict(c.serve(0.0, 0))
    assert [e.offset for e in got["a"]] == [0] and [e.offset for e in got["b"]] == [1, 2]
    assert [e.attempt for e in got["b"]] == [3, 1]  # the delivery count is the attempt
    c.ack("a", [got["a"][0].delivery_id])
    assert c.nack("b", [(got["b"][1].delivery_id, 0, "now")], 0) == []
    [dead] = c.nack("b", [(got["b"][0].delivery_id, None, "poison")], 0)
    assert dead.dead and dead.reason == "poison"
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(0, ACCEPT), (2, RELEASE)]
    c.copied(dead.entry, dead=True)
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(1, REJECT)]
    assert c.committable() == {}  # the broker keeps the state, not offsets


def test_share_mode_on_a_kip1191_cluster_rejects_the_last_attempt_without_a_copy():
    """With the broker's dead-letter topics (broker_dlq) a spent share record is only
    REJECTed (the broker copies it); a spent retry-topic record, not the share group's to
    reject, is still a copy, with KIP-1191's headers beside the sidecar's."""
    c = core(ordering="none", share=True, broker_dlq=True, max_attempts=2)
    c.subscribe("a", 100)
    retry_headers = ((H_ATTEMPT, b"2"), (H_TOPIC, b"t"), (H_PARTITION, b"0"),
                     (H_OFFSET, b"5"), (H_DUE, b"0"), ("trace", b"x"))
    c.add([ShareRec("t", 0, 1, 2), Rec("g.retry", 0, 9, headers=retry_headers)], 0)
    c.fetch("a", 2, 1, 500, 0.0)
    [(_, got)] = c.serve(0.0, 0)
    by_offset = {e.origin_offset: e for e in got}
    assert c.nack("a", [(by_offset[1].delivery_id, None, "poison")], 0) == []
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(1, REJECT)]
    [dead] = c.nack("a", [(by_offset[5].delivery_id, None, "gave up")], 0)
    assert dead.dead and c.rejected == 1
    headers = dict(dead.headers("t", "g", kip1191=True))
    assert headers["trace"] == b"x" and headers[H_REASON] == b"gave up"
    assert {k: v for k, v in headers.items() if k.startswith("__dlq.")} == {
        "__dlq.errors.topic": b"t", "__dlq.errors.partition": b"0",
        "__dlq.errors.offset": b"5", "__dlq.errors.group": b"g",
        "__dlq.errors.delivery.count": b"2", "__dlq.errors.message": b"gave up"}
    # without the broker's DLQs the spent share record is a copy too (then REJECTed)
    c = core(ordering="none", share=True, max_attempts=2)
    c.subscribe("a", 100)
    c.add([ShareRec("t", 0, 1, 2)], 0)
    c.fetch("a", 1, 1, 500, 0.0)
    [(_, got)] = c.serve(0.0, 0)
    [dead] = c.nack("a", [(got[0].delivery_id, None, "poison")], 0)
    assert dead.dead and c.take_settled() == [] and c.rejected == 0


def test_share_mode_holds_a_retry_within_the_lock_and_copies_a_longer_one():
    """A nack's level (1s) within the record's acquisition lock (10s, less a tenth, from
    when it was read): the record stays acquired and is RELEASEd when due.  A longer delay
    cannot be held: it is copied to the retry topic, ACCEPTed once the copy is in, and the
    copy (read by offset) is handed out when due with the next attempt."""
    c = core(ordering="none", share=True)
    c.lock_ms = 10_000
    c.subscribe("a", 100)
    c.add([ShareRec("t", 0, 0, 1), ShareRec("t", 0, 1, 1)], 100_000)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, [held, copied])] = c.serve(0.0, 100_000)
    assert c.nack("a", [(held.delivery_id, None, "level 1")], 101_000) == []
    [copy] = c.nack("a", [(copied.delivery_id, 9_000, "too long")], 101_000)
    assert not copy.dead and copy.due_ms == 110_000  # past the lock: 110s - 1s
    assert c.take_settled() == []
    assert c.next_wakeup(0.0, 101_000) == 1.0
    c.serve(0.0, 101_999)
    assert c.take_settled() == []  # never before its level
    c.serve(0.0, 102_000)
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(0, RELEASE)]
    c.copied(copy.entry)
    assert [(e.offset, kind) for e, kind in c.take_settled()] == [(1, ACCEPT)]

    # The copy comes back through the retry topic's consumer (offsets, not the share group).
    c.add([Rec("g.retry", 0, 5, headers=tuple(copy.headers("t", "g")))], 101_500)
    assert c.committable() == {("g.retry", 0): 5}
    c.fetch("a", 100, 1, 500, 1.0)
    assert c.serve(1.0, 109_999) == []
    [(_, [again])] = c.serve(1.0, 110_000)
    assert (again.offset, again.origin_offset, again.attempt) == (5, 1, 2)
    c.ack("a", [again.delivery_id])
    assert c.take_settled() == [] and c.committable() == {("g.retry", 0): 6}

    # Stopping: what is held becomes retry copies with their due times (closing the share
    # consumer would release it at once).
    c.add([ShareRec("t", 0, 2, 1)], 200_000)
    c.fetch("a", 100, 1, 500, 2.0)
    [(_, [third])] = c.serve(2.0, 200_000)
    c.nack("a", [(third.delivery_id, 2_000, None)], 200_000)
    [kept] = c.take_held()
    assert (kept.entry.offset, kept.due_ms, kept.dead) == (2, 202_000, False)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_an_ack_by_ranges_does_what_the_same_ids_one_by_one_do(data):
    """Two cores fed alike: one acked id by id, the other with the SDK's split of the same
    ids into singles and [first, last] runs; they agree on what is done and committable."""
    partitions = data.draw(st.integers(1, 3))
    ordering = data.draw(st.sampled_from(["partition", "none"]))
    cores = [core(ordering=ordering), core(ordering=ordering)]
    handed: list[int] = []
    for c in cores:
        c.subscribe("a", 1000)
        for p in range(partitions):
            c.add(records(p, range(20)), 0)
        c.fetch("a", 1000, 1, 500, 0.0)
        [(_, entries)] = c.serve(0.0, 0)
        handed = [e.delivery_id for e in entries]
    acked = data.draw(st.lists(st.sampled_from(handed), unique=True))
    singles, runs = wire.ack_runs(acked)
    one, other = cores
    assert one.ack("a", acked) == other.ack("a", singles, [tuple(r) for r in runs]) == len(acked)
    assert one.committable() == other.committable()
    assert one.in_flight == other.in_flight == len(handed) - len(acked)


def test_a_range_past_what_was_handed_out_acks_only_what_is_in_flight():
    c = core(ordering="none")
    c.subscribe("a", 100)
    c.add(records(0, range(5)), 0)
    c.fetch("a", 100, 1, 500, 0.0)
    [(_, entries)] = c.serve(0.0, 0)
    assert [e.delivery_id for e in entries] == [1, 2, 3, 4, 5]
    # a range of 2**63 ids: clipped to the ids handed out (cheap), unknown ones ignored
    assert c.ack("a", [], [(0, 3), (2, 2**63 - 1)]) == 5
    assert c.committable() == {("t", 0): 5} and c.in_flight == 0
