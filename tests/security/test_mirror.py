"""A mirror between two brokers over SASL_SSL, its passwords given as ``${env:...}`` and
``${file:...}`` in sidecar.yaml: the records arrive, and no password appears in the mirror's
log, its /metrics, or ``databus mirror status``."""

from __future__ import annotations

import subprocess
import sys

from databus.broker.process import BrokerProcess, _child_env
from databus.protocol.sasl import make_credential
from databus.storage.credentials import CredentialStore
from tests.mirror.harness import MirrorProcess, fast, mirror_config, produce, read_all

from .conftest import USERS

B_PASSWORD = "b-mirror-secret-2K"


def test_mirror_over_sasl_ssl_with_secrets_from_env_and_file(secured, tmp_path, monkeypatch):
    store = CredentialStore(tmp_path / "b" / "data")
    store.upsert("mirror", make_credential("SCRAM-SHA-512", B_PASSWORD))
    password_file = tmp_path / "b.password"
    password_file.write_text(B_PASSWORD + "\n")
    monkeypatch.setenv("A_PASSWORD", USERS["admin"])
    b_options = {"listeners": "SASL_SSL://127.0.0.1:0",
                 "ssl.keystore.location": str(secured.pki.keystore)}
    with BrokerProcess(tmp_path / "b", b_options) as b:
        tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(secured.pki.ca)}
        clusters = {
            "A": {"bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"), **tls,
                  "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin",
                  "sasl.password": "${env:A_PASSWORD}"},
            "B": {"bootstrap.servers": b.bootstrap_for("SASL_SSL"), **tls,
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror",
                  "sasl.password": f"${{file:{password_file}}}"},
        }
        a_conf = {k: v for k, v in secured.confluent("SASL_SSL", "SCRAM-SHA-256").items()
                  if k != "bootstrap.servers"}
        produce(secured.broker.bootstrap_for("SASL_SSL"), "mirrored",
                [(b"k%d" % i, b"v%d" % i, [], None, None) for i in range(20)], **a_conf)
        config = mirror_config(tmp_path / "mirror.yaml", clusters, [fast(
            name="a2b", source="A", target="B", topics=["mirrored"])])
        config.write_text(config.read_text().replace("metrics_listen: null",
                                                     "metrics_listen: 127.0.0.1:0"))
        b_conf = {**tls, "sasl.mechanism": "PLAIN", "sasl.username": "mirror",
                  "sasl.password": B_PASSWORD}
        with MirrorProcess(config) as mirror:
            got = read_all(b.bootstrap_for("SASL_SSL"), "A.mirrored", 20, timeout=60,
                           **b_conf)
            assert [m.value() for m in got[0]] == [b"v%d" % i for i in range(20)]
            metrics = mirror.metrics()
            status = subprocess.run(
                [sys.executable, "-m", "databus.cli", "mirror", "status", "-c", str(config)],
                capture_output=True, text=True, env=_child_env(), timeout=60)
        assert status.returncode == 0, status.stderr
        assert "a2b" in status.stdout and "mirrored" in status.stdout
        for secret in (USERS["admin"], B_PASSWORD):
            for where, text in (("log", mirror.log_text()), ("metrics", metrics),
                                ("status", status.stdout + status.stderr),
                                ("broker log", b.log_text())):
                assert secret not in text, f"a password in the mirror's {where}"
        assert "Traceback" not in mirror.log_text(), mirror.log_text()
