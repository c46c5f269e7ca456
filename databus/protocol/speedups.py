"""Which implementation of the per-record kernels runs: C or pure Python.

``databus.protocol._speedups`` (C, built by ``pip install`` when a C compiler and the Python
headers are there) does the record format's per-record work: RecordBatch v2 record decoding
(to Record tuples, to the consumer's records, or straight to column lists), record encoding
for the producer's batches, zigzag varints and murmur2.  The pure-Python code beside it
(records.py, varint.py, client/partitioners.py) stays the reference and the fallback, and
the tests check that both give the same bytes, objects and errors.

``databus.protocol._sidecar_speedups`` (C too, built beside it) does the sidecar wire
format's per-frame work: a produce frame read straight into message tuples (the
pure-Python twin is msgpack's decode plus ``sidecar_wire.parse_produce``), the SDK's produce
frames and the sidecar's reports frames written (``append_produce``, ``encode_reports``).

The parts above protocol/ keep their own C beside their code, loaded through
``load_native`` too: the SDK's outbox (``databus.sdk._outbox_speedups``), the sidecar's
placement loop (``databus.sidecar.produce._router_speedups``), the producer's per-record
future base (``databus.client._producer_speedups``) and the index plugin's JSON field reader
(``databus_plugins.index._json_speedups``).  protocol/'s C names none of their types
(tests/test_layering.py).

``DATABUS_PURE_PYTHON=1`` (any value but empty or ``0``) forces the pure-Python code, read
once at import, for every one of them; so does an extension that failed to build or import.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV_VAR = "DATABUS_PURE_PYTHON"


def load_native(environ=os.environ, name: str = "_speedups",
                package: str | None = __package__) -> ModuleType | None:
    """The C extension module ``name`` of ``package`` (this one unless the caller names
    its own), or None when the pure-Python code must run."""
    if environ.get(ENV_VAR, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError:
        return None


native: ModuleType | None = load_native()
sidecar_native: ModuleType | None = load_native(name="_sidecar_speedups")


def implementation() -> str:
    """"C extension" or "pure Python": what this process runs (benchmarks print it)."""
    return "C extension" if native is not None else "pure Python"
