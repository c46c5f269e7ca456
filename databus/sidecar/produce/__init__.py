"""Apps' produce path: ``session`` (one connection's protocol, sans I/O), ``ingress`` (a
connection's reader and writer tasks), ``dispatch`` (a produce frame from admission to its
reports), ``router`` (stream -> route with plugin callables, and the routing decision),
``upstream`` (the producer pool), ``budget`` (buffer.memory), ``gate`` (the reload barrier),
``access`` (app tokens)."""
