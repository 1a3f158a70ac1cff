"""One line of the latency dashboard per endpoint."""

from __future__ import annotations

from stats import mean, median


def summary_line(endpoint: str, latencies_ms: list[float]) -> str:
    return (
        f"{endpoint:<24} n={len(latencies_ms):<5} "
        f"mean={mean(latencies_ms):7.1f}ms median={median(latencies_ms):7.1f}ms"
    )
