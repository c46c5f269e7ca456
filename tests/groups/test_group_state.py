"""The group state machine driven directly: no sockets, the clock is a number."""

from __future__ import annotations

import itertools

from databus.broker.coordinator.group_state import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinRequest,
    JoinResult,
    Persist,
    Reply,
    SyncRequest,
    SyncResult,
)
from databus.protocol.errors import ErrorCode

SESSION = 10_000
REBALANCE = 30_000


def make(delay_ms: int = 100) -> GroupCoordinator:
    ids = itertools.count(1)
    return GroupCoordinator(
        CoordinatorConfig(initial_rebalance_delay_ms=delay_ms),
        new_member_id=lambda client_id: f"{client_id}-{next(ids)}",
    )


def join_req(member_id="", protocols=(("range", b"sub"),), v4=True, group="g", **kw):
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        protocol_type=kw.pop("protocol_type", "consumer"),
        protocols=tuple(protocols),
        session_timeout_ms=kw.pop("session", SESSION),
        rebalance_timeout_ms=kw.pop("rebalance", REBALANCE),
        client_id="c",
        require_known_member_id=v4,
        **kw,
    )


def replies(effects) -> dict:
    return {e.waiter: e.result for e in effects if isinstance(e, Reply)}


def join_new(coord, now, waiter, **kw) -> str:
    """KIP-394 dance: first JoinGroup returns MEMBER_ID_REQUIRED, second one parks."""
    first = replies(coord.join_group(now, ("id", waiter), join_req(**kw)))[("id", waiter)]
    assert first.error == ErrorCode.member_id_required
    assert first.member_id
    effects = coord.join_group(now, waiter, join_req(member_id=first.member_id, **kw))
    return first.member_id, effects


def test_single_member_forms_a_group_after_initial_delay():
    coord = make(delay_ms=3000)
    member, effects = join_new(coord, 0, "w1")
    assert replies(effects) == {}  # parked during group.initial.rebalance.delay.ms
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
    assert coord.next_deadline() == 3000
    assert replies(coord.advance(2999)) == {}
    result = replies(coord.advance(3000))["w1"]
    assert result.error == ErrorCode.none
    assert result.generation_id == 1
    assert result.leader_id == member == result.member_id
    assert [m.member_id for m in result.members] == [member]
    assert result.members[0].metadata == b"sub"
    assert coord.state_of("g") is GroupState.COMPLETING_REBALANCE

    effects = coord.sync_group(3001, "s1", SyncRequest("g", member, 1, ((member, b"A"),)))
    sync = replies(effects)["s1"]
    assert sync == SyncResult(ErrorCode.none, "consumer", "range", b"A")
    assert coord.state_of("g") is GroupState.STABLE
    assert any(isinstance(e, Persist) and e.snapshot.state is GroupState.STABLE for e in effects)


def test_initial_delay_is_extended_while_members_keep_joining():
    coord = make(delay_ms=3000)
    a, _ = join_new(coord, 0, "wa")
    b, _ = join_new(coord, 2000, "wb")
    # b arrived during the first delay: another delay of 3000 follows.
    assert replies(coord.advance(3000)) == {}
    done = replies(coord.advance(6000))
    assert set(done) == {"wa", "wb"}
    assert {r.generation_id for r in done.values()} == {1}
    assert done["wa"].leader_id == a
    assert [m.member_id for m in done["wa"].members] == [a, b]
    assert done["wb"].members == ()  # only the leader sees subscriptions


def test_join_without_kip394_parks_immediately():
    coord = make(delay_ms=0)
    effects = coord.join_group(0, "w", join_req(v4=False))
    result = replies(effects)["w"]
    assert result.error == ErrorCode.none and result.generation_id == 1


def test_session_timeout_out_of_bounds():
    coord = make()
    result = replies(coord.join_group(0, "w", join_req(session=1000)))["w"]
    assert result.error == ErrorCode.invalid_session_timeout


