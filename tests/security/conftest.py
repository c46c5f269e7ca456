"""One secured ``databus broker`` for the tests of this package (each uses its own topics): PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL listeners at once, ACLs on, users made with ``databus users add --data-dir`` before
it starts (as an operator makes the first user), certificates made with openssl as
docs/security.md says."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore
from tests.helpers.broker import BrokerProcess
from tests.helpers.tls import Pki, make_pki

USERS = {"admin": "admin-secret-7Q", "bob": "bob-secret-9Z", "tx": "tx-secret-3K",
         "sharer": "sharer-secret-5M"}
LISTENERS = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0," \
            "SASL_SSL://127.0.0.1:0"
CERT_PRINCIPAL = "User:CN=app,O=databus"


def databus(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "databus.cli", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


@dataclass
class Secured:
    broker: BrokerProcess
    pki: Pki

    def confluent(self, listener: str, mechanism: str | None = None, user: str = "admin",
                  password: str | None = None, **extra) -> dict:
        """confluent-kafka settings for ``listener`` as ``user``."""
        conf = {"bootstrap.servers": self.broker.bootstrap_for(listener),
                "security.protocol": listener}
        if "SSL" in listener:
            conf["ssl.ca.location"] = str(self.pki.ca)
        if listener == "SSL":  # a client certificate: the principal is its subject
            conf.update({"ssl.certificate.location": str(self.pki.client_cert),
                         "ssl.key.location": str(self.pki.client_key)})
        if listener.startswith("SASL"):
            conf.update({"sasl.mechanism": mechanism or "PLAIN", "sasl.username": user,
                         "sasl.password": USERS[user] if password is None else password})
        conf.update(extra)
        return conf

    def kafka_python(self, listener: str, mechanism: str | None = None, user: str = "admin",
                     password: str | None = None) -> dict:
        conf: dict = {"security_protocol": listener}
        if "SSL" in listener:
            conf["ssl_cafile"] = str(self.pki.ca)
        if listener == "SSL":
            conf.update(ssl_certfile=str(self.pki.client_cert),
                        ssl_keyfile=str(self.pki.client_key))
        if listener.startswith("SASL"):
            conf.update(sasl_mechanism=mechanism or "PLAIN", sasl_plain_username=user,
                        sasl_plain_password=USERS[user] if password is None else password)
        return conf

    def ours(self, listener: str, mechanism: str = "SCRAM-SHA-256", user: str = "admin",
             password: str | None = None) -> dict:
        """databus client settings (Kafka's names, as in sidecar.yaml)."""
        conf = {"security.protocol": listener}
        if "SSL" in listener:
            conf["ssl.ca.location"] = str(self.pki.ca)
        if listener.startswith("SASL"):
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": USERS[user] if password is None else password})
        return conf


@pytest.fixture(scope="package")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured")
    pki = make_pki(root / "pki")
    # the first user as an operator makes it, before the broker starts; the others directly
    result = databus("users", "add", "admin", "--data-dir", str(root / "data"),
                     "--password-stdin", stdin=USERS["admin"] + "\n")
    assert result.returncode == 0, result.stderr
    store = CredentialStore(root / "data")
    for user in ("bob", "tx", "sharer"):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            store.upsert(user, make_credential(mechanism, USERS[user]))
    options = {
        "listeners": LISTENERS,
        "ssl.keystore.location": str(pki.keystore),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "requested",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:admin;{CERT_PRINCIPAL}",
        "group.initial.rebalance.delay.ms": 0,
    }
    with BrokerProcess(root, options) as broker:
        yield Secured(broker, pki)


@pytest.fixture(scope="package")
def admin_config(secured, tmp_path_factory):
    """A --command-config file for the CLI: the super user over SASL_SSL."""
    path = tmp_path_factory.mktemp("cli") / "admin.properties"
    conf = secured.ours("SASL_SSL", "SCRAM-SHA-512")
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return ["--bootstrap-server", secured.broker.bootstrap_for("SASL_SSL"),
            "--command-config", str(path)]
