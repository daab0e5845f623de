"""Proportions with their uncertainty: Wilson score intervals, weighted (Kish) rates, percentiles.

Pure arithmetic over counts; every interval of ``evalq report`` comes from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._frozen import Frozen

__all__ = [
    "Z95",
    "Rate",
    "WeightedRate",
    "WeightedSums",
    "nearest_rank",
    "weighted_wilson",
    "wilson",
]

Z95 = 1.959963984540054
"""Two-sided 95 % normal quantile used by every interval."""

# --- intervals ---------------------------------------------------------------------------------


class Rate(Frozen):
    """``numerator / denominator`` with its Wilson 95 % interval (all null when nothing counted)."""

    numerator: int
    denominator: int
    value: float | None
    low: float | None
    high: float | None


class WeightedRate(Frozen):
    """A sampling-weighted proportion, with the Wilson interval at Kish's effective n."""

    value: float | None
    low: float | None
    high: float | None
    n: int
    weight_sum: float
    effective_n: float


def _wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    z2 = z * z
    denominator = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # The interval always holds p; rounding can put a bound a hair past it (1e-17 over 0/n).
    return max(0.0, min(p, center - half)), min(1.0, max(p, center + half))


def wilson(k: int, n: int, z: float = Z95) -> Rate:
    """``k/n`` with its Wilson score interval (``value``/bounds null when ``n == 0``)."""
    if n <= 0:
        return Rate(numerator=k, denominator=n, value=None, low=None, high=None)
    low, high = _wilson_bounds(k / n, n, z)
    return Rate(numerator=k, denominator=n, value=k / n, low=low, high=high)


@dataclass
class WeightedSums:
    """Running sums for a weighted proportion: n, Σw, Σw², Σw·y."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    hits: float = 0.0

    def add(self, weight: float, y: bool) -> None:
        self.n += 1
        self.total += weight
        self.squares += weight * weight
        self.hits += weight if y else 0.0

    def rate(self, z: float = Z95) -> WeightedRate:
        if self.n == 0 or self.total <= 0:
            return WeightedRate(
                value=None, low=None, high=None, n=self.n, weight_sum=self.total, effective_n=0
            )
        p = self.hits / self.total
        effective_n = self.total * self.total / self.squares
        low, high = _wilson_bounds(p, effective_n, z)
        return WeightedRate(
            value=p, low=low, high=high, n=self.n, weight_sum=self.total, effective_n=effective_n
        )


def weighted_wilson(pairs: Iterable[tuple[float, bool]], z: float = Z95) -> WeightedRate:
    """Weighted proportion ``Σw·y/Σw`` of ``(weight, y)`` pairs, Wilson interval at Kish n_eff."""
    sums = WeightedSums()
    for weight, y in pairs:
        sums.add(weight, y)
    return sums.rate(z)


def nearest_rank(sorted_values: Sequence[float], percent: int) -> float:
    """``sorted[ceil(p·n) - 1]`` (integer arithmetic), 0 for no values (docs/semantics.md §8)."""
    if not sorted_values:
        return 0.0
    rank = -(-percent * len(sorted_values) // 100)
    return sorted_values[max(rank, 1) - 1]
