"""Values in Confluent's wire format, without I/O: what typed streams (docs/schemas.md,
"Typed streams") do to each message, and what reads it back.

    codec = Codec(schema_id, "AVRO", schema_text)
    data = codec.encode({"order_id": 1, "item": "pen"})  # b"\\0" + id + Avro body
    codec.decode(data)                                    # the dict again

The wire format is Confluent's: a magic byte 0, the schema id as 4 bytes big-endian, then
the body — Avro's binary encoding (what ``AvroSerializer`` writes, read by
``AvroDeserializer``), the JSON text (``JSONSerializer`` / ``JSONDeserializer``) or the
Protobuf message indexes and message (``ProtobufSerializer`` / ``ProtobufDeserializer``;
protobuf_serde.py).

``encode`` checks the value against the schema first and raises ``RecordError`` naming the
field (a JSON path, ``$.items[2].sku``) and the rule it broke (``type``, ``required``,
``unknown field``, ``enum``, ``range``, JSON Schema's keyword ...): an app is told what to
fix, not that "the serializer failed".  A record field the Avro schema does not have is
refused rather than dropped (Avro's writer would skip it silently: data lost).

``parse_input`` turns what an app sent into a value: a msgpack map or array (what the SDK
sends for a dict or list) or JSON text.
"""

from __future__ import annotations

import io
import json
import math
import struct
from typing import Any

import fastavro
import msgpack

from databus.protocol.speedups import load_native

# the batch path in C (_avro_speedups.c): None where it is not built or DATABUS_PURE_PYTHON
avro_native = load_native(name="_avro_speedups", package=__package__)

MAGIC = 0
_HEADER = struct.Struct(">bI")
FORMATS = ("AVRO", "JSON", "PROTOBUF")
INPUTS = ("auto", "json", "msgpack")

_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def _compiled_writer():
    """fastavro's compiled ``write_data`` into a bytearray, with the schema parsed once:
    schemaless_writer parses the schema again at every call (half its time).  Checked on a
    known value; None (schemaless_writer then) where fastavro is not compiled or differs."""
    try:
        from fastavro._write import write_data

        data = bytearray()
        write_data(data, {"a": 1}, fastavro.parse_schema(
            {"type": "record", "name": "_", "fields": [{"name": "a", "type": "long"}]}), {},
            "", dict(_WRITE_OPTIONS))
        return write_data if bytes(data) == b"\x02" else None
    except Exception:  # noqa: BLE001 - any trouble: the public path
        return None


_WRITE_OPTIONS = {"strict": False, "strict_allow_default": False,
                  "disable_tuple_notation": False}
_write_data = _compiled_writer()


class RecordError(ValueError):
    """A value the schema does not take: ``path`` (``$`` is the value itself) and ``rule``."""

    def __init__(self, path: str, rule: str, detail: str) -> None:
        super().__init__(f"{path}: {detail} (rule: {rule})")
        self.path = path
        self.rule = rule
        self.detail = detail


def parse_input(data: bytes | None, how: str = "auto") -> Any:
    """The value an app sent: msgpack or JSON text.  ``auto`` takes a first byte that opens
    a msgpack map or array (0x80-0x9f, 0xdc-0xdf: never the start of JSON text) as msgpack,
    anything else as JSON; a scalar in msgpack needs ``how="msgpack"``."""
    if data is None:
        raise RecordError("$", "type", "no value (a typed stream's message needs one)")
    if how == "auto":
        first = data[0] if data else 0
        how = "msgpack" if 0x80 <= first <= 0x9F or 0xDC <= first <= 0xDF else "json"
    if how == "msgpack":
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise RecordError("$", "msgpack", f"not msgpack: {exc}") from None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RecordError("$", "json", f"not JSON text: {exc}") from None


def header(data: bytes) -> int:
    """The schema id of a wire-format value; ValueError if it is not in the format."""
    if len(data) < 5 or data[0] != MAGIC:
        raise ValueError("not in Confluent's wire format (no magic byte 0 and schema id)")
    return _HEADER.unpack_from(data)[1]


