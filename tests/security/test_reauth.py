"""KIP-368 re-authentication with ``connections.max.reauth.ms`` (2 s here): the broker says
the login's lifetime in SaslAuthenticate v1+; a connection that sends anything but a
re-authentication after it is closed; one that logs in again (same mechanism, same user)
goes on, a different mechanism or user is refused and closed.  databus's client and
confluent-kafka (librdkafka) log in again by themselves, so their connections outlive
several lifetimes without being closed.

The waits are past the login's end (2.2 s for a 2 s lifetime): what is checked is what the
broker does after the end, never how long anything took.  The broker's log is read up to a
line written on purpose (a failed login of a made-up user), so a line about an earlier
connection is in it if it was ever written."""

from __future__ import annotations

import datetime
import time

import pytest

from databus.protocol.errors import ErrorCode
from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore
from tests.broker.test_api_versions import make
from tests.broker.wire import WireClient
from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for

USERS = {"ada": "ada-secret-1R", "eve": "eve-secret-2T"}
LIFETIME = datetime.timedelta(milliseconds=2000)
PAST_THE_END = 2.2
EXPIRED = "SASL login as"  # the broker's INFO line when it closes an expired connection


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("reauth")
    store = CredentialStore(root / "data")
    for user, password in USERS.items():
        store.upsert(user, make_credential("SCRAM-SHA-256", password))
    options = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
               "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
               "connections.max.reauth.ms": int(LIFETIME.total_seconds() * 1000)}
    with BrokerProcess(root, options) as broker:
        yield broker


def _login(client, user="ada", mechanism="PLAIN", password=None):
    """SaslHandshake + PLAIN SaslAuthenticate v2: the answer."""
    handshake = client.request(make(17, 1, mechanism=mechanism))
    if handshake.error_code != ErrorCode.none:
        return handshake
    password = USERS[user] if password is None else password
    return client.request(make(36, 2, auth_bytes=f"\0{user}\0{password}".encode()))


def _log_until_now(broker, start: int = 0) -> str:
    """The broker's log from ``start`` up to a line it writes now (its log is copied to the
    file by a thread: a line about an earlier connection is before this one)."""
    marker = f"marker-{time.monotonic_ns()}"
    with WireClient(broker.bootstrap_for("SASL_PLAINTEXT")) as client:
        assert client.request(make(17, 1, mechanism="PLAIN")).error_code == ErrorCode.none
        client.request(make(36, 2, auth_bytes=f"\0{marker}\0-".encode()))

    def logged() -> str | None:
        text = broker.log_text()
        return text if marker in text else None

    text = wait_for(logged, "the marker's failed login in the broker's log", timeout=30,
                    interval=0.05)
    return text[start:]


def _metadata(client):
    return client.request(make(3, 9, topics=None, allow_auto_topic_creation=False,
                               include_cluster_authorized_operations=False,
                               include_topic_authorized_operations=False))


def test_broker_closes_an_expired_login_and_takes_a_re_authentication(reauth_broker):
    address = reauth_broker.bootstrap_for("SASL_PLAINTEXT")
    with WireClient(address) as client:
        login = _login(client)
        assert login.error_code == ErrorCode.none and login.session_lifetime == LIFETIME
        _metadata(client)
        time.sleep(PAST_THE_END)
        client.send(make(3, 9, topics=None, allow_auto_topic_creation=False,
                         include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False))
        assert client.is_closed_by_peer()
    assert EXPIRED in _log_until_now(reauth_broker)

    with WireClient(address) as client:
        assert _login(client).error_code == ErrorCode.none
        again = _login(client)  # after the end too: see test_our_client_...
        assert again.error_code == ErrorCode.none and again.session_lifetime == LIFETIME
        assert _metadata(client).brokers  # answered: the login is new

    with WireClient(address) as client:
        assert _login(client).error_code == ErrorCode.none
        other = client.request(make(17, 1, mechanism="SCRAM-SHA-256"))
        assert other.error_code == ErrorCode.unsupported_sasl_mechanism
        assert client.is_closed_by_peer()

    with WireClient(address) as client:
        assert _login(client).error_code == ErrorCode.none
        as_eve = _login(client, "eve")
        assert as_eve.error_code == ErrorCode.sasl_authentication_failed
        assert "cannot change principals" in as_eve.error_message
        assert client.is_closed_by_peer()


def test_our_client_logs_in_again_before_the_end(reauth_broker):
    from databus.client import SyncProducer

    address = reauth_broker.bootstrap_for("SASL_PLAINTEXT")
    start = len(reauth_broker.log_text())
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "ada", "sasl.password": USERS["ada"]}
    with SyncProducer(address, conf) as producer:
        offsets = []
        # a send every 0.25 s across the point where a login is due (85-95% of it), then
        # one after idling past its end
        pauses = [0.25] * 10 + [PAST_THE_END, 0]
        for i, pause in enumerate(pauses):
            offsets.append(producer.send("reauth-ours", b"m%d" % i).result(30).offset)
            time.sleep(pause)
    assert offsets == list(range(len(pauses)))
    assert EXPIRED not in _log_until_now(reauth_broker, start)


def test_librdkafka_logs_in_again_before_the_end(reauth_broker):
    import confluent_kafka

    address = reauth_broker.bootstrap_for("SASL_PLAINTEXT")
    start = len(reauth_broker.log_text())
    producer = confluent_kafka.Producer({
        "bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "ada",
        "sasl.password": USERS["ada"]})
    reports = []
    for i in range(5):
        producer.produce("reauth-rd", b"m%d" % i, on_delivery=lambda e, m: reports.append(e))
        producer.flush(30)
        time.sleep(0.6)
    assert reports == [None] * 5
    del producer
    assert EXPIRED not in _log_until_now(reauth_broker, start)