def test_unknown_member_and_inconsistent_protocol():
    coord = make()
    assert replies(coord.join_group(0, "w", join_req(member_id="nope")))["w"].error == (
        ErrorCode.unknown_member_id
    )
    join_new(coord, 0, "w1")
    res = replies(coord.join_group(0, "w2", join_req(v4=False, protocols=(("other", b""),))))
    assert res["w2"].error == ErrorCode.inconsistent_group_protocol
    res = replies(coord.join_group(0, "w3", join_req(v4=False, protocol_type="connect")))
    assert res["w3"].error == ErrorCode.inconsistent_group_protocol


def settle(coord, until: int) -> dict:
    """Fire timers up to ``until``, collecting the replies."""
    done = {}
    while (deadline := coord.next_deadline()) is not None and deadline <= until:
        done.update(replies(coord.advance(deadline)))
    return done


def stable_group(coord, n: int, protocols=(("range", b"sub"),)):
    """n members joined (within the initial delay) and synced at generation 1, at t=0."""
    ids = []
    for i in range(n):
        member, _ = join_new(coord, -1000, f"j{i}", protocols=protocols)
        ids.append(member)
    done = settle(coord, 0)
    assert {w for w in done} == {f"j{i}" for i in range(n)}
    gen = done["j0"].generation_id
    leader = done["j0"].leader_id
    for i, member in enumerate(ids):
        if member != leader:
            assert replies(coord.sync_group(0, f"s{i}", SyncRequest("g", member, gen))) == {}
    li = ids.index(leader)
    out = replies(
        coord.sync_group(0, f"s{li}", SyncRequest("g", leader, gen,
                                                  tuple((m, m.encode()) for m in ids)))
    )
    assert {r.assignment for r in out.values()} == {m.encode() for m in ids}
    assert coord.state_of("g") is GroupState.STABLE
    return ids, gen


def test_protocol_selection_by_votes():
    coord = make()
    for i, protocols in enumerate(
        [
            (("roundrobin", b"1"), ("range", b"1")),
            (("range", b"2"), ("roundrobin", b"2")),
            (("range", b"3"), ("roundrobin", b"3"), ("sticky", b"3")),
        ]
    ):
        join_new(coord, 0, f"w{i}", protocols=protocols)
    done = settle(coord, 1000)
    assert {r.protocol_name for r in done.values()} == {"range"}
    leader = next(r for r in done.values() if r.members)
    assert [m.metadata for m in leader.members] == [b"1", b"2", b"3"]


def test_heartbeat_errors_and_rebalance_signal():
    coord = make()
    (a, b), gen = stable_group(coord, 2)
    assert coord.heartbeat(1, "g", a, gen) == ErrorCode.none
    assert coord.heartbeat(1, "g", a, gen + 1) == ErrorCode.illegal_generation
    assert coord.heartbeat(1, "g", "ghost", gen) == ErrorCode.unknown_member_id
    assert coord.heartbeat(1, "nogroup", a, gen) == ErrorCode.unknown_member_id
    # A third member joins: existing members learn about it through their heartbeat.
    join_new(coord, 2, "w3")
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat(3, "g", b, gen) == ErrorCode.rebalance_in_progress


def test_leave_moves_partitions_within_one_rebalance():
    coord = make()
    (a, b, c), gen = stable_group(coord, 3)
    top, errors, _ = coord.leave_group(5, "g", [c, "ghost"])
    assert top == ErrorCode.none and errors == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
    coord.join_group(6, "ra", join_req(member_id=a))
    done = replies(coord.join_group(6, "rb", join_req(member_id=b)))
    assert set(done) == {"ra", "rb"}
    assert {r.generation_id for r in done.values()} == {gen + 1}


