"""The package version, in a module of its own so that any part can name it without
importing the package's face (``databus/__init__``)."""

__version__ = "0.1.0"
