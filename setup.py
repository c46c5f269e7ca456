"""Package list and the optional C extensions (everything else is in pyproject.toml).

``plugins/`` and ``spark_sink/`` are installed as ``databus_plugins`` and ``databus_spark``
(see [tool.setuptools.package-dir]); setuptools' declarative ``packages.find`` cannot rename
directories, so the list is computed here.

The C extensions, each beside the code it serves (EXTENSIONS below): protocol/'s record
format kernels (``_speedups``) and sidecar wire format kernels (``_sidecar_speedups``), the
producer's per-record future base (client/), the SDK's outbox (sdk/), the sidecar's placement
loop (sidecar/produce/) and the index plugin's JSON field reader (plugins/index/).  They are
optional, as msgpack's and aiokafka's extensions are: when one cannot be built (no C
compiler, no Python headers) the install still succeeds and the pure-Python code runs
(databus/protocol/speedups.py's ``load_native`` chooses).  DATABUS_NO_EXTENSION=1 skips the
builds.
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
    """build_ext that reports a failed compile and goes on without that extension (each
    module is optional on its own: the other still builds and is used)."""

    def initialize_options(self):
        super().initialize_options()
        self.failed: set[str] = set()

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any failure means: no extensions
            for ext in self.extensions:
                self._skip(ext.name, exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(ext.name, exc)

    def copy_extensions_to_source(self):
        # an editable install copies the built modules: only those that were built
        every, self.extensions = self.extensions, [
            e for e in self.extensions if e.name not in self.failed]
        try:
            super().copy_extensions_to_source()
        finally:
            self.extensions = every

    def _skip(self, name, exc):
        if name not in self.failed:
            self.failed.add(name)
            print(f"WARNING: the C extension {name} was not built ({exc}); databus runs "
                  "its pure-Python code there, which is slower", file=sys.stderr)


# (module, source): the Makefile's BUILD_INPUTS and `clean` list the same files
EXTENSIONS = [
    ("databus.protocol._speedups", "databus/protocol/_speedups.c"),
    ("databus.protocol._sidecar_speedups", "databus/protocol/_sidecar_speedups.c"),
    ("databus.client._producer_speedups", "databus/client/_producer_speedups.c"),
    ("databus.sdk._outbox_speedups", "databus/sdk/_outbox_speedups.c"),
    ("databus.sidecar.produce._router_speedups", "databus/sidecar/produce/_router_speedups.c"),
    ("databus_plugins.index._json_speedups", "plugins/index/_json_speedups.c"),
]

extensions = []
if not os.environ.get("DATABUS_NO_EXTENSION"):
    extensions += [
        Extension(name, [source],
                  extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wno-unused-parameter"])
        for name, source in EXTENSIONS
    ]

setup(packages=packages, ext_modules=extensions, cmdclass={"build_ext": OptionalBuildExt})
