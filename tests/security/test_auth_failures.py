"""A refused login reaches the caller at once, as Kafka's clients report it
(AuthenticationException): our producer, consumer, share consumer and admin raise
SaslAuthenticationFailedError with the broker's message instead of retrying it like a network
error until max.block.ms; the CLI tools exit 1 naming it, ``databus up`` says so after
start-up; a producer picks up a password
fixed on the broker while it runs; a sidecar with a wrong password fails an app's sends with
the error and keeps serving; the broker answers a refused login before it closes the
connection, after connection.failed.authentication.delay.ms as Kafka's."""

from __future__ import annotations

import os

import pytest
import trio
import yaml

from databus import Client
from databus.client import Admin, Consumer, Producer, ShareConsumer, errors
from databus.protocol.errors import ErrorCode
from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore
from tests.broker.test_api_versions import make
from tests.broker.wire import WireClient
from tests.helpers.broker import BrokerProcess
from tests.helpers.processes import start_databus, wait_for_log
from tests.sidecar.harness import running_sidecar, short_tmpdir, sidecar_config
from tests.sidecar.test_sidecar_mock import fetch

from .conftest import databus

REFUSED = "invalid credentials with SASL mechanism SCRAM-SHA-256"
# Limits far beyond the guard below: a client that waited for them instead of raising the
# refusal would trip the guard.
PATIENT = {"request.timeout.ms": 300_000}
PRODUCER_PATIENT = {"max.block.ms": 600_000, "delivery.timeout.ms": 600_000, **PATIENT}
GUARD = 30


def wrong(secured, user: str = "bob", password: str = "wrong") -> dict:
    return secured.ours("SASL_PLAINTEXT", "SCRAM-SHA-256", user=user, password=password)


async def test_our_clients_raise_a_refused_login_at_once(secured):
    bootstrap = secured.broker.bootstrap_for("SASL_PLAINTEXT")
    conf = {**wrong(secured), **PATIENT}
    with trio.fail_after(GUARD):
        async with Producer(bootstrap, {**conf, **PRODUCER_PATIENT}) as producer:
            with pytest.raises(errors.SaslAuthenticationFailedError, match=REFUSED):
                await producer.send("auth-refused", b"x")
        async with Consumer(bootstrap, {**conf, "group.id": "auth-g"}) as consumer:
            consumer.subscribe(["auth-refused"])
            with pytest.raises(errors.SaslAuthenticationFailedError, match=REFUSED):
                await consumer.poll(GUARD * 10)
            # still refused on the next poll: the consumer keeps trying, it did not stop
            with pytest.raises(errors.AuthenticationError, match=REFUSED):
                await consumer.poll(GUARD * 10)
        async with ShareConsumer(bootstrap, {**conf, "group.id": "auth-sg"}) as share:
            share.subscribe(["auth-refused"])
            with pytest.raises(errors.SaslAuthenticationFailedError, match=REFUSED):
                await share.poll(GUARD * 10)
        async with Admin(bootstrap, conf) as admin:
            with pytest.raises(errors.SaslAuthenticationFailedError, match=REFUSED):
                await admin.list_topics()


@pytest.mark.parametrize("tool", ["produce", "consume"])
def test_cli_with_a_wrong_password_exits_1_naming_the_refusal(secured, tool):
    args = [tool, "--bootstrap-server", secured.broker.bootstrap_for("SASL_PLAINTEXT"),
            "--topic", "auth-cli"]
    for key, value in wrong(secured).items():
        args += ["-X", f"{key}={value}"]
    if tool == "consume":
        args += ["--timeout-ms", "600000"]
    result = databus(*args, stdin="a\nb\n")
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"databus {tool}: SASL_AUTHENTICATION_FAILED"), result.stderr
    assert REFUSED in last
    assert "not delivered" not in result.stderr  # stopped at the refusal, not per line


