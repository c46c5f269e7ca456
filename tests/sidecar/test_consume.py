"""Consuming through the sidecar with real processes: a `databus broker`, `databus sidecar`
processes, apps using the SDK (the issue's 100k messages become a few thousand here; the big
run is `databus bench consume-sdk`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
import yaml

from databus import AsyncClient, Client, SubscriptionError
from databus.protocol import sidecar_wire as wire
from databus.sidecar.produce.session import ProtocolError, Session
from tests.groups.raw import share_start_offset
from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for


class SidecarProcess:
    """`databus sidecar -c FILE` against ``bootstrap``."""

    def __init__(self, tmp, name: str, sock_dir: str, bootstrap: str, streams: dict,
                 **extra) -> None:
        self.socket = os.path.join(sock_dir, f"{name}.sock")
        self.log_path = tmp / f"{name}.log"
        config = tmp / f"{name}.yaml"
        config.write_text(yaml.safe_dump({
            "sidecar": {"socket": self.socket, "metrics_listen": "127.0.0.1:0",
                        "reload_poll_ms": 0},
            "clusters": {"main": {"bootstrap.servers": bootstrap}},
            "streams": streams,
            **extra,
        }))
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "databus.cli", "sidecar", "-c", str(config)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        metrics = re.compile(r"metrics\s+http://(\S+?)/metrics")
        try:
            wait_for(lambda: metrics.search(self.text()) or self.process.poll() is not None,
                     f"sidecar {name} started")
            assert self.process.poll() is None, self.text()
        except BaseException:
            self.close()
            raise
        self.metrics = metrics.search(self.text()).group(1)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str, **labels) -> float:
        body = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10).read()
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in body.decode().splitlines():
            if line.startswith(f"{name}{{{want}}} "):
                return float(line.split()[-1])
        raise AssertionError(f"no {name}{{{want}}} in /metrics")

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


# An app: subscribes, writes "subscribed", then one "partition offset value" line per
# message it acked (after ack(): a kill -9 between the two may deliver it again).
APP = textwrap.dedent("""
    import sys, time
    from databus import Client
    socket, group, out, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    with open(out, "a", buffering=1) as log, Client(socket) as client:
        sub = client.subscribe("work", group, max_in_flight=50)
        log.write("subscribed\\n")
        for message in sub:
            if delay:
                time.sleep(delay)
            message.ack()
            log.write(f"{message.partition} {message.offset} {message.value.decode()}\\n")
