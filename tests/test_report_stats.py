"""runner compare's statistics against published worked examples and independent computations."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binomtest, wilcoxon

from runner.report import stats


def test_paired_interval_matches_altman_worked_example():
    """Altman et al., Statistics with Confidence (2nd ed., 2000), Table 6.2 / p. 52, Newcombe's method 10: 41 pairs,
    14 positive in both, 5 in the second only, 0 in the first only, 22 in neither: difference 0.122, 95 % CI 0.011
    to 0.226 (as published)."""
    diff, low, high = stats.paired_difference(stats.PairedTable(both=14, a_only=0, b_only=5, neither=22))
    assert round(diff, 3) == 0.122 and round(low, 3) == 0.011 and round(high, 3) == 0.226


def test_paired_interval_matches_fagerland_bentur_example():
    """Fagerland, Lydersen & Laake (2014, Statistics in Medicine 33:2850; 2017 book, ch. 8), Bentur et al. (2009)
    airway hyper-responsiveness, 21 pairs (1, 1 / 7, 12): Newcombe square-and-add -0.507 to -0.026."""
    diff, low, high = stats.paired_difference(stats.PairedTable(both=1, a_only=7, b_only=1, neither=12))
    assert round(diff, 3) == -0.286 and round(low, 3) == -0.507 and round(high, 3) == -0.026


def test_unpaired_interval_matches_newcombe_example():
    """Newcombe (1998, Statistics in Medicine 17:873), Table II example (a): 56/70 vs 48/80, method 10: 0.0524 to
    0.3339 (here B - A, so the signs flip)."""
    diff, low, high = stats.unpaired_difference(56, 70, 48, 80)
    assert round(diff, 4) == -0.2 and round(low, 4) == -0.3339 and round(high, 4) == -0.0524


@pytest.mark.parametrize("a_only,b_only", [(0, 0), (1, 7), (7, 1), (3, 3), (0, 12), (20, 31)])
def test_mcnemar_exact_is_the_two_sided_binomial_test(a_only, b_only):
    p = stats.mcnemar_exact(a_only, b_only)
    n = a_only + b_only
    if n == 0:
        assert p == 1.0
        return
    assert p == pytest.approx(binomtest(a_only, n, 0.5).pvalue)
    # and by hand: twice the smaller tail of Binomial(n, 1/2), at most 1
    k = min(a_only, b_only)
    assert p == pytest.approx(min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n))


def test_holm_step_down_by_hand():
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 = 0.04 -> 0.06 (monotone)
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([]) == []
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]


def test_identical_runs_have_no_difference():
    table = stats.PairedTable(both=7, a_only=0, b_only=0, neither=13)
    diff, low, high = stats.paired_difference(table)
    assert diff == 0 and low < 0 < high
    assert stats.mcnemar_exact(0, 0) == 1.0
    rewards = stats.paired_rewards([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert rewards["mean_diff"] == 0 and rewards["p"] == 1.0


def test_paired_rewards_use_wilcoxon_and_a_seeded_bootstrap():
    a = [0.1, 0.5, 0.2, 0.9, 0.3, 0.4, 0.8, 0.6]
    b = [0.4, 0.9, 0.1, 1.5, 0.9, 0.5, 1.6, 0.65]
    first, again = stats.paired_rewards(a, b), stats.paired_rewards(a, b)
    assert first == again  # seeded: the same interval every time
    assert first["p"] == pytest.approx(wilcoxon([y - x for x, y in zip(a, b, strict=True)]).pvalue)
    assert first["low"] < first["mean_diff"] < first["high"]
    assert first["mean_diff"] == pytest.approx(sum(b) / len(b) - sum(a) / len(a))


def test_episodes_needed_follows_connor():
    # psi 0.2, delta 0.1: (1.95996 sqrt(0.2) + 0.84162 sqrt(0.19))^2 / 0.01 = 154.6
    assert stats.episodes_needed(0.5, 0.1, discordant=0.2) == 155
    # no observed discordance: two uncorrelated policies at 50 % and 60 % (psi = 0.5)
    psi = 0.5 * 0.4 + 0.6 * 0.5
    assert stats.episodes_needed(0.5, 0.1) == math.ceil((1.959964 * psi ** 0.5 + 0.841621 * (psi - 0.01) ** 0.5) ** 2
                                                         / 0.01)
    # a huge observed discordance (a large effect) is not used for a small one
    assert stats.episodes_needed(0.0, 0.05, discordant=1.0) == stats.episodes_needed(0.0, 0.05)
    assert stats.episodes_needed(0.5, 0.0) is None
