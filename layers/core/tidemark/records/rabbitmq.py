"""Adapter for Amazon MQ (RabbitMQ) event source mapping events.

Lambda delivers ``{"eventSource": "aws:rmq", "eventSourceArn": <broker>, "rmqMessagesByQueue":
{"<queue>::<virtual host>": [message, ...]}}``; each message holds ``basicProperties`` (the AMQP
properties: ``messageId``, ``headers``, ``timestamp`` as ``"Jan 1, 1970, 12:33:41 AM"``, ...),
``redelivered`` and the body as base64 ``data``. A queue is one partition (0) and has no
offsets: records leave here with position ``-1``, and the partition writer numbers the ones it
accepts (``tidemark.dedupe``)::

    "<queue>::<vhost>" -> topic (the stream's source.match_name)     partition -> 0
    messageId -> key          data -> value          timestamp -> timestamp (ms; -1 when null)
    headers -> headers: a byte array ({"bytes": [...]}) as its bytes, any other value as its JSON
    the other set properties -> headers "amqp.<property>" (content_type, correlation_id, ...)

How the mapping shows AMQP values, and so what is read here, follows AWS's documented sample
event (``Jan 1, 1970, 12:33:41 AM``, ``{"bytes": [118, 97, ...]}``): Gson's rendering of the
RabbitMQ Java client's values. A timestamp is a ``java.util.Date`` in Java's medium US format,
``MMM d, y, h:mm:ss a`` in UTC, with any year (a producer that put epoch *milliseconds* in the
seconds field shows the year 58,859); a long string is ``{"bytes": [...]}`` of Java's signed
bytes; a nested table is a JSON object of such values (``{"meta": {"bytes": "abc"}}`` shows as
``{"bytes": {"bytes": [97, 98, 99]}}``), an array a JSON array.

Every message decodes, whatever its fields hold -- one message's odd field never refuses its
batch, which the mapping would requeue forever:

* a timestamp is read without ``datetime``'s year limits (``timestamp_ms``). One that is not a
  time in 1970 .. a Java long of ms (not a string, not Java's format, before the epoch) leaves the
  record without a timestamp (-1, as if unset) and keeps the text as header ``amqp.timestamp``;
  the stream's event time then falls back as for any record without one (``record_timestamp``:
  dead-lettered ``invalid_event_time``; a time past 9999 is dead-lettered so too).
* a header is a byte array only as ``{"bytes": [...]}`` holding nothing but integers in
  -128..255; any other value -- a nested table, ``{"bytes": "abc"}``, an array -- is kept as its
  JSON (orjson's, or the stdlib's for an integer past 64 bits).
* a message that cannot be read at all (not an object; its ``data`` not base64, its
  ``basicProperties`` or ``headers`` not an object, its ``messageId`` not a string; none of which
  the mapping sends) becomes a record carrying its reason in header ``UNDECODABLE_HEADER`` (its
  first and only header), with the message as the event showed it (its JSON without
  ``redelivered``) as its value and its id, when readable, as its key. The router dead-letters
  it ``undecodable_message`` (``tidemark.routing``). A producer's header of that name is such a
  message too: it cannot forge the marker on a message that decodes.

``redelivered`` is not kept: it says how the message came, not what it is (a redelivery is
told by its id). Parsing goes through Powertools' ``RabbitMQEvent`` data class. Only what is
wrong with the event itself -- not an Amazon MQ event, a broker ARN that is not one, a queue key
that is not ``<queue>::<virtual host>``, messages that are not a list -- raises
``MalformedEventError`` (failing it requeues the messages: nothing is lost).
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import orjson

from tidemark.exceptions import MalformedEventError
from tidemark.records.model import PartitionBatch, Record
from tidemark.sources import RABBITMQ

EVENT_SOURCE = "aws:rmq"
BROKER_ARN = re.compile(r"^arn:aws[a-z-]*:mq:[a-z0-9-]+:\d{12}:broker:[^:]+:[^:]+$")
#: the AMQP properties kept as ``amqp.<name>`` headers, in this order (messageId is the key,
#: headers and timestamp have their own fields, bodySize is the value's length)
PROPERTIES = (
    ("contentType", "content_type"),
    ("contentEncoding", "content_encoding"),
    ("deliveryMode", "delivery_mode"),
    ("priority", "priority"),
    ("correlationId", "correlation_id"),
    ("replyTo", "reply_to"),
    ("expiration", "expiration"),
    ("type", "type"),
    ("userId", "user_id"),
    ("appId", "app_id"),
    ("clusterId", "cluster_id"),
)
PROPERTY_PREFIX = "amqp."
TIMESTAMP_HEADER = PROPERTY_PREFIX + "timestamp"  # an unreadable timestamp's text
#: the first header of a record made from a message that could not be read; its data is the reason
UNDECODABLE_HEADER = "tidemark.undecodable"
#: ``strftime`` of Java's medium US format for years 1..9999 ("Jan 1, 1970, 12:33:41 AM" but
#: with a zero-padded day and hour); ``timestamp_text`` renders every year
TIMESTAMP_FORMAT = "%b %d, %Y, %I:%M:%S %p"
JAVA_LONG_MAX = 2**63 - 1
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_NUMBERS = {name: number for number, name in enumerate(_MONTHS, 1)}
# Java's "MMM d, y, h:mm:ss a" (Locale.US). JDK 8 writes no comma after the year; JDK 20+
# (CLDR 42) a narrow no-break space (U+202F) before AM/PM: \s takes any Unicode space. Digits are
# ASCII only (Java's US format writes no others), the year at most 9 of them (a long's ms end in
# the year 292,278,994).
_JAVA_MEDIUM = re.compile(
    r"([A-Z][a-z]{2})\s([0-9]{1,2}),\s([0-9]{1,9}),?\s([0-9]{1,2}):([0-9]{2}):([0-9]{2})\s([AP]M)"
)
_DAY_MS = 86_400_000
#: the first instant of the Gregorian calendar (1582-10-15): Java's calendar is Julian before it
_GREGORIAN_FROM_MS = -12_219_292_800_000


def is_rabbitmq_event(event: Any) -> bool:
    return isinstance(event, Mapping) and event.get("eventSource") == EVENT_SOURCE


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's ``days_from_civil``):
    integers only, so no year limit."""
    year -= month <= 2
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """``_days_from_civil`` backwards: (year, month, day), the year astronomical (0 = 1 BC)."""
    days += 719_468
    era = days // 146_097
    of_era = days - era * 146_097
    year_of_era = (of_era - of_era // 1460 + of_era // 36_524 - of_era // 146_096) // 365
    of_year = of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * of_year + 2) // 153
    month = shifted + 3 if shifted < 10 else shifted - 9
    return year_of_era + era * 400 + (month <= 2), month, of_year - (153 * shifted + 2) // 5 + 1


