"""Run one archiver invocation in a child process that dies for real (``os._exit``) when the
S3 multipart upload reaches a given part. Usage: python -m tests.support.crash_child EVENT PART"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from tidemark.archiver import Archiver
from tidemark.runtime import Runtime


def main() -> None:
    event_path, crash_part = sys.argv[1], int(sys.argv[2])
    runtime = Runtime.from_env()

    def die_on_part(params: dict[str, Any], **_: Any) -> None:
        if params.get("PartNumber") == crash_part:
            os._exit(137)

    runtime.objects.client.meta.events.register("before-parameter-build.s3.UploadPart", die_on_part)
    with open(event_path, encoding="utf-8") as handle:
        event = json.load(handle)
    Archiver(runtime).handle(event)


if __name__ == "__main__":
    main()
