"""Upload rendered objects with boto3's transfer manager (multipart above a threshold)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from tidemark.exceptions import CorruptSegmentError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

META_RECORDS = "tidemark-records"
META_SHA256 = "tidemark-sha256"
META_FIRST = "tidemark-first-offset"
META_LAST = "tidemark-last-offset"


@dataclass(frozen=True, slots=True)
class UploadedObject:
    key: str
    records: int
    size: int
    sha256: str


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
    ) -> UploadedObject:
        """Render into a spool file (memory stays flat whatever the object size), then upload.

        The record count and SHA-256 go into the object's metadata, so the object describes
        itself and reconciliation can compare it with the ledger.
        """
        fd, path = tempfile.mkstemp(prefix="tidemark-", suffix=".part", dir=self._spool_dir)
        try:
            with os.fdopen(fd, "wb") as raw:
                hashing = _HashingWriter(raw)
                records = render(hashing)  # type: ignore[arg-type]
            digest = hashing.sha256.hexdigest()
            if expected_records is not None and records != expected_records:
                raise CorruptSegmentError(f"{key}: rendered {records} records, the seal says {expected_records}")
            before_upload()
            self._client.upload_file(
                path,
                self.bucket,
                key,
                ExtraArgs={
                    "ContentType": content_type,
                    "Metadata": {
                        META_RECORDS: str(records),
                        META_SHA256: digest,
                        META_FIRST: str(first),
                        META_LAST: str(last),
                    },
                },
                Config=self._transfer,
            )
            return UploadedObject(key=key, records=records, size=hashing.size, sha256=digest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