def _julian_from_days(days: int) -> tuple[int, int, int]:
    """The Julian calendar's (year, month, day) of a day since 1970-01-01 (Richards' algorithm
    from the Julian day number), the year astronomical."""
    c = days + 2_440_588 + 32_082
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    return d - 4800 + m // 10, m + 3 - 12 * (m // 10), e - (153 * m + 2) // 5 + 1


def render_timestamp(ms: int) -> str:
    """``new Date(ms)`` as Lambda shows it: Java's medium US format in UTC, for any ``ms`` a Java
    long holds. As Java's ``GregorianCalendar``: Julian before 1582-10-15, and ``y`` is the year of
    the era (1 BC shows as 1)."""
    seconds = ms // 1000
    days, second_of_day = divmod(seconds, 86_400)
    year, month, day = _julian_from_days(days) if ms < _GREGORIAN_FROM_MS else _civil_from_days(days)
    hour, rest = divmod(second_of_day, 3600)
    minute, second = divmod(rest, 60)
    era_year = year if year > 0 else 1 - year
    half = "AM" if hour < 12 else "PM"
    return f"{_MONTHS[month - 1]} {day}, {era_year}, {hour % 12 or 12}:{minute:02d}:{second:02d} {half}"


def timestamp_text(ms: int) -> str | None:
    """``timestamp_ms`` backwards (the local mapping renders timestamps so); ``None`` for -1 (unset)."""
    return None if ms < 0 else render_timestamp(ms)


