"""DynamoDB backend of the ledger: one item per partition state, one item per committed object.

Keys (a single table, ``pk``/``sk`` strings):

* partition state: ``pk = PART#<stream>#<partition>``, ``sk = STATE``
* committed object: ``pk = HOUR#<stream>#<hour>``, ``sk = OBJ#<kind>#<partition>#<first offset>``
* hour mark: ``pk = HOURS#<stream>``, ``sk = <hour>`` (one item collection per stream, so the
  sweeper and the Spark job query a range of hours; see ``HourMark``)
* partition registry: ``pk = STREAM#<stream>``, ``sk = PARTITIONS`` (a number set)
* job runs: ``pk = RUNS#<stream>``, ``sk = <run id>`` (what an aggregation run read and wrote)
* position marks: ``pk = PART#<stream>#<partition>``, ``sk = MARKS#<epoch>#<offset // MARKS_PAGE_SPAN>``,
  ``marks`` a string set of ``<offset>:<fingerprint>`` (see ``tidemark.resets``), ``expires_at``

Conditional writes are turned into domain errors: a lost version check becomes
``LedgerConflictError`` carrying the winning state (``ReturnValuesOnConditionCheckFailure``), an
object item that already exists becomes ``DoubleCommitError``.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, fields
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
import orjson
from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

from tidemark.buffers import BufferKey
from tidemark.exceptions import DoubleCommitError, LedgerConflictError
from tidemark.ledger.base import Ledger
from tidemark.ledger.model import (
    AbandonedFlush,
    CommittedObject,
    EpochStart,
    HourMark,
    OpenBuffer,
    PartitionState,
    QuarantinedFlush,
    Recovery,
    RecoveryUnit,
    SealedFlush,
)
from tidemark.sources import KINESIS_POSITION_DIGITS, PartitionId
from tidemark.staging.store import SegmentRef

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()
STATE_SK = "STATE"
PARTITIONS_SK = "PARTITIONS"
RECOVERY_SK = "RECOVERY"  # the partition's recoveries (``tidemark recover``), next to its state
#: DynamoDB's limit on the actions of one TransactWriteItems
MAX_TRANSACTION_ITEMS = 100
TRANSACTION_ATTEMPTS = 5  # on TransactionConflict only; a failed condition is never retried here
#: offsets per marks item: about one mark per 16 offsets (``tidemark.resets.marks_of``), 64 or so
MARKS_PAGE_SPAN = 1024
#: marks expire (the table's TTL attribute) this long after their last write: a redelivery from
#: further back finds none and is refused (``below_window``), never guessed
MARKS_RETENTION_S = 400 * 24 * 3600
TTL_ATTRIBUTE = "expires_at"


def ledger_table_schema(table_name: str) -> dict[str, Any]:
    """``CreateTable`` arguments; the CDK stack defines the same keys (see stacks/storage.py)."""
    return pk_sk_table_schema(table_name)


def pk_sk_table_schema(table_name: str) -> dict[str, Any]:
    """An on-demand table keyed by string ``pk`` (hash) and ``sk`` (range): every Tidemark table."""
    return {
        "TableName": table_name,
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


def state_pk(stream: str, partition: PartitionId) -> str:
    return f"PART#{stream}#{partition}"


def marks_sk(epoch: int, page: int) -> str:
    """A marks item of the partition (``pk = state_pk``): pages sort by number within an epoch."""
    return f"MARKS#{epoch:05d}#{page:016d}"


def hour_pk(stream: str, hour: str) -> str:
    return f"HOUR#{stream}#{hour}"


def marks_pk(stream: str) -> str:
    return f"HOURS#{stream}"


def registry_pk(stream: str) -> str:
    return f"STREAM#{stream}"


# Positions are Python ints of any width. A Kinesis sequence number (up to 129 digits) fits
# neither orjson's 64-bit integers (the compressed body) nor DynamoDB's 38-digit numbers (the
# scalars an operator reads), so a position that does not fit is stored as its decimal string;
# readers take either (``int(...)``). Kafka offsets always fit: Kafka items are unchanged.
_JSON_INT_MAX = 2**63 - 1
_DYNAMODB_NUMBER_MAX = 10**38 - 1


def _json_position(position: int) -> int | str:
    return position if -_JSON_INT_MAX <= position <= _JSON_INT_MAX else str(position)


def _item_position(position: int) -> int | str:
    return position if -_DYNAMODB_NUMBER_MAX <= position <= _DYNAMODB_NUMBER_MAX else str(position)


def _partition_of_item(value: Any) -> PartitionId:
    """A number for Kafka partitions, the shard id (a string) for Kinesis."""
    return value if isinstance(value, str) else int(value)


def _seg_to(segment: SegmentRef) -> list[Any]:
    return [segment.name, segment.records, segment.size, _json_position(segment.first), _json_position(segment.last)]


def _seg_from(raw: list[Any]) -> SegmentRef:
    name, records, size, first, last = raw
    return SegmentRef(name=name, records=int(records), size=int(size), first=int(first), last=int(last))


def _buffer_to(buffer: OpenBuffer) -> dict[str, Any]:
    return {
        "key": str(buffer.key),
        "seq": buffer.seq,
        "opened": buffer.opened_ms,
        "appended": buffer.appended_ms,
        "segs": [_seg_to(segment) for segment in buffer.segments],
        "spec": buffer.spec,
    }


def _buffer_from(raw: dict[str, Any]) -> OpenBuffer:
    return OpenBuffer(
        key=BufferKey.parse(raw["key"]),
        seq=int(raw["seq"]),
        opened_ms=int(raw["opened"]),
        appended_ms=int(raw["appended"]),
        segments=tuple(_seg_from(segment) for segment in raw["segs"]),
        spec=raw["spec"],
    )


def _sealed_to(flush: SealedFlush) -> dict[str, Any]:
    return {
        "buffer": _buffer_to(flush.buffer),
        "object_key": flush.object_key,
        "reason": flush.reason,
        "sealed": flush.sealed_ms,
    }


def _sealed_from(raw: dict[str, Any]) -> SealedFlush:
    return SealedFlush(
        buffer=_buffer_from(raw["buffer"]),
        object_key=raw["object_key"],
        reason=raw["reason"],
        sealed_ms=int(raw["sealed"]),
    )


# zlib level of the state body. Every accepted batch compresses it and DynamoDB bills each
# write per KB: level 1 would save ~0.25 ms of CPU per batch but write ~14% more KB, which at
# list prices ($0.625 per million WRU, 1 WRU per KB) costs over 100 times what the CPU saves.
_BODY_LEVEL = 6


def state_to_item(state: PartitionState) -> dict[str, Any]:
    """The state as a plain item (Python values); serialised with boto3's ``TypeSerializer``.

    Scalars an operator looks at stay top-level attributes; the buffer and seal details travel
    as one zlib-compressed JSON ``body``. DynamoDB bills writes by item size and every accepted
    batch rewrites this item, so a compact body (segment names compress ~5x) keeps the ledger
    cheap and fast however many segments the open buffers hold.
    """
    body = {
        "next_seq": state.next_seq,
        "fingerprints": [(_json_position(offset), crc) for offset, crc in state.fingerprints],
        "buffers": {key: _buffer_to(buffer) for key, buffer in state.buffers.items()},
        "sealed": {flush_id: _sealed_to(flush) for flush_id, flush in state.sealed.items()},
        "quarantined": {
            flush_id: {
                **_sealed_to(held.flush),
                "error": held.error,
                "quarantined": held.quarantined_ms,
            }
            for flush_id, held in state.quarantined.items()
        },
    }
    item: dict[str, Any] = {
        "pk": state_pk(state.stream, state.partition),
        "sk": STATE_SK,
        "stream": state.stream,
        "partition": state.partition,
        "version": state.version,
        "staged_offset": _item_position(state.staged_offset),
        "updated_ms": state.updated_ms,
        "watermark_ms": state.watermark_ms,
        "epoch": state.epoch,
        "source": state.source,
        "open_buffers": len(state.buffers),
        "sealed_flushes": len(state.sealed),
        "quarantined_flushes": len(state.quarantined),
        "body": zlib.compress(orjson.dumps(body), _BODY_LEVEL),
    }
    if state.first_accepted is not None:  # not known: left out, so that it stays not known
        item["first_accepted"] = _item_position(state.first_accepted)
    return item


def state_from_item(item: dict[str, Any]) -> PartitionState:
    body = orjson.loads(zlib.decompress(bytes(item["body"])))
    return PartitionState(
        stream=item["stream"],
        partition=_partition_of_item(item["partition"]),
        version=int(item["version"]),
        staged_offset=int(item["staged_offset"]),
        next_seq=int(body["next_seq"]),
        updated_ms=int(item["updated_ms"]),
        watermark_ms=int(item.get("watermark_ms", -1)),
        epoch=int(item.get("epoch", 0)),
        source=item.get("source", ""),
        first_accepted=int(item["first_accepted"]) if "first_accepted" in item else None,  # None: an older item
        fingerprints=tuple((int(offset), int(crc)) for offset, crc in body.get("fingerprints", ())),
        buffers={key: _buffer_from(raw) for key, raw in body["buffers"].items()},
        sealed={flush_id: _sealed_from(raw) for flush_id, raw in body["sealed"].items()},
        quarantined={
            flush_id: QuarantinedFlush(_sealed_from(raw), raw["error"], int(raw["quarantined"]))
            for flush_id, raw in body.get("quarantined", {}).items()
        },
    )


def object_sk(kind: str, partition: PartitionId, first: int, epoch: int = 0) -> str:
    """Epoch 0 keeps the original form; a later epoch's positions may repeat earlier ones, so its
    objects' sort keys carry the epoch. A Kinesis shard id stands as it is, and a position wider
    than Kafka's 20 digits takes the 129 of a Kinesis sequence number."""
    label = f"{partition:05d}" if isinstance(partition, int) else partition
    position = f"{first:020d}" if first < 10**20 else f"{first:0{KINESIS_POSITION_DIGITS}d}"
    if epoch:
        return f"OBJ#{kind}#{label}#e{epoch:04d}#{position}"
    return f"OBJ#{kind}#{label}#{position}"


