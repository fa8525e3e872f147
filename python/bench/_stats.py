"""Percentiles for the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence


def pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))
    return s[i]


def summary(xs: Sequence[float]) -> str:
    return f"p50 {pct(xs, 50):8.1f}  p99 {pct(xs, 99):8.1f}  max {max(xs):8.1f}  (n={len(xs)})"
