"""Generated record values through the real archiver and both readers of the aggregation job,
against a plain-Python reference of what the job must store (issue 30's property test).

``make_case(seed)`` draws everything from ``random.Random(seed)`` (a failing seed replays
exactly): 2 or 3 Kafka partitions, records over 2 to 4 event hours (their record timestamps:
the stream's event time is ``record_timestamp``, so values that are no JSON object are archived
too), one format the native reader supports (JSON Lines gzip or plain, Parquet, CSV with the
``value`` column), a small flush size (several objects per partition and hour), and values:

* ``n``: integers small, around 2^53 and 2^63 (inside and beyond int64), of 20 to 38 digits
  (``decimal(38,0)``) and beyond 38 (text), floats ordinary, tiny (below 1e-130 in magnitude,
  down to subnormals), huge (beyond 1e38 and 1e126, up to 1e300), and decimal tokens
  (``1.50``, ``2.500``, ``1E5``, ``-0``); each hour, and each partition's objects within it,
  draws them from one or two of these regimes, so the field is a long in one hour, a decimal,
  a double or text in another (``min``, ``max``, ``count(distinct)``);
* ``amount``, ``price``/``Price`` and the unicode-named ``数量``: summed fields (ints, floats,
  tiny and huge floats, integers beyond int64, decimal tokens, and in some hours a string);
* ``code``: a group key that is an int in one object or hour and a float, a string (``"7"``,
  ``"1000.0"``: the text of a number), a boolean or a u64 in another;
* ``sku``: a group key of unicode text (composed and decomposed, emoji, quotes, backslashes,
  line breaks, a 19-digit run, ISO-looking text, ``""``), missing or null, and long ones: a
  group whose JSON is exactly 1,024 bytes (the sort key) and longer (hashed), 1,200 bytes of
  two-byte characters;
* ``meta``: a nested object with an ISO-8601 ``at`` (``Z``, offsets, fractions), a unicode
  ``region``, ``depth.n``, a ``score`` drawn like ``n`` or text (a nested field whose type
  changes between objects and hours) and ``stamps``, a list of ISO-8601 texts; sometimes
  partial, empty or missing;
* ``tags``: lists of unicode strings (an ISO-looking one, a 19-digit one), sometimes empty;
* value fields named like the record's envelope columns (``hour``, ``offset``, ``partition``,
  ``epoch``, ``event_time``), names that differ from them or each other only in case
  (``Hour``, ``Offset``, ``price``/``Price``), JSON Lines' own names (``value``, ``key``,
  ``tombstone``...) and a 120-character name;
* values that are no JSON object (arrays, numbers, strings -- one holding JSON --, ``true``,
  ``null``), empty objects, fields null now and then (at the top and inside ``meta``; now and
  then in every record of an object), whitespace inside values, ``\\u`` escapes, and a few
  values that are no JSON at all (dead-lettered: in no aggregate).

Some hours are "plain" (each field one kind in every object): Spark's own readers read those
(an hour whose text fields hold floats, objects or arrays goes to the Arrow reader).

The aggregations (``specs``) group by ``sku``, ``code``, ``meta.region``, ``meta.score`` and
``tags``, and one names envelope columns that no value field shadows (``count(distinct partition)``,
``max(offset)``, ``min(event_time)``): those must be the record's. An aggregation that names a
value field shadowed by an envelope column must be refused (``ConfigError``) with nothing
written and the hours left dirty.

``run_case`` archives the records with the real archiver (``tidemark.archiver.Archiver``, moto),
flushes them, then runs ``run_aggregation`` twice -- the Arrow reader over moto, Spark's own
readers over a ``file://`` copy (``--archive-root``) -- each into a table of its own, and
compares every item of both tables with ``reference_items``: exact equality, except float sums,
which may differ in their last digits (``FLOAT_SUM_TOLERANCE`` of the sum of the magnitudes).

The reference (``reference_items``) is plain Python over the values as produced, from the
job's documented rules (README, "The aggregation job"), not from its code: each hour types each
field by the values it holds in that hour (integers ``long``, ``decimal(38,0)`` beyond int64,
text beyond 38 digits; ints with floats ``double``, or text when an integer is beyond int64;
objects structs field by field; lists arrays of their elements' type, or text when their
elements are a mix; any other mix text, at any depth, each number its JSON token -- an integer's
is its digits, so ``-0`` is ``0`` --, objects and arrays compact JSON); a field the hour has no
value for (absent, or null in every record) takes the run's type, all null, and a field no
record of the run has is null; then groups and metrics as Spark computes them over those values
(``-0.0`` grouped as ``0.0``; ``sum`` of text adds each value read as a double), and items as the
sink stores them (numbers DynamoDB cannot hold as text, a group JSON beyond 1,024 bytes keyed
by its SHA-256).

Some hours must fail, alone: an aggregation their types cannot support (``sum`` of a field that
is only booleans or objects there, ``meta.region`` where ``meta`` is text), or an integer sum
beyond int64 (a ``long`` field) or 38 digits (a ``decimal(38,0)`` one), which the job refuses to
store wrapped or null (``jobs.aggregation.exact_sums``). The reference names them; every other
hour of the run must be aggregated, and the failed ones left dirty.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import orjson
from boto3.dynamodb.types import TypeDeserializer

from tests.support.events import msk_event
from tests.support.harness import small_config_data
from tidemark.archiver import Archiver
from tidemark.config import parse_config
from tidemark.config.model import AggregationConfig
from tidemark.exceptions import ConfigError
from tidemark.records.model import Record

STREAM = "orders"
BASE_MS = 1_795_248_000_000  # 2026-11-21T08:00:00Z
HOUR_MS = 3_600_000
#: formats Spark's own readers take (``jobs.aggregation.native.NATIVE_READERS``), as the stream's
#: ``format`` setting; the Arrow reader reads them all too
FORMATS: dict[str, dict[str, Any]] = {
    "jsonl-gzip": {"type": "jsonl", "compression": "gzip"},
    "jsonl-none": {"type": "jsonl", "compression": "none"},
    "parquet": {"type": "parquet", "compression": "snappy"},
    "csv-gzip": {"type": "csv", "compression": "gzip"},
}
#: the record's envelope columns in the job (``jobs.aggregation.reader.ENVELOPE_NAMES``)
ENVELOPE = ("hour", "epoch", "partition", "offset", "event_time")
#: float sums may differ in their last digits between runs and readers (README): a stored sum
#: must be within this share of the sum of its terms' magnitudes from the exact sum
FLOAT_SUM_TOLERANCE = 1e-12
#: Spark session time zones a case runs under (nothing the job stores may depend on it)
ZONES = ("UTC", "America/New_York", "Asia/Kolkata")


# -- JSON values with their number tokens ----------------------------------------------------------


class Token(str):
    """A JSON number as written in the value (its token, exact at any size)."""

    __slots__ = ()


class IntToken(Token):
    __slots__ = ()


class FloatToken(Token):
    __slots__ = ()


def int_token(value: int) -> IntToken:
    return IntToken(str(value))


def dump(value: Any, *, spaced: bool = False, ascii_only: bool = False) -> str:
    """A value (dicts, lists, strings, :class:`Token` numbers, booleans, None) as JSON text,
    every number exactly its token; ``spaced``: a space after each ``:`` and ``,``;
    ``ascii_only``: non-ASCII characters as ``\\u`` escapes."""
    colon, comma = (": ", ", ") if spaced else (":", ",")

    def text(item: Any) -> str:
        if isinstance(item, Token):
            return str(item)
        if isinstance(item, str):
            return json.dumps(item, ensure_ascii=ascii_only)
        if isinstance(item, dict):
            return "{" + comma.join(f"{text(str(k))}{colon}{text(v)}" for k, v in item.items()) + "}"
        if isinstance(item, list):
            return "[" + comma.join(text(v) for v in item) + "]"
        if isinstance(item, bool) or item is None:
            return json.dumps(item)
        if isinstance(item, int):
            return str(item)
        raise TypeError(f"not a generated JSON value: {item!r}")

    return text(value)


def canonical(value: Any) -> Any:
    """A parsed value with every integer token as its digits (``-0`` is ``0``: an integer's
    text is its value's, whichever reader renders it), at any depth."""
    if isinstance(value, IntToken):
        return IntToken("0") if value == "-0" else value
    if isinstance(value, dict):
        return {name: canonical(item) for name, item in value.items()}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def parse(value: bytes) -> Any:
    """A value as produced, every number its token (:class:`IntToken`, :class:`FloatToken`;
    integers :func:`canonical`)."""
    return canonical(json.loads(value, parse_int=IntToken, parse_float=FloatToken))


# -- the generator -----------------------------------------------------------------------------------

_LONG = "x" * 1_014  # {"sku":"x...x"} is exactly 1,024 bytes: the longest sort key
SKUS = (
    "a",
    "b",
    "é",  # composed
    "e\u0301",  # decomposed: another key
    "日本語",
    "🙂 emoji",
    'quote"d',
    "back\\slash",
    "line\nbreak",
    "tab\there",
    "",
    "null",
    "order-1234567890123456789",  # a run of 19 digits: the Arrow reader's Python path
    "2026-11-21T08:00:00Z",  # ISO-looking text stays text
    _LONG,  # a 1,024-byte sort key
    _LONG + "y",  # 1,025 bytes: keyed by its digest
    "é" * 600,  # 1,200 bytes of two-byte characters
)
REGIONS = ("eu-west", "us-east", "Zürich", "東京", "")
TAGS = ("red", "blue", "größe", "🙂", "2026-11-21T08:00:00Z", "1234567890123456789012", "")
NOT_OBJECTS = ("[1,2]", "5", '"text"', '"{\\"sku\\":\\"a\\"}"', "true", "null", "[]", "-0.5", '["a",{"b":1}]')
NOT_JSON = ('{"sku": nope}', "{not json", '{"a":1')
SHADOWING = ("hour", "offset", "partition", "epoch", "event_time")  # value fields of envelope names
CASE_TWINS = ("Hour", "Offset")
PLAIN_NAMES = ("value", "key", "tombstone", "timestamp", "topic", "headers")  # JSON Lines' envelope names
LONG_NAME = "long_" + "k" * 115  # a 120-character field name
UNICODE_NAME = "数量"


def _float_token(rng: random.Random, low: float, high: float) -> FloatToken:
    return FloatToken(
        repr(round(rng.uniform(low, high), rng.choice((0, 1, 2, 3, 6))))
        if rng.random() < 0.7
        else repr(rng.uniform(low, high))
    )


def _sign(rng: random.Random) -> int:
    return -1 if rng.random() < 0.3 else 1


NUMBER_REGIMES: dict[str, Callable[[random.Random], Token]] = {
    "small": lambda rng: int_token(rng.randint(-1_000, 1_000)),
    "2^53": lambda rng: int_token(_sign(rng) * (2**53 + rng.randint(-2, 3))),
    "int64-edge": lambda rng: int_token(rng.choice((2**63 - 1 - rng.randint(0, 3), -(2**63) + rng.randint(0, 3)))),
    "u64": lambda rng: int_token(rng.choice((2**63 + rng.randint(0, 3), 2**64 - 1 - rng.randint(0, 40)))),
    "38-digits": lambda rng: int_token(_sign(rng) * rng.randint(10**19, 10**38 - 1)),
    "beyond-38": lambda rng: int_token(_sign(rng) * (10**40 + rng.randint(0, 10**6))),
    "float": lambda rng: _float_token(rng, -1e4, 1e4),
    "tiny": lambda rng: FloatToken(
        rng.choice(
            (
                "1e-131",
                "-2.5e-200",
                "5e-324",
                "1.7976931348623157e-308",
                f"{rng.randint(1, 9)}e-{rng.randint(131, 300)}",
            )
        )
    ),
    "huge": lambda rng: FloatToken(
        rng.choice(
            ("3.5e38", "1e39", "-2E+127", "1.5e300", f"{rng.randint(1, 9)}.{rng.randint(0, 99)}e{rng.randint(39, 300)}")
        )
    ),
    "tokens": lambda rng: FloatToken(
        rng.choice(("1.50", "2.500", "1E5", "1e-7", "0.1", "100.0", "1000.0", "1e22", "-0.0"))
    ),
}
#: summed fields: integers near int64's end (sums beyond it fail their hour), booleans and objects
#: (an hour of only those cannot sum them: it fails), floats up to 1e300, text
AMOUNT_REGIMES: dict[str, Callable[[random.Random], Any]] = {
    "int": lambda rng: int_token(rng.randint(-(10**6), 10**6)),
    "2^53": lambda rng: int_token(_sign(rng) * (2**53 + rng.randint(-2, 3))),
    "beyond-int64": lambda rng: int_token(10**20 + rng.randint(0, 10**6)),
    "float": lambda rng: _float_token(rng, -1e3, 1e3),
    "tiny": NUMBER_REGIMES["tiny"],
    "huge": lambda rng: FloatToken(f"{rng.randint(1, 9)}.{rng.randint(0, 99)}e{rng.randint(39, 250)}"),
    "tokens": NUMBER_REGIMES["tokens"],
    "string": lambda rng: rng.choice(("n/a", "—", "", "x1")),
    "int64-edge": lambda rng: int_token(2**62 + rng.randint(0, 2**61)),
    "bool": lambda rng: rng.random() < 0.5,
    "object": lambda rng: {"value": int_token(rng.randint(0, 9))},
}
#: a nested field (``meta.score``): numbers of every regime, and text
SCORE_REGIMES: dict[str, Callable[[random.Random], Any]] = {
    **NUMBER_REGIMES,
    "text": lambda rng: rng.choice(("high", "1000.0", "7", "")),
}
CODE_REGIMES: dict[str, Callable[[random.Random], Any]] = {
    "int": lambda rng: int_token(rng.choice((0, 1, 7, 1000, -0))),
    "minus-zero": lambda rng: IntToken("-0"),
    "float": lambda rng: FloatToken(rng.choice(("7.0", "1000.0", "1e22", "2.5", "0.0", "-0.0", "1E3"))),
    "string": lambda rng: rng.choice(("7", "1000.0", "abc", "ü", "")),
    "bool": lambda rng: rng.random() < 0.5,
    "u64": lambda rng: int_token(2**64 - 1 - rng.randint(0, 2)),
}


def _iso(rng: random.Random, hour_ms: int) -> str:
    at = datetime.fromtimestamp((hour_ms + rng.randrange(HOUR_MS)) / 1000, UTC)
    style = rng.randrange(4)
    if style == 0:
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style == 1:
        return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if style == 2:
        return (at + timedelta(hours=5, minutes=30)).strftime("%Y-%m-%dT%H:%M:%S+05:30")
    return at.strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class Case:
    """One workload and the configuration it runs under."""

    seed: int
    format: str
    records: list[Record]  # offset order per partition
    specs: list[Spec]
    zone: str = "UTC"  # the Spark session's time zone during the runs
    max_records: int = 7  # flush size
    refused: AggregationConfig | None = None  # names a value field an envelope column shadows
    shape: str = ""
    batch: int | None = None  # records per delivery (None: 1 to 40, drawn); a flush cuts at batch ends


def _regimes(
    rng: random.Random, names: Sequence[str], hours: Sequence[str], partitions: int, plain: set[str]
) -> dict[Any, str]:
    """Per (hour, partition): a regime of ``names``; an hour uses one or two of them (one in a
    ``plain`` hour), so a field's type may differ between objects of an hour and between hours."""
    chosen: dict[Any, str] = {}
    for hour in hours:
        pair = rng.sample(list(names), 2)
        mixed = hour not in plain and rng.random() < 0.5
        for partition in range(partitions):
            chosen[(hour, partition)] = pair[partition % 2] if mixed else pair[0]
    return chosen


@dataclass
class _Draw:
    """What a case draws its values from."""

    rng: random.Random
    regimes: dict[str, dict[Any, str]]
    tables: dict[str, dict[str, Callable[[random.Random], Any]]]
    shadowing: list[str]
    plain: set[str]  # hours whose fields each hold one kind (Spark's readers may read them)
    nulls: float  # how often a present field is null
    meta_strings: bool  # meta is sometimes a string (``meta.region`` fails such an hour)

    def pick(self, name: str, hour: str, partition: int) -> Any:
        table = self.tables[name]
        regime = self.regimes[name][(hour, partition)]
        if hour not in self.plain and self.rng.random() < 0.1:  # now and then another regime within one object
            regime = self.rng.choice(list(table))
        return table[regime](self.rng)

    def value(self, hour: str, hour_ms: int, partition: int) -> dict[str, Any]:
        rng = self.rng
        value: dict[str, Any] = {}
        if rng.random() < 0.9:
            value["sku"] = rng.choice(SKUS)
        for name, share in (("n", 0.85), ("amount", 0.8), ("code", 0.8)):
            if rng.random() < share:
                value[name] = self.pick(name, hour, partition)
        if rng.random() < 0.6:
            value["price"] = rng.choice((int_token(rng.randint(1, 50)), _float_token(rng, 0, 100)))
        if rng.random() < 0.4:
            value["Price"] = rng.choice((int_token(rng.randint(1, 50)), _float_token(rng, 0, 100)))
        if rng.random() < 0.5:
            value[UNICODE_NAME] = int_token(rng.randint(0, 9))
        meta = rng.random()
        if meta < 0.55:
            at = _iso(rng, hour_ms)
            value["meta"] = {"at": at, "region": rng.choice(REGIONS), "depth": {"n": int_token(rng.randint(0, 5))}}
            if rng.random() < 0.7:  # a nested field whose type changes between objects and hours
                value["meta"]["score"] = self.pick("score", hour, partition)
            if rng.random() < 0.4:  # ISO-8601 text inside a nested list
                value["meta"]["stamps"] = [_iso(rng, hour_ms) for _ in range(rng.randint(0, 2))]
        elif meta < 0.7:
            value["meta"] = {"region": rng.choice(REGIONS)}
        elif meta < 0.75:
            value["meta"] = {}
        elif meta < 0.8 and self.meta_strings:
            value["meta"] = "n/a"
        if rng.random() < 0.6:
            value["tags"] = rng.sample(TAGS, rng.randint(0, 3))
        for name in self.shadowing:
            if rng.random() < 0.5:
                value[name] = SHADOWING_VALUES.get(name, int_token(rng.randint(0, 9)))
        for name in CASE_TWINS:
            if rng.random() < 0.2:
                value[name] = int_token(rng.randint(0, 3))
        if rng.random() < 0.15:
            value[rng.choice(PLAIN_NAMES)] = rng.choice(("x", int_token(1), None))
        if rng.random() < 0.1:
            value[LONG_NAME] = "long"
        for node in (value, value.get("meta")):
            for name in node if isinstance(node, dict) else ():
                if rng.random() < self.nulls:  # null at the top and inside objects
                    node[name] = None
        keys = list(value)
        rng.shuffle(keys)
        return {key: value[key] for key in keys}


#: what a value field named like an envelope column holds (the column's own type or another)
SHADOWING_VALUES: dict[str, Any] = {"hour": "2030-01-01T00", "offset": int_token(3_600), "partition": "p-9"}


def make_case(seed: int, *, records: int = 120) -> Case:
    """The workload of ``seed``: about ``records`` records (see the module's docstring)."""
    rng = random.Random(seed)
    partitions = rng.choice((2, 3))
    hours_count = rng.choice((2, 3, 4))
    hours = [f"2026-11-21T{8 + index:02d}" for index in range(hours_count)]
    shadowing = sorted(rng.sample(SHADOWING, rng.choice((0, 1, 2))))
    plain = {hour for hour in hours if rng.random() < 0.4}
    tables = {"n": NUMBER_REGIMES, "amount": AMOUNT_REGIMES, "code": CODE_REGIMES, "score": SCORE_REGIMES}
    draw = _Draw(
        rng,
        {name: _regimes(rng, list(table), hours, partitions, plain) for name, table in tables.items()},
        tables,
        shadowing,
        plain,
        nulls=rng.choice((0.0, 0.03, 0.1)),
        meta_strings=rng.random() < 0.3,
    )
    case = Case(
        seed=seed,
        format=rng.choice(sorted(FORMATS)),
        records=[],
        specs=specs(shadowing, absent_field=rng.random() < 0.3),
        zone=rng.choice(ZONES),
        max_records=rng.choice((4, 7, 12)),
        refused=refused_aggregation(shadowing),
    )
    per_partition = max(1, records // partitions)
    for partition in range(partitions):
        for offset in range(per_partition):
            hour_index = rng.randrange(hours_count)
            hour_ms = BASE_MS + hour_index * HOUR_MS
            timestamp = hour_ms + rng.randrange(HOUR_MS)
            roll = rng.random()
            if roll < 0.06:
                text = rng.choice(NOT_OBJECTS)
            elif roll < 0.08:
                text = rng.choice(NOT_JSON)
            elif roll < 0.1:
                text = "{}"
            else:
                value = draw.value(hours[hour_index], hour_ms, partition)
                text = dump(value, spaced=rng.random() < 0.1, ascii_only=rng.random() < 0.1)
            key = f"k{partition}-{offset}".encode()
            case.records.append(Record(STREAM, partition, offset, timestamp, text.encode(), key))
    case.shape = (
        f"{case.format}, {partitions} partitions, {hours_count} hours, flush {case.max_records}, "
        f"{len(plain)} plain, zone {case.zone}, nulls {draw.nulls}, shadowing {shadowing or '-'}"
    )
    return case


def case_of(
    values: dict[str, list[bytes | str]],
    specs_: list[Spec],
    *,
    format: str = "jsonl-gzip",
    max_records: int = 7,
    partitions: int = 1,
    refused: AggregationConfig | None = None,
) -> Case:
    """A hand-written case: ``values`` per event hour (``2026-11-21T08``...), dealt to
    ``partitions`` partitions in turn, each partition's in the order given, delivered
    ``max_records`` at a time (so each object holds ``max_records`` records of an hour)."""
    records: list[Record] = []
    offsets = dict.fromkeys(range(partitions), 0)
    for hour, hour_values in values.items():
        hour_ms = BASE_MS + (int(hour[-2:]) - 8) * HOUR_MS
        for index, value in enumerate(hour_values):
            partition = index % partitions
            data = value.encode() if isinstance(value, str) else value
            records.append(Record(STREAM, partition, offsets[partition], hour_ms + index, data, b"k"))
            offsets[partition] += 1
    records.sort(key=lambda record: (record.partition, record.offset))
    return Case(0, format, records, specs_, max_records=max_records, refused=refused, shape=format, batch=max_records)


# -- the aggregations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """A Spark SQL aggregate over one column (a value path or an envelope column) and what the
    reference computes for it: ``op`` is count_all, count, distinct, min, max or sum."""

    op: str
    path: tuple[str, ...] = ()

    @property
    def sql(self) -> str:
        column = ".".join(f"`{part}`" for part in self.path)
        return {
            "count_all": "count(*)",
            "count": f"count({column})",
            "distinct": f"count(distinct {column})",
            "min": f"min({column})",
            "max": f"max({column})",
            "sum": f"sum({column})",
        }[self.op]


@dataclass(frozen=True)
class Spec:
    """An aggregation and, for each metric, what the reference computes."""

    name: str
    group_by: tuple[str, ...]
    metrics: dict[str, Metric]

    @property
    def config(self) -> AggregationConfig:
        sql = {name: metric.sql for name, metric in self.metrics.items()}
        return AggregationConfig(name=self.name, group_by=list(self.group_by), metrics=sql)


SPECS = (
    Spec(
        "by_sku",
        ("sku",),
        {
            "records": Metric("count_all"),
            "amount": Metric("sum", ("amount",)),
            "amounts": Metric("count", ("amount",)),
            "low": Metric("min", ("n",)),
            "high": Metric("max", ("n",)),
            "distinct_n": Metric("distinct", ("n",)),
            "prices": Metric("sum", ("price",)),
            "Prices": Metric("sum", ("Price",)),
        },
    ),
    Spec(
        "by_code",
        ("code",),
        {
            "records": Metric("count_all"),
            "tags": Metric("distinct", ("tags",)),
            "quantity": Metric("sum", (UNICODE_NAME,)),
            "long_name": Metric("count", (LONG_NAME,)),
            "codes": Metric("distinct", ("code",)),
        },
    ),
    Spec(
        "by_region",
        ("meta.region",),
        {
            "records": Metric("count_all"),
            "first": Metric("min", ("meta", "at")),
            "last": Metric("max", ("meta", "at")),
            "stamps": Metric("distinct", ("meta", "at")),
            "depth": Metric("sum", ("meta", "depth", "n")),
            "scores": Metric("distinct", ("meta", "score")),
            "stamp_lists": Metric("distinct", ("meta", "stamps")),
        },
    ),
    Spec(
        "by_score",
        ("meta.score",),
        {
            "records": Metric("count_all"),
            "low": Metric("min", ("meta", "score")),
            "regions": Metric("count", ("meta", "region")),
        },
    ),
    Spec("by_tags", ("tags",), {"records": Metric("count_all"), "skus": Metric("distinct", ("sku",))}),
)
#: metrics of envelope columns, named only when no value field shadows the column
ENVELOPE_METRICS: dict[str, Metric] = {
    "partitions": Metric("distinct", ("partition",)),
    "last_offset": Metric("max", ("offset",)),
    "first_event": Metric("min", ("event_time",)),
    "hours": Metric("distinct", ("hour",)),
    "epochs": Metric("max", ("epoch",)),
}
#: value fields whose names differ from envelope columns only in case: named exactly, never refused
TWIN_METRICS = {"twin_hours": Metric("count", ("Hour",)), "twin_offsets": Metric("sum", ("Offset",))}
ABSENT = "refund"  # a field no record has: null in every hour


def specs(shadowing: Sequence[str], *, absent_field: bool = False) -> list[Spec]:
    """The aggregations of a case whose values have fields named ``shadowing`` (envelope names)."""
    envelope = {"records": Metric("count_all")}
    envelope.update({name: m for name, m in ENVELOPE_METRICS.items() if m.path[0] not in shadowing})
    envelope.update(TWIN_METRICS)
    if absent_field:
        envelope["refunds"] = Metric("sum", (ABSENT,))
    return [*SPECS, Spec("envelope", (), envelope)]


def refused_aggregation(shadowing: Sequence[str]) -> AggregationConfig | None:
    """An aggregation naming a value field an envelope column shadows (None without one)."""
    if not shadowing:
        return None
    name = shadowing[0]
    if name == "hour":
        return AggregationConfig(name="refused", group_by=["hour"], metrics={"records": "count(*)"})
    return AggregationConfig(name="refused", metrics={"shadowed": f"max(`{name}`)"})


# -- the reference: types ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A field's type in an hour: null (no value), bool, long, decimal, double, text, struct
    (``fields``) or array (``element``)."""

    name: str
    fields: tuple[tuple[str, Kind], ...] = ()
    element: Kind | None = None

    def field(self, name: str) -> Kind | None:
        return dict(self.fields).get(name)


NULL, TEXT = Kind("null"), Kind("text")
INT64 = (-(2**63), 2**63)


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, IntToken):
        return "int"
    if isinstance(value, FloatToken):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, list):
        return "list"
    raise TypeError(value)


