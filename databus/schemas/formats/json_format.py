"""JSON Schema: validated against its draft's meta-schema by the ``jsonschema`` library
(drafts 4, 6, 7, 2019-09 and 2020-12, by ``$schema``; draft 7 when it names none, as
Confluent's serializers write), compared by the rules Confluent documents for JSON Schema.

Compatibility is a walk of the two schemas side by side, ``writer`` (the schema the data
was written with) against ``reader`` (the schema it will be read with).  The content model
decides what adding or removing a property means, as in Confluent's registry:

- open (``additionalProperties`` absent or true): data may already hold any property, so
  a reader that adds a typed property may meet old data of another type: incompatible; a
  reader that drops one is fine.
- closed (``additionalProperties: false``): adding an optional property is fine, adding a
  required one is not; a closed reader that drops a property the writer had is not.
- partially open (``additionalProperties`` a schema): a property added or removed must be
  compatible with that schema.

Types may widen (integer -> number), not change or narrow; enums may grow, not shrink;
limits (maxLength, maximum, minItems ...) may loosen, not tighten or appear; ``required``
may shrink, not grow.  Local ``$ref`` s (``#/definitions/...``, ``#/$defs/...``) are followed.
"""

from __future__ import annotations

import json

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from databus.schemas.errors import invalid_schema

from . import ParsedSchema, Reference

_UPPER_LIMITS = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
_LOWER_LIMITS = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")


