"""The ``_schemas`` records byte for byte as Confluent's registry writes them (so each can
read the other's topic), and the registry state they rebuild."""

from __future__ import annotations

from databus.schemas import records
from databus.schemas.registry import Registry

# As written by Confluent Schema Registry 7.x (KafkaStore's JSON key/value serializer).
CONFLUENT_SCHEMA_KEY = b'{"keytype":"SCHEMA","subject":"orders-value","version":1,"magic":1}'
CONFLUENT_SCHEMA_VALUE = (b'{"subject":"orders-value","version":1,"id":7,'
                          b'"schema":"\\"string\\"","deleted":false}')
CONFLUENT_JSON_VALUE = (b'{"subject":"j","version":2,"id":8,"schemaType":"JSON",'
                        b'"references":[{"name":"a.json","subject":"a","version":1}],'
                        b'"schema":"{}","deleted":true}')


def test_keys_and_values_are_confluents_bytes():
    assert records.schema_key("orders-value", 1) == CONFLUENT_SCHEMA_KEY
    assert records.schema_value("orders-value", 1, 7, "AVRO", '"string"', []) == \
        CONFLUENT_SCHEMA_VALUE
    assert records.schema_value("j", 2, 8, "JSON", "{}",
                                [{"name": "a.json", "subject": "a", "version": 1}],
                                deleted=True) == CONFLUENT_JSON_VALUE
    assert records.config_key(None) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert records.config_value("FULL") == b'{"compatibilityLevel":"FULL"}'
    assert records.mode_key("s") == b'{"keytype":"MODE","subject":"s","magic":0}'
    assert records.mode_value("READONLY") == b'{"mode":"READONLY"}'
    assert records.delete_subject_key("s") == \
        b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}'


def test_a_confluent_log_rebuilds_the_state():
    registry = Registry()
    log = [
        (b'{"keytype":"NOOP","magic":0}', None),
        (CONFLUENT_SCHEMA_KEY, CONFLUENT_SCHEMA_VALUE),
        (b'{"keytype":"SCHEMA","subject":"orders-value","version":2,"magic":1}',
         b'{"subject":"orders-value","version":2,"id":9,"schema":"\\"long\\"",'
         b'"deleted":false}'),
        (b'{"keytype":"CONFIG","subject":"orders-value","magic":0}',
         b'{"compatibilityLevel":"NONE"}'),
        (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":"READONLY"}'),
        (b'{"keytype":"DELETE_SUBJECT","subject":"orders-value","magic":0}',
         b'{"subject":"orders-value","version":1}'),
    ]
    for key, value in log:
        registry.apply(records.decode(key, value))
    assert registry.version_numbers("orders-value") == [2]
    assert registry.version_numbers("orders-value", deleted=True) == [1, 2]
    assert registry.schema_by_id(7).schema == '"string"'
    assert registry.max_id == 9
    assert registry.level("orders-value") == "NONE" and registry.level() == "BACKWARD"
    assert registry.mode() == "READONLY"
    registry.apply(records.decode(CONFLUENT_SCHEMA_KEY, None))  # permanent delete
    assert registry.version_numbers("orders-value", deleted=True) == [2]
    assert registry.max_id == 9
