"""Upload rendered objects with boto3's transfer manager (multipart above a threshold).

Uploads are conditional (``If-None-Match: *``): an object is never overwritten. The transfer
manager does not accept ``IfNoneMatch`` among its extra arguments, so a botocore hook adds it to
the ``PutObject`` and ``CompleteMultipartUpload`` requests of the keys this module is uploading
(and only those: other writes on a shared client are left alone). When the key exists already:

* same bytes (the SHA-256 in its metadata): a resumed flush, the object is ours -- fine;
* other bytes but the same records (count, positions and content digest in its metadata): the
  same flush rendered by another library version -- adopted as it is;
* anything else: ``ObjectConflictError``, and nothing is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from tidemark.exceptions import CorruptSegmentError, ObjectConflictError
from tidemark.objects.content import ContentDigest

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

META_RECORDS = "tidemark-records"
META_SHA256 = "tidemark-sha256"
META_FIRST = "tidemark-first-offset"
META_LAST = "tidemark-last-offset"
META_CONTENT = "tidemark-content-sha256"

_CONDITIONAL_HOOK = "tidemark-if-none-match"
_in_flight: set[tuple[str, str]] = set()  # (bucket, key) being uploaded conditionally
_in_flight_lock = threading.Lock()
# The partitions of an event flush concurrently, and an upload keeps up to the transfer
# manager's concurrency times its chunk size in memory (80 MiB with the defaults), or a whole
# object below the multipart threshold: so a process runs at most this many at once.
MAX_UPLOADS = 2
_uploads = threading.BoundedSemaphore(MAX_UPLOADS)


def _add_if_none_match(params: dict[str, Any], **_kwargs: Any) -> None:
    """botocore ``before-parameter-build`` hook: make our own uploads conditional. It runs on the
    transfer manager's threads, hence a shared set of keys rather than a context variable."""
    with _in_flight_lock:
        ours = (params.get("Bucket"), params.get("Key")) in _in_flight
    if ours:
        params["IfNoneMatch"] = "*"


def precondition_failed(exc: BaseException) -> bool:
    """Did S3 refuse the upload because the key exists? (412; s3transfer wraps the ClientError
    of a single PutObject or a CompleteMultipartUpload into a message.)"""
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412")
    return "PreconditionFailed" in str(exc) or "(412)" in str(exc)


@dataclass(frozen=True, slots=True)
class UploadedObject:
    key: str
    records: int
    size: int
    sha256: str
    content_sha256: str = ""
    existing: str = ""  # "" : written now; "identical" | "adopted" : already there


class _HashingWriter:
    """Pass-through file wrapper that hashes and counts what is written."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner = inner
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()


class ObjectStore:
    def __init__(
        self,
        bucket: str,
        *,
        client: S3Client | None = None,
        transfer_config: TransferConfig | None = None,
        spool_dir: str | None = None,
    ) -> None:
        self.bucket = bucket
        self._client = client or boto3.client("s3", config=Config(retries={"mode": "standard", "max_attempts": 8}))
        self._transfer = transfer_config or TransferConfig()
        self._spool_dir = spool_dir
        for operation in ("PutObject", "CompleteMultipartUpload"):
            self._client.meta.events.register(
                f"before-parameter-build.s3.{operation}",
                _add_if_none_match,
                unique_id=f"{_CONDITIONAL_HOOK}-{operation}",
            )

    @property
    def client(self) -> S3Client:
        return self._client

    def put(
        self,
        key: str,
        render: Callable[[BinaryIO], int],
        *,
        first: int,
        last: int,
        content_type: str,
        expected_records: int | None = None,
        before_upload: Callable[[], None] = lambda: None,
        content: ContentDigest | None = None,
    ) -> UploadedObject:
        """Render into a spool file (memory stays flat whatever the object size), then upload
        conditionally (see the module docstring).

        The record count, positions, SHA-256 and content digest go into the object's metadata,
        so the object describes itself and reconciliation can compare it with the ledger.
        ``content`` is fed by ``render`` (``ContentDigest.wrap`` around its frames).
        """
        fd, path = tempfile.mkstemp(prefix="tidemark-", suffix=".part", dir=self._spool_dir)
        try:
            with os.fdopen(fd, "wb") as raw:
                hashing = _HashingWriter(raw)
                records = render(hashing)  # type: ignore[arg-type]
            digest = hashing.sha256.hexdigest()
            if expected_records is not None and records != expected_records:
                raise CorruptSegmentError(f"{key}: rendered {records} records, the seal says {expected_records}")
            content_sha256 = content.hexdigest() if content is not None else ""
            metadata = {META_RECORDS: str(records), META_SHA256: digest, META_FIRST: str(first), META_LAST: str(last)}
            if content_sha256:
                metadata[META_CONTENT] = content_sha256
            uploaded = UploadedObject(key, records, hashing.size, digest, content_sha256)
            before_upload()
            with _in_flight_lock:
                _in_flight.add((self.bucket, key))
            try:
                with _uploads:
                    self._client.upload_file(
                        path,
                        self.bucket,
                        key,
                        ExtraArgs={"ContentType": content_type, "Metadata": metadata},
                        Config=self._transfer,
                    )
            except (S3UploadFailedError, ClientError) as exc:
                if not precondition_failed(exc):
                    raise
                return self._existing(uploaded, first, last)
            finally:
                with _in_flight_lock:
                    _in_flight.discard((self.bucket, key))
            return uploaded
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _existing(self, ours: UploadedObject, first: int, last: int) -> UploadedObject:
        """The key exists: accept it if it is this flush's object, refuse loudly otherwise."""
        head = self._client.head_object(Bucket=self.bucket, Key=ours.key)
        meta = head.get("Metadata", {})
        if meta.get(META_SHA256) == ours.sha256 and head["ContentLength"] == ours.size:
            return UploadedObject(ours.key, ours.records, ours.size, ours.sha256, ours.content_sha256, "identical")
        same_records = (
            bool(ours.content_sha256)
            and meta.get(META_CONTENT) == ours.content_sha256
            and meta.get(META_RECORDS) == str(ours.records)
            and (meta.get(META_FIRST), meta.get(META_LAST)) == (str(first), str(last))
        )
        if same_records and meta.get(META_SHA256):
            return UploadedObject(
                ours.key, ours.records, head["ContentLength"], meta[META_SHA256], ours.content_sha256, "adopted"
            )
        raise ObjectConflictError(
            f"s3://{self.bucket}/{ours.key} exists with other records "
            f"(its metadata: records={meta.get(META_RECORDS)}, offsets {meta.get(META_FIRST)}..{meta.get(META_LAST)}, "
            f"sha256={meta.get(META_SHA256)}; ours: records={ours.records}, offsets {first}..{last}, "
            f"sha256={ours.sha256}): refusing to overwrite it"
        )