def _fits(token: str) -> bool:
    return INT64[0] <= int(token) < INT64[1]


def kind_of(values: Iterable[Any]) -> tuple[Kind, bool]:
    """The type of a field holding ``values`` (None: no value), and whether it is text for a
    mix of kinds (then an array of such elements is text as a whole)."""
    present = [value for value in values if value is not None]
    kinds = {_kind_of(value) for value in present}
    if not kinds:
        return NULL, False
    if kinds == {"bool"}:
        return Kind("bool"), False
    if kinds == {"int"}:
        if all(_fits(value) for value in present):
            return Kind("long"), False
        if all(len(value.lstrip("-")) <= 38 for value in present):
            return Kind("decimal"), False
        return TEXT, False
    if kinds <= {"int", "float"}:
        fits = all(_fits(value) for value in present if isinstance(value, IntToken))
        return (Kind("double"), False) if fits else (TEXT, True)
    if kinds == {"str"}:
        return TEXT, False
    if kinds == {"dict"}:
        names = list(dict.fromkeys(name for value in present for name in value))
        return Kind("struct", tuple((name, kind_of(value.get(name) for value in present)[0]) for name in names)), False
    if kinds == {"list"}:
        element, mixed = kind_of(item for value in present for item in value)
        return (TEXT, True) if mixed else (Kind("array", element=element), False)
    return TEXT, True


