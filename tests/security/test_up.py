"""`databus up` with a secured built-in broker, set up as docs/security.md says: a user and
ACLs written to the data directory before it starts (``databus users add --data-dir``,
``databus acls --add --data-dir``), ``broker.options`` adding a SASL_PLAINTEXT listener and
turning ACLs on, ``broker.metrics_listen`` serving the broker's /metrics.  An app sends
through the sidecar (its PLAINTEXT way in, ``broker.listen``, as User:ANONYMOUS from
127.0.0.1); a Kafka client with the user's credentials sends and reads on the SASL
listener; one without credentials is closed, and the user is refused a topic of no ACL."""

from __future__ import annotations

import os
import re
import urllib.request

import yaml

from databus import Client
from tests.broker.clients import Msg, confluent_consume, confluent_produce
from tests.broker.test_api_versions import make
from tests.broker.wire import WireClient
from tests.helpers.processes import start_up, stop

from .conftest import databus

PASSWORD = "app-secret-5M"


def _offline(*args, stdin=None):
    result = databus(*args, stdin=stdin)
    assert result.returncode == 0, result.stderr


def test_up_with_sasl_listener_and_acls(tmp_path, sock_dir):
    data = str(tmp_path / "data")
    _offline("users", "add", "app", "--mechanism", "SCRAM-SHA-256", "--data-dir", data,
             "--password-stdin", stdin=PASSWORD + "\n")
    _offline("acls", "--add", "--allow-principal", "User:app", "--producer", "--consumer",
             "--topic", "up-orders", "--group", "up-app", "--data-dir", data)
    # the sidecar: User:ANONYMOUS on broker.listen, from the loopback address only
    _offline("acls", "--add", "--allow-principal", "User:ANONYMOUS", "--allow-host",
             "127.0.0.1", "--producer", "--topic", "up-orders", "--data-dir", data)
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump({
        "sidecar": {"socket": os.path.join(sock_dir, "up.sock"), "metrics_listen": None},
        "broker": {"data_dir": "data", "listen": "127.0.0.1:0",
                   "metrics_listen": "127.0.0.1:0",
                   "options": {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                               "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                               "authorizer.class.name": "StandardAuthorizer",
                               "group.initial.rebalance.delay.ms": 0}},
        "streams": {"orders": {"topic": "up-orders"}},
    }))
    process, text = start_up(["-c", str(config)], tmp_path, tmp_path / "up.log",
                             ready=("metrics on",))
    try:
        sasl = re.search(r"SASL_PLAINTEXT (\S+:\d+)", text).group(1)
        metrics = re.search(r"metrics on (http://\S+:\d+)/metrics", text).group(1)

        with Client(os.path.join(sock_dir, "up.sock")) as client:
            through_sidecar = client.send("orders", b"from-the-sidecar", key=b"k").result(30)
        assert through_sidecar.topic == "up-orders"

        app = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
               "sasl.username": "app", "sasl.password": PASSWORD}
        confluent_produce(sasl, "up-orders", [Msg(b"k", b"from-app")], **app)
        got = confluent_consume(sasl, "up-orders", 2, timeout=30, **app, **{"group.id": "up-app"})
        assert sorted(g.value for g in got) == [b"from-app", b"from-the-sidecar"]
        assert _produce_error(sasl, "up-secret", app) == "TOPIC_AUTHORIZATION_FAILED"

        with WireClient(sasl) as anonymous:  # no login on the SASL listener: closed
            anonymous.send(make(3, 9, topics=None, allow_auto_topic_creation=False,
                                include_cluster_authorized_operations=False,
                                include_topic_authorized_operations=False))
            assert anonymous.is_closed_by_peer()
        with urllib.request.urlopen(metrics + "/healthz", timeout=10) as answer:
            assert answer.status == 200
    finally:
        stop(process)


def _produce_error(bootstrap, topic, conf) -> str | None:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, **conf})
    reports = []
    producer.produce(topic, b"no-acl", on_delivery=lambda e, m: reports.append(e))
    producer.flush(15)
    return reports[0].name() if reports and reports[0] is not None else None
