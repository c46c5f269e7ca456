"""The plugin manager: discovery through entry points, the allow-list, and fault isolation.

Plugins are found in the ``databus`` entry-point group, the built-in ones
(``databus_plugins.*``) exactly like third-party ones.  ``DATABUS_LOAD_PLUGINS`` is an
allow-list of entry-point names for plugins of *other* distributions (comma-separated; set but
empty loads none of them); databus's own built-ins always load, they are part of the product.

A plugin that fails to import, or whose hook raises, is recorded in ``failures`` under its
name and skipped; it never takes the sidecar down.  Factory hooks are called one
implementation at a time (``call_each`` / ``call_first``) so a failure names its plugin.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from . import hookspecs

log = logging.getLogger("databus.plugins")

ENTRY_POINT_GROUP = "databus"
ALLOW_ENV = "DATABUS_LOAD_PLUGINS"
OWN_DISTRIBUTION = "databus"


class PluginError(Exception):
    """A plugin's hook raised; ``plugin`` names it."""

    def __init__(self, plugin: str, hook: str, exc: BaseException) -> None:
        super().__init__(f"plugin {plugin!r} failed in {hook}: {type(exc).__name__}: {exc}")
        self.plugin = plugin
        self.hook = hook
        self.__cause__ = exc


@dataclass
class PluginInfo:
    name: str
    module: str
    distribution: str | None
    version: str | None
    hooks: list[str] = field(default_factory=list)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the load failures and per-plugin calls described above."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.failures: dict[str, str] = {}
        self._dists: dict[str, tuple[str | None, str | None]] = {}

    def load_entry_points(self, allow: set[str] | None = None) -> None:
        for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=_ep_key):
            dist = ep.dist.metadata["Name"] if ep.dist is not None else None
            own = dist is not None and dist.lower() == OWN_DISTRIBUTION
            if not own and allow is not None and ep.name not in allow:
                continue
            if self.get_plugin(ep.name) is not None or ep.name in self.failures:
                continue
            try:
                plugin = ep.load()
                self.register(plugin, name=ep.name)
            except Exception as exc:
                self.failures[ep.name] = f"{type(exc).__name__}: {exc}"
                log.error("plugin %r (%s) failed to load: %s", ep.name, ep.value, exc)
                continue
            self._dists[ep.name] = (dist, ep.dist.version if ep.dist is not None else None)

    def info(self) -> list[PluginInfo]:
        out = []
        for name, plugin in self.list_name_plugin():
            dist, version = self._dists.get(name, (None, None))
            hooks = sorted(
                caller.name for caller in (self.get_hookcallers(plugin) or [])
            )
            module = getattr(plugin, "__name__", type(plugin).__module__)
            out.append(PluginInfo(name, module, dist, version, hooks))
        return sorted(out, key=lambda p: p.name)

    def _impls(self, hook_name: str):
        # pluggy calls the most recently registered implementation first; keep its order.
        return list(reversed(getattr(self.hook, hook_name).get_hookimpls()))

    def call_each(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call every implementation; returns (plugin name, result) for non-None results.
        Raises PluginError for the first implementation that raises."""
        return list(self._results(hook_name, kwargs))

    def call_first(self, hook_name: str, **kwargs: Any) -> tuple[str, Any] | None:
        """The first non-None result and its plugin's name (firstresult hooks)."""
        return next(self._results(hook_name, kwargs), None)

    def _results(self, hook_name: str, kwargs: dict[str, Any]):
        """(plugin name, result) of each implementation with a non-None result, called
        lazily in order; an implementation that raises becomes PluginError naming it."""
        for impl in self._impls(hook_name):
            args = [kwargs[a] for a in impl.argnames]
            try:
                result = impl.function(*args)
            except Exception as exc:
                raise PluginError(impl.plugin_name, hook_name, exc) from exc
            if result is not None:
                yield impl.plugin_name, result

    def notify(self, hook_name: str, **kwargs: Any) -> None:
        """Call a lifecycle hook on every plugin; a raising plugin is logged and skipped."""
        for impl in self._impls(hook_name):
            args = [kwargs[a] for a in impl.argnames]
            try:
                impl.function(*args)
            except Exception:
                log.exception("plugin %r failed in %s (ignored)", impl.plugin_name, hook_name)

    def partitioner_names(self) -> list[str]:
        return self._names("databus_partitioner_names")

    def sink_names(self) -> list[str]:
        return self._names("databus_sink_names")

    def _names(self, hook_name: str) -> list[str]:
        names: set[str] = set()
        for impl in self._impls(hook_name):
            try:
                names.update(impl.function() or ())
            except Exception:
                log.exception("plugin %r failed in %s", impl.plugin_name, hook_name)
        return sorted(names)


def _ep_key(ep: importlib.metadata.EntryPoint) -> tuple[int, str]:
    own = ep.dist is not None and ep.dist.metadata["Name"].lower() == OWN_DISTRIBUTION
    return (0 if own else 1, ep.name)


def allow_list_from_env() -> set[str] | None:
    raw = os.environ.get(ALLOW_ENV)
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def get_plugin_manager(extra_plugins: Sequence[tuple[str, object]] = ()) -> PluginManager:
    """A manager with the entry-point plugins (filtered by the allow-list) loaded, plus
    ``extra_plugins`` as (name, plugin) pairs registered after them (tests, embedding)."""
    pm = PluginManager()
    pm.load_entry_points(allow_list_from_env())
    for name, plugin in extra_plugins:
        pm.register(plugin, name=name)
    return pm


def make_partitioner(
    pm: PluginManager, name: str, config: dict[str, Any]
) -> tuple[str, Callable[[str, bytes | None, bytes | None, int], int]]:
    """(plugin name, partition callable) for a stream's ``partitioner`` setting.

    Raises ValueError naming the choices when no plugin makes ``name``, PluginError when the
    plugin's factory raises."""
    found = pm.call_first("databus_partitioner", name=name, config=dict(config))
    if found is None:
        known = ", ".join(pm.partitioner_names()) or "none loaded"
        raise ValueError(f"unknown partitioner {name!r} (available: {known})")
    plugin, fn = found
    if not callable(fn):
        raise PluginError(plugin, "databus_partitioner", TypeError("did not return a callable"))
    return plugin, fn


SINK_METHODS = ("open", "write", "flush", "close", "aclose")


def make_sink(pm: PluginManager, name: str, config: dict[str, Any],
              schema_registry_url: str | None = None) -> tuple[str, Any]:
    """(plugin name, sink object) for a sink's ``plugin`` setting (hookspecs.databus_sink).

    Raises ValueError naming the choices when no plugin makes ``name``, PluginError when the
    plugin's factory raises or returns an object without the sink methods."""
    found = pm.call_first("databus_sink", name=name, config=dict(config),
                          schema_registry_url=schema_registry_url)
    if found is None:
        known = ", ".join(pm.sink_names()) or "none loaded"
        raise ValueError(f"unknown sink plugin {name!r} (available: {known})")
    plugin, sink = found
    missing = [m for m in SINK_METHODS if not callable(getattr(sink, m, None))]
    if missing:
        raise PluginError(
            plugin, "databus_sink", TypeError(f"the sink has no {', '.join(missing)} method")
        )
    return plugin, sink
