"""The statistics of `runner compare`: differences of success rates with 95 % intervals and exact tests, paired
(the same task, episode index and seed in both runs) or, when asked, unpaired. Distributions come from scipy.

Paired, per 2x2 table of pairs (both succeed `a`, only A `b`, only B `c`, neither `d`):
- the difference B - A = (c - b) / n with Newcombe's hybrid score interval for paired proportions (Newcombe 1998,
  Statistics in Medicine 17:2635, method 10: Wilson intervals of both rates combined with the phi correlation of
  the pairs, phi continuity-corrected as in the paper);
- the exact McNemar test: b ~ Binomial(b + c, 1/2), two-sided (scipy.stats.binomtest);
- rewards: Wilcoxon's signed-rank test on the paired differences and a seeded paired bootstrap interval of
  the mean difference.
Unpaired: Newcombe's hybrid score interval for independent proportions (Newcombe 1998, Statistics in Medicine
17:873, method 10), Fisher's exact test, the Mann-Whitney U test for rewards. Across tasks, p-values are
Holm-adjusted (family-wise error 5 %).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.results.aggregate import Z95, wilson_interval

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0  # the same interval on every machine and every call
Z80 = 0.8416212335729143  # scipy.stats.norm.ppf(0.80): 80 % power for sample sizes


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson 95 % interval as fractions (0..1)."""
    ci = wilson_interval(successes, n)
    return (0.0, 1.0) if ci is None else (ci[0] / 100.0, ci[1] / 100.0)


@dataclass(frozen=True)
class PairedTable:
    """Pairs of episodes: both succeed, only A succeeds, only B succeeds, neither."""

    both: int
    a_only: int
    b_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    @property
    def a_successes(self) -> int:
        return self.both + self.a_only

    @property
    def b_successes(self) -> int:
        return self.both + self.b_only

    def __add__(self, other: PairedTable) -> PairedTable:
        return PairedTable(self.both + other.both, self.a_only + other.a_only, self.b_only + other.b_only,
                           self.neither + other.neither)


def paired_difference(table: PairedTable) -> tuple[float, float, float] | None:
    """(B - A, low, high) as fractions, Newcombe's method 10 for paired proportions; None without pairs."""
    n = table.n
    if n == 0:
        return None
    pa, pb = table.a_successes / n, table.b_successes / n
    la, ua = wilson(table.a_successes, n)
    lb, ub = wilson(table.b_successes, n)
    # phi of the 2x2 table with Newcombe's continuity correction (0 when a margin is empty)
    margins = (table.a_successes * (n - table.a_successes) * table.b_successes * (n - table.b_successes))
    cross = table.both * table.neither - table.a_only * table.b_only
    corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
    phi = corrected / math.sqrt(margins) if margins > 0 else 0.0
    diff = pb - pa
    low = diff - math.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    high = diff + math.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2))
    return diff, max(-1.0, low), min(1.0, high)


