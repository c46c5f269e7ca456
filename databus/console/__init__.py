"""``databus console``: a web console over any Kafka-compatible cluster (docs/console.md).

Server-side rendered pages (Jinja templates, Starlette on hypercorn's trio worker) with htmx
partial updates; no Node build step, no JavaScript chart library.  Like the CLI tools it
talks to the cluster only through ``databus.client``'s public surface and shares the groups'
logic with ``databus groups`` (``databus.groups``: describing groups, lag, offset resets).

Modules: view (pure: how a message's bytes are shown, the lag chart's SVG, the samples the
console keeps), cluster (the reads and actions, trio), app (the Starlette routes and the
confirmation/read-only rules), sessions (login mode: a user's session acts with the user's
SASL credentials), server (hypercorn on trio, ``task_status``), command (the CLI).
"""