def timestamp_ms(text: object) -> int | None:
    """The AMQP timestamp as the mapping renders it (seconds, UTC) in epoch ms; -1 when unset
    (``null``); ``None`` when it is no time a record timestamp can hold -- not a string, not Java's
    medium format, no such day, before 1970 or past a Java long of ms."""
    if text is None:
        return -1
    if not isinstance(text, str) or len(text) > 64:
        return None
    return _parsed_ms(text)


@lru_cache(maxsize=4096)
def _parsed_ms(text: str) -> int | None:
    """Cached: the messages of a batch share few seconds."""
    found = _JAVA_MEDIUM.fullmatch(text)
    if found is None:
        return None
    name, day_text, year_text, hour_text, minute_text, second_text, half = found.groups()
    month = _MONTH_NUMBERS.get(name)
    year, day, hour, minute, second = map(int, (year_text, day_text, hour_text, minute_text, second_text))
    if month is None or not (1 <= hour <= 12 and minute < 60 and second < 60 and year >= 1970):
        return None
    length = 29 if month == 2 and _is_leap(year) else (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    if not 1 <= day <= length:
        return None
    hour = hour % 12 + (12 if half == "PM" else 0)
    ms = _days_from_civil(year, month, day) * _DAY_MS + ((hour * 60 + minute) * 60 + second) * 1000
    return ms if ms <= JAVA_LONG_MAX else None


class _Undecodable(Exception):
    """A message that cannot be read: it becomes a record the router dead-letters."""


def _json(value: object) -> bytes:
    """``value`` (as parsed from the event) as compact JSON: orjson's, else -- an integer past 64
    bits, a lone surrogate -- the stdlib's in ASCII; ``_Undecodable`` only if neither can."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        pass
    try:
        return json.dumps(value, separators=(",", ":"), default=repr).encode("ascii")
    except (ValueError, TypeError, RecursionError) as exc:
        raise _Undecodable(f"a value with no JSON ({type(exc).__name__})") from None


def _header_bytes(value: object) -> bytes:
    """A header value: a long string's bytes (``{"bytes": [...]}`` of integers in -128..255: Java's
    signed bytes, or unsigned), else the value's JSON."""
    if isinstance(value, dict) and len(value) == 1:
        data = value.get("bytes")
        if isinstance(data, list) and bool not in map(type, data):
            try:
                return bytes(data)  # unsigned: C speed
            except (TypeError, ValueError):
                if all(type(item) is int and -128 <= item <= 255 for item in data):
                    return bytes(item & 0xFF for item in data)
    return _json(value)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Undecodable(f"{what} is not Unicode (a lone surrogate)") from None


