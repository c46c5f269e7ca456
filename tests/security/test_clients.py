"""Real Kafka clients (confluent-kafka, kafka-python) and ours against the secured broker:
SSL with a client certificate, SASL_PLAINTEXT and SASL_SSL with PLAIN and both SCRAMs; right
credentials work, wrong ones fail with an authentication error that names the cause."""

from __future__ import annotations

import pytest

from tests.broker.clients import (
    Msg,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
    kafka_python_produce,
)

from .conftest import USERS

CASES = [  # (listener, mechanism)
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"),
]


@pytest.mark.parametrize(("listener", "mechanism"), CASES)
def test_confluent_kafka_produces_and_consumes(secured, listener, mechanism):
    topic = f"ck-{listener}-{mechanism}".lower()
    conf = secured.confluent(listener, mechanism)
    conf.pop("bootstrap.servers")
    confluent_produce(secured.broker.bootstrap_for(listener), topic,
                      [Msg(b"k", b"over " + listener.encode())], **conf)
    got = confluent_consume(secured.broker.bootstrap_for(listener), topic, 1, timeout=30,
                            **conf)
    assert [g.value for g in got] == [b"over " + listener.encode()]


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SSL", None), ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"),
])
def test_kafka_python_produces_and_consumes(secured, listener, mechanism):
    topic = f"kp-{listener}-{mechanism}".lower()
    conf = secured.kafka_python(listener, mechanism)
    bootstrap = secured.broker.bootstrap_for(listener)
    kafka_python_produce(bootstrap, topic, [Msg(b"k", b"kp")], **conf)
    got = kafka_python_consume(bootstrap, topic, 1, timeout=30, **conf)
    assert [g.value for g in got] == [b"kp"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_wrong_password_is_an_authentication_error(secured, mechanism):
    import confluent_kafka

    errors: list = []
    conf = secured.confluent("SASL_SSL", mechanism, password="not-the-password",
                             error_cb=errors.append)
    producer = confluent_kafka.Producer(conf)
    producer.produce("never", b"x")
    producer.poll(0)
    for _ in range(50):
        if errors:
            break
        producer.poll(0.1)
    assert errors, "no error reported"
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "invalid credentials" in errors[0].str()
    assert producer.flush(0) == 1  # nothing was delivered


def test_kafka_python_wrong_password_is_an_authentication_error(secured, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    conf = secured.kafka_python("SASL_PLAINTEXT", "SCRAM-SHA-256", user="bob",
                                password="wrong")
    # kafka-python logs the refusal and keeps retrying until its bootstrap timeout
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=secured.broker.bootstrap_for("SASL_PLAINTEXT"),
                      bootstrap_timeout_ms=8000, **conf)  # SCRAM under load is slow
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in caplog.text


def test_our_client_over_sasl_ssl_and_ssl(secured):
    from databus.client import SyncAdmin, SyncConsumer, SyncProducer

    conf = secured.ours("SASL_SSL", "SCRAM-SHA-512")
    bootstrap = secured.broker.bootstrap_for("SASL_SSL")
    with SyncProducer(bootstrap, conf) as producer:
        producer.send("ours-sasl", b"v1").result(30)
    consumer_conf = {**conf, "group.id": "ours-g", "auto.offset.reset": "earliest"}
    with SyncConsumer(bootstrap, consumer_conf) as consumer:
        consumer.subscribe(["ours-sasl"])
        got = []
        for _ in range(60):
            got += consumer.poll(0.5)
            if got:
                break
    assert [r.value for r in got] == [b"v1"]
    with SyncAdmin(secured.broker.bootstrap_for("SASL_PLAINTEXT"),
                   secured.ours("SASL_PLAINTEXT", "PLAIN")) as admin:
        assert "ours-sasl" in admin.list_topics()


def test_our_client_refuses_a_certificate_it_does_not_trust_and_a_wrong_password(secured):
    from databus.client import KafkaError, SyncAdmin

    wrong = secured.ours("SASL_SSL", "SCRAM-SHA-256", password="nope")
    unknown = secured.ours("SASL_SSL", "SCRAM-SHA-256", user="bob")
    unknown["sasl.username"] = "nobody"
    messages = []
    for conf in (wrong, unknown):  # the same words either way: no user enumeration
        with SyncAdmin(secured.broker.bootstrap_for("SASL_SSL"), conf) as admin:
            with pytest.raises(KafkaError, match="invalid credentials") as failure:
                admin.list_topics()
        messages.append(str(failure.value).split(": ", 1)[-1])
    assert messages[0] == messages[1]
    untrusted = {"security.protocol": "SSL"}  # the system CAs do not know our test CA
    with SyncAdmin(secured.broker.bootstrap_for("SSL"), untrusted) as admin:
        with pytest.raises(KafkaError, match="TLS handshake .* failed.*certificate verify"):
            admin.list_topics()
    assert USERS["admin"] not in secured.broker.log_text()
