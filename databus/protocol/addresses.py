"""HOST:PORT: the one parser for every address databus reads from config or flags.

Kafka's listener syntax, as ``listeners``, ``advertised.listeners`` and ``bootstrap.servers``
write it:

- ``host:port`` — a name or an IPv4 address (letters, digits, ``-``, ``.``, ``_``, ``%``);
- ``[v6]:port`` — an IPv6 address needs its brackets (``::1:9092`` is ambiguous, so bare
  IPv6 is refused); the host is returned without them;
- an optional ``SCHEME://`` prefix, Kafka's listener name (``PLAINTEXT://``, ``SSL://``,
  ``INTERNAL://``), is dropped: databus speaks plaintext only, the name picks nothing;
- the port is 1..65535; 0 only where a listener may bind an ephemeral port
  (``allow_port_zero``); a missing ``:port`` takes ``default_port`` when there is one;
- an empty host (``:9092``) is Kafka's "every interface" for a listener and "this host"
  for a client; a caller that needs a name says ``require_host``.

Every refusal is a ValueError naming the value and what is wrong with it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

__all__ = ["format_host_port", "parse_host_port", "parse_host_port_list"]

MAX_PORT = 65535

_SCHEME = re.compile(r"[A-Za-z0-9_.+-]+://")
# Kafka's own host pattern (EndPoint's uriParseExp): names, IPv4, and IPv6 zone ids.
_HOST = re.compile(r"[0-9A-Za-z\-%._]*")
_BRACKETED = re.compile(r"\[([^\]]*)\](.*)")


def parse_host_port(
    text: str,
    default_port: int | None = None,
    *,
    allow_port_zero: bool = False,
    require_host: bool = False,
    what: str = "address",
) -> tuple[str, int]:
    """``"[PLAINTEXT://]HOST:PORT"`` -> ``(host, port)``; see the module docstring for the
    rules.  ``what`` names the setting in the error message (``"bootstrap server"``)."""

    def bad(reason: str) -> ValueError:
        return ValueError(f"{what} must be HOST:PORT, got {text!r}: {reason}")

    text = text.strip()
    rest = text
    scheme = _SCHEME.match(rest)
    if scheme:
        rest = rest[scheme.end():]
    elif "://" in rest:
        raise bad("the listener name before :// may only have letters, digits and _.+-")

    bracketed = _BRACKETED.fullmatch(rest)
    if bracketed:
        host, tail = bracketed.groups()
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise bad(f"[{host}] is not an IPv6 address") from None
        if tail and not tail.startswith(":"):
            raise bad(f"unexpected {tail!r} after ]")
        port_text = tail[1:] if tail else None
    else:
        if rest.count(":") > 1:
            raise bad("an IPv6 address needs brackets, as in [::1]:9092")
        host, sep, port_text = rest.partition(":")
        if not sep:
            port_text = None
        if not _HOST.fullmatch(host):
            raise bad(f"{host!r} is not a host name or address")

    if require_host and not host:
        raise bad("no host")
    if port_text is None:
        if default_port is None:
            raise bad("no port")
        return host, default_port
    if not port_text.isascii() or not port_text.isdigit():
        raise bad(f"port {port_text!r} is not a number" if port_text else "no port")
    port = int(port_text)
    low = 0 if allow_port_zero else 1
    if not low <= port <= MAX_PORT:
        raise bad(f"port {port} is not in {low}..{MAX_PORT}")
    return host, port


def parse_host_port_list(
    value: str | Iterable[str], *, what: str = "bootstrap.servers"
) -> list[tuple[str, int]]:
    """A comma-separated list (``"h1:9092, h2:9092"``) or a sequence of HOST:PORT, as
    ``bootstrap.servers`` is written -> ``[(host, port), ...]``; blank entries are skipped,
    but the list may not be empty."""
    items = value.split(",") if isinstance(value, str) else list(value)
    addresses = [parse_host_port(item, what=what) for item in items if item.strip()]
    if not addresses:
        raise ValueError(f"{what} is empty")
    return addresses


def format_host_port(host: str, port: int) -> str:
    """``(host, port)`` -> ``"host:port"``, bracketing an IPv6 host (the inverse of
    ``parse_host_port``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
