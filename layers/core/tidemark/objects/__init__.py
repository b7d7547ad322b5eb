"""S3 object keys (deterministic) and the uploader (boto3's transfer manager)."""

from __future__ import annotations

from tidemark.objects.keys import object_key
from tidemark.objects.writer import ObjectStore, UploadedObject

__all__ = ["ObjectStore", "UploadedObject", "object_key"]
