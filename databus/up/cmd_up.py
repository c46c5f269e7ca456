"""``databus up``: the sidecar, plus the built-in broker when no cluster is set.

Implemented in commands.py; this module only gives the CLI its add_arguments/run pair.
"""

from .commands import add_up_arguments as add_arguments
from .commands import run_up as run

__all__ = ["add_arguments", "run"]
