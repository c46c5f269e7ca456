"""Which implementation of the per-record kernels runs: C or pure Python.

``databus.protocol._speedups`` (C, built by ``pip install`` when a C compiler and the Python
headers are there) does the record format's per-record work: RecordBatch v2 record decoding
(to Record tuples, to the consumer's records, or straight to column lists), record encoding
for the producer's batches, zigzag varints and murmur2.  The pure-Python code beside it
(records.py, varint.py, client/partitioners.py) stays the reference and the fallback, and
the tests check that both give the same bytes, objects and errors.

``databus.protocol._sidecar_speedups`` (C too, built beside it) does the sidecar wire
format's per-message work: a produce frame read straight into message tuples (the
pure-Python twin is msgpack's decode plus ``sidecar_wire.parse_produce``), the SDK's produce
frames and the sidecar's reports frames written (``append_produce``, ``encode_reports``),
and the SDK's outbox, which also resolves the futures of delivered reports
(databus/sdk/outbox.py, ``Client._resolve``).

``databus.protocol._json_speedups`` (C, built beside them) reads named fields out of many JSON
values in one call without decoding the rest (the index's field extraction,
plugins/index/fields.py); anything it is not sure of it leaves to ``json.loads``.

``databus.protocol._avro_speedups`` (C, built beside them) checks many msgpack values against
one Avro schema and writes them in Confluent's wire format in one call (typed streams'
batch path, databus/schemas/serde.py ``Codec.encode_many``); what it is not sure of it
leaves to serde.py's per-record path.

``DATABUS_PURE_PYTHON=1`` (any value but empty or ``0``) forces the pure-Python code, read
once at import, for all four; so does an extension that failed to build or import.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV_VAR = "DATABUS_PURE_PYTHON"


def load_native(environ=os.environ, name: str = "_speedups") -> ModuleType | None:
    """The C extension module ``name`` (of this package), or None when the pure-Python
    code must run."""
    if environ.get(ENV_VAR, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None


native: ModuleType | None = load_native()
sidecar_native: ModuleType | None = load_native(name="_sidecar_speedups")
json_native: ModuleType | None = load_native(name="_json_speedups")
avro_native: ModuleType | None = load_native(name="_avro_speedups")


def implementation() -> str:
    """"C extension" or "pure Python": what this process runs (benchmarks print it)."""
    return "C extension" if native is not None else "pure Python"
