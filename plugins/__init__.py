"""Built-in databus plugins (import name ``databus_plugins``).

They register through the ``databus`` entry-point group exactly as third-party plugins do.
"""