def unpaired_difference(a_successes: int, a_n: int, b_successes: int, b_n: int) -> tuple[float, float, float] | None:
    """(B - A, low, high) as fractions, Newcombe's method 10 for independent proportions."""
    if a_n == 0 or b_n == 0:
        return None
    pa, pb = a_successes / a_n, b_successes / b_n
    la, ua = wilson(a_successes, a_n)
    lb, ub = wilson(b_successes, b_n)
    diff = pb - pa
    return diff, diff - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2), diff + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p-value (1 when no pair is discordant)."""
    from scipy.stats import binomtest

    discordant = a_only + b_only
    return 1.0 if discordant == 0 else min(1.0, float(binomtest(a_only, discordant, 0.5).pvalue))


def fisher_exact(a_successes: int, a_n: int, b_successes: int, b_n: int) -> float:
    from scipy.stats import fisher_exact as fisher

    if a_n == 0 or b_n == 0:
        return 1.0
    return float(fisher([[a_successes, a_n - a_successes], [b_successes, b_n - b_successes]]).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error), in the order given."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def paired_rewards(a: Sequence[float], b: Sequence[float]) -> dict[str, float | None]:
    """Mean of B - A with a seeded paired bootstrap 95 % interval, and Wilcoxon's signed-rank p-value."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
    if not pairs:
        return {"mean_diff": None, "low": None, "high": None, "p": None, "n": 0}
    import numpy as np
    from scipy.stats import wilcoxon

    diffs = np.array([y - x for x, y in pairs], dtype=np.float64)
    mean = float(math.fsum(diffs) / len(diffs))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = diffs[rng.integers(0, len(diffs), size=(BOOTSTRAP_RESAMPLES, len(diffs)))].mean(axis=1)
    low, high = (float(v) for v in np.quantile(means, [ALPHA / 2, 1 - ALPHA / 2]))
    p = 1.0 if not np.any(diffs != 0) else float(wilcoxon(diffs, zero_method="wilcox").pvalue)
    return {"mean_diff": mean, "low": low, "high": high, "p": p, "n": len(diffs)}


def unpaired_rewards(a: Sequence[float], b: Sequence[float]) -> dict[str, float | None]:
    """Difference of means and the Mann-Whitney U p-value (two independent samples)."""
    xs = [x for x in a if math.isfinite(x)]
    ys = [y for y in b if math.isfinite(y)]
    if not xs or not ys:
        return {"mean_diff": None, "low": None, "high": None, "p": None, "n": 0}
    from scipy.stats import mannwhitneyu

    mean = math.fsum(ys) / len(ys) - math.fsum(xs) / len(xs)
    p = 1.0 if set(xs) == set(ys) and len(set(xs)) == 1 else float(mannwhitneyu(ys, xs).pvalue)
    return {"mean_diff": mean, "low": None, "high": None, "p": p, "n": min(len(xs), len(ys))}


def episodes_needed(rate: float, delta: float, discordant: float | None = None) -> int | None:
    """Paired episodes to detect a difference `delta` (fraction) from success rate `rate`, at 5 % two-sided and
    80 % power (Connor 1987, Biometrics 43:207):
        n = (z_a * sqrt(psi) + z_b * sqrt(psi - delta^2))^2 / delta^2,
    psi the share of discordant pairs: the observed one when it is lower than that of two uncorrelated policies
    at `rate` and `rate + delta` (pairing helps), else the uncorrelated one (a large observed effect says nothing
    about a small one)."""
    if not 0 < delta < 1:
        return None
    p1 = min(max(rate, 0.0), 1.0)
    p2 = p1 + delta if p1 + delta <= 1 else p1 - delta
    psi = p1 * (1 - p2) + p2 * (1 - p1)
    if discordant is not None and delta * delta < discordant < psi:
        psi = discordant
    n = (Z95 * math.sqrt(psi) + Z80 * math.sqrt(max(0.0, psi - delta * delta))) ** 2 / (delta * delta)
    return math.ceil(n)


def episodes_needed_unpaired(rate: float, delta: float) -> int | None:
    """Episodes of each policy to detect `delta` from `rate` with two independent samples (5 %, 80 % power):
    n = (z_a * sqrt(2 pbar qbar) + z_b * sqrt(p1 q1 + p2 q2))^2 / delta^2."""
    if not 0 < delta < 1:
        return None
    p1 = min(max(rate, 0.0), 1.0)
    p2 = p1 + delta if p1 + delta <= 1 else p1 - delta
    mean = (p1 + p2) / 2
    n = (Z95 * math.sqrt(2 * mean * (1 - mean)) + Z80 * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))) ** 2 / delta ** 2
    return math.ceil(n)


__all__ = ["PairedTable", "episodes_needed", "episodes_needed_unpaired", "fisher_exact", "holm", "mcnemar_exact", "paired_difference",
           "paired_rewards", "unpaired_difference", "unpaired_rewards", "wilson"]