class Codec:
    """One schema (an id is immutable, so is this): check, encode, decode."""

    def __init__(self, schema_id: int, schema_type: str, text: str) -> None:
        if schema_type not in FORMATS:
            raise ValueError(f"typed streams take AVRO, JSON and PROTOBUF schemas, not "
                             f"{schema_type}")
        self.id = schema_id
        self.type = schema_type
        self._prefix = _HEADER.pack(MAGIC, schema_id)
        self._program: tuple | None = None
        self._json_fits = None
        if schema_type == "PROTOBUF":
            from .protobuf_serde import ProtobufCodec
            from .protobuf_values import ProtobufError

            try:
                self._protobuf = ProtobufCodec(text)
            except ProtobufError as exc:
                raise ValueError(str(exc)) from None
            return
        obj = json.loads(text)
        if schema_type == "AVRO":
            self._names: dict[str, Any] = {}
            self._avro = fastavro.parse_schema(obj, named_schemas=self._names)
            _bytes_defaults(self._avro, self._names, set())
            self._fits = _avro_predicate(self._avro, self._names, {})
            # the batch path in C (encode_many), where it decides as fastavro does
            self._program = (_avro_program(self._avro, self._names, frozenset())
                             if avro_native is not None and _write_data is not None else None)
        else:
            import jsonschema.validators

            cls = jsonschema.validators.validator_for(obj, default=jsonschema.Draft7Validator)
            self._validator = cls(obj)
            self._json_fits = _json_predicate(obj, cls)

    def check(self, value: Any) -> None:
        """Raises RecordError if the schema does not take ``value``."""
        if self.type == "PROTOBUF":
            self._protobuf.encode(value)  # (the walk that checks is the one that encodes)
            return
        if self.type == "AVRO":
            if not self._fits(value):  # (the walk that names the field: only on a refusal)
                _check_avro(self._avro, value, "$", self._names)
            return
        if self._json_fits is not None and self._json_fits(value):
            return  # (the validator that names the keyword: only on a refusal)
        errors = list(self._validator.iter_errors(value))
        if errors:
            import jsonschema.exceptions

            error = jsonschema.exceptions.best_match(errors)
            raise RecordError(error.json_path, str(error.validator), error.message)

    def encode(self, value: Any) -> bytes:
        if self.type == "PROTOBUF":
            return self._prefix + self._protobuf.encode(value)
        self.check(value)
        if self.type == "AVRO":
            if _write_data is not None:
                data = bytearray(self._prefix)
                _write_data(data, value, self._avro, self._names, "", _WRITE_OPTIONS)
                return bytes(data)
            out = io.BytesIO()
            out.write(self._prefix)
            fastavro.schemaless_writer(out, self._avro, value)
            return out.getvalue()
        try:
            body = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise RecordError("$", "json", f"not representable as JSON: {exc}") from None
        return self._prefix + body

    def encode_many(self, values: list, how: str = "auto") -> list:
        """``parse_input`` then ``encode`` for each of ``values`` (what an app sent), in one
        call: each item the wire-format bytes, or the RecordError refusing that value.  An
        Avro schema's msgpack values go through the C batch path (one call for all, no
        Python object per field); what it leaves (a refusal, JSON text, what it cannot
        decide as fastavro does) takes the per-record path, which names field and rule."""
        out: list = [None] * len(values)
        if self._program is not None and avro_native is not None and how != "json":
            out = avro_native.encode_many(self._program, self._prefix, values, how == "auto")
        for i, done in enumerate(out):
            if done is None:
                try:
                    out[i] = self.encode(parse_input(values[i], how))
                except RecordError as exc:
                    out[i] = exc
        return out

    def encode_frame(self, messages: list, stream: str, how: str, skip: tuple) -> list:
        """``encode_many`` for the sidecar's frame as it is (router.py): in ``messages``
        (tuples: id, stream, value, key, headers, ...) the values of ``stream``'s messages
        are replaced by their encodings, in place; a message whose first header is named in
        ``skip`` has no app value and is left alone.  Returns (index, RecordError) for each
        value refused.  One pass in C over the frame where it can."""
        undone: list[int]
        if self._program is not None and avro_native is not None and how != "json":
            undone = avro_native.encode_stream(messages, stream, self._program, self._prefix,
                                               how == "auto", skip)
        else:
            undone = [i for i, m in enumerate(messages) if m[1] == stream and not (
                m[4] and m[4][0][0] in skip)]
        refused = []
        for i in undone:
            message = messages[i]
            try:
                value = self.encode(parse_input(message[2], how))
            except RecordError as exc:
                refused.append((i, exc))
                continue
            messages[i] = (message[0], message[1], value, *message[3:])
        return refused

    def decode_msgpack(self, data: bytes) -> bytes | None:
        """A wire-format value of this schema as msgpack (``msgpack.packb`` of what
        ``decode`` gives), read in C from Avro straight to msgpack; None where the caller
        must ``decode`` (no C path for this schema, or a value it does not read)."""
        if self._program is None or avro_native is None or header(data) != self.id:
            return None
        return avro_native.decode_msgpack(self._program, memoryview(data)[5:])

    def decode(self, data: bytes) -> Any:
        if header(data) != self.id:
            raise ValueError(f"written with schema id {header(data)}, not {self.id}")
        if self.type == "AVRO":
            return fastavro.schemaless_reader(io.BytesIO(data[5:]), self._avro, None)
        if self.type == "PROTOBUF":
            return self._protobuf.decode(data[5:])
        return json.loads(data[5:])


