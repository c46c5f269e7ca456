"""The per-host sidecar: apps' msgpack ingress, stream routing, upstream producers, reload.

One package per service, each a pure ``core`` (sans I/O) and a trio ``service``:
``produce/`` (session, ingress, dispatch, router, upstream, budget, gate, access),
``consume/`` (apps' subscriptions), ``delay/`` (delayed messages), ``half/`` (half
messages).  Beside them: ``app`` (the root service: listeners, reload, companions),
``metrics`` (/metrics and /healthz figures), ``config_diff`` (what a reload changes),
``background`` (what the delay and half services share).  ``databus up`` (databus/up/)
assembles the sidecar with the broker, sinks, mirrors and console; the sidecar imports none
of them.
"""