async def test_a_producer_recovers_once_its_password_is_fixed(secured, admin_config):
    def set_password(password: str) -> None:
        result = databus("users", "add", "dora", "--mechanism", "SCRAM-SHA-256",
                         *admin_config, "--password-stdin", stdin=password + "\n")
        assert result.returncode == 0, result.stderr

    def grant() -> None:
        result = databus("acls", "--add", "--allow-principal", "User:dora", "--producer",
                         "--idempotent", "--topic", "auth-fixed", *admin_config)
        assert result.returncode == 0, result.stderr

    await trio.to_thread.run_sync(set_password, "dora-old-1")
    await trio.to_thread.run_sync(grant)
    bootstrap = secured.broker.bootstrap_for("SASL_PLAINTEXT")
    async with Producer(bootstrap, wrong(secured, "dora", "dora-new-2")) as producer:
        with pytest.raises(errors.SaslAuthenticationFailedError, match=REFUSED):
            await producer.send("auth-fixed", b"refused")
        await trio.to_thread.run_sync(set_password, "dora-new-2")
        # the broker takes the new credential at once; the producer's next login after its
        # reconnect backoff (reconnect.backoff.max.ms, 1 s) uses it
        for _ in range(100):
            try:
                future = await producer.send("auth-fixed", b"accepted")
                break
            except errors.AuthenticationError:
                await trio.sleep(0.1)
        delivered = await future.wait()
    assert delivered.topic == "auth-fixed" and delivered.offset == 0


async def test_sidecar_with_a_wrong_password_fails_sends_and_keeps_serving(secured):
    cluster = {"bootstrap.servers": secured.broker.bootstrap_for("SASL_PLAINTEXT"),
               **wrong(secured)}

    def app(path):
        with Client(path) as client:
            outcomes = []
            for value in (b"one", b"two"):  # the second too: the sidecar is still there
                with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as failure:
                    client.send("auth-app", value).result(GUARD)
                outcomes.append(str(failure.value))
        return outcomes

    with short_tmpdir() as sock_dir:
        config = sidecar_config(sock_dir, {"main": cluster},
                                default_route={"topic": "auth-{stream}"})
        async with running_sidecar(config) as sidecar:
            outcomes = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
            health = await trio.to_thread.run_sync(fetch, sidecar.addresses.metrics[1],
                                                   "/metrics")
    assert all(REFUSED in outcome for outcome in outcomes), outcomes
    assert health


@pytest.fixture(scope="module")
def slow_close_broker(tmp_path_factory):
    """A SASL broker that closes a refused login's connection 2 s after the answer."""
    root = tmp_path_factory.mktemp("slow-close")
    CredentialStore(root / "data").upsert("ada", make_credential("SCRAM-SHA-256", "ada-9"))
    options = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
               "connection.failed.authentication.delay.ms": CLOSE_DELAY_MS}
    with BrokerProcess(root, options) as broker:
        yield broker


CLOSE_DELAY_MS = 2000


def test_broker_answers_a_refused_login_then_closes_after_the_delay(slow_close_broker):
    """Kafka's order (KIP-306): the refusal is sent at once, the close follows
    connection.failed.authentication.delay.ms later, never together (a client that reads
    an answer and the close in one go may drop the answer: kafka-python 3.0 does)."""
    with WireClient(slow_close_broker.bootstrap_for("SASL_PLAINTEXT")) as client:
        assert client.request(make(17, 1, mechanism="PLAIN")).error_code == ErrorCode.none
        refused = client.request(make(36, 2, auth_bytes=b"\0ada\0wrong"))
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert "invalid credentials" in refused.error_message
        client.sock.settimeout(CLOSE_DELAY_MS / 1000 / 4)
        assert not client.is_closed_by_peer()  # still open: the close waits
        client.sock.settimeout(30)
        assert client.is_closed_by_peer()  # then it comes


def test_databus_up_says_an_upstream_refused_the_login(secured, tmp_path):
    with short_tmpdir() as sock_dir:
        config = tmp_path / "sidecar.yaml"
        config.write_text(yaml.safe_dump({
            "sidecar": {"socket": os.path.join(sock_dir, "up.sock"), "metrics_listen": None},
            "clusters": {"main": {"bootstrap.servers":
                                  secured.broker.bootstrap_for("SASL_PLAINTEXT"),
                                  **wrong(secured)}},
        }))
        log_path = tmp_path / "up.log"
        process = start_databus(["up", "-c", str(config)], tmp_path, log_path)
        try:
            line = "databus up: upstream main: authentication failed (SASL_AUTHENTICATION_FAILED"
            text = wait_for_log(process, log_path, line, "the refused login logged",
                                timeout=GUARD)
            assert REFUSED in text
            assert process.poll() is None, text  # still running: sends fail, it serves on
        finally:
            process.terminate()
            process.wait(timeout=30)
