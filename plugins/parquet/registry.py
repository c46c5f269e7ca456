"""The parquet sink's values from a schema registry: a Decoder whose value columns are those
of the subject ``{topic}-value`` (databus/schemas/columns.py, shared with the iceberg sink,
says how the columns follow the subject and which records are dead-lettered).  A Parquet
directory is read as one set of files, so the columns follow only additions: a removed or
retyped field stops the sink (``IncompatibleSchemaError``)."""

from __future__ import annotations

from databus.schemas.columns import (  # noqa: F401 (the parquet sink's names for them)
    IncompatibleSchemaError,
    RegistryError,
    SubjectDecoder,
    has_subject,
)

from .decode import _EMPTY, Decoder


class RegistryDecoder(Decoder):
    """A Decoder whose value columns come from ``{topic}-value`` in the registry."""

    def __init__(self, url: str, topic: str) -> None:
        super().__init__("registry", None, topic)
        self.subject_decoder = SubjectDecoder(url, topic, "parquet")
        self.subject = self.subject_decoder.subject

    def _decode(self, records, values):
        good, table, rejected = self.subject_decoder.decode(
            records, [None if v is _EMPTY else v for v in values])
        self.schema = self.subject_decoder.schema
        return good, table, rejected
