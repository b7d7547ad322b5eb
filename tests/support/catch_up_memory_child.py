"""A queue's index catching up after it was lost, in a fresh process whose peak RSS is that step's.

``python -m tests.support.catch_up_memory_child DIRECTORY POSITIONS``: a partition that has
accepted ``POSITIONS`` messages, all flushed (nothing staged), and an empty index (lost, or
replaced by a new one). ``QueueNumbering.adopt`` catches up. The last stdout line is one JSON
object: ``peak_rss_mib`` (``VmHWM``, reset before the step: see ``flush_memory_child``),
``rss_mib_before`` and ``indexed_through``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.flush_memory_child import peak_rss_mib, reset_peak_rss, rss_mib
from tidemark.clock import ManualClock
from tidemark.config.model import DedupeConfig
from tidemark.dedupe.rebuild import ArchivedIds
from tidemark.dedupe.sqlite import SqliteDedupeIndex
from tidemark.ledger.model import PartitionState
from tidemark.staging.store import SegmentStore
from tidemark.writer.positions import QueueNumbering


def main() -> None:
    root, positions = Path(sys.argv[1]), int(sys.argv[2])
    index = SqliteDedupeIndex(root / "p0.sqlite")
    state = PartitionState("orders", 0, version=positions, staged_offset=positions - 1)
    numbering = QueueNumbering(
        stream="orders",
        partition=0,
        index=index,
        settings=DedupeConfig(),
        staging=SegmentStore(root / "staging"),
        clock=ManualClock(),
        load=lambda: state,
        archived=lambda _since_ms: ArchivedIds(),
    )
    index.indexed_through()  # the connection open before the measure
    before = rss_mib()
    reset_peak_rss()
    numbering.adopt(state)
    result = {"peak_rss_mib": peak_rss_mib(), "rss_mib_before": before, "indexed_through": index.indexed_through()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
