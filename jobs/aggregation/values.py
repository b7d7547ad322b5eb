"""Record values as typed Arrow columns, and one value schema for each hour of a run.

Every format's reader ends here: JSON text values (JSON Lines, the string ``value`` of Parquet,
Avro and CSV, bytes objects) go through :func:`parse_values`, one call to Arrow's (C++) JSON
reader per object; typed values (a declared value schema's struct or record) are already
columns; CSV ``value.<path>`` cells go through :func:`infer_text` and :func:`nest_paths`. The
driver unifies the value schemas of every object of an hour (:func:`widen`), and every
object's columns are conformed to its hour's (:func:`conform`), so the tasks reading hours of
one schema return the same typed columns. An hour's types come from its own objects only
(:func:`complete` adds the run's other fields as nulls), so its figures and item keys never
depend on which other hours share the run.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json


class EnvelopeError(ValueError):
    """An object that is not what the ledger says (not an archive envelope, a value that is
    not JSON, a field that cannot take the run's type)."""


class IntToken(str):
    """A JSON integer as the text it was archived as (exact at any size)."""


class FloatToken(str):
    """A JSON number with a fraction or an exponent, as the text it was archived as."""


INT64 = (-(2**63), 2**63)
DECIMAL = pa.decimal128(38, 0)  # Spark's widest integer: 38 digits
#: a text field holding floats, objects or arrays in some records: Spark's readers would render
#: those otherwise than their JSON tokens
MIXED = b"tidemark.mixed"


def loads(value: bytes | str) -> Any:
    """A JSON value with every number kept as its token's text (:class:`IntToken`,
    :class:`FloatToken`): never rounded through a double, rendered as archived."""
    return json.loads(value, parse_int=IntToken, parse_float=FloatToken)


def _fits_int64(value: str) -> bool:
    return INT64[0] <= int(value) < INT64[1]


def _digits(value: str) -> int:
    return len(value.lstrip("-"))


def _python_type(values: list[Any]) -> pa.DataType:
    """The Arrow type for a field's values read in Python: integers int64, decimal(38,0)
    beyond, text beyond 38 digits; integers and floats meet in double only when the
    integers fit int64 (a bigger one is never rounded into a double: text then); objects a
    struct; arrays a list of their elements' type (as Arrow's JSON reader reads them), or text
    when the elements are a mix (:func:`_element_type`); any other mix text (numbers as their
    JSON tokens)."""
    present = [value for value in values if value is not None]
    kinds = {type(value) for value in present}
    if not kinds:
        return pa.null()
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {IntToken}:
        if all(_fits_int64(value) for value in present):
            return pa.int64()
        return DECIMAL if all(_digits(value) <= 38 for value in present) else pa.string()
    if kinds == {IntToken, FloatToken} or kinds == {FloatToken}:
        ints_fit = all(_fits_int64(value) for value in present if isinstance(value, IntToken))
        return pa.float64() if ints_fit else pa.string()
    if kinds == {dict}:
        names = list(dict.fromkeys(name for value in present for name in value))
        return pa.struct([(name, _python_type([value.get(name) for value in present])) for name in names])
    if kinds == {list}:
        element = _element_type([item for value in present for item in value])
        return pa.string() if element is None else pa.list_(element)
    return pa.string()


def _element_type(items: list[Any]) -> pa.DataType | None:
    """The element type of arrays holding ``items``: None (the arrays are text) when the items
    are a mix that only text holds -- text from anything but strings."""
    element = _python_type(items)
    if _is_text(element) and any(type(item) is not str for item in items if item is not None):
        return None
    return element


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind))


def json_text(value: Any) -> str:
    """A value read by :func:`loads` as JSON text: numbers as their tokens, strings as they are
    at the top level (a mixed field's text), compact JSON inside objects and arrays."""
    if isinstance(value, IntToken | FloatToken):
        return _token(value)
    if isinstance(value, str):
        return value
    return _json(value)