# -- Avro: a predicate compiled once per schema (the common case: the value fits), then the
# walk that names the field and the rule of a refusal.  The predicate never takes what the
# walk refuses; it may refuse what the walk takes (an int subclass, say): then the walk
# decides, only slower.

_FLOAT_MAX = 3.4028234663852886e38


def _avro_predicate(schema: Any, names: dict, done: dict):
    if isinstance(schema, str):
        if schema in names:
            if schema not in done:
                done[schema] = None  # (recursive types: looked up when called)
                done[schema] = _avro_predicate(names[schema], names, done)
            return lambda v: done[schema](v)
        return _PRIMITIVE_PREDICATES.get(schema, lambda v: False)
    if isinstance(schema, list):
        branches = [_avro_predicate(b, names, done) for b in schema]
        return lambda v: any(fits(v) for fits in branches)
    kind = schema.get("type")
    if schema.get("logicalType") and kind in ("int", "long", "bytes", "fixed", "string"):
        base = _avro_predicate({k: x for k, x in schema.items() if k != "logicalType"}
                               if kind == "fixed" else kind, names, done)
        return lambda v: (not isinstance(v, (int, str, bytes)) or isinstance(v, bool)
                          or base(v))
    if kind in ("record", "error"):
        fields = [(f["name"], _avro_predicate(f["type"], names, done), "default" in f)
                  for f in schema["fields"]]
        known = frozenset(f["name"] for f in schema["fields"])

        def record(v) -> bool:
            if type(v) is not dict:
                return False
            for name, fits, has_default in fields:
                if name in v:
                    if not fits(v[name]):
                        return False
                elif not has_default:
                    return False
            return known.issuperset(v)
        return record
    if kind == "enum":
        symbols = frozenset(schema["symbols"])
        return lambda v: type(v) is str and v in symbols
    if kind == "array":
        items = _avro_predicate(schema["items"], names, done)
        return lambda v: type(v) in (list, tuple) and all(items(x) for x in v)
    if kind == "map":
        values = _avro_predicate(schema["values"], names, done)
        return lambda v: type(v) is dict and all(
            type(k) is str and values(x) for k, x in v.items())
    if kind == "fixed":
        size = schema["size"]
        return lambda v: type(v) in (bytes, bytearray) and len(v) == size
    return _avro_predicate(kind, names, done)


def _fits_int(v) -> bool:
    return type(v) is int and -(2**31) <= v <= 2**31 - 1


