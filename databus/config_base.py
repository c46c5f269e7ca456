"""What every part's config model shares: the strict pydantic base, ConfigError, Kafka's
``${env:...}`` / ``${file:...}`` references, durations, the checks of a field the parts'
validators share (``check_label``, ``check_regexes``, ``check_durations``, ``check_listen``)
and the topic selection a mirror, sink or index reads.  Each part's section model lives beside its code (docs/architecture.md,
"Where each config model lives"); databus/config.py assembles them into DatabusConfig.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from databus.protocol.addresses import parse_host_port


class ConfigError(ValueError):
    """sidecar.yaml (or a flag) is invalid; the message names every problem and where."""


# Cluster names used by mirrors and regions: they go into provenance headers and topic names.
LABEL = re.compile(r"^[A-Za-z0-9._-]+$")


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


# Kafka client keys about reaching a cluster (TLS, SASL) rather than producing or consuming:
# a cluster's values of them apply to every client of it (producers, mirrors, sinks).
CONNECTION_KEY_PREFIXES = ("security.protocol", "sasl.", "ssl.")
_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")


def is_secret_key(key: str) -> bool:
    """Keys whose values are never shown (logs, reload diffs, CLI output)."""
    last = key.rsplit(".", 1)[-1].lower()
    return last in ("password", "token", "secret") or key.endswith("jaas.config")


def describe_security(settings: Mapping[str, Any]) -> str:
    """``SASL_SSL, SCRAM-SHA-512 as sidecar``: how client ``settings`` reach a cluster, for
    start-up lines; "" for PLAINTEXT.  Never a secret."""
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol == "PLAINTEXT":
        return ""
    if protocol.startswith("SASL"):
        mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "PLAIN"
        user = settings.get("sasl.username")
        return f"{protocol}, {mechanism}" + (f" as {user}" if user else "")
    return protocol


def resolve_references(settings: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``${env:NAME}`` and ``${file:/path}`` in string values replaced by the environment
    variable / the file's content (without its final newline), as Kafka's config providers
    do; everything else as given.  ConfigError names the key and the reference (never a
    value) when a variable is unset or a file unreadable."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, str) and "${" in value:
            def replace(match, key=key):
                kind, ref = match.group(1), match.group(2)
                if kind == "env":
                    if ref not in os.environ:
                        raise ConfigError(f"{where}{key}: environment variable {ref} is not set")
                    return os.environ[ref]
                try:
                    return Path(ref).read_text().removesuffix("\n")
                except OSError as exc:
                    raise ConfigError(f"{where}{key}: cannot read {ref}: {exc.strerror}") from None
            value = _REFERENCE.sub(replace, value)
        out[key] = value
    return out


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}


def parse_duration_ms(value: Any) -> int:
    """``"1s"``, ``"5m"``, ``"2h"``, ``"250ms"`` or a number of ms -> ms."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value!r}")
        return int(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"not a duration: {value!r} (write e.g. 500ms, 1s, 5m, 2h)")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2)])


def compile_regex(pattern: str, what: str = "invalid regex") -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r}: {exc}") from None


# -- the checks the parts' field validators share: each raises ValueError naming the field

def check_label(value: str, what: str) -> str:
    """A name that goes into provenance headers and topic names (a mirror's, a region)."""
    if not LABEL.match(value):
        raise ValueError(f"{what} {value!r} may only contain letters, digits, '.', '_', '-'")
    return value


def check_regexes(patterns: Iterable[str], what: str = "invalid regex") -> None:
    for pattern in patterns:
        compile_regex(pattern, what)


def check_durations(values: Iterable[Any]) -> None:
    for value in values:
        parse_duration_ms(value)


def listen_address(value: str, field: str) -> tuple[str, int]:
    """A listener of ours: a host is required, port 0 picks a free port."""
    return parse_host_port(value, allow_port_zero=True, require_host=True, what=field)


def check_listen(value: str | None, field: str) -> str | None:
    """An optional listener (unset: none)."""
    if value is not None:
        listen_address(value, field)
    return value


class TopicSelection(Model):
    """The topics a mirror, sink or index reads: by exact name and/or by a regex."""

    topics: list[str] = Field(
        default_factory=list,
        description="Topics by exact name (a list, or a comma-separated string as in Kafka "
        "Connect).",
    )
    topics_regex: str | None = Field(
        None,
        alias="topics.regex",
        description="Every topic whose whole name matches this regular expression (checked "
        "again every `metadata.max.age.ms` of the consumer, so new topics are picked up).",
    )

    @field_validator("topics", mode="before")
    @classmethod
    def _topics(cls, v: Any) -> Any:
        """``topics`` as a list, or a comma-separated string as in Kafka Connect."""
        if isinstance(v, str):
            return [t.strip() for t in v.split(",") if t.strip()]
        return v

    @field_validator("topics_regex")
    @classmethod
    def _topics_regex(cls, v: str | None) -> str | None:
        if v is not None:
            compile_regex(v)
        return v

    def _require_topics(self, *, exactly_one: bool) -> None:
        if exactly_one and bool(self.topics) == (self.topics_regex is not None):
            raise ValueError("set exactly one of topics and topics.regex")
        if not self.topics and self.topics_regex is None:
            raise ValueError("set `topics` and/or `topics.regex`")
