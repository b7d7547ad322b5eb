"""Record values as typed Arrow columns, and one value schema for a run.

Every format's reader ends here: JSON text values (JSON Lines, the string ``value`` of Parquet,
Avro and CSV, bytes objects) go through :func:`parse_values`, one call to Arrow's (C++) JSON
reader per object; typed values (a declared value schema's struct or record) are already
columns; CSV ``value.<path>`` cells go through :func:`infer_text` and :func:`nest_paths`. The
driver unifies the value schemas of a few sample objects (:func:`widen`), and every object's
columns are conformed to it (:func:`conform`), so every task returns the same typed columns.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json


class EnvelopeError(ValueError):
    """An object that is not what the ledger says (not an archive envelope, a value that is
    not JSON, a field that cannot take the run's type)."""


def _python_type(values: list[Any]) -> pa.DataType:
    """The Arrow type for a field's values when Arrow's reader cannot decide (mixed types)."""
    kinds = {type(value) for value in values if value is not None}
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int} and all(-(2**63) <= value < 2**63 for value in values if value is not None):
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    return pa.string()  # strings, or a mix of anything: kept as text (JSON for non-strings)


def python_column(values: list[Any], kind: pa.DataType) -> pa.Array:
    if pa.types.is_string(kind):
        values = [v if v is None or isinstance(v, str) else orjson.dumps(v).decode() for v in values]
    elif pa.types.is_floating(kind) or pa.types.is_integer(kind):
        values = [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values]
    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:  # e.g. an integer beyond int64
        raise EnvelopeError(f"values do not fit {kind}: {exc}") from None  # loudly, never as nulls


def _parse_in_python(values: list[bytes]) -> pa.Table:
    """The slow path, for values whose fields change type from record to record."""
    try:
        rows = [orjson.loads(value) for value in values]
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"an archived value is not JSON: {exc}") from None
    names = list(dict.fromkeys(name for row in rows if isinstance(row, dict) for name in row))
    columns = {name: [row.get(name) if isinstance(row, dict) else None for row in rows] for name in names}
    return pa.table({name: python_column(column, _python_type(column)) for name, column in columns.items()})