def _fits_long(v) -> bool:
    return type(v) is int and -(2**63) <= v <= 2**63 - 1


_PRIMITIVE_PREDICATES = {
    "null": lambda v: v is None,
    "boolean": lambda v: type(v) is bool,
    "int": _fits_int,
    "long": _fits_long,
    "float": lambda v: type(v) is float and (abs(v) <= _FLOAT_MAX or v != v
                                             or math.isinf(v)) or _fits_long(v),
    "double": lambda v: type(v) is float or _fits_long(v),
    "string": lambda v: type(v) is str,
    "bytes": lambda v: type(v) in (bytes, bytearray),
}


def _bytes_defaults(schema: Any, names: dict, done: set) -> None:
    """Avro gives a bytes or fixed field's default as a string of code points 0-255 (one
    per byte); fastavro's writer takes the string as it is and fails on a record that
    leaves the field out.  The parsed schema gets the bytes instead."""
    if isinstance(schema, str):
        if schema in names and schema not in done:
            done.add(schema)
            _bytes_defaults(names[schema], names, done)
        return
    if isinstance(schema, list):
        for branch in schema:
            _bytes_defaults(branch, names, done)
        return
    kind = schema.get("type")
    if kind in ("record", "error"):
        for field in schema["fields"]:
            first = field["type"][0] if isinstance(field["type"], list) else field["type"]
            while isinstance(first, str) and first in names:
                first = names[first]
            base = first.get("type") if isinstance(first, dict) else first
            if base in ("bytes", "fixed") and isinstance(field.get("default"), str):
                try:
                    field["default"] = field["default"].encode("latin-1")
                except UnicodeEncodeError:
                    pass  # not an Avro bytes default: fastavro's error when it is used
            _bytes_defaults(field["type"], names, done)
    elif kind in ("array", "map"):
        _bytes_defaults(schema["items" if kind == "array" else "values"], names, done)


# -- JSON Schema: a predicate compiled once per schema (fastjsonschema generates Python for
# it: ~10x jsonschema's time on a valid value); jsonschema still decides every refusal, so
# a value fastjsonschema refuses and jsonschema takes goes through (formats, which
# jsonschema does not check by default, are off here too).

def _json_predicate(schema: Any, cls):
    """For drafts 4, 6 and 7 (what fastjsonschema knows) and local ``$ref``s only (it would
    fetch remote ones), else None."""
    import jsonschema

    if cls not in (jsonschema.Draft4Validator, jsonschema.Draft6Validator,
                   jsonschema.Draft7Validator) or not _local_refs(schema):
        return None
    try:
        import fastjsonschema

        validate = fastjsonschema.compile(schema, use_default=False, use_formats=False)
    except Exception:  # noqa: BLE001 - not compiled: jsonschema alone decides
        return None

    def fits(value) -> bool:
        try:
            validate(value)
            return True
        except Exception:  # noqa: BLE001 - a refusal, or trouble: jsonschema decides
            return False
    return fits