def epoch_sk(epoch: int) -> str:
    return f"EPOCH#{epoch:06d}"


def epoch_to_item(stream: str, partition: PartitionId, record: EpochStart) -> dict[str, Any]:
    key = {"pk": state_pk(stream, partition), "sk": epoch_sk(record.epoch), "stream": stream, "partition": partition}
    values = asdict(record)
    for name in _EPOCH_POSITIONS:
        values[name] = _item_position(values[name])
    return key | values


_EPOCH_POSITIONS = ("first_offset", "previous_staged_offset")


def abandoned_sk(epoch: int, flush_id: str) -> str:
    return f"ABANDONED#{epoch:05d}#{flush_id}"


def abandoned_to_item(stream: str, partition: PartitionId, record: AbandonedFlush) -> dict[str, Any]:
    return {
        "pk": state_pk(stream, partition),
        "sk": abandoned_sk(record.epoch, record.flush_id),
        "stream": stream,
        "partition": partition,
        "flush_id": record.flush_id,
        "object_key": record.object_key,
        "epoch": record.epoch,
        "segments": orjson.dumps(
            [[_json_position(first), _json_position(last), n] for first, last, n in record.segments]
        ).decode(),
        "reason": record.reason,
        "checked": record.checked,
        "abandoned_ms": record.abandoned_ms,
    }


