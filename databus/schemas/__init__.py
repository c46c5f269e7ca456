"""Schemas in the box: Confluent's Schema Registry REST API served by ``databus broker``.

- registry.py: subjects, versions, ids, compatibility levels, modes (pure, no I/O)
- records.py: the ``_schemas`` topic's key/value layout (Confluent's)
- formats/: Avro, JSON Schema and Protobuf (.proto text) parsing, canonical text,
  compatibility rules
- errors.py: Confluent's error codes and messages
- store.py: the ``_schemas`` topic read and written in the broker's process
- http.py, server.py: the REST API (Starlette app, hypercorn on trio)
- validation.py: broker-side validation of produced records (Confluent Server's configs)
- auth.py: HTTP basic logins by the broker's SASL users
- command.py: ``databus schemas`` (a client of the REST API)
- columns.py, protobuf_values.py: for the sinks that write Arrow (parquet, iceberg): a
  subject's columns and Confluent's wire format decoded into them (a client of the REST
  API; needs pyarrow, so only those sinks import it)

docs/schemas.md says how to use it.
"""