def _local_refs(schema: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
            return False
        return all(_local_refs(v, depth + 1) for v in schema.values())
    if isinstance(schema, list):
        return all(_local_refs(v, depth + 1) for v in schema)
    return True


# -- Avro: the program of the C batch path (databus/schemas/_avro_speedups.c) ---------------

_KINDS = {name: i for i, name in enumerate(
    ("null", "boolean", "int", "long", "float", "double", "string", "bytes", "record", "enum",
     "array", "map", "fixed", "union"))}
_COMPLEX = frozenset(("record", "error", "enum", "array", "map", "fixed"))


def _avro_program(schema: Any, names: dict, seen: frozenset):
    """The schema as nested tuples for the C batch path, or None where it could not write
    what fastavro writes (or take only what the checker takes): logical types (fastavro
    converts their Python types), recursive types, and unions where fastavro's pick is not
    simply the first branch that takes the value (a float branch, which it passes over for a
    later double; two complex branches, where it weighs records by their fields)."""
    if isinstance(schema, str):
        if schema in names:
            if schema in seen:
                return None
            return _avro_program(names[schema], names, seen | {schema})
        return (_KINDS[schema],) if schema in _KINDS and schema not in (
            "record", "enum", "array", "map", "fixed", "union") else None
    if isinstance(schema, list):
        kinds = [_kind_of(b, names) for b in schema]
        if "float" in kinds or sum(k in _COMPLEX for k in kinds) > 1:
            return None
        branches = tuple(_avro_program(b, names, seen) for b in schema)
        return None if None in branches else (_KINDS["union"], branches)
    if schema.get("logicalType"):
        return None
    kind = schema.get("type")
    if kind in ("record", "error"):
        seen = seen | {schema.get("name")}
        names_, types, defaults = [], [], []
        for field in schema["fields"]:
            program = _avro_program(field["type"], names, seen)
            if program is None:
                return None
            names_.append(field["name"].encode())
            types.append(program)
            default = None
            if "default" in field:
                default = bytearray()
                try:
                    _write_data(default, field["default"], field["type"], names, "",
                                _WRITE_OPTIONS)
                except Exception:  # noqa: BLE001 - a default fastavro cannot write: per record
                    return None
                default = bytes(default)
            defaults.append(default)
        return (_KINDS["record"], tuple(names_), tuple(types), tuple(defaults))
    if kind == "enum":
        return (_KINDS["enum"], tuple(s.encode() for s in schema["symbols"]))
    if kind in ("array", "map"):
        inner = _avro_program(schema["items" if kind == "array" else "values"], names, seen)
        return None if inner is None else (_KINDS[kind], inner)
    if kind == "fixed":
        return (_KINDS["fixed"], int(schema["size"]))
    return _avro_program(kind, names, seen)


def _kind_of(schema: Any, names: dict) -> str:
    while isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, dict):
        return "logical" if schema.get("logicalType") else str(schema.get("type"))
    return "union" if isinstance(schema, list) else schema


# -- Avro: the value walked beside its schema, each refusal naming a path and a rule -------

def _avro_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union [" + ", ".join(_avro_name(s) for s in schema) + "]"
    return str(schema.get("name") or schema.get("type"))


def _got(value: Any) -> str:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{type(value).__name__} {shown}"


def _check_avro(schema: Any, value: Any, path: str, names: dict) -> None:
    if isinstance(schema, str):
        named = names.get(schema)
        if named is not None:
            return _check_avro(named, value, path, names)
        return _check_primitive(schema, value, path)
    if isinstance(schema, list):
        for branch in schema:
            try:
                _check_avro(branch, value, path, names)
                return None
            except RecordError:
                continue
        raise RecordError(path, "type", f"expected {_avro_name(schema)}, got {_got(value)}")
    kind = schema.get("type")
    if schema.get("logicalType") and kind in ("int", "long", "bytes", "fixed", "string"):
        # timestamps, dates, decimals, uuids: fastavro takes their Python types too
        # (datetime, Decimal, UUID); its writer judges those
        if not isinstance(value, (int, str, bytes)) or isinstance(value, bool):
            return None
    if kind == "record" or kind == "error":
        if not isinstance(value, dict):
            raise RecordError(path, "type", f"expected record {schema.get('name')}, "
                              f"got {_got(value)}")
        known = set()
        for field in schema["fields"]:
            name = field["name"]
            known.add(name)
            where = f"{path}.{name}"
            if name not in value:
                if "default" not in field:
                    raise RecordError(where, "required",
                                      "missing, and the schema gives it no default")
                continue
            _check_avro(field["type"], value[name], where, names)
        extra = [k for k in value if k not in known]
        if extra:
            raise RecordError(f"{path}.{extra[0]}", "unknown field",
                              f"not a field of record {schema.get('name')} (it would be "
                              "dropped)")
        return None
    if kind == "enum":
        if value not in schema["symbols"]:
            raise RecordError(path, "enum", f"{_got(value)} is not one of "
                              f"{schema['symbols']}")
        return None
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            raise RecordError(path, "type", f"expected array, got {_got(value)}")
        for i, item in enumerate(value):
            _check_avro(schema["items"], item, f"{path}[{i}]", names)
        return None
    if kind == "map":
        if not isinstance(value, dict):
            raise RecordError(path, "type", f"expected map, got {_got(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise RecordError(path, "type", f"map keys are strings, got {_got(key)}")
            _check_avro(schema["values"], item, f"{path}.{key}", names)
        return None
    if kind == "fixed":
        if not isinstance(value, (bytes, bytearray)) or len(value) != schema["size"]:
            raise RecordError(path, "fixed size", f"expected {schema['size']} bytes, got "
                              f"{_got(value)}")
        return None
    return _check_avro(kind, value, path, names)


def _check_primitive(kind: str, value: Any, path: str) -> None:
    ok: bool
    if kind == "null":
        ok = value is None
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind in ("int", "long"):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok:
            low, high = _INT_RANGE[kind]
            if not low <= value <= high:
                raise RecordError(path, "range", f"{value} does not fit Avro's {kind}")
    elif kind in ("float", "double"):
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and (kind == "double" or not isinstance(value, float) or math.isinf(value)
                   or math.isnan(value) or abs(value) <= 3.4028234663852886e38))
    elif kind == "string":
        ok = isinstance(value, str)
    elif kind == "bytes":
        ok = isinstance(value, (bytes, bytearray))
    else:
        raise RecordError(path, "type", f"unknown Avro type {kind!r}")
    if not ok:
        raise RecordError(path, "type", f"expected {kind}, got {_got(value)}")