def abandoned_from_item(item: dict[str, Any]) -> AbandonedFlush:
    return AbandonedFlush(
        flush_id=item["flush_id"],
        object_key=item["object_key"],
        epoch=int(item["epoch"]),
        segments=tuple((int(first), int(last), int(n)) for first, last, n in orjson.loads(item["segments"])),
        reason=item["reason"],
        checked=item["checked"],
        abandoned_ms=int(item["abandoned_ms"]),
    )


def epoch_from_item(item: dict[str, Any]) -> EpochStart:
    values = {field.name: item[field.name] for field in fields(EpochStart)}
    for name in _EPOCH_POSITIONS:
        values[name] = int(values[name])
    return EpochStart(**values)


def object_to_item(committed: CommittedObject) -> dict[str, Any]:
    return {
        "pk": hour_pk(committed.stream, committed.hour),
        "sk": object_sk(committed.kind, committed.partition, committed.first, committed.epoch),
        "epoch": committed.epoch,
        "content_sha256": committed.content_sha256,
        "stream": committed.stream,
        "partition": committed.partition,
        "kind": committed.kind,
        "hour": committed.hour,
        "object_key": committed.key,
        "first_offset": _item_position(committed.first),
        "last_offset": _item_position(committed.last),
        "records": committed.records,
        "size": committed.size,
        "sha256": committed.sha256,
        "committed_ms": committed.committed_ms,
    }


