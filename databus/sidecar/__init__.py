"""The per-host sidecar: apps' msgpack ingress, stream routing, upstream producers, reload.

Modules: ``app`` (the root service), ``session`` (one connection's protocol, sans I/O),
``ingress`` (the reader and writer tasks of a connection), ``dispatch`` (a produce frame
from admission to its reports), ``router`` (stream -> route with plugin callables, and the
routing decision), ``gate`` (the reload barrier), ``upstream`` (the producer pool),
``budget`` (buffer.memory), ``metrics`` (/metrics and /healthz), ``reload`` (SIGHUP and file
watching), ``consume`` and ``consume_core`` (apps' subscriptions: the group members, and
their sans-I/O state).  ``databus up`` (databus/up/) assembles it with the broker, sinks,
mirrors and console; the sidecar imports none of them.
"""
