"""``databus up``: assembles a host above every part — the built-in broker (a child
process), the sidecar, and beside it the sinks, the mirrors and the web console.

Modules: ``commands`` (the ``up``, ``sidecar`` and ``plugins`` subcommands; ``cmd_*`` give
the CLI their add_arguments/run pairs), ``host`` (the sidecar with its companions: the sinks
and mirrors it runs and reloads), ``embedded_broker`` (the broker subprocess).  No part
imports this package.
"""
