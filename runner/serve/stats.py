"""What `runner serve` counts: requests, batch sizes, latencies, connections; a log line and the /stats numbers."""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

LATENCY_WINDOW = 10_000  # latencies kept for the percentiles (the most recent ones)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class ServerStats:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.requests = 0
        self.controls = 0
        self.errors = 0
        self.connections_total = 0
        self.batches: Counter[int] = Counter()
        self.latencies_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._window_start = time.monotonic()
        self._window_requests = 0
        self._window_batches: Counter[int] = Counter()
        self._window_latencies: list[float] = []

    def request_done(self, latency_s: float) -> None:
        self.requests += 1
        self._window_requests += 1
        ms = latency_s * 1000.0
        self.latencies_ms.append(ms)
        if len(self._window_latencies) < LATENCY_WINDOW:
            self._window_latencies.append(ms)

    def batch(self, size: int) -> None:
        self.batches[size] += 1
        self._window_batches[size] += 1

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        """Totals since the start (the /stats endpoint)."""
        latencies = list(self.latencies_ms)
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "requests": self.requests,
            "control_messages": self.controls,
            "errors": self.errors,
            "connections_total": self.connections_total,
            "batch_sizes": {str(k): v for k, v in sorted(self.batches.items())},
            "mean_batch_size": _mean_batch(self.batches),
            "latency_ms": {f"p{q}": _round(percentile(latencies, q)) for q in (50, 90, 99)},
            **extra,
        }

    def window_line(self, connections: int) -> str | None:
        """The periodic log line for the requests since the last one (None when there were none); resets the window."""
        now = time.monotonic()
        span = max(now - self._window_start, 1e-9)
        if not self._window_requests:
            self._window_start = now
            return None
        hist = " ".join(f"{size}x{count}" for size, count in sorted(self._window_batches.items()))
        lat = self._window_latencies
        line = (f"{self._window_requests / span:.1f} requests/s over {span:.0f} s; batch sizes {hist} (mean "
                f"{_mean_batch(self._window_batches)}); latency ms p50 {percentile(lat, 50):.1f} p90 "
                f"{percentile(lat, 90):.1f} p99 {percentile(lat, 99):.1f}; {connections} connection"
                f"{'' if connections == 1 else 's'}")
        self._window_start, self._window_requests = now, 0
        self._window_batches, self._window_latencies = Counter(), []
        return line


def _mean_batch(batches: Counter[int]) -> float | None:
    n = sum(batches.values())
    return round(sum(k * v for k, v in batches.items()) / n, 3) if n else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


__all__ = ["ServerStats", "percentile"]
