"""Package list and the optional C extensions (everything else is in pyproject.toml).

``plugins/`` and ``spark_sink/`` are installed as ``databus_plugins`` and ``databus_spark``
(see [tool.setuptools.package-dir]); setuptools' declarative ``packages.find`` cannot rename
directories, so the list is computed here.

``databus.protocol._speedups`` is the record format's per-record kernels in C, and
``databus.protocol._sidecar_speedups`` the sidecar wire format's (a produce frame read
straight into message tuples).  They are optional, as msgpack's and aiokafka's extensions
are: when one cannot be built (no C compiler, no Python headers) the install still succeeds
and the pure-Python code runs (databus/protocol/speedups.py chooses).  DATABUS_NO_EXTENSION=1 skips the builds.
"""

import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

RENAMED = {"plugins": "databus_plugins", "spark_sink": "databus_spark"}

packages = find_packages(include=["databus", "databus.*"])
for directory, name in RENAMED.items():
    packages += [name + p[len(directory):] for p in find_packages(include=[directory, directory + ".*"])]


class OptionalBuildExt(build_ext):
    """build_ext that reports a failed compile and goes on without the extension."""

    failed = False

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure means: no extension
            self._skip(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    def copy_extensions_to_source(self):
        if not self.failed:  # an editable install copies the built module: none to copy
            super().copy_extensions_to_source()

    def _skip(self, exc):
        if not self.failed:
            self.failed = True
            print(f"WARNING: the C extension was not built ({exc}); databus runs its "
                  "pure-Python code, which is slower", file=sys.stderr)


extensions = []
if not os.environ.get("DATABUS_NO_EXTENSION"):
    extensions += [
        Extension(
            f"databus.protocol.{name}",
            [f"databus/protocol/{name}.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-parameter"],
        )
        for name in ("_speedups", "_sidecar_speedups")
    ]

setup(packages=packages, ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