def parse(text: str, references: tuple[Reference, ...] = ()) -> ParsedSchema:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise invalid_schema(f"{text[:200]!r}: not JSON ({exc})") from None
    if not isinstance(obj, (dict, bool)):
        raise invalid_schema(f"{text[:200]!r}: a JSON Schema is an object or a boolean")
    validator = jsonschema.validators.validator_for(obj, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(obj)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        raise invalid_schema(f"{text[:200]!r}, details: at {where}: {exc.message}") from None
    except RecursionError:
        raise invalid_schema(f"{text[:200]!r}, details: nested too deeply") from None
    return ParsedSchema("JSON", json.dumps(obj, separators=(",", ":")),
                        json.dumps(obj, separators=(",", ":"), sort_keys=True), obj,
                        tuple(references))


def incompatibilities(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    walk = _Walk(writer.parsed, reader.parsed)
    walk.compare(writer.parsed, reader.parsed, "#")
    return walk.problems


def _as_dict(schema) -> dict:
    if schema is True or schema is None:
        return {}
    if schema is False:
        return {"not": {}}
    return schema if isinstance(schema, dict) else {}


def _types(schema: dict) -> set[str] | None:
    value = schema.get("type")
    if value is None:
        return None
    return {value} if isinstance(value, str) else set(value)


def _is_closed(schema: dict) -> bool:
    return schema.get("additionalProperties", True) is False


def _additional(schema: dict):
    """The partially open model's schema for undeclared properties, or None."""
    value = schema.get("additionalProperties")
    return value if isinstance(value, dict) and value else None


class _Walk:
    def __init__(self, writer_root, reader_root) -> None:
        self.roots = {"writer": writer_root, "reader": reader_root}
        self.problems: list[str] = []
        self._seen: set[tuple[int, int]] = set()

    def fail(self, error_type: str, path: str, description: str) -> None:
        self.problems.append(f"{{errorType:'{error_type}', description:'{description} "
                             f"at path '{path}''}}")

    def resolve(self, schema, side: str) -> dict:
        schema = _as_dict(schema)
        hops = 0
        while isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#") and hops < 32:
            target = self.roots[side]
            for part in schema["$ref"][1:].strip("/").split("/"):
                if not part:
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            schema = _as_dict(target)
            hops += 1
        return schema

    def compatible(self, writer, reader, path: str) -> bool:
        """Whether reader can read writer's data, without recording why."""
        saved = self.problems
        self.problems = []
        try:
            self.compare(writer, reader, path)
            return not self.problems
        finally:
            self.problems = saved

    def compare(self, writer, reader, path: str) -> None:
        w = self.resolve(writer, "writer")
        r = self.resolve(reader, "reader")
        key = (id(w), id(r))
        if key in self._seen:  # a recursive schema: this pair is being compared already
            return
        self._seen.add(key)
        try:
            self._compare(w, r, path)
        finally:
            self._seen.discard(key)

    def _compare(self, w: dict, r: dict, path: str) -> None:
        if r == {}:
            return  # the reader accepts anything
        if w == {"not": {}}:
            return  # the writer wrote nothing
        self._types(w, r, path)
        for combiner in ("oneOf", "anyOf", "allOf"):
            self._combined(w, r, combiner, path)
        if "enum" in r:
            if "enum" not in w or any(v not in r["enum"] for v in w["enum"]):
                self.fail("ENUM_ARRAY_NARROWED", path, "The new schema accepts fewer enum values")
        if "const" in r and w.get("const", object()) != r["const"]:
            self.fail("CONST_CHANGED", path, "The new schema's const differs")
        for limit in _UPPER_LIMITS:
            if limit in r and (limit not in w or _num(r[limit]) < _num(w[limit])):
                self.fail(_limit_error(limit, w), path, f"The new schema has a lower {limit}")
        for limit in _LOWER_LIMITS:
            if limit in r and (limit not in w or _num(r[limit]) > _num(w[limit])):
                self.fail(_limit_error(limit, w), path, f"The new schema has a higher {limit}")
        if "pattern" in r and r["pattern"] != w.get("pattern"):
            self.fail("PATTERN_ADDED" if "pattern" not in w else "PATTERN_CHANGED", path,
                      "The new schema's pattern differs")
        if "multipleOf" in r and not _divides(r["multipleOf"], w.get("multipleOf")):
            self.fail("MULTIPLE_OF_CHANGED", path, "The new schema's multipleOf differs")
        self._object(w, r, path)
        self._array(w, r, path)

    def _types(self, w: dict, r: dict, path: str) -> None:
        r_types = _types(r)
        if r_types is None:
            return
        w_types = _types(w)
        if w_types is None:
            self.fail("TYPE_NARROWED", path, "The new schema has a type the old one did not")
            return
        missing = {t for t in w_types if t not in r_types
                   and not (t == "integer" and "number" in r_types)}
        if missing:
            narrowed = r_types < w_types or ("integer" in r_types and w_types == {"number"})
            self.fail("TYPE_NARROWED" if narrowed else "TYPE_CHANGED", path,
                      f"The type changed from {sorted(w_types)} to {sorted(r_types)}")

    def _combined(self, w: dict, r: dict, combiner: str, path: str) -> None:
        r_parts = r.get(combiner)
        w_parts = w.get(combiner)
        if r_parts is None and w_parts is None:
            return
        if combiner == "allOf":
            # every reader condition must hold for what the writer wrote
            for i, part in enumerate(r_parts or ()):
                writers = w_parts or [{k: v for k, v in w.items() if k != "allOf"}]
                if not any(self.compatible(wp, part, f"{path}/allOf/{i}") for wp in writers):
                    self.fail("PRODUCT_TYPE_EXTENDED", path, "The new schema adds a condition "
                              "to allOf")
            return
        if r_parts is None:
            self.fail("COMBINED_TYPE_CHANGED", path, f"The new schema dropped {combiner}")
            return
        writers = w_parts if w_parts is not None else [
            {k: v for k, v in w.items() if k != combiner}]
        for i, part in enumerate(writers):
            if not any(self.compatible(part, rp, f"{path}/{combiner}/{j}")
                       for j, rp in enumerate(r_parts)):
                self.fail("SUM_TYPE_NARROWED", f"{path}/{combiner}/{i}",
                          f"A choice of the old schema's {combiner} is not in the new one")

    def _object(self, w: dict, r: dict, path: str) -> None:
        w_props = w.get("properties") or {}
        r_props = r.get("properties") or {}
        if not w_props and not r_props and "additionalProperties" not in r:
            return
        w_required = set(w.get("required") or ())
        r_required = set(r.get("required") or ())
        for name, schema in r_props.items():
            here = f"{path}/properties/{name}"
            if name in w_props:
                self.compare(w_props[name], schema, here)
                continue
            if _is_closed(w):
                if name in r_required:
                    self.fail("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", here,
                              "The new schema requires a property the old one's closed "
                              "content model could not have")
            elif _additional(w) is not None:
                if not self.compatible(_additional(w), schema, here):
                    self.fail("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", here,
                              "The new schema has a property the old one's additionalProperties "
                              "could have given another type")
            elif self.resolve(schema, "reader") != {}:
                self.fail("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", here,
                          "The new schema has a property the old one's open content model "
                          "could have given another type")
        for name, schema in w_props.items():
            if name in r_props:
                continue
            here = f"{path}/properties/{name}"
            if _is_closed(r):
                self.fail("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", here,
                          "The new schema's closed content model lacks a property of the old one")
            elif _additional(r) is not None and not self.compatible(schema, _additional(r), here):
                self.fail("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", here,
                          "The new schema's additionalProperties cannot read a removed property")
        added = (r_required - w_required) & set(w_props)
        for name in sorted(added):
            self.fail("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}",
                      "The new schema requires a property the old one did not")
        w_add = w.get("additionalProperties", True)
        r_add = r.get("additionalProperties", True)
        if r_add is False and w_add is not False:
            self.fail("ADDITIONAL_PROPERTIES_REMOVED", path, "The new schema closed the "
                      "content model")
        elif isinstance(r_add, dict) and r_add and w_add is not False:
            self.compare(w_add if isinstance(w_add, dict) else {}, r_add,
                         f"{path}/additionalProperties")

    def _array(self, w: dict, r: dict, path: str) -> None:
        w_items = w.get("items")
        r_items = r.get("items")
        if isinstance(r_items, dict) or r_items is False:
            if isinstance(w_items, (dict, bool)) or w_items is None:
                self.compare(w_items if w_items is not None else {}, r_items, f"{path}/items")
        for i, r_item in enumerate(r.get("prefixItems") or ()):
            w_prefix = w.get("prefixItems") or ()
            self.compare(w_prefix[i] if i < len(w_prefix) else {}, r_item,
                         f"{path}/prefixItems/{i}")


def _num(value) -> float:
    return float(value) if isinstance(value, (int, float)) else 0.0


def _limit_error(limit: str, w: dict) -> str:
    snake = "".join(f"_{c}" if c.isupper() else c.upper() for c in limit).upper()
    return f"{snake}_ADDED" if limit not in w else (
        f"{snake}_DECREASED" if limit in _UPPER_LIMITS else f"{snake}_INCREASED")


def _divides(reader_step, writer_step) -> bool:
    """Every multiple of writer_step is a multiple of reader_step."""
    if not isinstance(reader_step, (int, float)) or not isinstance(writer_step, (int, float)):
        return False
    ratio = writer_step / reader_step
    return abs(ratio - round(ratio)) < 1e-9
