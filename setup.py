"""Package list only (everything else is in pyproject.toml).

``plugins/`` and ``spark_sink/`` are installed as ``databus_plugins`` and ``databus_spark``
(see [tool.setuptools.package-dir]); setuptools' declarative ``packages.find`` cannot rename
directories, so the list is computed here.
"""

from setuptools import find_packages, setup

RENAMED = {"plugins": "databus_plugins", "spark_sink": "databus_spark"}

packages = find_packages(include=["databus", "databus.*"])
for directory, name in RENAMED.items():
    packages += [name + p[len(directory):] for p in find_packages(include=[directory, directory + ".*"])]

setup(packages=packages)
