"""The console's login sessions without a server (databus/console/sessions.py): tokens,
idle expiry, logout, the refused-login throttle."""

from __future__ import annotations

from databus.console.sessions import LoginThrottle, SessionTable, login_keys


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


def test_refused_logins_throttle_the_user_name_and_the_address_each_to_its_limit():
    clock = Clock()
    throttle = LoginThrottle({"user": 3, "address": 5}, window=300, clock=clock)
    mallory = login_keys("mallory", "10.0.0.7")
    for _ in range(3):
        assert throttle.retry_after(mallory) == 0
        throttle.failed(mallory)
        clock.now += 10
    # The user name is at its limit: from any address, until its oldest failure (at 1000)
    # leaves the window.
    assert throttle.retry_after(mallory) == 1300 - clock.now == 270
    assert throttle.retry_after(login_keys("mallory", "192.0.2.1")) == 270
    # The address is not: another user from it still may try (twice more).
    for user in ("bob", "carol"):
        assert throttle.retry_after(login_keys(user, "10.0.0.7")) == 0
        throttle.failed(login_keys(user, "10.0.0.7"))
    assert throttle.retry_after(login_keys("dave", "10.0.0.7")) == 1300 - clock.now
    assert throttle.retry_after(login_keys("dave", None)) == 0  # no address known: the name only
    # The window slides: one failure expires, one more try is allowed.
    clock.now = 1300
    assert throttle.retry_after(mallory) == 0
    throttle.failed(mallory)
    assert throttle.retry_after(mallory) == 10  # at the limit again until 1010's failure expires


def test_an_accepted_login_clears_its_keys_and_old_failures_are_forgotten():
    clock = Clock()
    throttle = LoginThrottle({"user": 2, "address": 2}, window=60, clock=clock)
    alice = login_keys("alice", "10.0.0.8")
    throttle.failed(alice)
    throttle.succeeded(alice)
    throttle.failed(alice)
    assert throttle.retry_after(alice) == 0  # one failure since the success, not two
    for n in range(100):  # a guesser of many names from many addresses
        throttle.failed(login_keys(f"user{n}", f"192.0.2.{n}"))
    assert len(throttle) == 202
    clock.now += 61
    assert throttle.retry_after(alice) == 0 and len(throttle) == 0  # all forgotten