def object_from_item(item: dict[str, Any]) -> CommittedObject:
    return CommittedObject(
        stream=item["stream"],
        partition=_partition_of_item(item["partition"]),
        kind=item["kind"],
        hour=item["hour"],
        key=item["object_key"],
        first=int(item["first_offset"]),
        last=int(item["last_offset"]),
        records=int(item["records"]),
        size=int(item["size"]),
        sha256=item["sha256"],
        committed_ms=int(item["committed_ms"]),
        epoch=int(item.get("epoch", 0)),
        content_sha256=item.get("content_sha256", ""),
    )


def item_size(item: dict[str, Any]) -> int:
    """An upper bound of DynamoDB's size of a plain item: attribute names plus values (strings and
    binaries by their length, numbers counted at their 21-byte maximum)."""
    total = 0
    for name, value in item.items():
        total += len(name.encode("utf-8"))
        if isinstance(value, str):
            total += len(value.encode("utf-8"))
        elif isinstance(value, bytes | bytearray):
            total += len(value)
        else:
            total += 21
    return total


def _serialize(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _SERIALIZER.serialize(value) for name, value in item.items()}


def _deserialize(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain(_DESERIALIZER.deserialize(value)) for name, value in item.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, Binary):
        return bytes(value)  # type: ignore[call-overload]  # Binary defines __bytes__
    if isinstance(value, dict):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_plain(inner) for inner in value]
    if isinstance(value, set):
        return {_plain(inner) for inner in value}
    return value


def mark_from_item(item: dict[str, Any]) -> HourMark:
    return HourMark(
        stream=item["stream"],
        hour=item["sk"],
        commits=int(item.get("commits", 0)),
        last_commit_ms=int(item.get("last_commit_ms", 0)),
        manifest_commits=int(item.get("manifest_commits", 0)),
        manifest_key=item.get("manifest_key", ""),
        completed_ms=int(item.get("completed_ms", 0)),
        reconciled_commits=int(item.get("reconciled_commits", 0)),
        aggregated_commits=int(item.get("aggregated_commits", 0)),
    )


def _state_item(state: PartitionState) -> dict[str, Any]:
    """The wire item of a state, refused before sending if it is over DynamoDB's limit.

    Every accepted batch writes one, so it is serialised directly: a state item holds strings,
    integers and one binary only (boto3's ``TypeSerializer`` costs more than the rest of it)."""
    item = state_to_item(state)
    Ledger.check_item_size(state, item_size(item))
    wire: dict[str, Any] = {}
    for name, value in item.items():
        kind = type(value)
        if kind is str:
            wire[name] = {"S": value}
        elif kind is int:
            wire[name] = {"N": str(value)}
        elif kind is bytes:
            wire[name] = {"B": value}
        else:
            wire[name] = _SERIALIZER.serialize(value)
    return wire


def recovery_to_item(recovery: Recovery) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": state_pk(recovery.stream, recovery.partition),
        "sk": RECOVERY_SK,
        "stream": recovery.stream,
        "partition": recovery.partition,
        "generation": recovery.generation,
    }
    unit = recovery.pending
    if unit is not None:  # one JSON text: an operator reads it whole, DynamoDB never looks inside
        item["pending"] = orjson.dumps(
            {
                "epoch": unit.epoch,
                "ranges": [[first, last] for first, last in unit.ranges],
                "objects": [[key, records] for key, records in unit.objects],
                "claimed_ms": unit.claimed_ms,
            }
        ).decode()
    return item


def recovery_from_item(item: dict[str, Any]) -> Recovery:
    pending = None
    if "pending" in item:
        raw = orjson.loads(item["pending"])
        pending = RecoveryUnit(
            epoch=int(raw["epoch"]),
            ranges=tuple((int(first), int(last)) for first, last in raw["ranges"]),
            objects=tuple((str(key), int(records)) for key, records in raw["objects"]),
            claimed_ms=int(raw["claimed_ms"]),
        )
    return Recovery(
        stream=item["stream"],
        partition=_partition_of_item(item["partition"]),
        generation=int(item["generation"]),
        pending=pending,
    )


def _version_condition(expected_version: int) -> tuple[str, dict[str, Any]]:
    if expected_version == 0:
        return "attribute_not_exists(pk)", {}
    return "version = :expected", {":expected": {"N": str(expected_version)}}