def _convert(message: object, topic: str) -> Record:
    """The message's record; ``_Undecodable`` when some part of it cannot be read."""
    if not isinstance(message, Mapping):
        raise _Undecodable(f"the message is not an object but {type(message).__name__}")
    properties = message.get("basicProperties")
    if not isinstance(properties, Mapping):
        raise _Undecodable("basicProperties must be an object")
    data = message.get("data")
    if not isinstance(data, str):
        raise _Undecodable(f"data must be a base64 string, not {type(data).__name__}")
    try:
        value = binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise _Undecodable(f"data is not valid base64 ({exc})") from None
    message_id = properties.get("messageId")
    if message_id is not None and not isinstance(message_id, str):
        raise _Undecodable(f"messageId must be a string, not {type(message_id).__name__}")
    key = None if message_id is None else _utf8(message_id, "messageId")
    raw_headers = properties.get("headers") or {}
    if not isinstance(raw_headers, Mapping):
        raise _Undecodable("headers must be an object")
    headers: list[tuple[str, bytes]] = []
    for name, item in raw_headers.items():
        name = str(name)
        if name == UNDECODABLE_HEADER:
            raise _Undecodable(f"header {name!r} is reserved: Tidemark marks unreadable messages with it")
        _utf8(name, f"header name {name!r}")
        headers.append((name, _header_bytes(item)))
    for field, name in PROPERTIES:
        item = properties.get(field)
        if item is not None:
            headers.append((PROPERTY_PREFIX + name, _utf8(item, field) if isinstance(item, str) else _json(item)))
    stamp = properties.get("timestamp")
    ms = timestamp_ms(stamp)
    if ms is None:  # the documented fallback: no timestamp, its text kept
        ms = -1
        headers.append((TIMESTAMP_HEADER, _utf8(stamp, "timestamp") if isinstance(stamp, str) else _json(stamp)))
    return Record(topic, 0, -1, ms, value, key, tuple(headers))  # the partition writer numbers accepted messages


def _undecodable(message: object, topic: str, position: int, why: str) -> Record:
    """A record the router dead-letters (``undecodable_message``) for a message that cannot be
    read: the message as the event showed it -- its JSON without ``redelivered``, the same for every
    delivery of it -- as the value; its id, when it has a readable one, as the key."""
    shown: object = message
    key = None
    if isinstance(message, Mapping):
        shown = {name: item for name, item in message.items() if name != "redelivered"}
        properties = message.get("basicProperties")
        message_id = properties.get("messageId") if isinstance(properties, Mapping) else None
        if isinstance(message_id, str) and message_id:
            try:
                key = message_id.encode("utf-8")
            except UnicodeEncodeError:
                key = None
    try:
        value = _json(shown)
    except _Undecodable:
        value = b"null"
    reason = f"message #{position} of {topic!r}: {why}"
    return Record(topic, 0, -1, -1, value, key, ((UNDECODABLE_HEADER, reason.encode("utf-8", "replace")),))


def parse_rabbitmq_event(event: Any) -> list[PartitionBatch]:
    """One batch per queue, messages in delivery order (positions unassigned)."""
    if not is_rabbitmq_event(event):
        raise MalformedEventError(f"not an Amazon MQ (RabbitMQ) event: eventSource={event.get('eventSource')!r}")
    arn = event.get("eventSourceArn")
    if not isinstance(arn, str) or BROKER_ARN.fullmatch(arn) is None:
        raise MalformedEventError(f"eventSourceArn {arn!r} is not an Amazon MQ broker ARN")
    queues = event.get("rmqMessagesByQueue")
    if not isinstance(queues, Mapping):
        raise MalformedEventError("rmqMessagesByQueue must be an object keyed by '<queue>::<virtual host>'")
    for topic, messages in queues.items():
        if not isinstance(messages, list):
            raise MalformedEventError(f"rmqMessagesByQueue[{topic!r}] must be a list of messages")
    # Imported here: Powertools' data classes package costs ~25 ms of import, which a Kafka
    # stream's cold start should not pay.
    from aws_lambda_powertools.utilities.data_classes.rabbit_mq_event import RabbitMQEvent

    parsed = RabbitMQEvent(dict(event))
    batches = []
    position = 0
    for topic, messages in parsed.rmq_messages_by_queue.items():
        queue, separator, vhost = topic.partition("::")
        if not separator or not queue or not vhost:
            raise MalformedEventError(f"queue key {topic!r} is not '<queue>::<virtual host>'")
        records = []
        for message in messages:
            raw = message.raw_event
            try:
                records.append(_convert(raw, topic))
            except _Undecodable as exc:
                records.append(_undecodable(raw, topic, position, str(exc)))
            position += 1
        broker = arn.split(":broker:", 1)[1]
        batches.append(PartitionBatch(topic, 0, records, kind=RABBITMQ, source=f"{broker}/{topic}"))
    return batches
