"""bench/replay.py runs end to end (at a tiny size here; the figures themselves are printed by
the bench, never asserted: see README, Performance)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "replay.py"


def test_the_replay_bench_builds_a_runlog_replays_it_and_reports() -> None:
    tiny = ["--events", "60", "--repeats", "2", "--sizes", "2,6", "--json"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *tiny], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert 50 <= figures["events"] <= 70  # about the size asked for
    for part in ("fabric_replay", "read_runlog", "replay_function"):
        assert figures[part]["runs"] == 2
        assert 0 < figures[part]["median_ms"] <= figures[part]["p95_ms"]
    assert figures["fabric_replay"]["raw_median_ms"] > 0 < figures["fabric_replay"]["ratio"]
    assert set(figures["bytes_per_step"]) == {"2", "6"}
    assert figures["growth"] > 0