class DynamoDBLedger(Ledger):
    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient | None = None,
        boto_config: Config | None = None,
    ) -> None:
        self.table_name = table_name
        # Every accepted batch makes one request, built here from typed values: botocore's
        # client-side parameter validation would only re-check what this module just built.
        self._client = client or boto3.client(
            "dynamodb",
            config=boto_config or Config(retries={"mode": "standard", "max_attempts": 8}, parameter_validation=False),
        )

    def _get_state(self, stream: str, partition: PartitionId) -> PartitionState | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": state_pk(stream, partition)}, "sk": {"S": STATE_SK}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return state_from_item(_deserialize(item)) if item else None

    def _prepare_state(self, state: PartitionState) -> dict[str, Any]:
        return _state_item(state)

    def _put_state(self, state: PartitionState, expected_version: int, payload: Any = None) -> None:
        condition, values = _version_condition(expected_version)
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": payload if payload is not None else _state_item(state),
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            self._client.put_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
            current = state_from_item(_deserialize(old)) if old else None
            raise LedgerConflictError(
                f"{state.stream}/{state.partition}: expected version {expected_version}, "
                f"found {current.version if current else 'another'}",
                current,
            ) from None

    def _conditional_state_put(self, state: PartitionState, expected_version: int) -> dict[str, Any]:
        """The transaction entry that writes ``state`` if the stored version is still the expected one."""
        condition, values = _version_condition(expected_version)
        put: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": _state_item(state),
            "ConditionExpression": condition,
        }
        if values:
            put["ExpressionAttributeValues"] = values
        return put

    def _put_state_and_object(self, state: PartitionState, expected_version: int, committed: CommittedObject) -> None:
        state_put = self._conditional_state_put(state, expected_version)
        items: list[Any] = [
            {"Put": state_put},
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": _serialize(object_to_item(committed)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {  # the hour has a new object: dirty for every consumer of the hour
                "Update": {
                    "TableName": self.table_name,
                    "Key": {"pk": {"S": marks_pk(committed.stream)}, "sk": {"S": committed.hour}},
                    "UpdateExpression": "ADD commits :one SET last_commit_ms = :now, #stream = :stream",
                    "ExpressionAttributeNames": {"#stream": "stream"},
                    "ExpressionAttributeValues": {
                        ":one": {"N": "1"},
                        ":now": {"N": str(committed.committed_ms)},
                        ":stream": {"S": committed.stream},
                    },
                }
            },
        ]
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                self._client.transact_write_items(TransactItems=items)
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                cancelled: list[dict[str, Any]] = exc.response.get("CancellationReasons", [])  # type: ignore[assignment]
                reasons = [reason.get("Code") for reason in cancelled]
            if "TransactionConflict" in reasons and attempt < TRANSACTION_ATTEMPTS:
                # Another transaction touched one of the items (typically the hour's mark, which
                # every partition's commit for that hour updates): back off with jitter, retry.
                time.sleep(random.uniform(0.01, 0.05) * attempt)
                continue
            fine = (None, "None")
            if (
                len(reasons) == 3
                and reasons[0] in fine
                and reasons[1] == "ConditionalCheckFailed"
                and reasons[2] in fine
            ):
                raise DoubleCommitError(f"object {committed.key} is already recorded but flush was still sealed")
            raise LedgerConflictError(
                f"{state.stream}/{state.partition}: commit of {committed.key} lost the version check ({reasons})"
            )

    def _get_recovery(self, stream: str, partition: PartitionId) -> Recovery | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": state_pk(stream, partition)}, "sk": {"S": RECOVERY_SK}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return recovery_from_item(_deserialize(item)) if item else None

    def _put_recovery(self, recovery: Recovery, expected_generation: int, committed: Sequence[CommittedObject]) -> None:
        where = f"{recovery.stream}/{recovery.partition}"
        put: dict[str, Any] = {"TableName": self.table_name, "Item": _serialize(recovery_to_item(recovery))}
        if expected_generation == 0:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "generation = :expected"
            put["ExpressionAttributeValues"] = {":expected": {"N": str(expected_generation)}}
        items: list[Any] = [{"Put": put}]
        hours: dict[str, list[CommittedObject]] = {}
        for obj in committed:
            hours.setdefault(obj.hour, []).append(obj)
            items.append(
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": _serialize(object_to_item(obj)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        for hour, objects in hours.items():  # as a commit does: each object is one more commit of its hour
            items.append(
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": {"pk": {"S": marks_pk(recovery.stream)}, "sk": {"S": hour}},
                        "UpdateExpression": "ADD commits :n SET last_commit_ms = :now, #stream = :stream",
                        "ExpressionAttributeNames": {"#stream": "stream"},
                        "ExpressionAttributeValues": {
                            ":n": {"N": str(len(objects))},
                            ":now": {"N": str(max(obj.committed_ms for obj in objects))},
                            ":stream": {"S": recovery.stream},
                        },
                    }
                }
            )
        if len(items) > MAX_TRANSACTION_ITEMS:
            raise ValueError(f"{where}: {len(items)} items in one transaction (DynamoDB takes {MAX_TRANSACTION_ITEMS})")
        for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
            try:
                if len(items) == 1:
                    self._client.put_item(**put)
                else:
                    self._client.transact_write_items(TransactItems=items)
                return
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                if code == "ConditionalCheckFailedException":
                    reasons: list[Any] = ["ConditionalCheckFailed"]
                elif code == "TransactionCanceledException":
                    cancelled: list[dict[str, Any]] = exc.response.get("CancellationReasons", [])  # type: ignore[assignment]
                    reasons = [reason.get("Code") for reason in cancelled]
                else:
                    raise
            if "TransactionConflict" in reasons and attempt < TRANSACTION_ATTEMPTS:
                time.sleep(random.uniform(0.01, 0.05) * attempt)  # an hour's mark, busy: back off, retry
                continue
            if reasons[:1] == ["ConditionalCheckFailed"]:
                raise LedgerConflictError(f"{where}: the recovery generation is no longer {expected_generation}")
            raise LedgerConflictError(f"{where}: recovery of generation {expected_generation} refused ({reasons})")

    def _state_item_size(self, state: PartitionState) -> int:
        return item_size(state_to_item(state))

    def _put_state_and_epoch(self, state: PartitionState, expected_version: int, record: EpochStart) -> None:
        item = epoch_to_item(state.stream, state.partition, record)
        self._put_state_and_record(state, expected_version, item, f"epoch {record.epoch} not started")

    def _put_state_and_abandoned(self, state: PartitionState, expected_version: int, record: AbandonedFlush) -> None:
        item = abandoned_to_item(state.stream, state.partition, record)
        self._put_state_and_record(state, expected_version, item, f"flush {record.flush_id} not abandoned")

    def _put_state_and_record(
        self, state: PartitionState, expected_version: int, item: dict[str, Any], what: str
    ) -> None:
        """The state and a new record item of the partition (an epoch start, an abandoned flush), together."""
        state_put = self._conditional_state_put(state, expected_version)
        try:
            items: list[Any] = [
                {"Put": state_put},
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": _serialize(item),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
            self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            raise LedgerConflictError(
                f"{state.stream}/{state.partition}: {what}, the state moved (expected version {expected_version})"
            ) from None

    def _query_abandoned(self, stream: str, partition: PartitionId) -> list[AbandonedFlush]:
        found: list[AbandonedFlush] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": {"S": state_pk(stream, partition)}, ":prefix": {"S": "ABANDONED#"}},
            ConsistentRead=True,
        ):
            found.extend(abandoned_from_item(_deserialize(item)) for item in page.get("Items", []))
        return found

    def _query_epochs(self, stream: str, partition: PartitionId) -> list[EpochStart]:
        found: list[EpochStart] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": {"S": state_pk(stream, partition)}, ":prefix": {"S": "EPOCH#"}},
            ConsistentRead=True,
        ):
            found.extend(epoch_from_item(_deserialize(item)) for item in page.get("Items", []))
        return found

    def _add_marks(
        self, stream: str, partition: PartitionId, epoch: int, marks: Sequence[tuple[int, int]], now_ms: int
    ) -> None:
        pages: dict[int, list[str]] = {}
        for offset, crc in marks:
            pages.setdefault(offset // MARKS_PAGE_SPAN, []).append(f"{offset}:{crc}")
        for page, entries in sorted(pages.items()):
            self._client.update_item(
                TableName=self.table_name,
                Key={"pk": {"S": state_pk(stream, partition)}, "sk": {"S": marks_sk(epoch, page)}},
                UpdateExpression="ADD marks :marks SET #ttl = :ttl",
                ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                ExpressionAttributeValues={
                    ":marks": {"SS": sorted(set(entries))},
                    ":ttl": {"N": str(now_ms // 1000 + MARKS_RETENTION_S)},
                },
            )

    def _get_marks(
        self, stream: str, partition: PartitionId, epoch: int, offsets: Sequence[int]
    ) -> dict[int, frozenset[int]]:
        wanted = set(offsets)
        pages = [offset // MARKS_PAGE_SPAN for offset in wanted]
        found: dict[int, set[int]] = {}
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":pk": {"S": state_pk(stream, partition)},
                ":low": {"S": marks_sk(epoch, min(pages))},
                ":high": {"S": marks_sk(epoch, max(pages))},
            },
            ConsistentRead=True,
        ):
            for item in page.get("Items", []):
                for entry in item.get("marks", {}).get("SS", []):
                    offset, crc = entry.split(":")
                    if int(offset) in wanted:
                        found.setdefault(int(offset), set()).add(int(crc))
        return {offset: frozenset(crcs) for offset, crcs in found.items()}

    def _get_object(
        self, stream: str, hour: str, kind: str, partition: PartitionId, first: int, epoch: int
    ) -> CommittedObject | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": hour_pk(stream, hour)}, "sk": {"S": object_sk(kind, partition, first, epoch)}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return object_from_item(_deserialize(item)) if item else None

    def _query_objects(self, stream: str, hour: str) -> list[CommittedObject]:
        paginator = self._client.get_paginator("query")
        found: list[CommittedObject] = []
        for page in paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": {"S": hour_pk(stream, hour)}, ":prefix": {"S": "OBJ#"}},
            ConsistentRead=True,
        ):
            found.extend(object_from_item(_deserialize(item)) for item in page.get("Items", []))
        return found

    def _get_partitions(self, stream: str) -> set[PartitionId]:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": registry_pk(stream)}, "sk": {"S": PARTITIONS_SK}},
            ConsistentRead=True,
        )
        item = response.get("Item") or {}
        found: set[PartitionId] = {int(number) for number in item.get("partitions", {}).get("NS", [])}
        found.update(item.get("shards", {}).get("SS", []))
        return found

    def _add_partitions(self, stream: str, partitions: set[PartitionId]) -> None:
        # Kafka partition numbers in a number set (as ever), shard ids in a string set beside it.
        numbers = sorted(str(p) for p in partitions if isinstance(p, int))
        names = sorted(p for p in partitions if isinstance(p, str))
        updates: list[str] = []
        values: dict[str, Any] = {}
        request: dict[str, Any] = {}
        if numbers:
            request["ExpressionAttributeNames"] = {"#partitions": "partitions"}  # a reserved word
            updates.append("#partitions :numbers")
            values[":numbers"] = {"NS": numbers}
        if names:
            updates.append("shards :names")
            values[":names"] = {"SS": names}
        self._client.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": registry_pk(stream)}, "sk": {"S": PARTITIONS_SK}},
            UpdateExpression="ADD " + ", ".join(updates),
            ExpressionAttributeValues=values,
            **request,
        )

    def _put_run(self, stream: str, run_id: str, finished_ms: int, report: dict[str, object]) -> None:
        self._client.put_item(
            TableName=self.table_name,
            Item=_serialize(
                {
                    "pk": f"RUNS#{stream}",
                    "sk": run_id,
                    "stream": stream,
                    "finished_ms": finished_ms,
                    "report": orjson.dumps(report).decode(),
                }
            ),
            ConditionExpression="attribute_not_exists(pk)",
        )

    def _query_hour_marks(self, stream: str, since_hour: str) -> list[HourMark]:
        condition, values = "pk = :pk", {":pk": {"S": marks_pk(stream)}}
        if since_hour:
            condition += " AND sk >= :since"
            values[":since"] = {"S": since_hour}
        marks: list[HourMark] = []
        for page in self._client.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=values,
            ConsistentRead=True,
        ):
            marks.extend(mark_from_item(_deserialize(item)) for item in page.get("Items", []))
        return marks

    def _set_if_commits(self, mark: HourMark, values: dict[str, int | str]) -> bool:
        names = {f"#a{i}": name for i, name in enumerate(values)}
        attribute_values: dict[str, Any] = {f":v{i}": _SERIALIZER.serialize(v) for i, v in enumerate(values.values())}
        attribute_values[":commits"] = {"N": str(mark.commits)}
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key={"pk": {"S": marks_pk(mark.stream)}, "sk": {"S": mark.hour}},
                UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(values))),
                ConditionExpression="commits = :commits",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=attribute_values,
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True
