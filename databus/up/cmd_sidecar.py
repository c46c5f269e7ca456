"""``databus sidecar``: the sidecar alone, against the configured clusters.

Implemented in commands.py; this module only gives the CLI its add_arguments/run pair.
"""

from .commands import add_sidecar_arguments as add_arguments
from .commands import run_sidecar as run

__all__ = ["add_arguments", "run"]