""")


def acked(paths) -> list[str]:
    values = []
    for path in paths:
        if path.exists():
            values += [line.split()[2] for line in path.read_text().splitlines()
                       if line.count(" ") == 2]
    return values


def group_members(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return len(description.members) if str(description.state).endswith("STABLE") else 0


def test_three_apps_two_sidecars_each_message_once_then_at_least_once_through_kill_9(
        tmp_path, sock_dir):
    # max.poll.interval.ms is also the group's rebalance timeout: a sidecar killed while a
    # rebalance waits for it holds the group up to that long (as in Kafka).
    streams = {"work": {"topic": "work", "consumer": {
        "session.timeout.ms": 4000, "heartbeat.interval.ms": 400, "fetch.max.wait.ms": 100,
        "max.poll.interval.ms": 10000,
    }}}
    options = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0,
               "group.min.session.timeout.ms": 1000}
    with BrokerProcess(tmp_path / "broker", options) as broker:
        (tmp_path / "app.py").write_text(APP)
        outs = [tmp_path / f"app{i}.out" for i in range(3)]
        apps: list = []
        sidecars: list = []
        try:
            a = SidecarProcess(tmp_path, "a", sock_dir, broker.bootstrap, streams)
            sidecars.append(a)
            b = SidecarProcess(tmp_path, "b", sock_dir, broker.bootstrap, streams)
            sidecars.append(b)
            with Client(a.socket) as client:
                client.send("work", b"create").result(30)  # the topic, 4 partitions
            for out, sidecar in zip(outs, (a, a, b)):
                apps.append(subprocess.Popen([
                    sys.executable, str(tmp_path / "app.py"), sidecar.socket, "g", str(out),
                    "0.003",
                ]))
            wait_for(lambda: all(o.exists() and "subscribed" in o.read_text() for o in outs),
                     "three apps subscribed")
            wait_for(lambda: group_members(broker.bootstrap, "g") == 2,
                     "one group member per sidecar, stable")
            n = 1500

            # Nothing fails: every message is acked exactly once, the load shared by all.
            with Client(a.socket) as client:
                for i in range(n):
                    client.send("work", b"1-%d" % i, key=b"%d" % i)
                client.flush(60)
            wait_for(lambda: len({v for v in acked(outs) if v.startswith("1-")}) == n,
                     "phase 1 acked")
            phase1 = [v for v in acked(outs) if v.startswith("1-")]
            assert len(phase1) == n, f"{len(phase1) - n} duplicates without any failure"
            assert all(any(line.startswith(("0 ", "1 ", "2 ", "3 "))
                           for line in o.read_text().splitlines()) for o in outs)

            # kill -9 of an app and of the other sidecar mid-way: every message still
            # acked, some twice.
            with Client(a.socket) as client:
                for i in range(n):
                    client.send("work", b"2-%d" % i, key=b"%d" % i)
                client.flush(60)
            wait_for(lambda: len([v for v in acked(outs) if v.startswith("2-")]) >= 150,
                     "phase 2 under way")
            os.kill(apps[0].pid, signal.SIGKILL)
            b.kill9()
            try:
                wait_for(lambda: len({v for v in acked(outs) if v.startswith("2-")}) == n,
                         "every message of phase 2 acked by the survivors", timeout=90)
            except AssertionError as exc:
                missing = {f"2-{i}" for i in range(n)} - set(acked(outs))
                raise AssertionError(
                    f"{exc}; {len(missing)} missing, e.g. {sorted(missing)[:5]}\n"
                    f"sidecar a:\n{a.text()[-4000:]}") from None
            phase2 = [v for v in acked(outs) if v.startswith("2-")]
            duplicates = len(phase2) - n
            print(f"phase 2: {n} messages, {duplicates} delivered twice")
            assert set(phase2) == {f"2-{i}" for i in range(n)}
            assert a.metric("databus_sidecar_consume_subscribers", stream="work", group="g") == 1
        finally:
            for app in apps:
                app.kill()
                app.wait()
            for sidecar in sidecars:
                sidecar.close()


def test_queue_mode_retries_wait_their_level_and_a_kill_9_loses_none(tmp_path, sock_dir):
    """ordering: none on a share group honours the retry delays.  With a 5 s acquisition
    lock, a nack whose level (1.5 s) ends within the lock keeps the record acquired until
    due; a longer delay (5 s) is copied to workers.retry and the original ACCEPTed.  A
    kill -9 of the sidecar with one of each pending loses neither: the held record comes
    back when its lock runs out (after its due time), the copy from the retry topic's
    consumer group; both come no earlier than due, as attempt 2, and the last attempt
    (max.attempts 2) goes to the share group's DLQ topic dlq.workers (KIP-1191): the held
    one REJECTed and copied by the broker, the retry topic's copied by the sidecar."""
    streams = {"queue": {"topic": "queue", "ordering": "none", "consumer": {
        "retry.levels": ["1500ms", "5s"], "max.attempts": 2, "fetch.max.wait.ms": 100,
        "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
        "max.poll.interval.ms": 5000,
    }}}
    options = {"num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
               "group.min.session.timeout.ms": 1000,
               "group.share.record.lock.duration.ms": 5000,
               "group.share.min.record.lock.duration.ms": 1000}
    with BrokerProcess(tmp_path / "broker", options) as broker:
        sidecars = [SidecarProcess(tmp_path, "a", sock_dir, broker.bootstrap, streams)]
        try:
            with Client(sidecars[0].socket) as client:
                client.send("queue", b"copied", partition=0).result(30)  # offset 0
                client.send("queue", b"held", partition=0).result(30)  # offset 1
                sub = client.subscribe("queue", "workers")
                first = {m.value: m for m in (sub.poll(30), sub.poll(30))}
                assert {v: m.attempt for v, m in first.items()} == {b"copied": 1, b"held": 1}
                nacked_at = time.time()
                first[b"held"].nack(reason="level 1")  # 1.5 s: within the lock
                first[b"copied"].nack(delay=5, reason="later")  # past the lock, less 0.5 s
                # The copy is in and the original accepted (the share group moved past it),
                # while "held" stays acquired by this sidecar: now kill it.
                wait_for(lambda: share_start_offset(broker.bootstrap, "workers", "queue") == 1,
                         "the copied record accepted")
                assert sidecars[0].metric("databus_sidecar_consume_held", stream="queue",
                                          group="workers") == 1
                sidecars[0].kill9()
            sidecars.append(SidecarProcess(tmp_path, "b", sock_dir, broker.bootstrap, streams))
            with Client(sidecars[1].socket) as client:
                sub = client.subscribe("queue", "workers")
                again = {}
                while len(again) < 2:
                    message = sub.poll(30)
                    assert message is not None, sidecars[1].text()[-3000:]
                    again[message.value] = (message, time.time())
                for value, delay in ((b"held", 1.5), (b"copied", 5)):
                    message, at = again[value]
                    assert message.attempt == 2 and message.offset == first[value].offset
                    assert at - nacked_at >= delay, f"{value} back before its {delay}s"
                    message.nack(reason="gave up")  # max.attempts: to the DLQ
                assert sub.poll(1.0) is None  # each came back once
                sub.close()
        finally:
            for sidecar in sidecars:
                sidecar.close()
        listed = dlq("list", "workers", "--bootstrap", broker.bootstrap, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = sorted((row["topic"], row["origin"], row["attempts"], row["reason"])
                      for row in json.loads(listed.stdout))
        assert rows == [("dlq.workers", "queue-0@0", 2, "gave up"),
                        ("dlq.workers", "queue-0@1", 2, "Offset rejected by client.")]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("consume")
    sock_dir = tmp_path_factory.mktemp("s")
    with BrokerProcess(tmp / "broker", {"num.partitions": 2,
                                        "group.initial.rebalance.delay.ms": 0}) as broker:
        process = SidecarProcess(tmp, "one", str(sock_dir), broker.bootstrap, {
            "retrying": {"topic": "retrying", "consumer": {
                "retry.levels": ["300ms", "600ms"], "max.attempts": 3,
                "fetch.max.wait.ms": 100}},
            "tagged": {"topic": "tagged"},
            "slow": {"topic": "slow", "consumer": {"max.poll.records": 20}},
            "jobs": {"topic": "jobs", "ordering": "none", "consumer": {"max.attempts": 2}},
        }, default_route={"topic": "{stream}"})
        process.bootstrap = broker.bootstrap
        try:
            yield process
        finally:
            process.close()


def dlq(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "databus.cli", "dlq", *args],
                          capture_output=True, text=True, timeout=60)