def test_dead_member_expires_after_session_timeout_and_group_rebalances():
    coord = make()
    (a, _b), gen = stable_group(coord, 2)
    for t in range(0, SESSION, 3000):
        assert coord.heartbeat(t, "g", a, gen) == ErrorCode.none
    # b stopped heartbeating at t=0.
    coord.advance(SESSION)
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
    assert coord.heartbeat(SESSION + 1, "g", a, gen) == ErrorCode.rebalance_in_progress
    done = replies(coord.join_group(SESSION + 2, "ra", join_req(member_id=a)))
    assert done["ra"].generation_id == gen + 1
    assert [m.member_id for m in done["ra"].members] == [a]


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout():
    coord = make()
    (a, b), gen = stable_group(coord, 2)
    coord.join_group(100, "ra", join_req(member_id=a, protocols=(("range", b"new"),)))
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
    # b keeps heartbeating but never rejoins.
    for t in range(1000, REBALANCE, 3000):
        assert coord.heartbeat(t, "g", b, gen) == ErrorCode.rebalance_in_progress
    done = replies(coord.advance(100 + REBALANCE))
    assert done["ra"].generation_id == gen + 1
    assert [m.member_id for m in done["ra"].members] == [a]
    assert coord.heartbeat(100 + REBALANCE + 1, "g", b, gen) == ErrorCode.unknown_member_id


def test_leader_dies_during_completing_rebalance():
    coord = make()
    ids = [join_new(coord, -1000, f"j{i}")[0] for i in range(3)]
    done = settle(coord, 0)
    leader = done["j0"].leader_id
    followers = [m for m in ids if m != leader]
    for i, m in enumerate(followers):
        assert replies(coord.sync_group(1, f"s{i}", SyncRequest("g", m, 1))) == {}
    # The leader never sends SyncGroup; followers stay parked (they are alive) until the
    # leader's session expires, then they are told to rejoin.
    answered = replies(coord.advance(SESSION))
    assert answered == {
        "s0": SyncResult(ErrorCode.rebalance_in_progress),
        "s1": SyncResult(ErrorCode.rebalance_in_progress),
    }
    for i, m in enumerate(followers):
        effects = coord.join_group(SESSION + 1, f"r{i}", join_req(member_id=m))
    done = replies(effects)
    assert set(done) == {"r0", "r1"}
    new_leader = done["r0"].leader_id
    assert new_leader in followers and {r.generation_id for r in done.values()} == {2}
    out = replies(coord.sync_group(SESSION + 2, "x", SyncRequest("g", new_leader, 2,
                                                                   ((new_leader, b"all"),))))
    assert out["x"].error == ErrorCode.none
    assert coord.state_of("g") is GroupState.STABLE


def test_sync_errors():
    coord = make()
    (a, b), gen = stable_group(coord, 2)
    assert replies(coord.sync_group(1, "x", SyncRequest("g", a, gen + 1)))["x"].error == (
        ErrorCode.illegal_generation
    )
    assert replies(coord.sync_group(1, "x", SyncRequest("g", "ghost", gen)))["x"].error == (
        ErrorCode.unknown_member_id
    )
    assert replies(
        coord.sync_group(1, "x", SyncRequest("g", a, gen, protocol_name="roundrobin"))
    )["x"].error == ErrorCode.inconsistent_group_protocol
    # Stable: a repeated SyncGroup returns the member's assignment again.
    assert replies(coord.sync_group(1, "x", SyncRequest("g", b, gen)))["x"].assignment == (
        b.encode()
    )


def test_stable_rejoin_with_same_metadata_returns_current_generation():
    coord = make()
    (a, b), gen = stable_group(coord, 2)
    leader = a
    follower = b
    res = replies(coord.join_group(1, "x", join_req(member_id=follower)))["x"]
    assert res.error == ErrorCode.none and res.generation_id == gen
    assert coord.state_of("g") is GroupState.STABLE
    # The leader rejoining forces a rebalance (that is how it reacts to new partitions).
    assert replies(coord.join_group(1, "y", join_req(member_id=leader))) == {}
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE


def test_duplicate_join_answers_the_replaced_request():
    coord = make(delay_ms=3000)
    member, _ = join_new(coord, 0, "w1")
    effects = coord.join_group(10, "w1-again", join_req(member_id=member))
    assert replies(effects) == {"w1": JoinResult(ErrorCode.rebalance_in_progress, member)}
    assert set(replies(coord.advance(3000))) == {"w1-again"}


