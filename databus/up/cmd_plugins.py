"""``databus plugins``: list the loaded plugins and the hooks each implements.

Implemented in commands.py; this module only gives the CLI its add_arguments/run pair.
"""

from .commands import add_plugins_arguments as add_arguments
from .commands import run_plugins as run

__all__ = ["add_arguments", "run"]