# -- what fields a schema has (the index checks its value paths against it) ----------------

def field_paths(schema_type: str, text: str) -> set[tuple[str, ...]]:
    """Every field path of a record schema, nested records and objects included
    (``("order", "id")``); a union with null is looked through.  Protobuf: the fields of
    the file's first message (what typed streams and Confluent's serializers write)."""
    out: set[tuple[str, ...]] = set()
    if schema_type == "PROTOBUF":
        from .protobuf_values import first_message

        _protobuf_paths(first_message(text)[0], (), out, frozenset())
        return out
    obj = json.loads(text)
    if schema_type == "AVRO":
        names: dict[str, Any] = {}
        _avro_paths(fastavro.parse_schema(obj, named_schemas=names), (), names, out, set())
    elif schema_type == "JSON":
        _json_paths(obj, (), obj, out, 0)
    return out


def _protobuf_paths(message, prefix: tuple[str, ...], out: set, seen: frozenset) -> None:
    if message.full_name in seen:  # a recursive message: its paths are already there
        return
    for field in message.fields:
        path = (*prefix, field.name)
        out.add(path)
        inner = field.message_type
        if inner is not None and not inner.GetOptions().map_entry:
            _protobuf_paths(inner, path, out, seen | {message.full_name})


def _avro_paths(schema: Any, prefix: tuple[str, ...], names: dict, out: set,
                seen: set) -> None:
    if isinstance(schema, str) and schema in names:
        if schema in seen:  # a recursive type: its paths are already there
            return
        seen = seen | {schema}
        schema = names[schema]
    if isinstance(schema, list):
        for branch in schema:
            _avro_paths(branch, prefix, names, out, seen)
        return
    if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
        for field in schema["fields"]:
            path = (*prefix, field["name"])
            out.add(path)
            _avro_paths(field["type"], path, names, out, seen | {schema.get("name")})


def _json_paths(schema: Any, prefix: tuple[str, ...], root: Any, out: set, depth: int) -> None:
    if not isinstance(schema, dict) or depth > 32:
        return
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target: Any = root
        for part in ref[1:].strip("/").split("/"):
            if part:
                target = target.get(part) if isinstance(target, dict) else None
        _json_paths(target, prefix, root, out, depth + 1)
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key) or ():
            _json_paths(branch, prefix, root, out, depth + 1)
    for name, spec in (schema.get("properties") or {}).items():
        path = (*prefix, name)
        out.add(path)
        _json_paths(spec, path, root, out, depth + 1)
