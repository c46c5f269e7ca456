"""The sidecar in front of a SASL_SSL cluster, its password from ``${env:...}``, with
per-app tokens: an app with its token sends to its streams and is refused others; an app
without a token is turned away at hello; no password nor token appears in /metrics or the
log."""

from __future__ import annotations

import logging

import pytest
import trio

from databus import Client, StreamNotAllowedError, UnauthorizedError
from tests.sidecar.harness import running_sidecar, sidecar_config
from tests.sidecar.test_sidecar_mock import fetch

from .conftest import USERS

TOKEN = "billing-token-8V"


async def test_sidecar_over_sasl_ssl_with_app_tokens(secured, sock_dir, monkeypatch, caplog):
    monkeypatch.setenv("UPSTREAM_PASSWORD", USERS["admin"])
    monkeypatch.setenv("BILLING_TOKEN", TOKEN)
    cluster = {"bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"),
               "security.protocol": "SASL_SSL", "ssl.ca.location": str(secured.pki.ca),
               "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
               "sasl.password": "${env:UPSTREAM_PASSWORD}"}
    config = sidecar_config(
        sock_dir, {"secure": cluster}, default_route={"topic": "sc-{stream}"},
        sidecar={"tokens": {"billing": {"token": "${env:BILLING_TOKEN}",
                                        "streams": ["billing\\..*"]}}})

    def app(path):
        with pytest.raises(UnauthorizedError, match="needs a token"):
            Client(path, connect_timeout=5)
        with pytest.raises(UnauthorizedError, match="unknown token"):
            Client(path, connect_timeout=5, token="guess")
        with Client(path, token=TOKEN) as client:
            delivered = client.send("billing.invoices", b"inv-1").result(30)
            refused = client.send("payroll", b"salaries")
            with pytest.raises(StreamNotAllowedError, match="may not send to stream 'payroll'"):
                refused.result(30)
        return delivered

    caplog.set_level(logging.DEBUG)
    async with running_sidecar(config) as sidecar:
        delivered = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
        metrics = await trio.to_thread.run_sync(fetch, sidecar.addresses.metrics[1], "/metrics")
    assert delivered.topic == "sc-billing.invoices" and delivered.offset == 0
    for secret in (USERS["admin"], TOKEN):
        assert secret not in metrics
        assert secret not in caplog.text
