"""A batch's Arrow schema reconciled with the table's (pure Arrow, no pyiceberg, no I/O).

The rules (docs/iceberg.md, "Schema evolution"):

* a field the table lacks is added, by name, as optional (also inside structs);
* a field whose table type is narrower and Iceberg allows the promotion (int -> long,
  float -> double, decimal(P, S) -> decimal(P', S) with P' > P) is promoted;
* a long field of an int column stays int while its values fit (JSON and msgpack carry no
  width), and promotes the column to long when one does not;
* a field whose batch type is narrower than the table's is written as the table's type
  (int -> long or double, float -> double): the table is not changed;
* any other change (long -> double, string -> long, struct -> string, ...) is refused with
  ``IncompatibleField`` naming the field: the sink stops that table and commits nothing more
  to it; its records stay in Kafka.

A field the batch does not have is never dropped: its rows read as null.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .decode import iceberg_type


class IncompatibleField(ValueError):
    def __init__(self, path: str, table_type: pa.DataType, batch_type: pa.DataType) -> None:
        self.path = path
        super().__init__(
            f"field {path!r}: the table has {_name(table_type)}, the records have "
            f"{_name(batch_type)}, and Iceberg cannot change a column from one to the other "
            "(change the table by hand, or write the field under a new name)")


def _name(t: pa.DataType) -> str:
    names = {pa.int32(): "int", pa.int64(): "long", pa.float32(): "float",
             pa.float64(): "double", pa.string(): "string", pa.bool_(): "boolean",
             pa.binary(): "binary"}
    return names.get(t, str(t))


# Iceberg's allowed promotions (table type -> wider type).
_PROMOTIONS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}
# Narrower batch types written as the table's type, the table unchanged.
_WIDENINGS = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64()),
              (pa.int32(), pa.float64()), (pa.int64(), pa.float64())}


def merged_type(path: str, table_t: pa.DataType, batch_t: pa.DataType,
                narrow: bool = False) -> pa.DataType:
    """The type the table must have for this batch (the table's when nothing changes).
    With ``narrow``, a long batch field keeps an int table column (conform casts the values,
    and fails if one does not fit: then the column is promoted)."""
    if table_t == batch_t:
        return table_t
    if pa.types.is_struct(table_t) and pa.types.is_struct(batch_t):
        return pa.struct(merged_fields(path + ".", list(table_t), list(batch_t), narrow))
    if pa.types.is_list(table_t) and pa.types.is_list(batch_t):
        return pa.list_(merged_type(path + ".element", table_t.value_type, batch_t.value_type,
                                    narrow))
    if (table_t, batch_t) in _PROMOTIONS:
        return table_t if narrow and table_t == pa.int32() else batch_t
    if (batch_t, table_t) in _WIDENINGS:
        return table_t
    if (pa.types.is_decimal(table_t) and pa.types.is_decimal(batch_t)
            and table_t.scale == batch_t.scale):
        return table_t if table_t.precision >= batch_t.precision else batch_t
    raise IncompatibleField(path, table_t, batch_t)


def merged_fields(prefix: str, table_fields: list[pa.Field],
                  batch_fields: list[pa.Field], narrow: bool = False) -> list[pa.Field]:
    """The table's fields in its order, each merged with the batch's, then the new ones."""
    batch = {f.name: f for f in batch_fields}
    out = []
    for f in table_fields:
        if f.name in batch:
            f = f.with_type(merged_type(prefix + f.name, f.type, batch.pop(f.name).type, narrow))
        out.append(f)
    out.extend(pa.field(f.name, f.type) for f in batch.values())  # new: optional
    return out


def plain(schema: pa.Schema) -> pa.Schema:
    """A table's Arrow schema (from pyiceberg) in the decoder's types, without field ids."""
    return pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in schema])


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("item", _plain_type(t.value_type), t.value_field.nullable))
    return iceberg_type(t) or t


def plan(table: pa.Schema, batch: pa.Schema, narrow: bool = False) -> tuple[pa.Schema, bool]:
    """(the schema the table needs for ``batch``, whether that differs from ``table``)."""
    table = plain(table)
    merged = pa.schema(merged_fields("", list(table), list(batch), narrow))
    return merged, not same(merged, table)


def same(a: pa.Schema, b: pa.Schema) -> bool:
    return [(f.name, _loose(f.type)) for f in a] == [(f.name, _loose(f.type)) for f in b]


def _loose(t: pa.DataType):
    """A type without nullability (Arrow compares struct children's nullability too)."""
    if pa.types.is_struct(t):
        return ("struct", tuple((f.name, _loose(f.type)) for f in t))
    if pa.types.is_list(t):
        return ("list", _loose(t.value_type))
    return t


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: missing ones null, narrower ones cast."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(_conform_array(table.column(f.name), f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _conform_array(array, t: pa.DataType):
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([_conform_array(c, t) for c in array.chunks], t)
    if array.type == t:
        return array
    if pa.types.is_struct(t) and pa.types.is_struct(array.type):
        names = {array.type.field(i).name: i for i in range(array.type.num_fields)}
        children = [
            _conform_array(array.field(names[f.name]), f.type) if f.name in names
            else pa.nulls(len(array), f.type)
            for f in t
        ]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=array.is_null())
    if pa.types.is_list(t) and pa.types.is_list(array.type):
        values = _conform_array(array.flatten(), t.value_type)
        offsets = pc.subtract(array.offsets, array.offsets[0])  # (a slice's start at 0)
        return pa.ListArray.from_arrays(offsets, values, type=t, mask=array.is_null())
    return array.cast(t)
