"""Service plumbing shared by the long-running processes (the sidecar, ``databus mirror``,
the sinks): the ``/metrics`` and ``/healthz`` endpoint with latency histograms
(``metrics``), configuration reload on SIGHUP and file change (``reload``), and how the
commands run around their service (``run``: the metrics listener, stopping on signals).  It
knows nothing of what the processes do, so each of them imports it and it imports none of them.
"""
