"""Test certificates made with the ``openssl`` command, exactly as docs/security.md tells a
user to make them: a CA, a broker certificate for 127.0.0.1/localhost signed by it, and a
client certificate (CN=app) for ``ssl.client.auth``.  EC P-256 keys: quick to make."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # CA certificate: ssl.ca.location / ssl.truststore.location
    keystore: Path  # broker key + certificate (PEM): ssl.keystore.location
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=app: ssl.certificate.location
    client_key: Path  # ssl.key.location


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=databus test CA", cwd=directory)
    for name, subject, extension in (
        ("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "/O=databus/CN=app", "extendedKeyUsage=clientAuth"),
    ):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
                 cwd=directory)
        (directory / f"{name}.ext").write_text(extension + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
                 "-extfile", f"{name}.ext", cwd=directory)
    keystore = directory / "server.keystore.pem"
    keystore.write_text((directory / "server.key").read_text()
                        + (directory / "server.crt").read_text())
    return Pki(directory / "ca.crt", keystore, directory / "server.crt",
               directory / "server.key", directory / "client.crt", directory / "client.key")
