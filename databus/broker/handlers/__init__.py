"""The broker's handler modules, one per Kafka API family.

The server imports every module named here at start (importing registers its handlers with
``databus.broker.api.handles``).  A module may also define
``async def serve(broker, *, task_status=trio.TASK_STATUS_IGNORED)``: the broker starts it
with ``nursery.start`` after the LogManager is open and before it listens, and cancels it on
shutdown before the LogManager is closed.  Other parts append their modules to this tuple.
"""

HANDLER_MODULES: tuple[str, ...] = (
    "databus.broker.handlers.api_versions",
    "databus.broker.handlers.metadata",
    "databus.broker.handlers.produce",
    "databus.broker.handlers.fetch",
    "databus.broker.handlers.list_offsets",
    "databus.broker.handlers.admin",
    "databus.broker.handlers.init_producer_id",
    "databus.broker.handlers.groups", "databus.broker.handlers.offsets",
)