def _one_per_line(column: pa.Array | pa.ChunkedArray) -> pa.Buffer:
    """A column of JSON texts as one newline-separated buffer, without a Python loop: raw line
    breaks (only ever insignificant whitespace in valid JSON) become spaces, a null becomes
    ``{}``, and the values of the resulting string array are contiguous in its data buffer."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not pa.types.is_string(column.type):
        try:
            column = column.cast(pa.string())  # binary (UTF-8 checked) or large_string
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise EnvelopeError(f"archived values are not JSON text: {exc}") from None
    column = pc.fill_null(column, "{}")
    column = pc.replace_substring(pc.replace_substring(column, "\n", " "), "\r", " ")
    lines = pc.binary_join_element_wise(column, "", "\n")
    _validity, offsets_buffer, data = lines.buffers()
    offsets = pa.Array.from_buffers(pa.int32(), len(lines) + 1, [None, offsets_buffer], offset=lines.offset)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return data.slice(start, end - start)


def _read_json(data: pa.Buffer | bytes) -> pa.Table:
    table = pa_json.read_json(pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data))
    stamps = [field.name for field in table.schema if pa.types.is_timestamp(field.type)]
    if stamps:  # keep ISO-8601 text as text (Arrow would make timestamps Spark cannot take)
        as_text = pa.schema([(name, pa.string()) for name in stamps])
        options = pa_json.ParseOptions(explicit_schema=as_text)
        source = pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data)
        table = pa_json.read_json(source, parse_options=options).select(table.column_names)  # fields in value order
    return table


def parse_values(values: list[bytes] | pa.Array | pa.ChunkedArray) -> pa.Table:
    """JSON object values as typed Arrow columns: parsed in C++ by Arrow's JSON reader, or,
    when a field's type varies between records, in Python (mixed fields become text).

    ``values`` is a list of one-line JSON texts (JSON Lines) or a string/binary column (Parquet,
    Avro, CSV, bytes objects), which never leaves Arrow on the fast path."""
    rows = len(values)
    if not rows:
        return pa.table({})
    data = b"\n".join(values) if isinstance(values, list) else _one_per_line(values)
    try:
        table = _read_json(data)
        if table.num_rows == rows:
            return table
    except pa.ArrowInvalid:
        pass
    if not isinstance(values, list):
        items = values.to_pylist()
        values = [b"{}" if item is None else item.encode() if isinstance(item, str) else item for item in items]
    return _parse_in_python(values)


_JSON_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"


def infer_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The type of a CSV ``value.<path>`` column, whose cells are text (strings as they are,
    numbers and booleans as their JSON text): every non-empty cell an integer -> int64, a
    number -> double, ``true``/``false`` -> bool; otherwise text. All empty -> null (typed by
    the run). So a string field whose every value looks like a number reads as a number: the
    one thing CSV cannot tell (a declared value schema or the ``value`` column can)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = column.cast(pa.string())
    if column.null_count == len(column):
        return pa.nulls(len(column))
    # only JSON's number syntax: Arrow's cast would also take "nan", "inf" or "+5", text a
    # JSON number never renders as
    if pc.all(pc.match_substring_regex(column.drop_null(), _JSON_NUMBER)).as_py():
        for kind in (pa.int64(), pa.float64()):
            try:
                return column.cast(kind)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
    if pc.all(pc.is_in(column.drop_null(), pa.array(["true", "false"]))).as_py():
        return pc.equal(column, "true")
    return column


def nest_paths(columns: Mapping[str, pa.Array]) -> pa.Table:
    """Columns named by dotted paths (``price``, ``meta.region``) as the value's fields: a
    one-part path is a field, a longer one a field of a struct named by its first part
    (``meta`` with a field ``region``), exactly as a JSON value ``{"meta": {"region": ..}}``
    reads, so aggregations name ``meta.region`` in every format. When a path is both a leaf
    and a prefix of others (``value.meta`` and ``value.meta.region``), the struct wins."""
    tree: dict[str, Any] = {}
    for path, column in columns.items():
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        if not isinstance(node.get(leaf), dict):
            node[leaf] = column

    def build(node: Mapping[str, Any]) -> tuple[list[str], list[pa.Array]]:
        names, arrays = [], []
        for name, child in node.items():
            if isinstance(child, dict):
                child_names, child_arrays = build(child)
                array: pa.Array = pa.StructArray.from_arrays(child_arrays, names=child_names)
            else:
                array = child
            names.append(name)
            arrays.append(array)
        return names, arrays

    names, arrays = build(tree)
    return pa.Table.from_arrays(arrays, names=names) if names else pa.table({})


def widen(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type both fit in: null gives way, int and float meet in double, structs merge field
    by field (nested values of objects with different fields), otherwise text."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(check(a) for check in numeric) and any(check(b) for check in numeric):
        return pa.float64()
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {field.name: field.type for field in a}
        for field in b:
            fields[field.name] = widen(fields.get(field.name, pa.null()), field.type)
        return pa.struct([(name, settle(kind)) for name, kind in fields.items()])
    return pa.string()


def settle(kind: pa.DataType) -> pa.DataType:
    """A field never seen with a value (null type) is text, at any depth."""
    if pa.types.is_null(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([(field.name, settle(field.type)) for field in kind])
    return kind


def unify(tables: Iterable[pa.Table]) -> pa.Schema:
    """One value schema over sample tables: a field takes the widest type it has anywhere."""
    fields: dict[str, pa.DataType] = {}
    for table in tables:
        for field in table.schema:
            fields[field.name] = widen(fields.get(field.name, pa.null()), field.type)
    return pa.schema([(name, settle(kind)) for name, kind in fields.items()])


def _conform_column(column: pa.Array, kind: pa.DataType, name: str) -> pa.Array:
    if column.type == kind:
        return column
    if pa.types.is_struct(kind) and pa.types.is_struct(column.type):
        present = {field.name for field in column.type}
        children = [
            _conform_column(column.field(field.name), field.type, f"{name}.{field.name}")
            if field.name in present
            else pa.nulls(len(column), field.type)
            for field in kind
        ]
        mask = column.is_null() if column.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)
    try:
        return column.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        if pa.types.is_string(kind):
            return python_column(column.to_pylist(), kind)  # anything -> text
        raise EnvelopeError(f"field {name!r} is {column.type} here but {kind} in the run: {exc}") from None


def conform(table: pa.Table, fields: Iterable[pa.Field], rows: int) -> list[pa.Array]:
    """Columns for ``fields`` from ``table``: cast when types differ (12 vs 12.5), nulls when the
    object lacks the field, structs field by field. A value that cannot take the run's type
    fails the task loudly (the hour stays dirty) rather than turning into nulls that would skew
    the aggregates."""
    columns = []
    for field in fields:
        if field.name not in table.column_names:
            columns.append(pa.nulls(rows, field.type))
            continue
        columns.append(_conform_column(table.column(field.name).combine_chunks(), field.type, field.name))
    return columns
