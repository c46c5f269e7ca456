"""What a reload changes: the difference between two DatabusConfigs, in words.

``diff_configs(old, new)`` is plain code (no I/O): ``applied`` lists what a hot reload
applies (streams added / removed / changed by name, producer defaults, the default route,
clusters, mirrors, sinks — and any other section, named, so a reload never mistakes a
change for "no change"), ``restart`` what only a restart can change (``sidecar.socket`` and the
other listeners and sizes fixed at start, every ``broker.*`` setting of the built-in broker),
each with its old and new value.  Both configs must have had the same command-line
overrides applied (databus/up/commands.py does), so a ``--socket`` given on the command
line is not a "change" against the file.  The sidecar logs ``applied`` as one line and each ``restart``
item as a WARNING; ``databus up --check-config`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from databus.config import is_secret_key

# Sidecar settings that only a restart can change (sockets and sizes fixed at start).
RESTART_ONLY = ("socket", "socket_mode", "socket_group", "tcp_listen", "metrics_listen", "buffer_memory",
                "max_frame_bytes")
# Sidecar settings a reload applies in place.
RELOADABLE_SIDECAR = ("reload_poll_ms", "shutdown_timeout_ms")


@dataclass
class ConfigDiff:
    applied: list[str] = field(default_factory=list)
    restart: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.applied or self.restart)

    def applied_line(self) -> str:
        return "; ".join(self.applied)


def _show(value: Any) -> str:
    value = _redacted(value)
    return "(unset)" if value is None else repr(value) if isinstance(value, str) else str(value)


def _redacted(value: Any) -> Any:
    """``value`` with the values of password-like keys (at any depth) replaced."""
    if isinstance(value, dict):
        return {k: "(hidden)" if is_secret_key(str(k)) else _redacted(v)
                for k, v in value.items()}
    return value


def _keys_changed(old: dict, new: dict) -> list[str]:
    """``k: a -> b`` / ``k: added b`` / ``k: removed`` for each differing key, sorted; the
    value of a password-like key is never shown (it is logged)."""
    out = []
    for key in sorted(set(old) | set(new)):
        show = (lambda _v: "(hidden)") if is_secret_key(str(key)) else _show
        if key not in new:
            out.append(f"{key} removed")
        elif key not in old:
            out.append(f"{key}={show(new[key])} added")
        elif old[key] != new[key]:
            out.append(f"{key} {show(old[key])} -> {show(new[key])}")
    return out


def _dump(model) -> dict:
    return model.model_dump(by_alias=True) if model is not None else {}


def _flat(data: dict, prefix: str = "") -> dict:
    """Nested dicts as dotted keys (broker.options.num.partitions), so a diff names the key."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def diff_configs(old, new) -> ConfigDiff:
    diff = ConfigDiff()
    added = sorted(set(new.streams) - set(old.streams))
    removed = sorted(set(old.streams) - set(new.streams))
    changed = sorted(name for name in set(old.streams) & set(new.streams)
                     if _dump(old.streams[name]) != _dump(new.streams[name]))
    if added:
        diff.applied.append(f"streams added: {', '.join(added)}")
    if removed:
        diff.applied.append(f"streams removed: {', '.join(removed)}")
    for name in changed:
        details = _keys_changed(_dump(old.streams[name]), _dump(new.streams[name]))
        diff.applied.append(f"stream {name} changed: {', '.join(details)}")
    producer = _keys_changed(old.producer, new.producer)
    if producer:
        diff.applied.append(f"producer defaults changed: {', '.join(producer)}")
    if _dump(old.default_route) != _dump(new.default_route):
        diff.applied.append(f"default_route {_describe_route(old.default_route)} -> "
                            f"{_describe_route(new.default_route)}")
    clusters = _keys_changed({k: _dump(v) for k, v in old.clusters.items()},
                             {k: _dump(v) for k, v in new.clusters.items()})
    if clusters:
        diff.applied.append(f"clusters changed: {', '.join(clusters)}")
    mirrors = _keys_changed({m.name: _dump(m) for m in old.mirrors},
                            {m.name: _dump(m) for m in new.mirrors})
    if mirrors:
        diff.applied.append(f"mirrors changed: {', '.join(_mirror_words(mirrors))}")
    sinks = _keys_changed({k: _dump(v) for k, v in old.sinks.items()},
                          {k: _dump(v) for k, v in new.sinks.items()})
    if sinks:
        diff.applied.append(f"sinks changed: {', '.join(_mirror_words(sinks))}")
    # Any other top-level section (one added to the config later): named, never ignored.
    for section in sorted(set(type(new).model_fields) - _DIFFED):
        if _dump_field(old, section) != _dump_field(new, section):
            diff.applied.append(f"{section} changed")
    for name in RELOADABLE_SIDECAR:
        a, b = getattr(old.sidecar, name), getattr(new.sidecar, name)
        if a != b:
            diff.applied.append(f"sidecar.{name} {a} -> {b}")
    for name in RESTART_ONLY:
        a, b = getattr(old.sidecar, name), getattr(new.sidecar, name)
        if a != b:
            diff.restart.append(f"sidecar.{name} {_show(a)} -> {_show(b)}")
    for key in _keys_changed(_flat(_dump(old.broker)), _flat(_dump(new.broker))):
        diff.restart.append(f"broker.{key}")
    # The console is started once with its settings (databus up): a restart moves it.
    for key in _keys_changed(_dump(old.console), _dump(new.console)):
        diff.restart.append(f"console.{key}")
    for section in ("delay", "transactions"):  # these services start with the sidecar
        for key in _keys_changed(_flat(_dump(getattr(old, section))),
                                 _flat(_dump(getattr(new, section)))):
            diff.restart.append(f"{section}.{key}")
    return diff


# The DatabusConfig fields diff_configs compares one by one above.
_DIFFED = {"streams", "producer", "default_route", "clusters", "mirrors", "sinks", "sidecar",
           "broker", "console", "delay", "transactions"}


def _dump_field(config, name: str) -> Any:
    value = getattr(config, name)
    return value.model_dump(by_alias=True) if hasattr(value, "model_dump") else repr(value)


def _describe_route(route) -> str:
    if route is None:
        return "(none)"
    return f"topic {route.topic!r}" + (f" on {route.cluster}" if route.cluster else "")


def _mirror_words(items: list[str]) -> list[str]:
    # A mirror's whole dict is noise in a log line: say added / removed / changed by name.
    words = []
    for item in items:
        name = item.split(" ", 1)[0].split("=", 1)[0]
        if item.endswith(" removed"):
            words.append(f"{name} removed")
        elif item.endswith(" added"):
            words.append(f"{name} added")
        else:
            words.append(f"{name} changed")
    return words