def settle(kind: Kind) -> Kind:
    """A type with no value seen (null) is text, at any depth."""
    if kind.name == "null":
        return TEXT
    if kind.name == "struct":
        return Kind("struct", tuple((name, settle(child)) for name, child in kind.fields))
    if kind.name == "array":
        return Kind("array", element=settle(kind.element or NULL))
    return kind


def complete(own: Kind, run: Kind) -> Kind:
    """The hour's own type, a null (no value in the hour) taking the run's; a struct's
    fields completed likewise, with the run's other fields added (all null in the hour)."""
    if own.name == "null":
        return run
    if own.name == "struct" and run.name == "struct":
        fields = [(name, complete(child, run.field(name) or child)) for name, child in own.fields]
        names = {name for name, _child in own.fields}
        return Kind("struct", (*fields, *((name, child) for name, child in run.fields if name not in names)))
    return own


def compact(value: Any) -> str:
    """A value as the text of a mixed field: strings as they are, numbers their tokens,
    booleans ``true``/``false``, objects and arrays compact JSON (numbers their tokens)."""
    if isinstance(value, str) and not isinstance(value, Token):
        return value
    return dump(value)


def render(value: Any, kind: Kind) -> Any:
    """``value`` as the job must hold it in a field of type ``kind`` (Python values: int,
    Decimal, float, str, bool, dict for a struct, list for an array)."""
    if value is None:
        return None
    name = kind.name
    if name == "text":
        return compact(value)
    if name == "null":
        return None
    if name == "bool":
        return value
    if name == "long":
        return int(value)
    if name == "decimal":
        return Decimal(int(value))
    if name == "double":
        return float(value)
    if name == "struct":
        return {child: render(value.get(child), kind_) for child, kind_ in kind.fields}
    if name == "array":
        return [render(item, kind.element or TEXT) for item in value]
    raise ValueError(kind)


