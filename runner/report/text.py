"""The report as Markdown (GitHub job summaries, pull requests) and as JSON (the numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.report.compare import Comparison, format_p
from runner.report.load import RunResults
from runner.results.formats import interval, pct, reward
from runner.results.fingerprint import initial_states_line
from runner.results.provenance import described
from runner.text import visible


def _md(value: Any, limit: int = 200) -> str:
    """A table cell: hidden characters shown, Markdown's table and inline syntax neutralised."""
    text = visible(value if isinstance(value, str) else str(value), limit)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # no HTML reaches the page
    for char in "\\|`*_[]#!":
        text = text.replace(char, "\\" + char)
    return text.replace("\n", " ")


def _pct(stats: dict[str, Any] | None) -> str:
    return pct(None if stats is None else stats.get("pc_success"))


def markdown(runs: Sequence[RunResults], comparison: Comparison | None = None) -> str:
    lines: list[str] = []
    for run in runs:
        o = run.eval_info["overall"]
        lines += [f"### {_md(run.run.spec_name)}: {_md(run.name)}", "",
                  f"**{o['n_successes']}/{o['n_episodes']} = {_pct(o)} %** {interval(o)} (Wilson 95 %)"
                  + (f", {o['n_errors']} errors" if o["n_errors"] else "")
                  + (f", **{run.missing} episodes missing ({_md(run.run.state)})**" if run.missing else "")
                  + f"; {run.run.eval_s:.0f} s", "", provenance_line(run.run.provenance), "",
                  fingerprint_line(run), ""]
        if len(runs) == 1:
            lines += ["| task | name | success | % | 95 % CI | avg sum reward | errors |",
                      "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
            for t in run.eval_info["per_task"]:
                s = t["aggregated"]
                lines.append(f"| {_md(t['task_group'])}\\_{t['task_id']} | {_md(t['task'])} | "
                             f"{s['n_successes']}/{s['n_episodes']} | {_pct(s)} | {interval(s)} | "
                             f"{reward(s['avg_sum_reward'])} | "
                             f"{s['n_errors']} |")
            for g, s in run.eval_info["per_group"].items():
                lines.append(f"| group | {_md(g)} | {s['n_successes']}/{s['n_episodes']} | {_pct(s)} | {interval(s)} | | |")
            lines.append("")
    if len(runs) > 1:
        first = runs[0]
        lines += ["| task | " + " | ".join(_md(r.name) for r in runs) + " |",
                  "| --- |" + " ---: |" * len(runs)]
        tables = [{t["task"]: t["aggregated"] for t in r.eval_info["per_task"]} for r in runs]
        for t in first.eval_info["per_task"]:
            lines.append(f"| {_md(t['task'])} | " + " | ".join(_pct(table.get(t["task"])) for table in tables) + " |")
        lines.append("| **overall** | " + " | ".join(_pct(r.eval_info["overall"]) for r in runs) + " |")
        lines.append("")
    if comparison is not None:
        lines += comparison_markdown(comparison)
    return "\n".join(lines) + "\n"


def fingerprint_line(run: RunResults) -> str:
    """The fingerprint's hash and its parts' hashes, and the initial states recorded: one line."""
    fp = run.run.fingerprint
    if not fp:
        return "fingerprint: not recorded (written by an older runner)"
    parts = ", ".join(f"{name} {p.get('hash', '')}" for name, p in (fp.get("parts") or {}).items())
    return _md(f"fingerprint {fp.get('hash', '')} ({parts}); initial states: {initial_states_line(run.records)}", 2000)


def provenance_line(prov: dict[str, Any] | None) -> str:
    """runner's version and commit, Python, the packages, the host: one line."""
    if not prov:
        return "provenance: not recorded (written by an older runner)"
    d = described(prov)
    return _md(f"runner {d['runner']}; Python {d['python']}; {d['packages']}; {d['host']}", 2000)


def comparison_markdown(c: Comparison) -> list[str]:
    lines = [f"### Comparison{'' if c.paired else ' (unpaired)'}: B = {_md(c.b_label)} vs A = {_md(c.a_label)}", "",
             _md(c.verdict_line(), 2000), ""]
    lines += [f"> warning: {_md(w, 1000)}" for w in c.warnings]
    hint = c.sample_size_line()
    if hint:
        lines += ["", _md(hint, 1000)]
    lines += ["", "| task | A | B | B − A (pts) | 95 % CI | p | p (Holm) | verdict |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for t in [c.overall, *c.tasks]:
        d = "–" if t.diff is None else f"{100 * t.diff:+.1f}"
        ci = "–" if t.low is None else f"[{100 * t.low:+.1f}, {100 * t.high:+.1f}]"
        verdict = "" if t is c.overall else t.verdict
        lines.append(f"| {_md((t.task + ' ' + t.name).strip())} | {t.a_successes}/{t.a_n} | {t.b_successes}/{t.b_n} | "
                     f"{d} | {ci} | {format_p(t.p)} | {format_p(t.p_holm)} | {verdict} |")
    return [*lines, ""]


def as_json(runs: Sequence[RunResults], comparison: Comparison | None = None) -> dict[str, Any]:
    return {
        "runs": [{"dir": str(r.path), "spec_name": r.run.spec_name, "labels": dict(r.run.labels), "state": r.run.state,
                  "missing": r.missing, "provenance": r.run.provenance, "eval_info": r.eval_info} for r in runs],
        "comparison": None if comparison is None else comparison.to_json(),
    }


md_cell = _md  # for other Markdown writers (runner check's job summary)

__all__ = ["as_json", "comparison_markdown", "markdown", "md_cell", "provenance_line"]
