"""The built-in ``lanes`` route plugin: swimlane routing (docs/lanes.md).

On when sidecar.yaml has ``lanes:``.  A message whose lane header (``databus-lane`` by
default, set by ``Client.send(..., lane=...)``) names a live lane of the registry goes to
the lane's topic, ``{topic}.lane.{lane}``, created on its first message with the lane's
partitions and retention; a message of an unknown or expired lane follows ``lanes.unknown``
(``main``: the stream's own topic, header kept; ``reject``: refused).  Messages without the
header are untouched (one scan of their headers).  Registered through the ``databus``
entry-point group like any third-party plugin; the registry and the consuming helper live
in ``databus.lanes``.
"""

from __future__ import annotations

from databus import hookimpl

NAME = "lanes"


@hookimpl
def databus_route(stream, topic, settings, config, bootstrap):
    lanes = config.lanes
    if lanes is None:
        return None
    if config.stream_cluster(stream if stream in config.streams else None) != \
            config.resolve_cluster(lanes.cluster, "lanes"):
        return None  # lanes live in one cluster: streams sent elsewhere are left alone
    from .route import make_route
    from .service import service_for

    return make_route(service_for(bootstrap, lanes), stream, lanes)


@hookimpl
def databus_sidecar_started(config, spawn, metrics):
    # Registered whether lanes are on or not: a reload may turn them on, and the series
    # must then appear without a restart (the collector yields nothing while they are off).
    from .metrics import LaneCollector
    from .service import counters, start_services

    metrics.register(LaneCollector())
    counters().enabled = config.lanes is not None
    if config.lanes is not None:
        start_services()


@hookimpl
def databus_config_reloaded(old, new):
    from .service import counters, start_services, stop_services

    counters().enabled = new.lanes is not None
    if old.lanes is not None and old.lanes != new.lanes:
        stop_services(keep=new.lanes)
    if new.lanes is not None:
        start_services()  # the services the new routing table made, now that it is live


@hookimpl
def databus_sidecar_stopping(config):
    if config.lanes is not None:
        from .service import stop_services

        stop_services()
