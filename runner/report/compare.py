"""`runner compare A B`: is B better than A? Episodes are paired by (task, episode index, seed): the same seed
gives both policies the same initial state, so the paired test sees the difference between the policies, not
between the episodes drawn (see runner.report.stats for the methods)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.utils import canonicalize_name

from runner.report import stats
from runner.report.load import ReportError, RunResults
from runner.results.fingerprint import BENCHMARK_ONLY, described_differences, initial_state_mismatches
from runner.results.records import EpisodeRecord
from runner.results.runfile import spec_changes
from runner.text import visible

DETECT = 0.05  # the difference the sample-size hint is for (5 points)

PairKey = tuple  # (task name, episode index, seed), or (group, task id, name, index, seed) when names repeat


@dataclass(frozen=True)
class TaskComparison:
    task: str  # "<group>_<id>"
    name: str
    group: str
    n: int  # pairs (paired) or the smaller sample (unpaired)
    a_successes: int
    b_successes: int
    a_n: int
    b_n: int
    a_only: int | None  # discordant pairs (paired only)
    b_only: int | None
    diff: float | None  # B - A, fraction
    low: float | None
    high: float | None
    p: float
    p_holm: float = 1.0
    rewards: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        if self.p_holm < stats.ALPHA and self.diff is not None:
            return "better" if self.diff > 0 else "worse"
        return "no detectable difference"


@dataclass(frozen=True)
class Comparison:
    a: RunResults
    b: RunResults
    a_label: str
    b_label: str
    paired: bool
    tasks: list[TaskComparison]
    overall: TaskComparison
    excluded_errors: int  # pairs left out because an episode of either run is an error
    warnings: list[str]
    episodes_for_5pts: int | None

    @property
    def counts(self) -> dict[str, int]:
        verdicts = [t.verdict for t in self.tasks]
        return {v: verdicts.count(v) for v in ("better", "worse", "no detectable difference")}

    def verdict_line(self) -> str:
        c, o = self.counts, self.overall
        test = "exact McNemar" if self.paired else "Fisher's exact test"
        interval = "Newcombe paired" if self.paired else "Newcombe"
        head = (f"{self.b_label} vs {self.a_label}: better on {c['better']} task{'s' * (c['better'] != 1)}, worse on "
                f"{c['worse']}, no detectable difference on {c['no detectable difference']} ({test}, Holm-adjusted, "
                f"alpha {stats.ALPHA:g})")
        if o.diff is None:
            return head + "; no episodes to compare"
        return (f"{head}; overall {100 * o.diff:+.1f} pts [{100 * o.low:+.1f}, {100 * o.high:+.1f}] "
                f"({interval} 95 % CI), {p_equals(o.p)} ({test}){'' if self.paired else ' (unpaired)'}")

    def sample_size_line(self) -> str:
        if self.episodes_for_5pts is None:
            return ""
        rate = self.overall.a_successes / self.overall.a_n if self.overall.a_n else 0.0
        what = "paired episodes" if self.paired else "episodes of each policy (unpaired)"
        return (f"to detect a {100 * DETECT:.0f}-point difference from A's success rate ({100 * rate:.0f} %) with 80 % "
                f"power: about {self.episodes_for_5pts} {what} (per task, for a difference on one task)")

    def to_json(self) -> dict[str, Any]:
        def row(t: TaskComparison) -> dict[str, Any]:
            return {"task": t.task, "name": t.name, "group": t.group, "n": t.n, "a_successes": t.a_successes,
                    "b_successes": t.b_successes, "a_n": t.a_n, "b_n": t.b_n, "a_only": t.a_only, "b_only": t.b_only,
                    "diff": t.diff, "ci_low": t.low, "ci_high": t.high, "p": t.p, "p_holm": t.p_holm,
                    "verdict": t.verdict, "rewards": t.rewards}

        return {
            "a": {"dir": str(self.a.path), "label": self.a_label},
            "b": {"dir": str(self.b.path), "label": self.b_label},
            "paired": self.paired,
            "methods": {
                "difference_ci": "Newcombe hybrid score, paired (1998, method 10)" if self.paired
                else "Newcombe hybrid score, independent (1998, method 10)",
                "test": "exact McNemar (binomial)" if self.paired else "Fisher's exact",
                "multiplicity": "Holm",
                "rewards": "Wilcoxon signed-rank; paired bootstrap CI (10,000 resamples, seed 0)" if self.paired
                else "Mann-Whitney U",
            },
            "overall": row(self.overall),
            "tasks": [row(t) for t in self.tasks],
            "counts": self.counts,
            "excluded_error_pairs": self.excluded_errors,
            "warnings": list(self.warnings),
            "verdict": self.verdict_line(),
            "episodes_for_5pts": self.episodes_for_5pts,
        }


def format_p(p: float) -> str:
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def p_equals(p: float) -> str:
    """"p = 0.004" or "p < 0.0001"."""
    text = format_p(p)
    return f"p {text}" if text.startswith("<") else f"p = {text}"


def labels(a: RunResults, b: RunResults) -> tuple[str, str]:
    la, lb = a.name, b.name
    if la == lb:
        la, lb = f"A ({visible(a.path, 80)})", f"B ({visible(b.path, 80)})"
    return visible(la, 120), visible(lb, 120)


def compare(a: RunResults, b: RunResults, *, unpaired: bool = False) -> Comparison:
    """Compare B with A; ReportError when the runs are not paired (unless `unpaired`)."""
    warnings = _warnings(a, b)
    if not unpaired:
        _require_pairs(a, b)
    a_label, b_label = labels(a, b)
    rows = _paired_rows(a, b) if not unpaired else _unpaired_rows(a, b)
    tasks, overall, excluded = rows
    adjusted = stats.holm([t.p for t in tasks])
    tasks = [replace(t, p_holm=p) for t, p in zip(tasks, adjusted, strict=True)]
    overall = replace(overall, p_holm=overall.p)
    if a.missing or b.missing:
        warnings.append("a run is incomplete (" + ", ".join(f"{r.path}: {r.missing} episodes missing"
                                                           for r in (a, b) if r.missing) + ")")
    if excluded:
        warnings.append(f"{excluded} pair(s) left out: an episode is recorded as an error in one of the runs")
    rate = overall.a_successes / overall.a_n if overall.a_n else 0.0
    if unpaired:
        needed = stats.episodes_needed_unpaired(rate, DETECT)
    else:
        discordant = ((overall.a_only or 0) + (overall.b_only or 0)) / overall.n if overall.n else None
        needed = stats.episodes_needed(rate, DETECT, discordant)
    return Comparison(a, b, a_label, b_label, not unpaired, tasks, overall, excluded, warnings, needed)


def _keys(run: RunResults, by_name: bool) -> dict[PairKey, EpisodeRecord]:
    """Episodes by what makes them the same episode in another run: the task (its simulator name: the same
    task under another group, e.g. reach-v3 in "easy" and in "mt50", starts from the same state), the episode
    index and the seed."""
    names = {(t.group, t.task_id): t.name for t in run.run.tasks}
    if by_name:
        return {(r.task, r.episode_index, r.seed): r for r in run.records}
    return {(r.task_group, r.task_id, names[(r.task_group, r.task_id)], r.episode_index, r.seed): r
            for r in run.records}


def _by_name(a: RunResults, b: RunResults) -> bool:
    """Pair by task name unless a name appears twice in a run (e.g. env.task: easy,mt50)."""
    return all(len({t.name for t in r.run.tasks}) == len(r.run.tasks) for r in (a, b))


def _task_of(key: PairKey) -> str:
    return str(key[0]) if len(key) == 3 else f"{key[0]}_{key[1]} {key[2]}"


def _require_pairs(a: RunResults, b: RunResults) -> None:
    by_name = _by_name(a, b)
    ka, kb = set(_keys(a, by_name)), set(_keys(b, by_name))
    if ka == kb:
        _require_same_starts(a, b, by_name)
        return
    problems = []
    seeds = (a.run.identity["eval"]["seed"], b.run.identity["eval"]["seed"])
    if seeds[0] != seeds[1]:
        problems.append(f"eval.seed differs ({seeds[0]} vs {seeds[1]}), so no episode starts from the same state")
    tasks_a = {_task_of(k) for k in ka}
    tasks_b = {_task_of(k) for k in kb}
    if tasks_a != tasks_b:
        only_a = sorted(tasks_a - tasks_b)
        only_b = sorted(tasks_b - tasks_a)
        problems.append("the tasks differ (" + "; ".join(
            part for part in (f"only in A: {_few(only_a)}" if only_a else "",
                              f"only in B: {_few(only_b)}" if only_b else "") if part) + ")")
    if not problems:
        only_a, only_b = len(ka - kb), len(kb - ka)
        problems.append(f"the episodes differ: {only_a} only in A, {only_b} only in B (eval.n_episodes "
                        f"{a.run.n_episodes} vs {b.run.n_episodes}, or an incomplete run)")
    raise ReportError("compare: the runs are not paired episode by episode: " + visible("; ".join(problems), 1500)
                      + ". Compare runs of the same plan (same tasks, eval.seed and episodes), or pass --unpaired "
                      "for an unpaired test (much less sensitive)")


def _require_same_starts(a: RunResults, b: RunResults, by_name: bool) -> None:
    """Same seed must mean same start: pairs whose recorded initial states differ are no pairs."""
    ra, rb = _keys(a, by_name), _keys(b, by_name)
    pairs = [(ra[k], rb[k]) for k in sorted(ra, key=lambda k: ra[k].key)]
    known, n_differ, differ = initial_state_mismatches(pairs)
    if not n_differ:
        return
    first = "; ".join(f"{x.task} episode {x.episode_index} (seed {x.seed}): {x.init_state} vs {y.init_state}"
                      for x, y in differ[:3])
    parts = [line.split(":", 1)[0] for line in
             described_differences(a.run.fingerprint, b.run.fingerprint, ignore=BENCHMARK_ONLY)]
    raise ReportError(f"compare: the runs share their seeds but not their initial states: {n_differ} of {known} "
                      f"episode pairs start from different states (first: {visible(first, 600)})"
                      + (f"; their fingerprints differ in: {', '.join(parts)}" if parts else "")
                      + ". The benchmark changed between them (docs/trust.md); pass --unpaired for an unpaired test "
                      "(much less sensitive)")


def _few(items: Sequence[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _warnings(a: RunResults, b: RunResults) -> list[str]:
    out = []
    missing = [r.path for r in (a, b) if r.records and not any(x.init_state for x in r.records)]
    if missing:
        out.append("initial states not recorded in " + ", ".join(visible(p, 200) for p in missing)
                   + " (written by an older runner): pairs are matched by seed alone")
    if a.run.fingerprint and b.run.fingerprint:  # what differs, part by part (the spec's env and the stack too)
        return out + ["the benchmark fingerprints differ in " + visible(line, 600) for line in
                      described_differences(a.run.fingerprint, b.run.fingerprint, ignore=BENCHMARK_ONLY)]
    env_a, env_b = a.run.identity.get("env"), b.run.identity.get("env")
    if env_a != env_b:
        changes = spec_changes({"env": env_a}, {"env": env_b})
        out.append("the env settings differ: " + visible("; ".join(changes[:6]), 600))
    pa = (a.run.provenance or {}).get("packages") or {}
    pb = (b.run.provenance or {}).get("packages") or {}
    stack = _simulation_stack(env_a, env_b)
    differ = [f"{name} {pa[name]} vs {pb[name]}" for name in sorted(set(pa) & set(pb))
              if pa[name] != pb[name] and (stack is None or canonicalize_name(name) in stack)]
    if differ:
        out.append("the simulator versions differ: " + visible(", ".join(differ), 600))
    return out


def _simulation_stack(*envs: Any) -> set[str] | None:
    """The canonical names of the distributions that simulate these env sections (runner.install.needs.env_stack);
    None when a family is not known here (then every package both runs recorded counts)."""
    from runner.errors import RunnerError
    from runner.install.needs import env_stack

    names: set[str] = set()
    for env in envs:
        try:
            names.update(env_stack(str(env["type"]), env))
        except (RunnerError, LookupError, TypeError, ValueError):
            return None
    return names


def _paired_rows(a: RunResults, b: RunResults) -> tuple[list[TaskComparison], TaskComparison, int]:
    ka, kb = _keys(a, _by_name(a, b)), _keys(b, _by_name(a, b))
    by_task: dict[tuple[str, int], list[tuple[EpisodeRecord, EpisodeRecord]]] = {}  # A's (group, task id)
    excluded = 0
    for key in sorted(set(ka) & set(kb), key=lambda k: (ka[k].key)):
        ra, rb = ka[key], kb[key]
        if not (ra.ok and rb.ok):
            excluded += 1
            continue
        by_task.setdefault((ra.task_group, ra.task_id), []).append((ra, rb))
    order = [(t.group, t.task_id, t.name) for t in a.run.tasks]
    rows = [_paired_row(f"{g}_{i}", name, g, by_task.get((g, i), [])) for g, i, name in order]
    everything = [pair for g, i, _ in order for pair in by_task.get((g, i), [])]
    return rows, _paired_row("overall", "", "", everything), excluded


def _paired_row(task: str, name: str, group: str, pairs: list[tuple[EpisodeRecord, EpisodeRecord]]) -> TaskComparison:
    table = stats.PairedTable(
        both=sum(1 for x, y in pairs if x.success and y.success),
        a_only=sum(1 for x, y in pairs if x.success and not y.success),
        b_only=sum(1 for x, y in pairs if y.success and not x.success),
        neither=sum(1 for x, y in pairs if not x.success and not y.success),
    )
    diff = stats.paired_difference(table)
    return TaskComparison(
        task, name, group, table.n, table.a_successes, table.b_successes, table.n, table.n, table.a_only,
        table.b_only, *(diff if diff else (None, None, None)), p=stats.mcnemar_exact(table.a_only, table.b_only),
        rewards=stats.paired_rewards([_reward(x) for x, _ in pairs], [_reward(y) for _, y in pairs]))


def _reward(record: EpisodeRecord) -> float:
    return record.sum_reward if math.isfinite(record.sum_reward) else math.nan


def _unpaired_rows(a: RunResults, b: RunResults) -> tuple[list[TaskComparison], TaskComparison, int]:
    def by_name(run: RunResults) -> dict[str, list[EpisodeRecord]]:
        names = {(t.group, t.task_id): t.name for t in run.run.tasks}
        out: dict[str, list[EpisodeRecord]] = {}
        for r in run.records:
            if r.ok:
                out.setdefault(names[(r.task_group, r.task_id)], []).append(r)
        return out

    na, nb = by_name(a), by_name(b)
    order = [(t.group, t.task_id, t.name) for t in a.run.tasks if t.name in nb]
    if not order:  # nothing in common: no comparison at all, not a "0/0" that looks like one
        only_a = sorted({t.name for t in a.run.tasks})
        only_b = sorted({t.name for t in b.run.tasks})
        raise ReportError(f"compare: the runs share no task with finished episodes (A: "
                          f"{visible(', '.join(only_a), 200)}; B: {visible(', '.join(only_b), 200)}): there is nothing "
                          "to compare, paired or not")
    rows = [_unpaired_row(f"{g}_{i}", name, g, na.get(name, []), nb[name]) for g, i, name in order]
    shared = {name for _, _, name in order}
    all_a = [r for name in shared for r in na.get(name, [])]
    all_b = [r for name in shared for r in nb[name]]
    return rows, _unpaired_row("overall", "", "", all_a, all_b), 0


def _unpaired_row(task: str, name: str, group: str, xs: list[EpisodeRecord], ys: list[EpisodeRecord]) \
        -> TaskComparison:
    ka, kb = sum(r.success for r in xs), sum(r.success for r in ys)
    diff = stats.unpaired_difference(ka, len(xs), kb, len(ys))
    return TaskComparison(
        task, name, group, min(len(xs), len(ys)), ka, kb, len(xs), len(ys), None, None,
        *(diff if diff else (None, None, None)), p=stats.fisher_exact(ka, len(xs), kb, len(ys)),
        rewards=stats.unpaired_rewards([_reward(r) for r in xs], [_reward(r) for r in ys]))


__all__ = ["Comparison", "TaskComparison", "compare", "format_p"]