def _token(value: IntToken | FloatToken) -> str:
    """A number's token; an integer's is its digits, so the one other spelling JSON allows,
    ``-0``, is ``0`` (as Spark's readers and Arrow's render it)."""
    return "0" if value == "-0" else str(value)


def _json(value: Any) -> str:
    if isinstance(value, IntToken | FloatToken):
        return _token(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json(str(name))}:{_json(item)}" for name, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json(item) for item in value) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value)  # true, false, null


def python_column(values: list[Any], kind: pa.DataType) -> pa.Array:
    """Values read by :func:`loads` (or plain Python values) as an array of ``kind``."""
    if pa.types.is_struct(kind):
        rows = [value if isinstance(value, dict) else None for value in values]
        children = [python_column([None if row is None else row.get(f.name) for row in rows], f.type) for f in kind]
        mask = pa.array([row is None for row in rows], pa.bool_())
        return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)
    if pa.types.is_list(kind):
        lists = [value if isinstance(value, list) else None for value in values]
        offsets = [0]
        for items in lists:
            offsets.append(offsets[-1] + (len(items) if items else 0))
        elements = python_column([item for items in lists if items for item in items], kind.value_type)
        mask = pa.array([items is None for items in lists], pa.bool_())
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements, type=kind, mask=mask)
    if pa.types.is_null(kind):
        return pa.nulls(len(values))
    if pa.types.is_string(kind):
        values = [None if value is None else json_text(value) for value in values]
    elif pa.types.is_floating(kind):
        values = [float(v) if isinstance(v, int | float | str) and not isinstance(v, bool) else None for v in values]
    elif pa.types.is_integer(kind):
        values = [int(v) if isinstance(v, int | IntToken) and not isinstance(v, bool) else None for v in values]
    elif pa.types.is_decimal(kind):
        values = [Decimal(v) if isinstance(v, int | IntToken) and not isinstance(v, bool) else None for v in values]
    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:  # e.g. an integer beyond int64
        raise EnvelopeError(f"values do not fit {kind}: {exc}") from None  # loudly, never as nulls


def _parse_in_python(values: list[bytes], run: pa.Schema | None = None) -> pa.Table:
    """The slow path, for values whose fields change type from record to record, integers
    beyond int64, or fields the run renders as text: every number kept as its token. A field
    the run holds as text, at any depth, is made text here (its numbers as their tokens, not
    re-rendered by a cast)."""
    try:
        rows = [loads(value) for value in values]
    except ValueError as exc:
        raise EnvelopeError(f"an archived value is not JSON: {exc}") from None
    names = list(dict.fromkeys(name for row in rows if isinstance(row, dict) for name in row))
    columns = {name: [row.get(name) if isinstance(row, dict) else None for row in rows] for name in names}
    theirs = {field.name: field.type for field in run} if run is not None else {}
    arrays, fields = [], []
    for name, column in columns.items():
        # a field without a value here stays null-typed, as Arrow's reader types it: the hour
        # types it (never text for an object that happens to hold only nulls)
        kind = _text_as_run(_python_type(column), theirs.get(name))
        mixed = _holds_others(column, kind)
        arrays.append(python_column(column, kind))
        fields.append(pa.field(name, kind, metadata={MIXED: b"1"} if mixed else None))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _holds_others(values: list[Any], kind: pa.DataType) -> bool:
    """Whether a field of ``kind`` is text (at any depth) where some of ``values`` are floats,
    objects or arrays: text Spark's readers would render otherwise (integers and booleans they
    render as their tokens)."""
    if pa.types.is_string(kind):
        return any(isinstance(value, FloatToken | dict | list) for value in values)
    if pa.types.is_struct(kind):
        rows = [value for value in values if isinstance(value, dict)]
        return any(_holds_others([row.get(field.name) for row in rows], field.type) for field in kind)
    if pa.types.is_list(kind):
        return _holds_others([item for value in values if isinstance(value, list) for item in value], kind.value_type)
    return False


