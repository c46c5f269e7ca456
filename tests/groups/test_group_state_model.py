"""Random joins, syncs, heartbeats, leaves and clock jumps never break the group invariants.

Invariants checked after every step:
- every request handed to the coordinator is answered exactly once, and a request not yet
  answered is parked inside the coordinator (so nothing can be lost or hang);
- generations advance by exactly one per completed join phase, and every successful
  JoinGroup answer carries the generation of the phase that produced it;
- each completed phase has exactly one leader, which alone gets the member list, and that
  list is exactly the set of members answered in the phase;
- when clients stop talking, advancing the clock answers every parked request.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from databus.broker.coordinator.group_state import (
    CoordinatorConfig,
    GroupCoordinator,
    GroupState,
    JoinRequest,
    JoinResult,
    Persist,
    Rebalanced,
    Reply,
    SyncRequest,
)
from databus.protocol.errors import ErrorCode

PROTOCOL_SETS = [
    (("range", b"r"), ("roundrobin", b"rr")),
    (("roundrobin", b"rr"), ("range", b"r")),
    (("range", b"r2"),),
]


class GroupModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        ids = itertools.count()
        self.coord = GroupCoordinator(
            CoordinatorConfig(initial_rebalance_delay_ms=500, min_session_timeout_ms=1),
            new_member_id=lambda cid: f"m{next(ids)}",
        )
        self.now = 0
        self.waiter_ids = itertools.count()
        self.outstanding: set[int] = set()
        self.answered: set[int] = set()
        self.known_members: list[str] = []
        self.generation_of: dict[str, int] = {}  # member -> generation of its last join answer
        self.last_phase_generation = 0

    # -- plumbing ---------------------------------------------------------------------

    def new_waiter(self) -> int:
        w = next(self.waiter_ids)
        self.outstanding.add(w)
        return w

    def apply(self, effects):
        phase_members: list[JoinResult] = []
        for effect in effects:
            if isinstance(effect, Reply):
                assert effect.waiter in self.outstanding, f"{effect.waiter} answered twice"
                self.outstanding.discard(effect.waiter)
                self.answered.add(effect.waiter)
                result = effect.result
                if isinstance(result, JoinResult):
                    if result.error == ErrorCode.member_id_required:
                        self.known_members.append(result.member_id)
                    elif result.error == ErrorCode.none:
                        if result.member_id not in self.known_members:
                            self.known_members.append(result.member_id)
                        assert result.generation_id == self.last_phase_generation
                        self.generation_of[result.member_id] = result.generation_id
                        phase_members.append(result)
            elif isinstance(effect, (Persist, Rebalanced)):
                snap = effect.snapshot
                if isinstance(effect, Rebalanced) or snap.state is GroupState.EMPTY:
                    # A join phase completed: one generation more, no skipping.
                    assert snap.generation_id == self.last_phase_generation + 1
                    self.last_phase_generation = snap.generation_id
                    self.check_phase_answers(phase_members)
                    phase_members = []
                else:
                    assert snap.generation_id == self.last_phase_generation
        self.check_phase_answers(phase_members)

    def check_phase_answers(self, results: list[JoinResult]):
        if not results:
            return
        leaders = {r.leader_id for r in results}
        assert len(leaders) == 1
        with_members = [r for r in results if r.members]
        for r in with_members:
            assert r.member_id == r.leader_id
        if len(with_members) == 1 and len(results) > 1:
            # A whole phase was answered: the leader's list is exactly who got answered.
            assert {m.member_id for m in with_members[0].members} == {
                r.member_id for r in results
            }

    # -- rules ------------------------------------------------------------------------

    @rule(kip394=st.booleans(), protocols=st.sampled_from(PROTOCOL_SETS),
          session=st.sampled_from([1000, 5000]), rebalance=st.sampled_from([2000, 8000]))
    def new_member(self, kip394, protocols, session, rebalance):
        w = self.new_waiter()
        self.apply(
            self.coord.join_group(
                self.now, w,
                JoinRequest("g", "", "consumer", protocols, session, rebalance,
                            require_known_member_id=kip394),
            )
        )

    @precondition(lambda self: self.known_members)
    @rule(data=st.data(), protocols=st.sampled_from(PROTOCOL_SETS))
    def rejoin(self, data, protocols):
        member = data.draw(st.sampled_from(self.known_members))
        w = self.new_waiter()
        self.apply(
            self.coord.join_group(
                self.now, w,
                JoinRequest("g", member, "consumer", protocols, 5000, 8000,
                            require_known_member_id=True),
            )
        )

    @precondition(lambda self: self.generation_of)
    @rule(data=st.data(), stale=st.booleans())
    def sync(self, data, stale):
        member = data.draw(st.sampled_from(sorted(self.generation_of)))
        gen = self.generation_of[member] - (1 if stale else 0)
        members = sorted(self.generation_of)
        w = self.new_waiter()
        self.apply(
            self.coord.sync_group(
                self.now, w,
                SyncRequest("g", member, gen, tuple((m, m.encode()) for m in members)),
            )
        )

    @precondition(lambda self: self.generation_of)
    @rule(leader_last=st.booleans())
    def sync_everyone(self, leader_last):
        """Every member of the newest generation sends SyncGroup (the common, happy path)."""
        gen = self.last_phase_generation
        members = sorted(m for m, g in self.generation_of.items() if g == gen)
        snap = self.coord.snapshot("g")
        leader = snap.leader_id if snap else None
        members.sort(key=lambda m: (m == leader) == leader_last)
        for member in members:
            w = self.new_waiter()
            self.apply(
                self.coord.sync_group(
                    self.now, w,
                    SyncRequest("g", member, gen, tuple((m, m.encode()) for m in members)),
                )
            )

    @precondition(lambda self: self.generation_of)
    @rule(data=st.data())
    def heartbeat(self, data):
        member = data.draw(st.sampled_from(sorted(self.generation_of)))
        self.coord.heartbeat(self.now, "g", member, self.generation_of[member])

    @precondition(lambda self: self.known_members)
    @rule(data=st.data())
    def leave(self, data):
        member = data.draw(st.sampled_from(self.known_members))
        _, _, effects = self.coord.leave_group(self.now, "g", [member])
        self.apply(effects)

    @rule(ms=st.integers(0, 6000))
    def tick(self, ms):
        self.now += ms
        self.apply(self.coord.advance(self.now))

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def nothing_lost(self):
        assert self.coord.waiters() == self.outstanding

    @invariant()
    def leader_is_a_member(self):
        snap = self.coord.snapshot("g")
        if snap is not None and snap.state in (GroupState.STABLE,
                                               GroupState.COMPLETING_REBALANCE):
            assert snap.leader_id in {m.member_id for m in snap.members}
            assert snap.generation_id == self.last_phase_generation

    def teardown(self):
        # Clients go quiet: within bounded time everything parked gets its answer.
        for _ in range(50):
            deadline = self.coord.next_deadline()
            if deadline is None or not self.outstanding:
                break
            self.now = max(self.now, deadline)
            self.apply(self.coord.advance(self.now))
        assert not self.outstanding, f"requests left hanging: {self.outstanding}"


TestGroupModel = GroupModel.TestCase
TestGroupModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