def test_pending_member_that_never_returns_is_forgotten():
    coord = make()
    (a,), gen = stable_group(coord, 1)
    first = replies(coord.join_group(1, "p", join_req()))["p"]
    assert first.error == ErrorCode.member_id_required
    # The half-joined member does not disturb the group, and is gone after its session.
    assert coord.state_of("g") is GroupState.STABLE
    coord.heartbeat(SESSION, "g", a, gen)
    coord.advance(SESSION + 1)
    res = replies(coord.join_group(SESSION + 2, "late", join_req(member_id=first.member_id)))
    assert res["late"].error == ErrorCode.unknown_member_id


def test_last_member_leaving_empties_the_group():
    coord = make()
    (a,), gen = stable_group(coord, 1)
    _, _, effects = coord.leave_group(7, "g", [a])
    assert coord.state_of("g") is GroupState.EMPTY
    persisted = [e.snapshot for e in effects if isinstance(e, Persist)]
    assert persisted[-1].state is GroupState.EMPTY
    assert persisted[-1].generation_id == gen + 1 and persisted[-1].members == ()
    assert coord.snapshot("g").state_timestamp_ms == 7


def test_offset_commit_validation():
    coord = make()
    assert coord.validate_offset_commit("simple", "", -1) == ErrorCode.none
    assert coord.validate_offset_commit("simple2", "m", 3) == ErrorCode.illegal_generation
    (a, b), gen = stable_group(coord, 2)
    assert coord.validate_offset_commit("g", a, gen) == ErrorCode.none
    assert coord.validate_offset_commit("g", a, gen - 1) == ErrorCode.illegal_generation
    assert coord.validate_offset_commit("g", "ghost", gen) == ErrorCode.unknown_member_id
    assert coord.validate_offset_commit("g", "", -1) == ErrorCode.unknown_member_id
    join_new(coord, 1, "w3")
    # PreparingRebalance: the old generation may still commit (consumers commit on revoke).
    assert coord.validate_offset_commit("g", a, gen) == ErrorCode.none
    coord.join_group(2, "ra", join_req(member_id=a))
    coord.join_group(2, "rb", join_req(member_id=b))
    assert coord.state_of("g") is GroupState.COMPLETING_REBALANCE
    assert coord.validate_offset_commit("g", a, gen + 1) == ErrorCode.rebalance_in_progress


def test_delete_group_only_when_empty():
    coord = make()
    (a,), _ = stable_group(coord, 1)
    assert coord.delete_group("g", 1) == ErrorCode.non_empty_group
    coord.leave_group(2, "g", [a])
    assert coord.delete_group("g", 3) == ErrorCode.none
    assert coord.state_of("g") is None
    assert coord.delete_group("g", 3) == ErrorCode.group_id_not_found


def test_loaded_group_keeps_generation_and_expires_silent_members():
    coord = make()
    (a, _b), gen = stable_group(coord, 2)
    snap = coord.snapshot("g")
    fresh = make()
    fresh.load_group(snap, 1000)
    assert fresh.state_of("g") is GroupState.STABLE
    assert fresh.heartbeat(2000, "g", a, gen) == ErrorCode.none
    fresh.heartbeat(1000 + SESSION - 1, "g", a, gen)
    fresh.advance(1000 + SESSION)  # b never came back
    assert fresh.state_of("g") is GroupState.PREPARING_REBALANCE


def test_fail_all_answers_parked_requests():
    coord = make(delay_ms=3000)
    join_new(coord, 0, "w1")
    effects = coord.fail_all()
    assert replies(effects)["w1"].error == ErrorCode.not_coordinator
    assert coord.waiters() == set()


def test_member_leaving_while_parked_in_sync_gets_an_answer():
    coord = make()
    a, _ = join_new(coord, -1000, "wa")
    b, _ = join_new(coord, -1000, "wb")
    done = settle(coord, 0)
    follower = b if done["wa"].leader_id == a else a
    assert replies(coord.sync_group(1, "sf", SyncRequest("g", follower, 1))) == {}
    _, errors, effects = coord.leave_group(2, "g", [follower])
    assert errors == [ErrorCode.none]
    assert replies(effects) == {"sf": SyncResult(ErrorCode.unknown_member_id)}
    assert coord.waiters() == set()


