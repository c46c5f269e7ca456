"""Client telemetry (KIP-714) in the broker: the subscriptions operators make
(``subscriptions.py``, CLIENT_METRICS config resources), the per-client-instance rules of
GetTelemetrySubscriptions / PushTelemetry (``manager.py``), the decoding of the pushed OTLP
payloads (``otlp.py``) and the Prometheus series they become (``series.py``).  All pure: the
handlers in ``broker/handlers/telemetry.py`` pass the clock in.  docs/client-metrics.md.
"""
