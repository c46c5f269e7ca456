"""The console's login sessions without a server (databus/console/sessions.py): tokens,
idle expiry, logout."""

from __future__ import annotations

from databus.console.sessions import SessionTable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_finds_its_session_and_nothing_else():
    table = SessionTable(60, Clock())
    alice, bob = table.add("alice", "a"), table.add("bob", "b")
    assert alice != bob and len(alice) >= 43  # 256 random bits, URL-safe
    assert (table.get(alice).user, table.get(bob).value) == ("alice", "b")
    for wrong in (None, "", alice[:-1], bob + "x"):
        assert table.get(wrong) is None
    # Another console process (another secret) does not know the token.
    assert SessionTable(60, Clock()).get(alice) is None
    # The table keeps digests, never the tokens it handed out.
    assert alice.encode() not in b"".join(table._entries)


def test_idle_sessions_expire_and_use_keeps_one_alive():
    clock = Clock()
    table = SessionTable(60, clock)
    busy, idle = table.add("busy", 1), table.add("idle", 2)
    for _ in range(3):
        clock.now += 40
        assert table.get(busy) is not None  # used every 40 s: never idle for 60
    assert table.get(idle) is None  # 120 s unused
    assert [e.user for e in table.expired()] == ["idle"]
    assert table.expired() == [] and len(table) == 1
    clock.now += 60
    assert table.get(busy) is None and [e.user for e in table.expired()] == ["busy"]


def test_logout_removes_the_session():
    table = SessionTable(60, Clock())
    token = table.add("alice", "a")
    assert table.remove(token).user == "alice"
    assert table.get(token) is None and table.remove(token) is None and len(table) == 0
