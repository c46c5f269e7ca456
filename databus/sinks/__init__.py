"""The sinks runtime: consumer-side plugins (``sinks:`` in sidecar.yaml).

Each sink is a plugin object (hookspecs.databus_sink) fed by a consumer group of its own.
Modules: ``core`` (pure: per-partition progress, what may be committed, lag, dead-letter
headers; no trio), ``runtime`` (the trio shell: one runner per sink, the supervisor that
applies configs), ``metrics`` (the per-sink Prometheus families), ``command`` (``databus
sinks``).
"""
