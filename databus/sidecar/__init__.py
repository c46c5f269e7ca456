"""The per-host sidecar: apps' msgpack ingress, stream routing, upstream producers, reload.

Modules: ``app`` (the root service), ``ingress`` (one task pair per app connection),
``router`` (stream -> route with plugin callables), ``upstream`` (the producer pool),
``budget`` (buffer.memory), ``metrics`` (/metrics and /healthz), ``reload`` (SIGHUP and file
watching), ``embedded_broker`` (the broker subprocess of ``databus up``), ``commands`` (the
``up``, ``sidecar`` and ``plugins`` subcommands).
"""