def _static_stable_group(coord):
    """Two static members (a leads) in a Stable group, assignments A and B."""
    ra = replies(coord.join_group(0, "ja", join_req(group_instance_id="ia")))
    assert ra == {}  # no MEMBER_ID_REQUIRED round trip for a static member: it parks
    coord.join_group(0, "jb", join_req(group_instance_id="ib"))
    coord.advance(100)  # the initial delay, extended once as b arrived during it
    done = replies(coord.advance(1000))
    a, b = done["ja"].member_id, done["jb"].member_id
    assert done["ja"].leader_id == a
    coord.sync_group(1001, "sb", SyncRequest("g", b, 1))
    coord.sync_group(1001, "sa", SyncRequest("g", a, 1, ((a, b"A"), (b, b"B"))))
    assert coord.state_of("g") is GroupState.STABLE
    return a, b


def test_static_member_restart_gets_its_assignment_back_without_a_rebalance():
    coord = make()
    a, b = _static_stable_group(coord)
    # b restarts (no LeaveGroup) and joins with an unknown member id and new owned partitions
    rejoin = replies(coord.join_group(1200, "jb2", join_req(
        group_instance_id="ib", protocols=(("range", b"sub-after-restart"),))))["jb2"]
    assert rejoin.error == ErrorCode.none and rejoin.member_id not in (a, b)
    assert (rejoin.generation_id, rejoin.leader_id, rejoin.members) == (1, a, ())
    assert coord.state_of("g") is GroupState.STABLE
    sync = replies(coord.sync_group(1201, "sb2", SyncRequest("g", rejoin.member_id, 1)))["sb2"]
    assert (sync.error, sync.assignment) == (ErrorCode.none, b"B")
    # a was never disturbed; the old incarnation of b is fenced everywhere
    assert coord.heartbeat(1202, "g", a, 1, "ia") == ErrorCode.none
    assert coord.heartbeat(1202, "g", b, 1, "ib") == ErrorCode.fenced_instance_id
    assert coord.validate_offset_commit("g", b, 1, "ib") == ErrorCode.fenced_instance_id
    assert replies(coord.sync_group(1202, "sb", SyncRequest("g", b, 1, group_instance_id="ib"))
                   )["sb"].error == ErrorCode.fenced_instance_id
    assert replies(coord.join_group(1202, "jb", join_req(member_id=b, group_instance_id="ib"))
                   )["jb"].error == ErrorCode.fenced_instance_id
    _, errors, _ = coord.leave_group(1203, "g", [b], ["ib"])
    assert errors == [ErrorCode.fenced_instance_id]
    snapshot = coord.snapshot("g")
    assert [(m.group_instance_id, m.assignment) for m in snapshot.members] == [
        ("ia", b"A"), ("ib", b"B")]


def test_static_leader_restart_learns_it_leads_only_with_skip_assignment():
    coord = make()
    a, b = _static_stable_group(coord)
    old = replies(coord.join_group(1200, "ja2", join_req(group_instance_id="ia")))["ja2"]
    # JoinGroup < v9: told the previous leader id, so it syncs as a follower
    assert (old.leader_id, old.members, old.skip_assignment) == (a, (), False)
    new = replies(coord.join_group(1300, "ja3", join_req(group_instance_id="ia",
                                                        supports_skip_assignment=True)))["ja3"]
    assert new.leader_id == new.member_id and new.skip_assignment
    assert [m.group_instance_id for m in new.members] == ["ia", "ib"]
    assert coord.state_of("g") is GroupState.STABLE


def test_static_member_leaves_by_instance_id_alone():
    coord = make()
    a, b = _static_stable_group(coord)
    top, errors, _ = coord.leave_group(1201, "g", [""], ["ib"])
    assert (top, errors) == (ErrorCode.none, [ErrorCode.none])
    assert [m.group_instance_id for m in coord.snapshot("g").members] == ["ia"]
    assert coord.state_of("g") is GroupState.PREPARING_REBALANCE