def test_nack_retries_after_the_level_then_dead_letters_and_replay_brings_it_back(sidecar):
    with Client(sidecar.socket) as client:
        client.send("retrying", b"job-1", key=b"k", headers={"trace": b"t1"}).result(30)
        sub = client.subscribe("retrying", "r")
        first = sub.poll(30)
        assert (first.value, first.attempt, first.headers) == (b"job-1", 1, [("trace", b"t1")])
        nacked_at = time.monotonic()
        first.nack(reason="db down")
        second = sub.poll(30)
        waited = time.monotonic() - nacked_at
        assert (second.attempt, second.offset, second.partition) == (2, first.offset,
                                                                      first.partition)
        assert second.headers == [("trace", b"t1")]  # the retry bookkeeping stays inside
        assert waited >= 0.29, "redelivered before its retry level (300ms)"
        second.nack(delay=0.05, reason="still down")
        third = sub.poll(30)
        assert third.attempt == 3
        third.nack(reason="gave up")  # max.attempts=3: to the DLQ
        assert sub.poll(1.0) is None

        listed = dlq("list", "r", "--bootstrap", sidecar.bootstrap, "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)
        assert row["reason"] == "gave up" and row["attempts"] == 3
        assert row["origin"] == f"retrying-{first.partition}@{first.offset}"
        shown = dlq("show", "r", "--bootstrap", sidecar.bootstrap)
        assert "value: job-1" in shown.stdout and "header trace: t1" in shown.stdout

        replayed = dlq("replay", "r", "--bootstrap", sidecar.bootstrap)
        assert replayed.returncode == 0 and "replayed 1 message" in replayed.stdout
        back = sub.poll(30)
        assert (back.value, back.attempt, back.offset) == (b"job-1", 1, first.offset)
        back.ack()
        again = dlq("replay", "r", "--bootstrap", sidecar.bootstrap)
        assert "replayed 0 message" in again.stdout  # each dead letter is replayed once
        sub.close()


def test_dlq_list_of_an_unknown_group_says_so_and_creates_nothing(sidecar):
    listed = dlq("list", "nosuchgroup", "--bootstrap", sidecar.bootstrap)
    assert (listed.returncode, listed.stdout) == (1, "")
    assert listed.stderr == ("databus dlq: unknown group 'nosuchgroup' (no such consumer group "
                             "and no topic nosuchgroup.dlq)\n")
    replayed = dlq("replay", "nosuchgroup", "--bootstrap", sidecar.bootstrap)
    assert replayed.returncode == 1 and "unknown group 'nosuchgroup'" in replayed.stderr
    topics = subprocess.run([sys.executable, "-m", "databus.cli", "topics", "list",
                             "--bootstrap", sidecar.bootstrap],
                            capture_output=True, text=True, timeout=60, check=True)
    assert "nosuchgroup.dlq" not in topics.stdout.split()
    assert "nosuchgroup.dlq-replay" not in topics.stdout.split()


def test_a_subscriber_sees_only_its_tags(sidecar):
    with Client(sidecar.socket) as client:
        for i, tag in enumerate(["paid", "free", None, "refund", "paid"]):
            client.send("tagged", b"%d" % i, tag=tag)
        client.flush(30)
        sub = client.subscribe("tagged", "billing", tags=["paid", "refund"])
        got = []
        while (message := sub.poll(2.0)) is not None:
            got.append((message.value, message.tag))
            message.ack()
        assert sorted(got) == [(b"0", "paid"), (b"3", "refund"), (b"4", "paid")]
        assert sidecar.metric("databus_sidecar_consume_filtered_total", stream="tagged",
                              group="billing") == 2
        # The same group with other tags on this host is refused (members subscribe alike).
        with pytest.raises(SubscriptionError, match="must subscribe alike"):
            client.subscribe("tagged", "billing", tags=["free"])
        sub.close()  # its acks go out first; the member commits them as it leaves
        again = client.subscribe("tagged", "billing", tags=["paid", "refund"])
        assert again.poll(1.0) is None  # a new member starts after what was acked
        again.close()


def test_an_idle_subscriber_long_polls_and_a_slow_one_bounds_the_sidecar(sidecar):
    with Client(sidecar.socket) as client:
        idle = client.subscribe("idle-stream", "idlers", fetch_max_wait_ms=200)
        time.sleep(1.0)
        # One long poll per fetch.max.wait.ms, not a busy loop.
        assert 2 <= idle.fetches <= 8, idle.fetches
        idle.close()

        for i in range(400):
            client.send("slow", b"%d" % i)
        client.flush(30)
        slow = client.subscribe("slow", "sloths", max_in_flight=5)
        held = [slow.poll(30) for _ in range(5)]
        assert slow.poll(0.5) is None  # the window is full until something is acked
        wait_for(lambda: sidecar.metric("databus_sidecar_consume_pending", stream="slow",
                                        group="sloths") > 0, "the sidecar read ahead")
        time.sleep(0.5)
        # 4 * max.poll.records (20) plus one poll's worth, however many wait upstream.
        assert sidecar.metric("databus_sidecar_consume_pending", stream="slow",
                              group="sloths") <= 100
        assert sidecar.metric("databus_sidecar_consume_in_flight", stream="slow",
                              group="sloths") == 5
        held[0].ack()
        assert slow.poll(30) is not None
        slow.close()


def test_async_client_subscribes_and_a_second_stream_in_one_group_is_refused(sidecar):
    async def main():
        async with AsyncClient(sidecar.socket) as client:
            await client.send_and_wait("async-stream", b"hello", tag="t")
            sub = await client.subscribe("async-stream", "asyncers")
            message = await sub.poll(30)
            assert (message.value, message.tag, message.topic) == (b"hello", "t",
                                                                   "async-stream")
            message.ack()
            with pytest.raises(SubscriptionError, match="a group consumes one stream"):
                await client.subscribe("other-stream", "asyncers")
            sub.close()

    asyncio.run(main())


def test_queue_mode_shares_a_partition_through_a_share_group(sidecar):
    """ordering: none against a broker that serves KIP-932: several apps get one
    partition's messages, a nack is a RELEASE once its retry level (1s) has passed (the
    delivery count is the attempt), the last attempt a REJECT, which the broker (KIP-1191,
    share.version 2) copies to the group's DLQ topic dlq.workers with its headers; `databus
    dlq replay` brings it back to the group."""
    with Client(sidecar.socket) as client:
        for i in range(60):
            client.send("jobs", b"%d" % i, partition=0)
        client.flush(30)
        subs = [client.subscribe("jobs", "workers", max_in_flight=4) for _ in range(3)]
        assert subs[0].ordering == "none"
        seen: dict[bytes, list[int]] = {}
        by_sub = [0, 0, 0]
        nacked_at = float("inf")  # when b"7" was nacked
        deadline = time.monotonic() + 60
        while (len(seen) < 60 or len(seen[b"7"]) < 2) and time.monotonic() < deadline:
            for i, sub in enumerate(subs):
                message = sub.poll(0.05)
                if message is None:
                    continue
                assert message.partition == 0
                seen.setdefault(message.value, []).append(message.attempt)
                by_sub[i] += 1
                if message.value == b"7":
                    if message.attempt == 2:
                        assert time.monotonic() - nacked_at >= 1.0, "before its retry level"
                    nacked_at = time.monotonic()
                    message.nack(reason="poison")
                else:
                    message.ack()
        assert sorted(seen, key=int) == [b"%d" % i for i in range(60)]
        assert seen[b"7"] == [1, 2]  # RELEASE when due, then the last attempt to the DLQ
        assert all(by_sub), by_sub  # one partition, three apps
        wait_for(lambda: sidecar.metric("databus_sidecar_consume_dead_lettered_total",
                                        stream="jobs", group="workers") == 1, "REJECTed")
        for sub in subs:
            sub.close()
    listed = dlq("show", "workers", "--bootstrap", sidecar.bootstrap, "--json")
    (row,) = json.loads(listed.stdout)
    assert (row["topic"], row["reason"], row["attempts"], row["origin"], row["value"]) == (
        "dlq.workers", "Offset rejected by client.", 2, "jobs-0@7", "7")
    assert row["headers"]["__dlq.errors.group"] == "workers"  # the broker wrote it
    assert "databus-reason" not in row["headers"]  # (the sidecar did not)
    replayed = dlq("replay", "workers", "--bootstrap", sidecar.bootstrap)
    assert replayed.returncode == 0 and "replayed 1 message" in replayed.stdout
    with Client(sidecar.socket) as client:
        sub = client.subscribe("jobs", "workers")
        back = sub.poll(30)
        assert (back.value, back.attempt, back.offset, back.partition) == (b"7", 1, 7, 0)
        back.ack()
        sub.close()


def test_queue_mode_without_kip1191_writes_its_own_dead_letters(tmp_path, sock_dir):
    """A cluster whose share.version is 1 (share groups, no dead-letter topics): the
    sidecar copies the last attempt to GROUP.dlq itself, then REJECTs it."""
    streams = {"q": {"topic": "q", "ordering": "none",
                     "consumer": {"max.attempts": 1, "fetch.max.wait.ms": 100}}}
    with BrokerProcess(tmp_path / "broker", {"num.partitions": 1, "share.version": 1,
                                             "group.initial.rebalance.delay.ms": 0}) as broker:
        sidecar = SidecarProcess(tmp_path, "a", sock_dir, broker.bootstrap, streams)
        try:
            with Client(sidecar.socket) as client:
                client.send("q", b"bad", partition=0).result(30)
                sub = client.subscribe("q", "w")
                message = sub.poll(30)
                assert message.attempt == 1
                message.nack(reason="poison")
                wait_for(lambda: share_start_offset(broker.bootstrap, "w", "q") == 1,
                         "the dead letter rejected")
                sub.close()
        finally:
            sidecar.close()
        listed = dlq("list", "w", "--bootstrap", broker.bootstrap, "--json")
        (row,) = json.loads(listed.stdout)
        assert (row["topic"], row["reason"], row["origin"]) == ("w.dlq", "poison", "q-0@0")


def test_consume_frames_need_protocol_version_3():
    session = Session(1 << 20, lambda v: wire.hello_reply("s", 1 << 20, 1000, v))
    data = (wire.encode_frame(wire.hello("old-sdk", version=2))
            + wire.encode_frame(wire.subscribe(1, "s", "g")))
    events = session.receive_data(data)
    assert type(events[-1]) is ProtocolError
    assert "need protocol version 3" in events[-1].message