def _text_as_run(kind: pa.DataType, run: pa.DataType | None) -> pa.DataType:
    """``kind`` (a field's type in these values) with text wherever the run holds text, at any
    depth."""
    if run is None or pa.types.is_null(kind):
        return kind
    if pa.types.is_string(run):
        return run
    if pa.types.is_struct(kind) and pa.types.is_struct(run):
        theirs = {field.name: field.type for field in run}
        return pa.struct([(field.name, _text_as_run(field.type, theirs.get(field.name))) for field in kind])
    if pa.types.is_list(kind) and pa.types.is_list(run):
        return pa.list_(_text_as_run(kind.value_type, run.value_type))
    return kind


def _renders_text(parsed: pa.Schema, run: pa.Schema | None) -> bool:
    """Whether the run holds as text, at any depth, a field these values parsed as something
    else: its numbers must then be their tokens, which only the Python path keeps (Arrow's
    cast renders ``1000.0`` as ``1000`` and ``1e22`` as ``1e+22``)."""
    theirs = {field.name: field.type for field in run} if run is not None else {}
    return any(field.type != _text_as_run(field.type, theirs.get(field.name)) for field in parsed)


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


def _untimed(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every timestamp, at any depth, as text."""
    if pa.types.is_timestamp(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([pa.field(field.name, _untimed(field.type)) for field in kind])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(_untimed(kind.value_type))
    return kind


def _read_json(data: pa.Buffer | bytes) -> pa.Table:
    table = pa_json.read_json(pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data))
    as_text = pa.schema([pa.field(field.name, _untimed(field.type)) for field in table.schema])
    if as_text != table.schema:  # keep ISO-8601 text as text, at any depth (Spark would take it as a zoned time)
        options = pa_json.ParseOptions(explicit_schema=as_text)
        source = pa.BufferReader(data) if isinstance(data, pa.Buffer) else io.BytesIO(data)
        table = pa_json.read_json(source, parse_options=options).select(table.column_names)  # fields in value order
    return table


#: an integer of 19 digits or more may be beyond int64, which Arrow's reader would make a double
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
#: a value (one a line) that is no JSON object -- an array, a scalar, ``null`` --: Arrow's JSON
#: reader (pyarrow 26) crashes the process (SIGSEGV) on a ``null`` at the start of its input or
#: of any of its blocks, and fails on the others anyway; such values are read in Python. (The
#: first line is matched apart: a pattern starting with the literal line break is searched for
#: at memchr speed, about 20 ms for 60 MB, where ``(?:^|\n)`` costs as much as Arrow's parse.)
_FIRST_NOT_OBJECT = re.compile(rb"[ \t\r]*[^{\s]")
_NOT_OBJECT = re.compile(rb"\n[ \t\r]*[^{\s]")


def parse_values(values: list[bytes] | pa.Array | pa.ChunkedArray, run: pa.Schema | None = None) -> pa.Table:
    """JSON object values as typed Arrow columns: parsed in C++ by Arrow's JSON reader, or in
    Python (every number kept as its token) when a field's type varies between records, when
    an integer may be beyond int64 (19 digits or more anywhere), when a value is no JSON
    object, or when ``run`` (the run's value schema) holds as text, at any depth, a field
    parsed as something else here.

    ``values`` is a list of one-line JSON texts (JSON Lines) or a string/binary column (Parquet,
    Avro, CSV, bytes objects), which never leaves Arrow on the fast path."""
    rows = len(values)
    if not rows:
        return pa.table({})
    data = b"\n".join(values) if isinstance(values, list) else _one_per_line(values)
    view = data if isinstance(data, bytes) else memoryview(data)
    objects = not _FIRST_NOT_OBJECT.match(view) and not _NOT_OBJECT.search(view)
    if objects and not _LONG_DIGITS.search(view):
        try:
            table = _read_json(data)
            if table.num_rows == rows and not _renders_text(table.schema, run):
                return table
        except pa.ArrowInvalid:
            pass
    if not isinstance(values, list):
        items = values.to_pylist()
        values = [b"{}" if item is None else item.encode() if isinstance(item, str) else item for item in items]
    return _parse_in_python(values, run)


_JSON_NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"


def infer_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The type of a CSV ``value.<path>`` column, whose cells are text (strings as they are,
    numbers and booleans as their JSON text): every non-empty cell an integer -> int64, a
    number -> double, ``true``/``false`` -> bool; otherwise text. All empty -> null (typed by
    the run). Integers beyond int64 are decimal(38,0), beyond 38 digits text, never a double
    (and with floats, double only when every integer fits int64, else text). So a string field
    whose every value looks like a number reads as a number: the one thing CSV cannot tell (a
    declared value schema or the ``value`` column can)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = column.cast(pa.string())
    if column.null_count == len(column):
        return pa.nulls(len(column))
    # only JSON's number syntax: Arrow's cast would also take "nan", "inf" or "+5", text a
    # JSON number never renders as
    cells = column.drop_null()
    if pc.all(pc.match_substring_regex(cells, _JSON_NUMBER)).as_py():
        kind = _python_type(
            [(IntToken if "." not in c and "e" not in c.lower() else FloatToken)(c) for c in cells.to_pylist()]
        )
        return python_column([None if c is None else loads(c) for c in column.to_pylist()], kind)
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


def widen(a: pa.DataType, b: pa.DataType, *, settled: bool = True) -> pa.DataType:
    """The type both fit in: null gives way, integers meet in decimal(38,0) when one is
    beyond int64, int64 and float in double (a decimal and a float in text: never a double
    for an integer beyond int64), structs merge field by field (nested values of objects with
    different fields), lists element by element (an object's empty lists, ``list<null>``,
    give way too) unless their elements meet only in text from anything but strings (then the
    lists are text), otherwise text. A struct's field never seen with a value is text, or with
    ``settled`` false still null (an hour's schema: :func:`complete` types it)."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    if {pa.types.is_decimal(a), pa.types.is_decimal(b)} == {True} or (
        (pa.types.is_decimal(a) or pa.types.is_decimal(b)) and (pa.types.is_integer(a) or pa.types.is_integer(b))
    ):
        return DECIMAL
    numeric = (pa.types.is_integer, pa.types.is_floating)
    if any(check(a) for check in numeric) and any(check(b) for check in numeric):
        return pa.float64()
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {field.name: field.type for field in a}
        for field in b:
            fields[field.name] = widen(fields.get(field.name, pa.null()), field.type, settled=settled)
        return pa.struct([(name, settle(kind) if settled else kind) for name, kind in fields.items()])
    if pa.types.is_list(a) and pa.types.is_list(b):
        element = widen(a.value_type, b.value_type, settled=settled)
        texts = (pa.types.is_string, pa.types.is_null)
        if _is_text(element) and not all(any(check(k) for check in texts) for k in (a.value_type, b.value_type)):
            return pa.string()
        return pa.list_(element)
    return pa.string()


def settle(kind: pa.DataType) -> pa.DataType:
    """A field never seen with a value (null type) is text, at any depth."""
    if pa.types.is_null(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([(field.name, settle(field.type)) for field in kind])
    if pa.types.is_list(kind):
        return pa.list_(settle(kind.value_type))
    return kind


def unify(tables: Iterable[pa.Table | pa.Schema], *, settled: bool = True) -> pa.Schema:
    """One value schema over tables (or their schemas): a field takes the widest type it has anywhere. A
    field that is text in the run (at any depth) where some sample had it otherwise, or that a
    sample read as a mixed field, is marked :data:`MIXED`: its numbers are their JSON tokens,
    which only the Arrow reader's Python path keeps (Spark's readers would render them as
    Java doubles). With ``settled`` false, a field never seen with a value keeps the null type
    (an hour's schema, before :func:`complete` gives it the run's type)."""
    fields: dict[str, pa.DataType] = {}
    samples: dict[str, list[pa.DataType]] = {}
    mixed: set[str] = set()
    for table in tables:
        for field in table.schema if isinstance(table, pa.Table) else table:
            fields[field.name] = widen(fields.get(field.name, pa.null()), field.type, settled=settled)
            samples.setdefault(field.name, []).append(field.type)
            if field.metadata and MIXED in field.metadata:
                mixed.add(field.name)
    schema = []
    for name, kind in fields.items():
        final = settle(kind) if settled else kind
        marked = name in mixed or any(_text_over(sample, final) for sample in samples[name])
        schema.append(pa.field(name, final, metadata={MIXED: b"1"} if marked else None))
    return pa.schema(schema)


def _text_over(sample: pa.DataType, final: pa.DataType) -> bool:
    """Whether ``final`` holds as text, at any depth, what ``sample`` holds as floats, objects
    or arrays."""
    if pa.types.is_string(final):  # integers and booleans: Spark renders them as their tokens too
        kinds = (pa.types.is_string, pa.types.is_null, pa.types.is_integer, pa.types.is_decimal, pa.types.is_boolean)
        return not any(check(sample) for check in kinds)
    if pa.types.is_struct(final) and pa.types.is_struct(sample):
        finals = {field.name: field.type for field in final}
        return any(_text_over(field.type, finals[field.name]) for field in sample if field.name in finals)
    if pa.types.is_list(final) and pa.types.is_list(sample):
        return _text_over(sample.value_type, final.value_type)
    return False


def _completed(own: pa.DataType, run: pa.DataType) -> pa.DataType:
    if pa.types.is_null(own):  # no value in the hour: as if the hour did not have the field
        return run
    if pa.types.is_list(own) and pa.types.is_list(run):
        return pa.list_(_completed(own.value_type, run.value_type))
    if not (pa.types.is_struct(own) and pa.types.is_struct(run)):
        return own
    theirs = {field.name: field.type for field in run}
    fields = [pa.field(field.name, _completed(field.type, theirs.get(field.name, field.type))) for field in own]
    names = {field.name for field in own}
    return pa.struct([*fields, *(pa.field(field.name, field.type) for field in run if field.name not in names)])


def complete(own: pa.Schema, run: pa.Schema) -> pa.Schema:
    """An hour's value schema (``own``: unified over that hour's objects only, unsettled) with
    the fields, at any depth, that it lacks and the run's other hours have (``run``), typed as
    there: the hour has no value for them, so they are all nulls and change none of its figures
    or keys, and every aggregation names the same columns in every hour. A field the hour holds
    only nulls in (null-typed) takes the run's type likewise; then what is still null-typed is
    text. Its own fields keep their types (and :data:`MIXED` marks): what the hour holds is
    typed by the hour alone."""
    theirs = {field.name: field.type for field in run}
    fields = [field.with_type(settle(_completed(field.type, theirs.get(field.name, field.type)))) for field in own]
    names = set(own.names)
    return pa.schema([*fields, *(pa.field(field.name, field.type) for field in run if field.name not in names)])


def mixed_fields(schema: pa.Schema) -> list[str]:
    """The run's fields marked :data:`MIXED` (text holding numbers in some records)."""
    return [field.name for field in schema if field.metadata and MIXED in field.metadata]


def _conform_column(column: pa.Array, kind: pa.DataType, name: str) -> pa.Array:
    if column.type == kind:
        return column
    if pa.types.is_list(kind) and pa.types.is_list(column.type):
        starts = column.offsets
        first, last = starts[0].as_py(), starts[-1].as_py()
        offsets = pc.subtract(starts, first) if first else starts
        items = _conform_column(column.values.slice(first, last - first), kind.value_type, f"{name}[]")
        mask = column.is_null() if column.null_count else None
        return pa.ListArray.from_arrays(offsets, items, type=kind, mask=mask)
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
    # int64 into a double field (the hour has fractions elsewhere): an integer beyond 2**53 rounds
    # to the nearest double, as Arrow's JSON reader, the Python path and Spark's reader round it
    # in an object holding both -- never a failed cast for what the object alone reads
    safe = not (pa.types.is_integer(column.type) and pa.types.is_floating(kind))
    try:
        return column.cast(kind, safe=safe)
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
