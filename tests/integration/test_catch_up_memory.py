"""A queue's index catching up costs what is staged, whatever the history (issue 28, finding 4).

After a lost or replaced index, every position ever accepted is "not indexed". Catching up walks
the staged segments (the only place ids can come from) and counts the rest: its memory must not
grow with the number of positions. Each run is a fresh process measuring its own peak
(``tests/support/catch_up_memory_child.py``). Failing first: the catch-up built a list and a set
of every position up to the staged offset (142 MiB at 1M positions, 401 MiB at 4M).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.cdk import REPO


def catch_up(tmp_path, positions: int) -> dict[str, float]:
    directory = tmp_path / f"n{positions}"
    directory.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.catch_up_memory_child", str(directory), str(positions)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["indexed_through"] == positions - 1  # caught up (nothing staged to index)
    return result


def test_catching_up_a_lost_index_costs_the_same_after_8m_positions_as_after_1000(tmp_path):
    small = catch_up(tmp_path, 1_000)
    large = catch_up(tmp_path, 8_000_000)
    grown = large["peak_rss_mib"] - large["rss_mib_before"]
    base = small["peak_rss_mib"] - small["rss_mib_before"]
    assert grown <= base + 8, (small, large)  # the old range and set: over 600 MiB here