# -- the reference: records, groups, metrics ---------------------------------------------------------


@dataclass
class Row:
    """A record as the job aggregates it: its envelope and its value fields, typed."""

    hour: str
    partition: int
    offset: int
    event_time: str
    fields: dict[str, Any]  # rendered by the hour's types (absent: null)


def iso_millis(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def utc_hour(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H")


def archived(case: Case) -> list[tuple[Record, Any]]:
    """The records the archive holds (those whose value is JSON) with their parsed values."""
    found = []
    for record in case.records:
        try:
            found.append((record, parse(record.value or b"")))
        except ValueError:  # not JSON: dead-lettered
            continue
    return found


def typed_rows(case: Case) -> tuple[dict[str, list[Row]], dict[str, dict[str, Kind]], set[str]]:
    """Each hour's rows, each hour's field types and the run's value field names."""
    by_hour: dict[str, list[tuple[Record, dict[str, Any]]]] = defaultdict(list)
    for record, value in archived(case):
        by_hour[utc_hour(record.timestamp_ms)].append((record, value if isinstance(value, dict) else {}))
    names = list(dict.fromkeys(name for rows in by_hour.values() for _record, value in rows for name in value))
    run = {name: kind_of(v.get(name) for rows in by_hour.values() for _r, v in rows)[0] for name in names}
    kinds: dict[str, dict[str, Kind]] = {}
    rows: dict[str, list[Row]] = {}
    for hour, records in by_hour.items():
        own = {name: kind_of(value.get(name) for _record, value in records)[0] for name in names}
        kinds[hour] = {name: settle(complete(own[name], run[name])) for name in names}
        rows[hour] = [
            Row(
                hour,
                int(record.partition),
                int(record.offset),
                iso_millis(record.timestamp_ms),
                {name: render(value.get(name), kinds[hour][name]) for name in names if name not in ENVELOPE},
            )
            for record, value in records
        ]
    return rows, kinds, set(names)


def _path_kind(kinds: dict[str, Kind], path: Sequence[str]) -> Kind | None:
    """The type at a value path in an hour (text: a field no record has, all null), or None
    where Spark cannot resolve it (a field of something that is no struct)."""
    kind: Kind | None = kinds.get(path[0], TEXT)
    for part in path[1:]:
        if kind is None or kind.name != "struct":
            return None
        kind = kind.field(part) or TEXT
    return kind


def column(row: Row, path: Sequence[str]) -> Any:
    """A row's value at a path: an envelope column, or a value path (null where missing)."""
    if len(path) == 1 and path[0] in ENVELOPE:
        return {"hour": row.hour, "epoch": 0, "partition": row.partition, "offset": row.offset}.get(
            path[0], row.event_time
        )
    value: Any = row.fields
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _hashable(value: Any) -> Any:
    return tuple(_hashable(item) for item in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Figure:
    """A metric's reference value; ``magnitude`` is set for a float sum (the sum of its terms'
    magnitudes: what its tolerance is relative to)."""

    value: Any
    magnitude: float | None = None


def compute(metric: Metric, rows: list[Row], kind: Kind | None) -> Figure:
    """What Spark computes for ``metric`` over the group's rows (``kind``: the column's type in
    the hour; for text, ``sum`` adds each value read as a double, as Spark's implicit cast)."""
    if metric.op == "count_all":
        return Figure(len(rows))
    values = [value for value in (column(row, metric.path) for row in rows) if value is not None]
    if metric.op == "count":
        return Figure(len(values))
    if metric.op == "distinct":
        return Figure(len({_hashable(value) for value in values}))
    if metric.op in ("min", "max"):
        if not values:
            return Figure(None)
        return Figure((min if metric.op == "min" else max)(values, key=_hashable))
    assert metric.op == "sum", metric
    name = kind.name if kind else "text"
    if name in ("long", "decimal"):
        return Figure(sum(values) if values else None)
    numbers = [number for number in (_as_double(value) for value in values) if number is not None]
    if not numbers:
        return Figure(None)
    return Figure(math.fsum(numbers), magnitude=math.fsum(abs(number) for number in numbers))


def _as_double(value: Any) -> float | None:
    """A value summed as a double: numbers, and text that is a JSON number's token (the
    generated strings of summed fields never look like numbers)."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value) if value.strip() and value.strip()[0] in "-0123456789" else None
        except ValueError:
            return None
    return None


# -- the reference: items ------------------------------------------------------------------------------

MAX_SORT_KEY_BYTES = 1_024
DYNAMODB_MAX = Decimal("9.9999999999999999999999999999999999999E+125")
DYNAMODB_MIN = Decimal("1E-130")


def stored(value: Any) -> Any:
    """A value as DynamoDB holds it (read back with boto3's deserializer): numbers as Decimal,
    or as their text when DynamoDB cannot hold them (beyond 1e126, non-zero below 1e-130,
    more than 38 significant digits, not finite); lists and maps element-wise."""
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not isinstance(value, Token)):
        return value
    if isinstance(value, list):
        return [stored(item) for item in value]
    if isinstance(value, dict):
        return {str(key): stored(item) for key, item in value.items()}
    if isinstance(value, float):
        text = repr(value)
        number = Decimal(text) if math.isfinite(value) else None
    else:
        text, number = str(value), Decimal(value)
    if number is None:
        return text
    if number.is_zero():
        return Decimal(0)
    digits = len("".join(map(str, number.as_tuple().digits)).strip("0"))
    if not DYNAMODB_MIN <= abs(number) <= DYNAMODB_MAX or digits > 38:
        return text
    return number


def group_json(group: dict[str, Any]) -> str:
    """The group as the sort key's JSON: ``{"sku":"a"}``, decimals as JSON strings of their
    digits (README: "the group as JSON"; orjson renders floats)."""
    return orjson.dumps(group, default=str).decode()


@dataclass
class Expected:
    """The reference's items by (aggregation, hour, sort key) -- each ``(item, float sums)`` --,
    and the hours the job must fail (an aggregation Spark cannot resolve over their types)."""

    items: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, float]]]
    failed_hours: set[str]
    value_fields: set[str]
    records: int


def reference_items(case: Case) -> Expected:
    rows, kinds, names = typed_rows(case)
    items: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, float]]] = {}
    failed: set[str] = set()
    for spec in case.specs:
        columns = [tuple(column.split(".")) for column in spec.group_by]
        for hour, hour_rows in rows.items():
            metric_kinds = {name: _metric_kind(kinds[hour], metric) for name, metric in spec.metrics.items()}
            if any(_path_kind(kinds[hour], path) is None for path in columns) or False in metric_kinds.values():
                failed.add(hour)
                continue
            groups: dict[str, list[Row]] = defaultdict(list)
            values: dict[str, dict[str, Any]] = {}
            for row in hour_rows:
                group = {
                    name: _group_value(column(row, path)) for name, path in zip(spec.group_by, columns, strict=True)
                }
                text = group_json(group)
                groups[text].append(row)
                values[text] = group
            for text, group_rows in groups.items():
                figures = {
                    name: compute(metric, group_rows, metric_kinds[name] or None)
                    for name, metric in spec.metrics.items()
                }
                if any(_overflows(figures[name], metric_kinds[name]) for name in figures):
                    failed.add(hour)
                data = text.encode()
                sk = text if len(data) <= MAX_SORT_KEY_BYTES else "sha256:" + hashlib.sha256(data).hexdigest()
                item = {
                    "pk": f"AGG#{STREAM}#{spec.name}#{hour}",
                    "sk": sk,
                    "group_key": text,
                    "stream": STREAM,
                    "aggregation": spec.name,
                    "hour": hour,
                    "group": {name: stored(value) for name, value in values[text].items()},
                    "metrics": {name: stored(figure.value) for name, figure in figures.items()},
                    "utc_offsets": ["+00:00"],  # the stream's event-time zone is UTC
                }
                sums = {name: f.magnitude for name, f in figures.items() if f.magnitude is not None}
                items[(spec.name, hour, sk)] = (item, sums)
    items = {key: value for key, value in items.items() if key[1] not in failed}
    records = sum(len(hour_rows) for hour, hour_rows in rows.items() if hour not in failed)
    return Expected(items, failed, names, records)


def _overflows(figure: Figure, kind: Kind | bool | None) -> bool:
    """An integer sum the job must refuse (its hour fails): beyond int64 for a ``long`` field
    (Spark's sum would wrap), beyond 38 digits for a ``decimal(38,0)`` one (it would be null)."""
    value = figure.value
    if not isinstance(kind, Kind) or isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False
    if kind.name == "long":
        return not INT64[0] <= value < INT64[1]
    return kind.name == "decimal" and abs(value) >= Decimal(10) ** 38


def _group_value(value: Any) -> Any:
    """A group value as Spark groups it: -0.0 is 0.0 (floating-point keys are normalized)."""
    return 0.0 if isinstance(value, float) and value == 0 else value


def _metric_kind(kinds: dict[str, Kind], metric: Metric) -> Kind | bool | None:
    """The column's type for a metric, None for count(*) and envelope columns, False where Spark
    cannot resolve it (a path through something that is no struct, a sum of no number type)."""
    if metric.op == "count_all" or (len(metric.path) == 1 and metric.path[0] in ENVELOPE):
        return None
    kind = _path_kind(kinds, metric.path)
    if kind is None:
        return False
    if metric.op == "sum" and kind.name not in ("long", "decimal", "double", "text"):
        return False
    return kind


# -- running a case ----------------------------------------------------------------------------------


@dataclass
class CaseResult:
    seed: int
    shape: str = ""
    records: int = 0  # archived records (not dead letters) the reference aggregates
    dead_letters: int = 0
    objects: int = 0
    hours: int = 0
    items: int = 0  # reference items (each compared in both tables)
    float_sums: int = 0  # of those metrics, float sums (compared within the tolerance)
    hashed_keys: int = 0  # items keyed by a digest (a group JSON beyond 1,024 bytes)
    native_objects: int = 0  # objects Spark's own readers read in the native run
    refusals: int = 0  # runs refused for an aggregation naming a shadowed value field
    failed_hours: int = 0  # hours the reference says must fail alone (each run must report them)
    absent_fields: int = 0  # runs that read a field no record has as null (and reported it)
    reasons: dict[str, str] = field(default_factory=dict)  # the Arrow run's failed hours and why
    absent: dict[str, list[str]] = field(default_factory=dict)  # the Arrow run's fields read as null
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def config_for(case: Case, aggregations_: list[AggregationConfig]) -> Any:
    data = small_config_data(format=FORMATS[case.format], max_records=case.max_records)
    stream = data["streams"][0]
    stream["event_time"] = {"source": "record_timestamp"}
    stream["aggregations"] = [aggregation.model_dump() for aggregation in aggregations_]
    return parse_config(data)


def archive_case(archive: Any, case: Case) -> Any:
    """Archive the case's records with the real archiver (ESM-sized batches per partition,
    interleaved), flush everything; returns the runtime."""
    config = config_for(case, [spec.config for spec in case.specs])
    runtime = archive.runtime(config)
    archiver = Archiver(runtime)
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for record in case.records:
        by_partition[int(record.partition)].append(record)
    rng = random.Random(case.seed + 1)
    cursors = dict.fromkeys(by_partition, 0)
    while any(cursors[p] < len(records) for p, records in by_partition.items()):
        partition = rng.choice([p for p, records in by_partition.items() if cursors[p] < len(records)])
        size = case.batch or rng.randint(1, 40)
        batch = by_partition[partition][cursors[partition] : cursors[partition] + size]
        cursors[partition] += len(batch)
        archiver.handle(msk_event(batch))
    archive.clock.advance(minutes=16)
    for partition in by_partition:
        runtime.writer(config.streams[0], partition).drain()
    return runtime


def table_items(archive: Any, table: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    deserialize = TypeDeserializer().deserialize
    found = {}
    pages = archive.dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    for page in pages:
        for raw in page["Items"]:
            item = {name: deserialize(value) for name, value in raw.items() if name != "run_id"}
            found[(item["aggregation"], item["hour"], item["sk"])] = item
    return found


def compare(found: dict[tuple[str, str, str], dict[str, Any]], expected: Expected, label: str) -> list[str]:
    """Problems: items missing, unexpected or different (float sums within the tolerance)."""
    problems = []
    for key in sorted(set(expected.items) - set(found)):
        problems.append(f"{label}: missing {key}: {_short(expected.items[key][0])}")
    for key in sorted(set(found) - set(expected.items)):
        problems.append(f"{label}: unexpected {key}: {_short(found[key])}")
    for key in sorted(set(found) & set(expected.items)):
        item, sums = expected.items[key]
        got = found[key]
        differences = [name for name in item if name != "metrics" and got.get(name) != item[name]]
        differences += [name for name in set(got) - set(item)]
        for name, value in item["metrics"].items():
            actual = got.get("metrics", {}).get(name)
            if name in sums:
                if not _within(actual, value, sums[name]):
                    differences.append(f"metrics.{name}")
            elif actual != value or type(actual) is not type(value):
                differences.append(f"metrics.{name}")
        if set(got.get("metrics", {})) != set(item["metrics"]):
            differences.append("metrics (names)")
        if differences:
            shown = {name: (got.get(name), item.get(name)) for name in differences if not name.startswith("metrics.")}
            metrics = {
                name[len("metrics.") :]: (got.get("metrics", {}).get(name[8:]), item["metrics"].get(name[8:]))
                for name in differences
                if name.startswith("metrics.")
            }
            problems.append(f"{label}: {key} differs (found, wanted): {_short({**shown, **metrics})}")
    return problems


def _within(actual: Any, wanted: Any, magnitude: float) -> bool:
    if actual is None or wanted is None:
        return actual is wanted
    try:
        a, w = float(actual), float(wanted)
    except (TypeError, ValueError):
        return False
    return abs(a - w) <= FLOAT_SUM_TOLERANCE * magnitude or a == w


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def run_case(spark: Any, archive: Any, case: Case, workdir: Path) -> CaseResult:
    """Archive the case, run the job with both readers (and the refused aggregation, if the
    case has one), compare every item with the reference; problems in ``CaseResult.problems``."""
    import time

    from jobs.aggregation.job import run_aggregation
    from jobs.aggregation.sink import AggregateSink, aggregates_table_schema

    started = time.monotonic()
    result = CaseResult(case.seed, case.shape)
    expected = reference_items(case)
    result.records = expected.records
    result.dead_letters = len(case.records) - len(archived(case))
    result.items = len(expected.items)
    result.float_sums = sum(len(sums) for _item, sums in expected.items.values())
    result.hashed_keys = sum(1 for _agg, _hour, sk in expected.items if sk.startswith("sha256:"))
    result.failed_hours = len(expected.failed_hours)
    runtime = archive_case(archive, case)
    stream = runtime.config.streams[0]
    ledger = runtime.ledger
    hours = sorted({utc_hour(record.timestamp_ms) for record, _value in archived(case)})
    result.hours = len(hours)
    committed = [item for hour in hours for item in ledger.committed_objects(STREAM, hour) if item.kind == "raw"]
    result.objects = len(committed)
    resource = boto3.resource("dynamodb", endpoint_url=archive.endpoint)

    def new_table() -> str:
        name = f"{archive.table}-agg-{uuid.uuid4().hex[:6]}"
        resource.meta.client.create_table(**aggregates_table_schema(name))
        return name

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", case.zone)
    try:
        refused = case.refused
        if refused is not None:
            table = new_table()
            shadowed = stream.model_copy(update={"aggregations": [*stream.aggregations, refused]})
            try:
                run_aggregation(
                    spark, shadowed, ledger=ledger, bucket=archive.bucket, sink=AggregateSink(table, resource=resource)
                )
                result.problems.append(f"an aggregation naming a shadowed value field ran: {refused}")
            except ConfigError as exc:
                result.refusals += 1
                if "envelope column" not in str(exc):
                    result.problems.append(f"refused for another reason: {exc}")
            except Exception as exc:  # noqa: BLE001 -- a failed run is a problem of the case
                result.problems.append(f"the refused run failed otherwise: {type(exc).__name__}: {_short(str(exc))}")
            if table_items(archive, table):
                result.problems.append("the refused run wrote items")
            dirty = sorted(mark.hour for mark in ledger.hour_marks(STREAM) if mark.dirty)
            if dirty != hours:
                result.problems.append(f"after the refused run, dirty hours {dirty}, wanted {hours}")
        for native in (False, True):
            label = "spark" if native else "arrow"
            table = new_table()
            root = None
            if native:
                root = workdir / f"archive-{case.seed}"
                for item in committed:
                    path = root / item.key
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(archive.s3.get_object(Bucket=archive.bucket, Key=item.key)["Body"].read())
            try:
                report = run_aggregation(
                    spark,
                    stream,
                    ledger=ledger,
                    bucket=archive.bucket,
                    sink=AggregateSink(table, resource=resource),
                    hours=hours if native else None,  # the second run: a backfill of every hour
                    tasks=2,
                    archive_root=f"file://{root}" if root else None,
                )
            except Exception as exc:  # noqa: BLE001 -- a failed run is a problem of the case
                result.problems.append(f"{label}: the run failed: {type(exc).__name__}: {_short(str(exc), 600)}")
                continue
            if native:
                result.native_objects = sum(count for reader, count in report.readers.items() if reader != "arrow")
            if not native:
                result.reasons, result.absent = dict(report.failed), dict(report.absent)
            generated = "envelope" in {spec.name for spec in case.specs}
            absent = any(ABSENT in metric.path for spec in case.specs for metric in spec.metrics.values())
            if generated and absent and set(hours) - expected.failed_hours:
                if ABSENT not in report.absent.get("envelope", []):
                    result.problems.append(f"{label}: fields read as null {report.absent}, wanted {ABSENT!r}")
                result.absent_fields += 1
            if sorted(report.failed) != sorted(expected.failed_hours):
                result.problems.append(f"{label}: failed hours {report.failed}, wanted {sorted(expected.failed_hours)}")
            if sorted(report.cleared) != sorted(set(hours) - expected.failed_hours):
                result.problems.append(f"{label}: cleared {report.cleared}, wanted every hour")
            if report.records != expected.records:
                result.problems.append(f"{label}: {report.records} records, wanted {expected.records}")
            result.problems.extend(compare(table_items(archive, table), expected, label))
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    result.seconds = round(time.monotonic() - started, 2)
    return result
