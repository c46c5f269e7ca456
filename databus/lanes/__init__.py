"""Swimlanes (docs/lanes.md): the registry (``model``: pure; ``registry``: its topic), the
consuming helper ``LaneConsumer`` and the ``databus lanes`` command.  The routing itself is
the built-in ``lanes`` route plugin (plugins/lanes).

``LaneConsumer`` is imported on first use: ``databus.lanes.model`` serves the config's
validation without loading trio or the client.
"""

__all__ = ["LaneConsumer"]


def __getattr__(name: str):
    if name == "LaneConsumer":
        from .consumer import LaneConsumer

        return LaneConsumer
    raise AttributeError(f"module 'databus.lanes' has no attribute {name!r}")
