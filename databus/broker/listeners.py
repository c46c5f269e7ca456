"""Listeners in Kafka's terms: ``listeners``, ``advertised.listeners`` and
``listener.security.protocol.map``.

    listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9094,INTERNAL://10.0.0.5:9095
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SSL
    advertised.listeners=SASL_SSL://bus.example.com:9094

Each listener has a name (the part before ``://``; none means PLAINTEXT) whose security
protocol the map gives: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.  Names are unique.  A
client connecting to a listener is told, in Metadata and FindCoordinator, the advertised
address of that same listener (Kafka's rule), which defaults to the bound address.

``server_ssl_context`` builds the TLS side from Kafka's PEM settings: ``ssl.keystore.location``
(``ssl.keystore.type=PEM``: a file holding the private key and the certificate chain),
``ssl.key.password``, ``ssl.truststore.location`` (``ssl.truststore.type=PEM``: CA
certificates that client certificates must chain to) and ``ssl.client.auth``
(none, requested, required).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from databus.protocol.addresses import parse_host_port

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {name: protocol}; ValueError naming a bad entry."""
    mapping: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name:
            raise ValueError(f"listener.security.protocol.map entry {item!r} is not "
                             "NAME:PROTOCOL")
        if protocol not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {protocol!r} is not one of "
                             f"{', '.join(PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


def listener_name(entry: str, default: str) -> str:
    """The NAME of a `NAME://HOST:PORT` listener entry; ``default`` for a bare HOST:PORT."""
    scheme, sep, _ = entry.strip().partition("://")
    return scheme.upper() if sep else default


def parse_listeners(text: str, protocol_map: str = DEFAULT_PROTOCOL_MAP, *,
                    advertised: bool = False, default_name: str = "PLAINTEXT") -> list[Listener]:
    """The listeners of a ``listeners`` (or ``advertised.listeners``) value, in order; an
    entry without ``NAME://`` is named ``default_name``."""
    what = "advertised.listeners" if advertised else "listeners"
    mapping = parse_protocol_map(protocol_map)
    result: list[Listener] = []
    for entry in text.split(","):
        if not entry.strip():
            continue
        name = listener_name(entry, default_name)
        host, port = parse_host_port(entry, allow_port_zero=not advertised,
                                     require_host=advertised, what=what)
        if name not in mapping:
            raise ValueError(f"{what}: listener {name} has no security protocol in "
                             f"listener.security.protocol.map ({protocol_map})")
        if any(existing.name == name for existing in result):
            raise ValueError(f"{what}: listener {name} is named twice")
        result.append(Listener(name, mapping[name], host, port))
    if not result:
        raise ValueError(f"{what} is empty")
    return result


def server_ssl_context(config) -> ssl.SSLContext:
    """The TLS context of the broker's SSL and SASL_SSL listeners; ValueError naming the
    setting that is missing or whose file cannot be used."""
    if not config.ssl_keystore_location:
        raise ValueError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM file "
                         "with the private key and the certificate chain)")
    for setting, kind in (("ssl.keystore.type", config.ssl_keystore_type),
                          ("ssl.truststore.type", config.ssl_truststore_type)):
        if kind.upper() != "PEM":
            raise ValueError(f"{setting}={kind}: only PEM is supported")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = config.ssl_key_password.get_secret_value() if config.ssl_key_password else None
    try:
        context.load_cert_chain(config.ssl_keystore_location, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"ssl.keystore.location={config.ssl_keystore_location}: cannot load "
                         f"the key and certificate: {exc}") from None
    if config.ssl_truststore_location:
        try:
            context.load_verify_locations(config.ssl_truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"ssl.truststore.location={config.ssl_truststore_location}: "
                             f"cannot load the CA certificates: {exc}") from None
    elif config.ssl_client_auth != "none":
        raise ValueError(f"ssl.client.auth={config.ssl_client_auth} needs "
                         "ssl.truststore.location (the CAs client certificates chain to)")
    context.verify_mode = CLIENT_AUTH[config.ssl_client_auth]
    return context


_DN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "domainComponent": "DC", "emailAddress": "EMAILADDRESS"}


def certificate_principal(peer_cert: dict | None) -> str | None:
    """``User:CN=app,OU=x,O=y`` for a verified client certificate (Kafka's default
    principal for SSL: the subject's distinguished name, RFC 2253 order); None without."""
    if not peer_cert or not peer_cert.get("subject"):
        return None
    parts = [f"{_DN_NAMES.get(key, key)}={value}"
             for rdn in reversed(peer_cert["subject"]) for key, value in rdn]
    return "User:" + ",".join(parts)
